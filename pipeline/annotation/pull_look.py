"""What a pull sees of the round's projects before it exports them, read from the desks side by side.

A pull asks each desk for its users and projects (:func:`read_desk`), and each project of the round
what changed since the last pull (:func:`look`): its live counts and config, the tasks Label
Studio changed since a window before the last look (a task is stamped whenever it, an
annotation or a prediction of it is saved or deleted) and every task holding a draft, with a
digest of those drafts. A project that looks as at the last pull is read from its archived
export (:attr:`Wanted.archived`); any other is exported (:func:`export`). A project the last pull
did not export is not looked at: its look is read off its export (:func:`look_from_export`). That costs, per desk,
its users and projects, and per project one request; the drafts are read from the desk's own
database where the pull may (:mod:`.desk_db`), else one request per task holding a draft (up to
:data:`DRAFTS_ONE_BY_ONE`; past that, one partial export). The looks are kept in the pull state
(``annotation/sync/<round>.pull.json``, :mod:`.pushed`) by :func:`.pull.pull_round`.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.annotation import acceptance

from pipeline.labelstudio import desk_db
from pipeline.labelstudio.client import ID_CHUNK, SETTLE_S, LabelStudioClient, Project, chunks, format_time, parse_time
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.push import each_desk
from pipeline.annotation.push_project import parse_project_key
from pipeline.annotation.rounds import Round
from pipeline.paths import DataRoot


def settled(answered: dt.datetime | None) -> dt.datetime | None:
    """A look's ``since`` from the server's clock: :data:`.client.SETTLE_S` before it."""
    return answered - dt.timedelta(seconds=SETTLE_S) if answered else None


DRAFTS_ONE_BY_ONE = 10  # up to this many tasks with drafts, a look reads their drafts task by task


def look(client: LabelStudioClient, project: Project, since: dt.datetime, database: Path | None = None) -> dict:
    """What Label Studio shows of a project without exporting it: its live counts, its config,
    every task changed since ``since`` or holding a draft (``[updated_at, annotations, skipped,
    draft]``), and a digest of those drafts (read from the desk's ``database`` where the pull may,
    :mod:`.desk_db`; else task by task, or by a partial export of those tasks when there are many).
    Two looks from the same ``since`` are equal only if no task, annotation, prediction or draft
    of the project was added, changed or deleted in between (:data:`.client.SETTLE_S`)."""
    seen, _ = client.changed_tasks(project.id, since, drafts=True,
                                   include="id,updated_at,total_annotations,cancelled_annotations,draft_exists")
    drafts = None
    with_drafts = [t["id"] for t in seen if t.get("draft_exists")]
    if with_drafts and database is not None:
        try:
            drafts = desk_db.read_drafts(database, project.id, with_drafts)
        except desk_db.Unavailable as exc:
            logging.getLogger(__name__).warning("%s: %s; reading drafts through its API instead", client.url, exc)
    if with_drafts and drafts is None:
        if len(with_drafts) <= DRAFTS_ONE_BY_ONE:  # a request per task: nothing written on the desk
            drafts = [d for task_id in with_drafts for d in client.task_drafts(task_id)]
        else:  # a partial export (Label Studio keeps a copy of every export under its export/ folder)
            drafts = [d for part in chunks(with_drafts, ID_CHUNK) for t in json.loads(client.export_tasks(project.id, ids=part))
                      if isinstance(t, dict) for d in t.get("drafts") or []]
    return _shown(project, since, seen, drafts)


def look_from_export(project: Project, since: dt.datetime, tasks: list) -> dict:
    """The :func:`look` from ``since`` that Label Studio would have shown while it made this
    export of every task of ``project`` (an export's tasks carry the stored fields a look asks
    for, and their drafts): the pull records it for a project it had nothing to compare with,
    and so sends no look. A change made while the export ran shows as a difference next time
    (a task's fields are read before its annotations and drafts), never the other way round."""
    seen = [{**t, "draft_exists": bool(t.get("drafts"))} for t in tasks if isinstance(t, dict)]
    seen = [t for t in seen if t["draft_exists"] or (parse_time(t.get("updated_at")) or since) >= since]
    with_drafts = [d for t in seen for d in t.get("drafts") or []]
    return _shown(project, since, seen, with_drafts if any(t["draft_exists"] for t in seen) else None)


def _shown(project: Project, since: dt.datetime, seen: list[dict], drafts: list | None) -> dict:
    """A look: the project's counts and config, the window (``seen``: the tasks changed since
    ``since`` or holding a draft) and a digest of their drafts (None: no task holds one)."""
    window = {str(t["id"]): [t.get("updated_at"), t.get("total_annotations", 0), t.get("cancelled_annotations", 0),
                             bool(t.get("draft_exists"))] for t in seen}
    digest = None
    if drafts is not None:
        marks = sorted(([d.get("id"), d.get("task"), d.get("user"), d.get("annotation"), d.get("updated_at"),
                         d.get("was_postponed")] for d in drafts if isinstance(d, dict)), key=json.dumps)
        digest = hashlib.sha256(json.dumps(marks).encode()).hexdigest()
    return {"key": project.key, "counts": list(project.counts or ()),
            "config": hashlib.sha256(project.label_config.encode()).hexdigest(),
            "since": format_time(since), "window": window, "drafts": digest}


def narrowed(look: dict, since: dt.datetime) -> dict:
    """``look`` as a look from the later ``since`` would have shown it (a subset of its window)."""
    keep = {i: v for i, v in look["window"].items() if v[3] or (parse_time(v[0]) or since) >= since}
    return {**look, "since": format_time(since), "window": keep}


@dataclass
class Wanted:
    """One project of the round on its annotator's desk, as the pull reads it."""
    client: LabelStudioClient
    project: Project
    scenario: str
    annotator: str
    users: dict[int, str]
    owner: int | None
    look: dict | None = None          # what Label Studio showed before the export (None: could not look)
    raw: bytes | None = None          # exported now
    predictions: dict | None = None   # read now, with the export
    archived: Path | None = None      # unchanged since the last pull: its archived export
    look_since: dt.datetime | None = None  # not looked at: its look is read off the export, from this
    database: Path | None = None      # the desk's database, when the export may be read from it (:mod:`.desk_db`)
    ready: threading.Event = field(default_factory=threading.Event)  # looked at (and exported)

    @property
    def read(self) -> bool:
        """Whether it is all here: archived, or exported with its predictions."""
        return self.archived is not None or (self.raw is not None and self.predictions is not None)

    @property
    def sha(self) -> str:
        """The sha256 of its export (the archived one's name)."""
        return self.archived.stem if self.archived is not None else hashlib.sha256(self.raw).hexdigest()


@dataclass
class DeskRead:
    """What a pull read from one desk: its users, the round's projects on it and the problems of
    projects named for someone else; ``listed`` once those are known."""
    users: dict[int, str] = field(default_factory=dict)
    items: list[Wanted] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    listed: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)  # set whenever an item is ready (may be shared)


