"""Blind by construction: the door annotators use to reach Label Studio.

Label Studio Community has no roles: every login of an organization can list, open, edit and
export every project, and ``/api/annotations/<id>/`` answers for any annotation
(HumanSignal/label-studio#9796). A blind round (one project per annotator, :mod:`.push`)
therefore needs a gate. This is an authenticating reverse proxy: annotators get its address,
Label Studio itself stays on 127.0.0.1 for the pipeline (which talks to it directly with the
admin token).

For every request the proxy learns who asks (the login behind the session cookie or token, via
``/api/current-user/whoami``, cached briefly) and which round project the request touches:

* a project in the path (``/projects/<id>/...``, ``/api/projects/<id>/...``) or in the
  ``project`` query parameter / JSON body field;
* a task, annotation, draft or prediction in the path (``/api/tasks/<id>``,
  ``/api/annotations/<id>``, ``/api/drafts/<id>``, ``/api/predictions/<id>``) or in the ``task``
  query parameter / body field: resolved to its project with the admin token.

A round project belongs to the annotator named in its key (the description's last line); an
adjudication project (key ``rescue-adjudication:<round>/<scenario>``) belongs to the
adjudicators. Three kinds of login:

* the admin (the login of the pipeline's token): passes unfiltered;
* an annotator (a login some round project belongs to): only their own round projects, never an
  adjudication project;
* anyone else is taken as an adjudicator: only the adjudication projects, no annotator's
  project. With ``adjudicators`` named (``RESCUE_ADJUDICATORS``, comma-separated e-mails), only
  those logins are; any other login then reaches no project at all (e.g. an annotator added
  before the first push).

Speed and keys (what annotators' browsers get from the gate, not from Label Studio):

* Label Studio's build assets (``/static/``, ``/react-app/``: about 7 MB of JavaScript and
  1.5 MB of CSS per page) are fetched from Label Studio once, kept in memory, gzip-compressed
  when the browser accepts it (a remote annotator downloads about a quarter) and served with
  cache headers and an ETag: a second page loads them from the browser's cache without asking,
  and a revalidation is answered by the gate itself (304). Label Studio's development server
  sends them with neither. Restart the gate after upgrading Label Studio.
* A task page (``/projects/<id>/data?task=<id>``) of an annotator or adjudicator: as soon as
  Label Studio has answered the page, the gate asks it, with that session, for what the data
  manager will ask next one request after another (:func:`prefetch_urls`; one at a time, in that
  order), while the browser is still compiling the app; once the views answer is there, the
  first page of the task list its first tab shows follows (:func:`task_list_url`). The
  session's identical GET within :data:`PREFETCH_TTL_S` gets that answer once (after the gate's
  check, like any request); a write of the session drops them (saving the data manager's tab,
  which its first visit of a project does, drops only the views and the list). (A
  ``<link rel=preload>`` does not do it: Chrome does not give a preload to the data manager's
  ``mode: same-origin`` fetches.)
  ``RESCUE_NO_PREFETCH=1`` turns this off (for before/after figures of the annotator benchmark).
* Label Studio's service worker (``/sw.js``, which its app pages register: one worker per scope)
  comes with the gate's build cache in front of it (``static/sw.js``), and the login page
  registers it too (:data:`SW_REGISTER_PATH`): while the annotator types their login, it caches
  the build's scripts and styles that pages have loaded through the gate so far, and serves them
  cache-first; Chrome compiles what a worker caches while installing and keeps the compiled code
  (V8 code cache), so even the first task page skips most of compiling ~7 MB of JavaScript. The
  cache is named by Label Studio's version (``/api/version``): after an upgrade (and the gate's
  restart) the old build's cache is dropped, and a page whose entry scripts (``main.js?v=...``)
  are not the cached ones gets its other assets from the network meanwhile. ``RESCUE_NO_SW=1``
  leaves Label Studio's worker as it is (before/after figures).
* The page's feature flags come without those equal to the default (:func:`slim_feature_flags`).
* The data manager's task list shows only the heading of the task data by default, not the
  dialogue rows and people the labeling config uses (:func:`slim_columns`; ``RESCUE_NO_SLIM_COLUMNS=1``
  for before figures).
* Label Studio's build comes with exact-text patches (:data:`BUNDLE_PATCHES`: the feature-flag
  copy on every ``isFF`` call left out, the hotkey re-binding after every dynamic choice list is
  loaded coalesced, and the task's annotation built once instead of twice per task page, also
  for a task not on the task list's first page): about 1 s of a 250-row window's page; a build
  without those exact texts is served unchanged;
  ``RESCUE_NO_BUNDLE_PATCHES=1`` for before figures.
* Pages get a small script (:data:`KEYS_JS`, at :data:`KEYS_PATH`): number keys 1-9, 0 pick the
  1st-10th choice of the list in focus, else of the first list of the form being worked on (the
  one focused or clicked last, outlined), ``-`` its last choice (the "none" choice where a list
  has one); Enter keeps that form as it is and goes to the next one. Label Studio's own automatic letter and number hotkeys (which always act on the first
  forms of a task, whichever form is being worked on) are swallowed outside text fields.

A request that touches a project the caller may not reach (or an object that does not exist) is
refused (403) before it reaches Label Studio; the project list is cut down to the caller's
projects; exports, new projects and project settings writes are refused to annotators and
adjudicators alike; anything else passes unchanged.
"""
from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import http.cookiejar
import json
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from pipeline.annotation.client import connection_limits
from pipeline.annotation.push import parse_project_key

