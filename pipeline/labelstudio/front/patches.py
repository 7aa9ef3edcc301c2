"""Exact-text patches of Label Studio's minified editor build, tied to the build they were
written for.

A patch of minified code is only right for the exact file it was read from. So each group
names the asset it patches and the sha256 of that file as Label Studio builds it; the front
applies a group only when the file it gets from its desk has that sha256 AND every ``old`` text
of the group occurs in it exactly once, and then all of the group's replacements; otherwise
none of them (never 3 of 4) and the file is served as built. At start the front fetches each
patched asset once and logs one line per group (:func:`check`); a file that differs there or
later gets one warning, not one per request. Another Label Studio release than
``pipeline.labelstudio.server.LS_VERSION`` gets no patch at all, and ``RESCUE_NO_BUNDLE_PATCHES=1``
serves every file as built (before/after figures).
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

log = logging.getLogger("rescue.front")

NO_PATCHES_ENV = "RESCUE_NO_BUNDLE_PATCHES"


@dataclass(frozen=True)
class PatchGroup:
    """Replacements that go together into one build file: ``path`` (as the browser asks for it,
    without the query), ``sha256`` of the file as built (hex) and ``(old, new)`` pairs."""

    name: str
    path: str
    sha256: str
    replacements: tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class Outcome:
    group: str
    path: str
    applied: bool
    reason: str = ""  # why not applied

    def line(self) -> str:
        state = "applied" if self.applied else f"not applied: {self.reason}"
        return f"bundle patch group {self.group} ({self.path}): {state}"


def sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def apply_group(body: bytes, group: PatchGroup) -> tuple[bytes, Outcome]:
    """``body`` with all of ``group``'s replacements, or ``body`` unchanged (with the reason)
    when its sha256 is not the group's or any ``old`` text does not occur exactly once."""
    got = sha256(body)
    if got != group.sha256:
        return body, Outcome(group.name, group.path, False,
                             f"sha256 differs from the build it was written for ({got[:12]})")
    for i, (old, _new) in enumerate(group.replacements):
        n = body.count(old)
        if n != 1:
            return body, Outcome(group.name, group.path, False,
                                 f"replacement {i + 1} of {len(group.replacements)} occurs {n} times, not once")
    for old, new in group.replacements:
        body = body.replace(old, new)
    return body, Outcome(group.name, group.path, True)


# --- the groups -----------------------------------------------------------------------------
# Spots of Label Studio 1.23.2's editor build that cost a long task page most for nothing (CPU
# profiles of a viewpoints window of a 250-row interview).

# one setupHotKeys per annotation and microtask, for the selected annotation only
_HOTKEYS_ONCE = (
    b"(a=>{const q=window.__rescueHotKeys||(window.__rescueHotKeys=new Set);q.has(a)||(q.add(a),"
    b"queueMicrotask(()=>{q.delete(a);try{a.store.annotationStore.selected===a&&a.setupHotKeys()}catch(x){}}))})")

# isFF copies the whole feature-flag object (101 flags) on each of its thousands of calls; its
# only reader (isFF itself) only reads, so the object can be handed out as it is
FLAGS_UNCOPIED = (
    b"function L(){var e,t;return Object.assign({},null!=(e=null==(t=window.APP_SETTINGS)?void 0:"
    b"t.feature_flags)?e:{})}",
    b"function L(){var e,t;return null!=(e=null==(t=window.APP_SETTINGS)?void 0:t.feature_flags)?e:{}}")
# every Choices with dynamic values (value="$entities"; viewpoints has 30 on a page) re-binds
# every hotkey of the annotation after loading its choices, walking the whole tree three times:
# quadratic in the forms of a page. Selecting an annotation binds its hotkeys anyway (after these
# loads), so these calls are coalesced to one per annotation, for the selected one.
HOTKEYS_COALESCED = (
    b"e.annotation&&(e.annotation.setupHotKeys(),null==e.needsUpdate||e.needsUpdate())",
    b"e.annotation&&(" + _HOTKEYS_ONCE + b"(e.annotation),null==e.needsUpdate||e.needsUpdate())")