@contextlib.contextmanager
def reading(desks: DeskAccess, people: list[str], work: Callable[[str], None], read: dict[str, DeskRead]):
    """Run ``work`` for every desk in the background (:func:`.push.each_desk`) and yield
    ``failed(event, who)``: it waits for ``event`` and says whether ``who``'s desk failed (what
    that desk gave before is still read, and the other desks are read in full). Every event is
    set once the desks are done, failed or not; leaving raises the first failure (in
    ``people``'s order), after the work done meanwhile (e.g. archiving the other desks' exports)."""
    errors: dict[str, BaseException] = {}

    def guarded(who: str) -> None:
        try:
            work(who)
        except BaseException as exc:
            errors[who] = exc
            raise

    def run_all() -> None:
        try:
            each_desk(desks, people, guarded)
        finally:  # nothing waits forever on a desk that failed, or was never reached
            for desk in read.values():
                desk.listed.set()
                for item in desk.items:
                    item.ready.set()
                desk.arrived.set()

    def failed(event: threading.Event, who: str) -> bool:
        event.wait()
        return who in errors

    with ThreadPoolExecutor(1) as runner:  # leaving waits for the desks (their exports finish)
        background = runner.submit(run_all)
        yield failed
    background.result()


def look_at(root: DataRoot, rnd: Round, item: Wanted, old: dict | None, since_new: dt.datetime | None) -> None:
    """Look at the project: it is :attr:`Wanted.archived` when it is as the last pull left it
    and that pull's export and predictions record are in the archive; else it is to be exported.
    A project the last pull did not export is not looked at (:attr:`Wanted.look_since`)."""
    try:  # the pull state is a cache: anything odd in it means an export
        since_old = parse_time(old.get("since")) if isinstance(old, dict) else None
    except (TypeError, ValueError, AttributeError):
        old, since_old = None, None
    if item.project.counts is None or not (since_old or since_new):
        return  # nothing to compare with: exported
    if since_new is not None and not (isinstance(old, dict) and old.get("export")):
        item.look_since = since_new  # nothing to compare with: exported, and its look read off the export
        return
    shown = look(item.client, item.project, since_old or since_new, item.database)
    if isinstance(old, dict) and old.get("export") and {k: old.get(k) for k in shown} == shown:
        try:
            path = root.export(rnd.name, item.scenario, item.annotator, old["export"])
            records = root.export_predictions(rnd.name, item.scenario, item.annotator, old["export"])
        except (TypeError, ValueError):
            path = records = None
        if path is not None and path.is_file() and records.is_file():
            item.look, item.archived = shown, path
            return
    item.look = narrowed(shown, since_new) if since_old and since_new and since_new > since_old else shown