_PROJECT_PATH = re.compile(r"^/(?:api/)?projects/(\d+)(?:/|$)")
_OBJECT_PATH = re.compile(r"^/api/(tasks|annotations|drafts|predictions|dm/views)/(\d+)(?:/|$)")
_EXPORT_PATH = re.compile(r"^/api/projects/\d+/export")
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "content-length"}
WHO_TTL_S = 60.0
_SESSION = re.compile(r"(?:^|;\s*)sessionid=([^;\s]+)")


def session_key(cookie: str | None) -> str | None:
    """What identifies a browser session in its cookie line: the session cookie's content.
    Label Studio keeps sessions in signed cookies (``payload:timestamp:signature``) and signs the
    cookie again, with a new timestamp, on every response: keyed on the whole value, a session
    would be a new one each second. Label Studio still checks the signature of every request
    it gets."""
    m = _SESSION.search(cookie or "")
    return m[1].split(":", 1)[0] if m else None
OWNERS_TTL_S = 10.0  # a login not found among annotators is looked up again after this long
# adjudication projects' key prefix (pipeline.quality.adjudication.project_key; the quality layer
# sits above this one, so the prefix is repeated here and a test ties the two together)
ADJUDICATION_KEY_PREFIX = "rescue-adjudication:"
ADJUDICATION = "\x00adjudication"  # the owner of an adjudication project (no e-mail can equal it)
ADJUDICATORS_ENV = "RESCUE_ADJUDICATORS"
_ASSET_PREFIXES = ("/static/", "/react-app/")  # build assets: no project data, same for everyone
_HASHED_NAME = re.compile(r"\.[0-9a-f]{12}\.\w+$")  # Django's manifest names never change content
ASSET_MAX_AGE_S = 3600  # unhashed names (react-app chunks) may change with a Label Studio upgrade
_COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml", "application/wasm")
KEYS_PATH = "/__rescue__/keys.js"
SW_PATH = "/sw.js"  # Label Studio's service worker, served by the gate with its build cache (static/sw.js) in front
SW_REGISTER_PATH = "/__rescue__/sw-register.js"  # registers SW_PATH on pages without Label Studio's app (login)
_STATIC = Path(__file__).resolve().parent / "static"
_CODE_TYPES = ("application/javascript", "text/javascript", "text/css")  # what the service worker caches
KEYS_JS = r"""// RESCUE annotators' keys, added by the annotators' gate (pipeline/annotation/proxy.py).
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


# Spots of Label Studio 1.23's build that cost a long task page most for nothing (CPU profiles
# of a viewpoints window of a 250-row interview, see patch_bundle). Each is an exact piece of the
# minified build: another build does not contain it and is served unchanged.
_HOTKEYS_ONCE = (  # one setupHotKeys per annotation and microtask, for the selected annotation only
    "(a=>{const q=window.__rescueHotKeys||(window.__rescueHotKeys=new Set);q.has(a)||(q.add(a),"
    "queueMicrotask(()=>{q.delete(a);try{a.store.annotationStore.selected===a&&a.setupHotKeys()}catch(x){}}))})")
BUNDLE_PATCHES = (
    # isFF copies the whole feature-flag object (101 flags) on each of its thousands of calls;
    # its only reader (isFF itself) reads, so the object can be handed out as it is
    (b"function L(){var e,t;return Object.assign({},null!=(e=null==(t=window.APP_SETTINGS)?void 0:"
     b"t.feature_flags)?e:{})}",
     b"function L(){var e,t;return null!=(e=null==(t=window.APP_SETTINGS)?void 0:t.feature_flags)?e:{}}"),
    # every Choices with dynamic values (value="$entities"; viewpoints has 30 on a page) re-binds
    # every hotkey of the annotation after loading its choices, walking the whole tree three
    # times: quadratic in the forms of a page. Selecting an annotation binds its hotkeys anyway
    # (after these loads), so these calls are coalesced to one per annotation, for the selected one.
    (b"e.annotation&&(e.annotation.setupHotKeys(),null==e.needsUpdate||e.needsUpdate())",
     b"e.annotation&&(" + _HOTKEYS_ONCE.encode() + b"(e.annotation),null==e.needsUpdate||e.needsUpdate())"),
    # A task page built the task's annotation twice: the editor starts with the task the data
    # manager selected (often the task list's entry of it, without its annotations, predictions
    # or drafts) and builds an annotation; once the data manager has loaded the task in full
    # and the editor shows an annotation, it hands the task over again, and the editor resets
    # and builds it anew. Now the data manager says from the start of the load until the
    # hand-over that one is coming (the only one that hands over); the editor, started meanwhile,
    # waits for it instead of building an annotation to throw away, and the data manager, told
    # so, hands over at once. Should no one hand the task over, the editor goes on as before
    # once the load is over.
    (b'?t:"auto";await s.setAnnotation(e)}',
     b'?t:"auto";const q=s.datamanager.store.taskStore;'
     b"if(s.datamanager.__rescueHandOver){"
     b"s.__rescueDeferred=e;for(;q.loadingItems.includes(s.task.id);)await new Promise(e=>setTimeout(e,20));"
     b"await new Promise(e=>requestAnimationFrame(()=>requestAnimationFrame(e)));"
     b"if(s.__rescueDeferred!==e)return;s.__rescueDeferred=void 0}await s.setAnnotation(e)}"),
    # (A task not on the task list's first page, e.g. a page reloaded or a task link opened late
    # in a batch: selecting it by number started a load of its own, so the task was fetched twice.
    # The data manager's own load selects it instead.)
    (b"(0,Da.h5)(()=>{void 0!==n?e.annotationStore.setSelected(n):e.taskStore.setSelected(t)});"
     b"const i=e.taskStore.loadTask(t,{select:!!t&&!!n});yield i.then(async()=>{let t=1e3;"
     b"for(;(null==(n=e.LSF)||!n.currentAnnotation)&&t>0;){var n;await new Promise(e=>setTimeout(e,1)),t-=1}"
     b"if(e.LSF){",
     b'(0,Da.h5)(()=>{void 0!==n?e.annotationStore.setSelected(n):"number"==typeof t&&!e.taskStore.hasRecord(t)'
     b"||e.taskStore.setSelected(t)});e.SDK.__rescueHandOver=!0;"
     b'const i=e.taskStore.loadTask(t,{select:!!t&&(!!n||"number"==typeof t&&!e.taskStore.hasRecord(t))});'
     b"yield i.then(async()=>{let t=1e3;"
     b"for(;(null==(n=e.LSF)||!n.currentAnnotation&&void 0===n.__rescueDeferred)&&t>0;)"
     b"{var n;await new Promise(e=>setTimeout(e,1)),t-=1}e.SDK.__rescueHandOver=void 0;if(e.LSF){"),
    # An editor started while a hand-over is coming gets the task without its annotations and
    # predictions, as it gets the list's entry of a listed task: it builds nothing from them (the
    # hand-over sets the task up in full), so a task not on the list, whose editor starts with
    # the loaded task itself, does not build its prediction twice. The hand-over passes on the
    # annotation the waiting editor would have picked (an editor started with a prediction
    # already holds one selected, which is not it).
    (b"task:sa(this.task),description:this.instruction,",
     b"task:this.datamanager.__rescueHandOver?Object.assign(sa(this.task),{annotations:[],predictions:[]}):sa(this.task),"
     b"description:this.instruction,"),
    (b"null==(l=e.LSF)||l.setLSFTask(e.taskStore.selected,n);",
     b"null==(l=e.LSF)||l.setLSFTask(e.taskStore.selected,void 0!==l.__rescueDeferred?"
     b"(x=>(l.__rescueDeferred=void 0,x))(l.__rescueDeferred):n);"),
)


def patch_bundle(body: bytes) -> bytes:
    """A build script with :data:`BUNDLE_PATCHES` applied where their exact text occurs once
    (``RESCUE_NO_BUNDLE_PATCHES=1``: unchanged, for before figures)."""
    if os.environ.get("RESCUE_NO_BUNDLE_PATCHES") == "1":
        return body
    for old, new in BUNDLE_PATCHES:
        if body.count(old) == 1:
            body = body.replace(old, new)
    return body


_DATA_PAGE = re.compile(r"^/projects/(\d+)/data/?$")
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


_VIEWS_PATH = "/api/dm/views"
_COLUMNS_PATH = "/api/dm/columns"
_TASK_LIST_PATH = "/api/tasks?"
# the project counters the data manager asks for before the task (its spelling, Label Studio 1.23)
_TIMER_INCLUDE = "task_count%2Ctask_number%2Cannotation_count%2Cnum_tasks_with_annotations%2Cqueue_total"
PREFETCH_TTL_S = 20.0  # a prefetched answer not asked for within this long is dropped
TASK_LIST_PAGE = 30  # tasks per page of the data manager's list (its default)


def prefetch_urls(path: str, query: dict[str, str]) -> list[str]:
    """The API requests Label Studio's data manager makes one after another, each waiting for the
    one before, when a task page opens (project, ML backends, columns, project stats, users, views,
    project counters, the task itself, its history): exactly as the data manager spells them, so that the gate can ask for them
    while the browser is still compiling the app (see ``make_app``)."""
    m = _DATA_PAGE.match(path)
    if not m:
        return []
    pid = m[1]
    urls = ["/api/version", f"/api/projects/{pid}", "/api/current-user/whoami", f"/api/ml?project={pid}",
            f"{_COLUMNS_PATH}?project={pid}", f"/api/dm/project?project={pid}", f"/api/users?project={pid}",
            f"{_VIEWS_PATH}?project={pid}",
            f"/api/dm/project?interaction=timer&include={_TIMER_INCLUDE}&project={pid}"]
    if query.get("task", "").isdigit():
        urls += [f"/api/tasks/{query['task']}?project={pid}", f"/api/projects/{pid}/label-stream-history?project={pid}"]
    return urls


def task_list_url(project: str, views_payload: bytes) -> str | None:
    """The first page of the task list the data manager asks for once it has the views answer
    (``views_payload``): it shows the first view (tab) when the page names none, 30 tasks a page,
    spelt as the data manager spells it. None when the answer names no view."""
    try:
        views = json.loads(views_payload)
    except ValueError:
        return None
    views = views.get("tabs") if isinstance(views, dict) else views
    if not isinstance(views, list) or not views or not isinstance(views[0], dict):
        return None
    view = views[0].get("id")
    if not isinstance(view, int):
        return None
    return f"{_TASK_LIST_PATH}page=1&page_size={TASK_LIST_PAGE}&view={view}&project={project}"


def no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that never keeps a cookie (every request carries only its caller's). Given to
    an httpx client as the jar itself: wrapped in ``httpx.Cookies`` it would be copied, policy lost."""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


