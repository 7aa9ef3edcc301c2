"""What the desk's front adds for everyone: the annotators' keys script, pages' feature flags
without those equal to the default, and the data manager's columns slimmed to the heading.
None of it depends on who asks."""
from __future__ import annotations

import json
import re

KEYS_PATH = "/__rescue__/keys.js"
KEYS_JS = r"""// RESCUE annotators' keys, added to pages by the desk's front (desk_front/comfort.py).
(function () {
  if (window.__rescueKeys) return; window.__rescueKeys = true;
  // Label Studio's automatic hotkey marks ([1], [q], ...) name keys that act on the first forms only
  var style = document.createElement("style");
  style.textContent = ".lsf-choices sup.lsf-hint { display: none; }";
  document.head.appendChild(style);
  var current = null;  // id of the form (unit_<i>) the keys act on
  function unitOf(el) { return el && el.closest ? el.closest('[id^="unit_"]') : null; }
  function editing(el) {
    if (!el) return false;
    if (el.isContentEditable || el.tagName === "TEXTAREA" || el.tagName === "SELECT") return true;
    return el.tagName === "INPUT" && ["checkbox", "radio", "button", "submit"].indexOf(el.type) < 0;
  }
  function mark(unit) {
    var old = current && document.getElementById(current);
    if (old && old !== unit) old.style.outline = "";
    if (unit) { current = unit.id; unit.style.outline = "2px solid #1677ff"; unit.style.outlineOffset = "2px"; }
  }
  document.addEventListener("focusin", function (e) { var u = unitOf(e.target); if (u) mark(u); }, true);
  document.addEventListener("pointerdown", function (e) { var u = unitOf(e.target); if (u) mark(u); }, true);
  function onScreen() {  // no form chosen yet: the first one on screen, else the first one
    var all = document.querySelectorAll('[id^="unit_"]');
    for (var i = 0; i < all.length; i++) {
      var r = all[i].getBoundingClientRect();
      if (r.bottom > 0 && r.top < window.innerHeight) return all[i];
    }
    return all[0] || null;
  }
  function go(unit) {
    mark(unit); unit.scrollIntoView({block: "center"});
    var first = unit.querySelector("input, textarea");
    if (first) first.focus({preventScroll: true});
  }
  // a form that came pre-filled in full shows a required "pre-fill checked" box (ls_config.prefill_check):
  // Enter on the form, or any change in it, ticks it (a hidden box, on a form not pre-filled, never)
  function check(unit) {
    var box = unit && unit.querySelector('[id^="prefill-checked_"] input');
    if (box && !box.checked && box.offsetParent) box.click();
  }
  function edited(e) {  // a choice clicked (Label Studio's choices fire no change event) or text typed
    var t = e.target;
    if (!t || !t.closest || t.closest('[id^="prefill-checked_"]')) return;
    if (e.type !== "click" || t.type === "checkbox" || t.type === "radio") check(unitOf(t));
  }
  ["click", "input", "change"].forEach(function (kind) { document.addEventListener(kind, edited, true); });
  function choices(group) { return group ? group.querySelectorAll('input[type=checkbox], input[type=radio]') : []; }
  window.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || editing(e.target)) return;
    var chosen = current && document.getElementById(current);
    var unit = chosen || onScreen();
    if (!unit) return;  // not a RESCUE form: Label Studio's keys as usual
    if (/^[0-9-]$/.test(e.key)) {
      e.preventDefault(); e.stopImmediatePropagation();
      var a = document.activeElement;
      var group = (a && unit.contains(a) && a.closest(".lsf-choices")) || unit.querySelector(".lsf-choices");
      var all = choices(group);
      var item = e.key === "-" ? all[all.length - 1] : all[e.key === "0" ? 9 : Number(e.key) - 1];
      if (item) { mark(unit); item.click(); }
    } else if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault(); e.stopImmediatePropagation();
      // the first Enter comes to the first form on screen, each next one to the following form
      var next = chosen ? document.getElementById("unit_" + (Number(unit.id.slice(5)) + 1)) : unit;
      if (chosen) check(unit);  // Enter keeps the outlined form as it is: its pre-fill is checked
      if (next) go(next);
    } else if (/^[a-z]$/i.test(e.key) && !e.shiftKey) {
      e.stopImmediatePropagation();  // Label Studio's automatic hotkeys act on the first forms only
    }
  }, true);
})();
"""


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