# Every Text and HyperText (two per row) maps its text's DOM once drawn: collectText selects the
# whole text to read it (a forced layout of the page), and blurs and refocuses whatever has the focus;
# about 60 ms of an emotion window's build. The map serves only text regions (labels on the text,
# which no round has) and their offsets, so it is made when first read, from the same DOM (nothing
# but the map itself changes a text's DOM once drawn); a manager taken down unread needs none.
TEXT_MAP_LAZY = (
    b"this.styleTags={},this.initDataMap()}nextStep(e=!1){",
    b"this.styleTags={},this.__rescueUnmapped=!0}get domData(){return this.__rescueUnmapped&&("
    b"this.__rescueUnmapped=!1,this.initDataMap()),this.__rescueMap}set domData(e){this.__rescueMap=e}"
    b"nextStep(e=!1){")
TEXT_MAP_DROPPED_UNREAD = (
    b"destroy(){this.removeStyles(Object.keys(this.styleTags)),this.domData.destroy(),this.domData=new Jh}}",
    b"destroy(){this.__rescueUnmapped=!1,this.removeStyles(Object.keys(this.styleTags)),this.domData.destroy(),"
    b"this.domData=new Jh}}")
# The side panels' box measures its width (a forced layout of the whole page) in a ref callback made
# anew at each render, so at every render of the panels, several times while a window is built;
# its ResizeObserver follows every later change of that width. Measured once per element here.
PANELS_MEASURED_ONCE = (
    b"ref:e=>{e&&(w.current=e,g(e.clientWidth<=EC))}",
    b"ref:e=>{e&&w.current!==e&&(w.current=e,g(e.clientWidth<=EC))}")

# Every tag's children are a maybeNull(array(...)) of the editor's state tree (mobx-state-tree), a
# union of two types without a dispatcher: to build a tag from its config snapshot the union asks each
# type in turn whether the snapshot is one of it, and the array's answer validates the whole subtree
# below, at every level again (quadratic in the depth: about 60 ms of an emotion window's three trees,
# the window's own, its prediction's and its annotation's). Here the union dispatches on null as
# maybeNull picks for a valid snapshot (null or none: null, else the array); a config with an unknown
# tag fails as before (the children's own dispatcher throws), and the configs Label Studio accepts
# are valid snapshots (it validates them itself, on save and before this build).
CHILDREN_DISPATCHED = (
    b"unionArray:function(e){const t=u.gK.maybeNull(u.gK.array(Pe(e)));return t.value=e,t}",
    b"unionArray:function(e){const a=u.gK.array(Pe(e)),n=u.gK.optional(u.gK.null,null),"
    b"t=u.gK.union({dispatcher:e=>null==e?n:a},a,n);return t.value=e,t}")

# Label Studio 1.23.2's editor chunk (web/dist/apps/labelstudio/358.js of the label-studio
# 1.23.2 wheel, served at /react-app/358.js). (The data manager's "hand-over" patches of 167.js,
# which spared a task page its second build of the annotation, are gone: four linked patches of
# two files, too much to keep right by hand.)
EDITOR = PatchGroup(
    name="editor-1.23.2",
    path="/react-app/358.js",
    sha256="4ab02f0ee667be3c3bfc9df3c9fb847c530e6de9cbcae134c813ef83ae6b45ec",
    replacements=(FLAGS_UNCOPIED, HOTKEYS_COALESCED, TEXT_MAP_LAZY, TEXT_MAP_DROPPED_UNREAD, PANELS_MEASURED_ONCE,
                  CHILDREN_DISPATCHED),
)

# A submit in the label stream: the data manager shows its loader (the editor taken down), saves the
# annotation, asks for the next task and builds its editor. On the way it lifts the loader twice for
# a moment, after the save and after the next task's answer, and each time the editor of the task
# just submitted is built again in full and taken down again: a 5-row emotion window's submit did
# three builds instead of one (CPU profile of the page: about a fifth of its work from the submit to
# the next window's first form). Here the loader stays from the save until the next task is built.
# Where no next task is built right away the loader is lifted as before: a save refused (status >= 400),
# a submit that reloads the same task (outside the stream), comments not saved yet (the data manager
# asks first) and the stream's end ("nothing to label").
# And the save is asked for before the editor is taken down (the loader shown), so that taking it down
# (about 50 ms of an emotion window) overlaps the desk's answer instead of delaying the question; both
# in the same task of the page, no input between them. Where the project has labels of the person's own
# to save first (another request), the loader comes first, as built.
SUBMIT_KEEPS_LOADER = (
    b"this.setLoading(!0),await this.saveUserLabels();const c=await this.withinLoadingState(async function(){"
    b"return await t(i,r)});",
    b"(q=>q&&Object.keys(q).length&&this.setLoading(!0))(null==(s=this.lsf)||null==(s=s.userLabels)?void 0:"
    b"s.controls),await this.saveUserLabels();const c=await(p=>(this.setLoading(!0),p))(t(i,r));")