class Denied(Exception):
    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


@dataclass
class Gate:
    """The decisions (no HTTP serving): who owns which project, who may touch what."""

    upstream: str
    admin_token: str
    adjudicators: frozenset[str] | None = None  # None: every login that annotates no round
    _owners: dict[int, str | None] = field(default_factory=dict)
    _objects: dict[tuple[str, int], int | None] = field(default_factory=dict)
    _who: dict[str, tuple[float, str | None]] = field(default_factory=dict)
    _who_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self._admin = httpx.Client(base_url=self.upstream.rstrip("/"), timeout=30, cookies=no_cookies(),
                                   headers={"Authorization": f"Token {self.admin_token}"},
                                   limits=connection_limits(self.upstream))
        if self.adjudicators is not None:
            self.adjudicators = frozenset(a.strip().lower() for a in self.adjudicators if a.strip())
        self._admin_email: str | None = None
        self._owners_at = float("-inf")

    def close(self) -> None:
        self._admin.close()

    # --- facts from Label Studio ------------------------------------------------------
    def refresh_owners(self) -> None:
        owners: dict[int, str | None] = {}
        page = 1
        while True:
            body = self._admin.get("/api/projects/", params={"page": page, "page_size": 100,
                                                              "include": "id,description"}).json()
            items = body["results"] if isinstance(body, dict) else body
            for p in items:
                lines = (p.get("description") or "").strip().splitlines()
                key = lines[-1].strip() if lines else ""
                parsed = parse_project_key(key)
                owners[p["id"]] = (parsed[2].lower() if parsed
                                   else ADJUDICATION if key.startswith(ADJUDICATION_KEY_PREFIX) else None)
            if not isinstance(body, dict) or not body.get("next"):
                break
            page += 1
        with self._lock:
            self._owners = owners
            self._owners_at = time.monotonic()

    def owner(self, project_id: int) -> str | None:
        """The annotator a round project belongs to, :data:`ADJUDICATION` for an adjudication
        project (None: neither)."""
        if project_id not in self._owners:
            self.refresh_owners()
        return self._owners.get(project_id)

    def annotators(self) -> set[str]:
        if not self._owners:
            self.refresh_owners()
        return {o for o in self._owners.values() if o and o != ADJUDICATION}

    def admin_email(self) -> str | None:
        if self._admin_email is None:
            r = self._admin.get("/api/current-user/whoami")
            if r.status_code == 200:
                self._admin_email = (r.json().get("email") or "").lower() or None
        return self._admin_email

    def role(self, user: str | None) -> str | None:
        """Whose projects ``user`` may reach: their e-mail (an annotator), :data:`ADJUDICATION`,
        "" (no project at all), or None (unfiltered: the admin, or not logged in - Label Studio
        answers those itself)."""
        if user is None or user == self.admin_email():
            return None
        if user in self.annotators():
            return user
        if time.monotonic() - self._owners_at > OWNERS_TTL_S:
            self.refresh_owners()  # pushed to since we last looked: an annotator, not an adjudicator
            if user in self.annotators():
                return user
        if self.adjudicators is None or user in self.adjudicators:
            return ADJUDICATION
        return ""

    def project_of(self, kind: str, object_id: int) -> int | None:
        key = (kind, object_id)
        if key not in self._objects:
            r = self._admin.get(f"/api/{kind}/{object_id}/")
            body = r.json() if r.status_code == 200 else {}
            project = body.get("project")
            if project is None and body.get("task") is not None:
                project = self.project_of("tasks", int(body["task"]))
            self._objects[key] = project
        return self._objects[key]

    def whoami(self, cookie: str | None, authorization: str | None) -> str | None:
        """The login behind a request (cached :data:`WHO_TTL_S` per session or token; Label
        Studio still authenticates every request it gets, this only decides the filtering)."""
        session = session_key(cookie)
        # keyed on what identifies the caller: other cookies (csrftoken, ...) come and go
        key = f"s:{session}" if session else f"a:{authorization}" if authorization else f"c:{cookie}"
        with self._who_locks.setdefault(key, threading.Lock()):  # one lookup for a page's burst of requests
            now = time.monotonic()
            hit = self._who.get(key)
            if hit and now - hit[0] < WHO_TTL_S:
                return hit[1]
            headers = {k: v for k, v in (("cookie", cookie), ("authorization", authorization)) if v}
            email = None
            if headers:
                r = httpx.get(f"{self.upstream.rstrip('/')}/api/current-user/whoami", headers=headers, timeout=30)
                if r.status_code == 200:
                    email = (r.json().get("email") or "").lower() or None
            self._who[key] = (now, email)
            return email

    # --- the decision -----------------------------------------------------------------
    def projects_touched(self, method: str, path: str, query: dict[str, str], body: bytes) -> set[int]:
        found: set[int] = set()
        m = _PROJECT_PATH.match(path)
        if m:
            found.add(int(m[1]))
        m = _OBJECT_PATH.match(path)
        if m:
            found.add(self.project_of(m[1], int(m[2])) or -1)
        if query.get("project", "").isdigit():
            found.add(int(query["project"]))
        if query.get("task", "").isdigit():
            found.add(self.project_of("tasks", int(query["task"])) or -1)
        if query.get("view", "").isdigit():
            found.add(self.project_of("dm/views", int(query["view"])) or -1)
        if body and method in ("POST", "PUT", "PATCH", "DELETE"):
            try:
                data = json.loads(body)
            except ValueError:
                data = None
            items = data if isinstance(data, list) else [data]
            for item in items:
                if isinstance(item, dict):
                    if isinstance(item.get("project"), int):
                        found.add(item["project"])
                    if isinstance(item.get("task"), int):
                        found.add(self.project_of("tasks", item["task"]) or -1)
        return found

    def _recheck(self, user: str | None, role: str | None, projects: set[int]) -> str | None:
        """``user``'s role again when a project is asked for that was pushed after the owners were
        last read: it may be this login's first round project (logged in before the push), which
        makes an annotator of a login that looked like the adjudicator a moment ago."""
        if role is None or role == user or all(pid == -1 or pid in self._owners for pid in projects):
            return role
        self.refresh_owners()
        return self.role(user)

    def check(self, user: str | None, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        """Raise :class:`Denied` when ``user`` may not make this request (see :meth:`role`)."""
        role = self.role(user)
        if role is None:
            return  # not logged in (Label Studio answers) or the admin
        if _EXPORT_PATH.match(path):
            raise Denied("exports are for the pipeline, not for annotators")
        m = _PROJECT_PATH.match(path)
        if m and path.startswith("/api/") and method in ("PATCH", "PUT", "DELETE") and path.rstrip("/").count("/") == 3:
            raise Denied("project settings are for the pipeline, not for annotators")
        if method == "POST" and path.rstrip("/") == "/api/projects":
            raise Denied("projects are made by the pipeline")
        touched = self.projects_touched(method, path, query, body)
        role = self._recheck(user, role, touched)
        for pid in touched:
            if pid == -1 or not role or self.owner(pid) != role:
                raise Denied("not one of your projects")

    def filter_project_list(self, user: str, payload: bytes) -> bytes:
        """The project list cut down to the projects ``user`` may reach."""
        role = self.role(user)
        try:
            body = json.loads(payload)
        except ValueError:
            return payload
        items = body.get("results") if isinstance(body, dict) else body
        if isinstance(items, list):
            role = self._recheck(user, role, {int(p.get("id", -1)) for p in items if isinstance(p, dict)})

        def own(p):
            return bool(role) and isinstance(p, dict) and self.owner(int(p.get("id", -1))) == role
        if isinstance(body, dict) and isinstance(body.get("results"), list):
            body["results"] = [p for p in body["results"] if own(p)]
            body["count"] = len(body["results"])
        elif isinstance(body, list):
            body = [p for p in body if own(p)]
        return json.dumps(body).encode()


def make_app(upstream: str, admin_token: str, adjudicators: Iterable[str] | None = None):
    """The proxy as an ASGI app (Starlette) in front of Label Studio at ``upstream``.
    ``adjudicators``: the logins that adjudicate (default: ``$RESCUE_ADJUDICATORS``, else every
    login that annotates no round)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    if adjudicators is None and os.environ.get(ADJUDICATORS_ENV, "").strip():
        adjudicators = os.environ[ADJUDICATORS_ENV].split(",")
    gate = Gate(upstream, admin_token, frozenset(adjudicators) if adjudicators is not None else None)
    # No cookie jar: a shared client would keep one caller's session and send it for the next.
    client = httpx.AsyncClient(base_url=upstream.rstrip("/"), timeout=300, follow_redirects=False,
                               cookies=no_cookies(), limits=connection_limits(upstream))

    assets: dict[str, dict] = {}  # path?query -> {"type", "body", "gz", "etag", "cache"}
    # the build's scripts and styles pages have loaded so far, in order: what the service worker
    # caches (sw.js); learnt from the pages, as the chunks a page loads are named only in its code
    code_assets: dict[str, None] = {}
    build: list[str] = []  # Label Studio's version (the build cache's name) and its own worker, asked once
    # Prefetched answers (see prefetch_urls): (session, path?query) -> (expiry, task giving
    # (status, headers, body)). Each answers one identical GET of the same session, once; any
    # write of that session drops them (the data may change).
    prefetched: dict[tuple[str, str], tuple[float, asyncio.Task]] = {}

    slim_cols = os.environ.get("RESCUE_NO_SLIM_COLUMNS") != "1"

    def rewrite_of(user: str | None, path: str):
        """How the gate changes a successful GET's answer at ``path`` for an annotator or
        adjudicator (the project list cut to theirs, the columns slimmed), or None: as it came."""
        path = path.rstrip("/")
        if path == "/api/projects":
            return lambda payload: gate.filter_project_list(user, payload)
        return slim_columns if path == _COLUMNS_PATH and slim_cols else None

    async def fetch_for(user: str, headers: list[tuple[str, str]], url: str):  # (annotators and adjudicators)
        r = await client.get(url, headers=headers)
        content = r.content
        rewrite = rewrite_of(user, url.partition("?")[0]) if r.status_code == 200 else None
        if rewrite is not None:
            content = rewrite(content)
        return r.status_code, [(k.lower(), v) for k, v in r.headers.multi_items()
                               if k.lower() not in _HOP and k.lower() != "content-encoding"], content

    def allowed_prefetches(user: str | None, path: str, query: dict[str, str]) -> list[str]:
        """What :func:`prefetch_urls` names for this page that ``user`` may ask for (the gate's
        check, as for any request; in a worker thread: it may look projects up)."""
        allowed = []
        for url in prefetch_urls(path, query):
            u_path, _, u_query = url.partition("?")
            try:
                gate.check(user, "GET", u_path, dict(x.split("=", 1) for x in u_query.split("&") if "=" in x), b"")
            except Denied:
                continue
            allowed.append(url)
        return allowed

    def start_prefetch(session: str, request: Request, user: str, urls: list[str], page_sent: asyncio.Event) -> None:
        """Ask Label Studio, for this session, what its data manager will ask for next
        (:func:`prefetch_urls`, then the task list :func:`task_list_url` names once the views
        answer is there): each answer waits for one identical GET of the same session within
        :data:`PREFETCH_TTL_S`, which passes the gate's check like any request (``forward``).
        One request at a time, in the data manager's order, from when Label Studio has answered
        the page (``page_sent``): Label Studio answers its requests in threads of one Python
        process, so requests sent together all end late and hold up the page itself (250-row
        windows, interleaved, median of 10: the page's HTML 0.4-0.5 s -> 0.1 s; the whole page
        0.1-0.2 s sooner in two of three comparisons, the same in the third)."""
        now = time.monotonic()
        for key in [k for k, (expiry, _) in prefetched.items() if expiry < now]:
            prefetched.pop(key)[1].cancel()
        # what the data manager's fetch() sends: the same cookies, JSON wanted
        headers = [(k, v) for k, v in request.headers.items()
                   if k.lower() in ("cookie", "host", "user-agent", "accept-language")] + [("accept", "*/*")]
        project = _DATA_PAGE.match(request.url.path)[1]
        loop = asyncio.get_running_loop()

        def register(url: str) -> asyncio.Future | None:
            if (session, url) in prefetched:
                return None
            answer = loop.create_future()
            prefetched[(session, url)] = (time.monotonic() + PREFETCH_TTL_S, answer)
            return answer

        pending = [(url, answer) for url in urls if (answer := register(url)) is not None]

        async def fetch_in_order():
            await page_sent.wait()
            while pending:
                url, answer = pending.pop(0)
                if answer.done():  # dropped meanwhile (a write of the session, expiry)
                    continue
                try:
                    got = await fetch_for(user, headers, url)
                except httpx.HTTPError:
                    got = None  # the browser's own request then goes to Label Studio
                views = got is not None and got[0] == 200 and url.startswith(_VIEWS_PATH)
                list_url = task_list_url(project, got[2]) if views else None
                # the list's key is there before the browser can have the views answer
                if list_url is not None and (listed := register(list_url)) is not None:
                    pending.insert(0, (list_url, listed))
                if not answer.done():
                    answer.set_result(got)

        asyncio.ensure_future(fetch_in_order())

    async def prefetch_page(session: str, request: Request, user: str, path: str, query: dict[str, str],
                            page_sent: asyncio.Event) -> None:
        import anyio

        if await anyio.to_thread.run_sync(gate.role, user) is not None:  # annotators and adjudicators
            start_prefetch(session, request, user,
                           await anyio.to_thread.run_sync(allowed_prefetches, user, path, query), page_sent)

    async def take_prefetched(session: str | None, method: str, url: str) -> Response | None:
        if session is None:
            return None
        if method != "GET":
            # a write may change what was prefetched; the data manager's first visit saves its tab
            # (POST /api/dm/views), which changes only the views and the task list they show
            tabs = url.startswith(_VIEWS_PATH)
            for key in [k for k in prefetched if k[0] == session
                        and (not tabs or k[1].startswith((_VIEWS_PATH, _TASK_LIST_PATH)))]:
                prefetched.pop(key)[1].cancel()
            return None
        hit = prefetched.pop((session, url), None)
        if hit is None or hit[0] < time.monotonic():
            return None
        try:
            got = await hit[1]
        except asyncio.CancelledError:
            return None
        if got is None:  # Label Studio did not answer the prefetch: ask it as usual
            return None
        status, headers, content = got
        response = Response(content, status_code=status)
        kept = [(k, v) for k, v in response.raw_headers if k.decode() == "content-length"]
        response.raw_headers = kept + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers
                                       if k != "content-length"]
        return response

    keys_tag = '"' + hashlib.sha256(KEYS_JS.encode()).hexdigest()[:20] + '"'
    with_worker = os.environ.get("RESCUE_NO_SW") != "1"
    register_js = (_STATIC / "sw-register.js").read_bytes().replace(b"__SW_PATH__", SW_PATH.encode())
    sw_template = (_STATIC / "sw.js").read_text()  # read once: browsers ask for the worker on every page
    register_entry = {"type": "application/javascript", "body": register_js, "gz": None,
                      "etag": '"' + hashlib.sha256(register_js).hexdigest()[:20] + '"',
                      "cache": f"public, max-age={ASSET_MAX_AGE_S}"}

    def asset_response(request: Request, entry: dict) -> Response:
        headers = {"cache-control": entry["cache"], "etag": entry["etag"], "vary": "Accept-Encoding"}
        if request.headers.get("if-none-match") == entry["etag"]:
            return Response(status_code=304, headers=headers)
        body = entry["body"]
        if entry["gz"] is not None and "gzip" in request.headers.get("accept-encoding", ""):
            body, headers["content-encoding"] = entry["gz"], "gzip"
        return Response(body if request.method == "GET" else b"", headers=headers, media_type=entry["type"])

    async def asset(request: Request):
        """A build asset from memory, fetched from Label Studio once (see the module doc)."""
        import anyio

        key = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        entry = assets.get(key)
        if entry is None:
            r = await client.get(request.url.path, params=request.url.query or None)
            if r.status_code != 200:
                return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))
            kind = r.headers.get("content-type", "application/octet-stream")
            body = patch_bundle(r.content) if kind.startswith(_CODE_TYPES) else r.content
            gz = None
            if kind.startswith(_COMPRESSIBLE) and len(body) > 1024:
                gz = await anyio.to_thread.run_sync(lambda: gzip.compress(body, 6, mtime=0))
            hashed = _HASHED_NAME.search(request.url.path) is not None
            entry = {"type": kind, "body": body, "gz": gz,
                     "etag": '"' + hashlib.sha256(body).hexdigest()[:20] + '"',
                     "cache": "public, max-age=31536000, immutable" if hashed else f"public, max-age={ASSET_MAX_AGE_S}"}
            assets[key] = entry
        if entry["type"].startswith(_CODE_TYPES):
            code_assets[key] = None
        return asset_response(request, entry)

    async def service_worker(request: Request) -> Response:
        """Label Studio's service worker with the gate's build cache (static/sw.js) in front of
        it, filled in with this Label Studio's version and the build's scripts and styles seen so
        far: a page after a new one was seen gets a worker that caches that one too (the browser
        compares the worker's bytes on each page and installs a changed one)."""
        import anyio

        if not build:
            try:
                version = (await anyio.to_thread.run_sync(lambda: gate._admin.get("/api/version"))).json()
                own = await client.get(SW_PATH)
                own.raise_for_status()
            except (httpx.HTTPError, ValueError):
                return Response("Label Studio's service worker is not there", status_code=503)
            build[:] = [hashlib.sha256(json.dumps(version, sort_keys=True).encode()).hexdigest()[:16], own.text]
        code = sw_template.replace("__BUILD__", build[0]).replace(
            "__ASSETS__", json.dumps(list(code_assets))) + build[1]
        return Response(code, media_type="text/javascript", headers={"cache-control": "no-cache"})

    async def forward(request: Request):
        import anyio

        path = request.url.path
        if request.method in ("GET", "HEAD") and path.startswith(_ASSET_PREFIXES):
            return await asset(request)
        if request.method in ("GET", "HEAD") and path == KEYS_PATH:
            return asset_response(request, {"type": "application/javascript", "body": KEYS_JS.encode(), "gz": None,
                                            "etag": keys_tag, "cache": f"public, max-age={ASSET_MAX_AGE_S}"})
        if request.method in ("GET", "HEAD") and path in (SW_PATH, SW_REGISTER_PATH) and with_worker:
            if path == SW_PATH:
                return await service_worker(request)
            return asset_response(request, register_entry)
        query = dict(request.query_params)
        body = await request.body()
        user = await anyio.to_thread.run_sync(gate.whoami, request.headers.get("cookie"),
                                              request.headers.get("authorization"))
        try:
            await anyio.to_thread.run_sync(gate.check, user, request.method, path, query, body)
        except Denied as exc:
            return JSONResponse({"detail": str(exc)}, status_code=exc.status)
        session = session_key(request.headers.get("cookie"))
        url = path + (f"?{request.url.query}" if request.url.query else "")
        early = await take_prefetched(session, request.method, url)
        if early is not None:
            return early
        # A task page: its prefetch is checked while Label Studio renders the page and starts
        # once Label Studio has answered it (the page waits for the checks, not for the answers).
        early_start = page_sent = None
        if (request.method == "GET" and session and user and _DATA_PAGE.match(path)
                and os.environ.get("RESCUE_NO_PREFETCH") != "1"):
            page_sent = asyncio.Event()
            early_start = asyncio.ensure_future(prefetch_page(session, request, user, path, query, page_sent))
        # the caller's Host stays: Django checks it against the browser's Origin (CSRF)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        upstream_request = client.build_request(request.method, path, params=request.url.query or None,
                                                headers=headers, content=body)
        try:
            r = await client.send(upstream_request, stream=True)
        finally:
            if page_sent is not None:
                page_sent.set()
        if early_start is not None:
            await early_start
        # every header line as it came (several Set-Cookie lines stay several lines)
        raw = [(k.lower(), v) for k, v in r.headers.multi_items() if k.lower() not in _HOP]
        ok_get = request.method == "GET" and r.status_code == 200
        # answers the gate changes for annotators and adjudicators: the project list, the columns
        rewrite = rewrite_of(user, path) if ok_get else None
        page = ok_get and r.headers.get("content-type", "").startswith("text/html")
        if rewrite is not None and gate.role(user) is not None:
            payload = await r.aread()  # decoded
            await r.aclose()
            response = Response(rewrite(payload), status_code=r.status_code)
            raw = [(k, v) for k, v in raw if k != "content-encoding"]
        elif page:  # every page registers the service worker; a logged-in user's gets the keys (KEYS_JS)
            html = await r.aread()
            await r.aclose()
            tag = f'<script src="{SW_REGISTER_PATH}"></script>'.encode() if with_worker else b""
            if user is not None:
                html = slim_feature_flags(html)
                tag += f'<script src="{KEYS_PATH}"></script>'.encode()
            at = html.rfind(b"</body>")
            response = Response(html[:at] + tag + html[at:] if at >= 0 else html + tag, status_code=r.status_code)
            raw = [(k, v) for k, v in raw if k != "content-encoding"]
        else:
            async def stream():
                try:
                    async for chunk in r.aiter_raw():
                        yield chunk
                finally:
                    await r.aclose()
            response = StreamingResponse(stream(), status_code=r.status_code)
        kept = [(k, v) for k, v in response.raw_headers if k.decode() in ("content-length",)]
        response.raw_headers = kept + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in raw]
        return response

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        await client.aclose()
        gate.close()

    app = Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)
    app.state.gate = gate
    app.state.prefetched = prefetched
    return app


class ProxyServer:
    """The proxy served by uvicorn in a background thread (tests, ``rescue annotate gate``)."""

    def __init__(self, upstream: str, admin_token: str, host: str = "127.0.0.1", port: int = 0,
                 adjudicators: Iterable[str] | None = None):
        import socket

        import uvicorn

        if port == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        self.host, self.port = host, port
        self.app = make_app(upstream, admin_token, adjudicators)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=port, log_level="warning",
                                                     lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> "ProxyServer":
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the annotators' gate did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
