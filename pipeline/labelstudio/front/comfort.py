"""What the desk's front adds for everyone: the annotators' keys scripts (``static/keys*.js``),
pages' feature flags without those equal to the default, and the data manager's columns slimmed
to the heading. None of it depends on who asks."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

_STATIC = Path(__file__).resolve().parent / "static"
# The annotators' keys: plain scripts (package data) that pages load in this order, each from
# /__rescue__/<its name>: the forms and the page's tidying first (it checks Label Studio's hooks; the
# other two act only through it), then what each key does, then the page around the forms.
KEYS_FILES = tuple(_STATIC / name for name in ("keys.js", "keys-input.js", "keys-page.js"))
KEYS_FILE = KEYS_FILES[0]  # the first (its hooks check says whether the keys are on)
KEYS_PATHS = tuple(f"/__rescue__/{f.name}" for f in KEYS_FILES)
KEYS_PATH = KEYS_PATHS[0]  # where pages load the first keys script from
NO_SLIM_COLUMNS_ENV = "RESCUE_NO_SLIM_COLUMNS"  # =1: the data manager's columns as built
NO_SW_ENV = "RESCUE_NO_SW"  # =1: Label Studio's service worker as it is


def switched_off(switch: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the front's switch ``switch`` (``RESCUE_NO_...``) turns its comfort off: ``=1`` in
    ``environ`` (default this process's; ``rescue doctor`` asks of a running front's too)."""
    return (os.environ if environ is None else environ).get(switch) == "1"


def keys_js() -> dict[str, bytes]:
    """The annotators' keys scripts as served, by path (read once per front, at its start)."""
    return {path: f.read_bytes() for path, f in zip(KEYS_PATHS, KEYS_FILES)}


_FLAGS = re.compile(rb"^(\s*feature_flags: )(\{.*\}),\s*\n\s*feature_flags_default_value: (true|false),", re.M)
_RELEASE = re.compile(rb'"release": "(\d+\.\d+)\.')
SLIM_FLAGS_RELEASES = (b"1.23",)  # Label Studio releases whose bundles were read (see slim_feature_flags)


def slim_feature_flags(html: bytes) -> bytes:
    """The page's feature flags without those equal to ``feature_flags_default_value`` (and
    without LaunchDarkly's ``$flagsState``, which no script reads). Why: the editor's ``isFF``
    copies the whole flags object on every call, thousands of calls while a task's forms are
    built, and Label Studio's own copy of the object is a slow (dictionary-mode) one: 213 flags
    cost ~200 us a call here, about 0.4-0.7 s of a 10-row task's load on this 2-core machine;
    101 flags about half. Safe only where every reader of the object answers a missing flag with
    the default value: in Label Studio 1.23's bundles the three readers (``isFF`` of the editor,
    of the data manager and of the app) all do, so the page is only changed for the releases in
    :data:`SLIM_FLAGS_RELEASES`; any other page is returned as it came."""
    m, release = _FLAGS.search(html), _RELEASE.search(html)
    if m is None or release is None or release[1] not in SLIM_FLAGS_RELEASES:
        return html
    try:
        flags = json.loads(m[2])
    except ValueError:
        return html
    if not isinstance(flags, dict):
        return html
    default = m[3] == b"true"
    kept = {k: v for k, v in flags.items() if isinstance(v, bool) and v != default}
    return html[:m.start(2)] + json.dumps(kept).encode() + html[m.end(2):]


LIST_COLUMNS = ("heading",)  # the task data an annotator's task list shows (push's task data)


def slim_columns(payload: bytes) -> bytes:
    """The data manager's columns (``GET /api/dm/columns``) with only :data:`LIST_COLUMNS` of the
    task data shown by default. Why: by default the data manager shows every data key the
    labeling config uses (a RESCUE window's dialogue rows and people) as a column, and builds
    each of those cells for the 30 tasks it lists before the editor starts: measured on a window
    of a 250-row interview (viewpoints, median of 7) 0.25 s of a 2.8 s task page, 160 DOM nodes.
    A person can still show any column (the data manager's Columns menu); a view they saved
    keeps its choice."""
    try:
        body = json.loads(payload)
    except ValueError:
        return payload
    columns = body.get("columns") if isinstance(body, dict) else None
    if not isinstance(columns, list):
        return payload
    for col in columns:
        if isinstance(col, dict) and col.get("parent") == "data" and col.get("id") not in LIST_COLUMNS:
            col["visibility_defaults"] = {"explore": False, "labeling": False}
    return json.dumps(body).encode()
