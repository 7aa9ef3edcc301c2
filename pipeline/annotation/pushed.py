"""What a round was pushed to, kept under the data root, and the lock around a push.

Adjudicators never annotate what they adjudicate: roles are explicit (:mod:`.desks`), and the
adjudication pull refuses answers of anyone the round was pushed to or who has labels in it.

Label Studio is not the record of what was handed out: a task or project deleted there after
the push would otherwise just vanish from the next pull. Every push with a data root merges
``{"<scenario>/<annotator>": [sample_id, ...]}`` into ``DataRoot.pushed(round)``; the pull
(:func:`pipeline.annotation.pull.pull_round`) reports each pushed (sample, annotator) whose task
is gone, and agreement and gold name the annotators a round was given to but who have no labels.
The same record keeps ``{"prefilled": {sample_id: [field, ...]}}``: the fields the push really
pre-filled in that sample's tasks (a value in their prediction), merged over pushes; the
dataset card's "pre-filled" column is read from it (:func:`prefilled_fields`), never from the
round definition. And ``{"replaced": ...}``: the answered tasks ``--redraft`` replaced
(:mod:`.redraft`), which the pull reports and never counts.

:func:`round_lock` is an exclusive ``fcntl.flock`` on ``DataRoot.push_lock(round)``, held by
:func:`pipeline.annotation.push.push_round` from "find or create the project" to the last task
imported, so two pushes of a round at once (two CLI processes, two flow runs) never create a
second project or a second copy of a task. It holds between processes on ONE host (and on a
shared file system whose flock is reliable, e.g. local or NFSv4 with lock support); workers on
several hosts must serialise pushes elsewhere (a Prefect global concurrency limit of 1 around
the push task, or a single push worker).

:func:`read_sync` / :func:`write_sync` keep what the last push and the last pull saw of each
desk (``<data root>/annotation/sync/<round>.push.json`` and ``.pull.json``): the tasks of every
project with their content hash, and what Label Studio showed of each project (its counts, the
tasks it changed in a recent window); a push or pull with nothing new asks Label Studio only
whether anything moved (:mod:`.push`, :mod:`.pull`). They are caches: deleting them costs one
full listing or export, never a wrong answer.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from pipeline import store
from pipeline.paths import DataRoot, check_name


@contextlib.contextmanager
def round_lock(root: DataRoot, round_name: str) -> Iterator[None]:
    """Hold the round's push lock (waits for another holder; every holder opens the file anew)."""
    path = root.push_lock(check_name(round_name, "round"))
    store.make_private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_pushed(root: DataRoot, round_name: str) -> dict[str, list[str]]:
    """``{"<scenario>/<annotator>": [sample_id, ...]}`` of every push so far ({} before any)."""
    return _sorted_lists(_read(root, round_name).get("projects"))


def _read(root: DataRoot, round_name: str) -> dict:
    return store.read_json_record(root.pushed(check_name(round_name, "round")),
                                  "the record of what was pushed", "push the round again to rewrite it")


def _sorted_lists(part) -> dict[str, list[str]]:
    return {str(k): sorted(map(str, v)) for k, v in (part or {}).items()}


def read_prefilled(root: DataRoot, round_name: str) -> dict[str, list[str]]:
    """``{sample_id: [field, ...]}``: the fields pushes of the round pre-filled, per sample ({} before any)."""
    return _sorted_lists(_read(root, round_name).get("prefilled"))


def prefilled_fields(root: DataRoot, round_name: str) -> list[str]:
    """Every field some push of the round really pre-filled (sorted; [] when none or never pushed)."""
    return sorted({f for fields in read_prefilled(root, round_name).values() for f in fields})


def record_pushed(root: DataRoot, round_name: str, given: Iterable[tuple[str, str, str]],
                  prefilled: dict[str, Iterable[str]] | None = None) -> dict[str, list[str]]:
    """Merge ``(scenario, annotator, sample_id)`` triples, and ``{sample_id: fields pre-filled}``,
    into the round's record (never drops)."""
    raw = _read(root, round_name)  # once: the projects, the pre-filled fields and the replaced hashes
    projects = {k: set(v) for k, v in _sorted_lists(raw.get("projects")).items()}
    for scenario, annotator, sample_id in given:
        projects.setdefault(f"{scenario}/{annotator}", set()).add(sample_id)
    filled = {k: set(v) for k, v in _sorted_lists(raw.get("prefilled")).items()}
    for sample_id, fields in (prefilled or {}).items():
        filled.setdefault(sample_id, set()).update(fields)
    out = {k: sorted(v) for k, v in sorted(projects.items())}
    replaced = raw.get("replaced")  # kept as it is (:mod:`.redraft`)
    # a push that gave nothing new leaves the record as it is
    store.write_text_if_changed(root.pushed(round_name), store.canonical_json(
        {"round": round_name, "projects": out, "prefilled": {k: sorted(v) for k, v in sorted(filled.items())},
         **({"replaced": replaced} if replaced else {})}))
    return out


@functools.lru_cache(maxsize=32)
def files_digest(paths: tuple[Path, ...]) -> str:
    """sha256 over the bytes of ``paths`` in order (the code a push or pull state is a function
    of: a changed file makes the next push or pull read everything again); once per process."""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()


def sync_path(root: DataRoot, round_name: str, kind: str) -> Path:
    """``annotation/sync/<round>.<kind>.json`` (kind: ``push`` or ``pull``)."""
    if kind not in ("push", "pull"):
        raise ValueError(f"sync state kind {kind!r} is not push or pull")
    return root.annotation_dir() / "sync" / f"{check_name(round_name, 'round')}.{kind}.json"


def read_sync(root: DataRoot, round_name: str, kind: str) -> dict:
    """The round's push or pull state ({} when there is none or it cannot be read: a cache)."""
    path = sync_path(root, round_name, kind)
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) and raw.get("round") == round_name else {}


def write_sync(root: DataRoot, round_name: str, kind: str, state: dict) -> bool:
    """Write the round's push or pull state (0600, atomically); False when it is already so."""
    path = sync_path(root, round_name, kind)
    data = json.dumps({**state, "round": round_name}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return False
    store.make_private_dir(path.parent)
    store.atomic_write_bytes(path, data)
    return True


def pushed_annotators(root: DataRoot, round_name: str) -> list[str]:
    """Everyone the round was pushed to (sorted e-mails)."""
    return sorted({k.split("/", 1)[1] for k in read_pushed(root, round_name)})