EXPORTS_PER_DESK = 1  # exports asked of one desk at once (Label Studio serializes an export in one process)
LOOKS_PER_DESK = 4    # looks and prediction listings asked of one desk at once (small reads)


def export(item: Wanted, aside: ThreadPoolExecutor) -> None:
    """Export the project and list its predictions: read from the desk's database where the pull
    may (:mod:`.desk_db`: the same JSON, a fraction of the desk's CPU), else asked of the desk
    (the predictions on ``aside``, beside the export as it runs)."""
    if item.database is not None:
        try:
            item.raw, item.predictions = desk_db.read_project(item.database, item.project.id)
            return
        except desk_db.Unavailable as exc:
            logging.getLogger(__name__).warning("%s: %s; exporting through its API instead", item.client.url, exc)
    predictions = aside.submit(acceptance.project_predictions, item.client, item.project.id)
    item.raw = item.client.export_tasks(item.project.id)
    item.predictions = predictions.result()


def read_desk(desks: DeskAccess, who: str, rnd: Round, root: DataRoot, old_projects: dict, desk: DeskRead) -> None:
    """Fill ``desk`` from ``who``'s desk: its users and the round's projects on it (then
    ``listed``), each project looked at and, unless it is as the last pull left it
    (``old_projects``: the pull state's looks), exported (then ``ready``).

    The projects are read largest first (the longest parse starts while the smaller projects
    are still exported); a project's look comes before its
    export, the other looks and the prediction listings run beside the exports (at most
    :data:`LOOKS_PER_DESK`), and at most :data:`EXPORTS_PER_DESK` exports at once. A failure is
    raised once the desk's other projects are read (their ``ready`` is set either way)."""
    client = desks.client(who)
    with ThreadPoolExecutor(1) as aside:  # reads only: asked side by side
        users = aside.submit(client.users)
        listed = sorted(client.projects(), key=lambda p: p.key)
        since_new = settled(client.answered_at())
        desk.users = {u["id"]: u["email"] for u in users.result()}
    owner = next((uid for uid, email in desk.users.items() if email.lower() == who.lower()), None)  # as Desks.owner_id
    database = desks.database(who)
    for project in listed:
        parsed = parse_project_key(project.key)
        if parsed is None or parsed[0] != rnd.name:
            continue
        if parsed[2] != who:  # a project made on this desk in someone else's name
            desk.foreign.append(f"project {project.id} on {desks.where(who)} is named for {parsed[2]}: not counted")
            continue
        desk.items.append(Wanted(client, project, parsed[1], who, desk.users, owner, database=database))
    desk.items.sort(key=lambda item: -(item.project.counts or (0,))[0])  # stable: by key among equals
    desk.listed.set()
    if not desk.items:
        return

    def fetch(item: Wanted, looked) -> None:
        try:
            looked.result()  # the look comes before the export: a change after it shows next time
            if item.archived is None:
                export(item, side)
        finally:
            item.ready.set()
            desk.arrived.set()

    with ThreadPoolExecutor(min(2 * len(desk.items), LOOKS_PER_DESK)) as side, \
            ThreadPoolExecutor(min(len(desk.items), EXPORTS_PER_DESK)) as exports:
        looked = [side.submit(look_at, root, rnd, item, old_projects.get(f"{client.url}|{item.project.id}"), since_new)
                  for item in desk.items]
        done = [exports.submit(fetch, item, look) for item, look in zip(desk.items, looked)]
        for future in done:
            future.result()