SUBMIT_NEXT_WITHOUT_REBUILD = (
    b"var u;return this.setLoading(!1),(null==c||null==(s=c.$meta)?void 0:s.status)>=400||(!a||"
    b"this.datamanager.isExplorer?await this.loadTask(i,l.pk,!0):await this.loadTask()),c}",
    b"var u;const w=(null==c||null==(s=c.$meta)?void 0:s.status)>=400,k=!a||this.datamanager.isExplorer;"
    b"return(w||k||Lt(St)&&null!=(s=this.lsf)&&null!=(s=s.commentStore)&&s.hasUnsaved)&&this.setLoading(!1),"
    b"w||(k?await this.loadTask(i,l.pk,!0):await this.loadTask()),c}")
NEXT_TASK_WITHOUT_REBUILD = (
    b"i=await s.withinLoadingState(async function(){let t;t=Q(e)?await a.loadTask(e):await a.loadNextTask();"
    b"const n=s.labelStream&&!t;return s.lsf.setFlags({noTask:n}),t});i&&await s.selectTask(i,t,n)",
    b"i=(s.setLoading(!0),await async function(){let t;t=Q(e)?await a.loadTask(e):await a.loadNextTask();"
    b"const n=s.labelStream&&!t;return s.lsf.setFlags({noTask:n}),t}());i?await s.selectTask(i,t,n):s.setLoading(!1)")

# Label Studio 1.23.2's data manager chunk (web/dist/apps/labelstudio/167.js, served at
# /react-app/167.js): its editor wrapper's submit (submitCurrentAnnotation) and task load (loadTask).
# The task selected (selectTask -> setLSFTask) sets the loader itself and lifts it once built.
DATAMANAGER = PatchGroup(
    name="datamanager-submit-1.23.2",
    path="/react-app/167.js",
    sha256="0187ac4065ce3d40b5650fd2244439a6672980577b59b19becae80371d5cf2f8",
    replacements=(SUBMIT_KEEPS_LOADER, SUBMIT_NEXT_WITHOUT_REBUILD, NEXT_TASK_WITHOUT_REBUILD),
)
BUNDLE_PATCHES: tuple[PatchGroup, ...] = (EDITOR, DATAMANAGER)


class Patcher:
    """Which groups apply to the files of one desk; logs each group's outcome once."""

    def __init__(self, groups: tuple[PatchGroup, ...], enabled: bool = True):
        self.groups = {g.path: g for g in groups}
        self.enabled = enabled
        self.outcomes: dict[str, Outcome] = {}  # group name -> what happened (first time seen)
        self.disabled_reason = "" if enabled else f"{NO_PATCHES_ENV}=1"

    def disable(self, reason: str) -> None:
        self.enabled, self.disabled_reason = False, reason

    def wants(self, path: str) -> bool:
        return path in self.groups

    def record(self, outcome: Outcome, quiet: bool = False) -> None:
        """Keep ``outcome`` and log it unless the group's last outcome was the same (one line
        per group at start, one warning for a file served as built). ``quiet``: not applied for
        a reason said once already (the version, the switch): an info line."""
        if self.outcomes.get(outcome.group) == outcome:
            return
        self.outcomes[outcome.group] = outcome
        (log.info if outcome.applied or quiet else log.warning)(outcome.line())

    def patch(self, path: str, body: bytes) -> bytes:
        """The body to serve for the build file at ``path`` (as built unless its group applies)."""
        group = self.groups.get(path)
        if group is None:
            return body
        if not self.enabled:
            self.record(Outcome(group.name, group.path, False, self.disabled_reason), quiet=True)
            return body
        patched, outcome = apply_group(body, group)
        self.record(outcome)
        return patched
