"""One annotator's project of a round on their desk, as a push keeps it in step: find or make it,
learn its tasks, write what changed and keep the new tasks to import (:class:`ProjectSync`).

A project's identity is its key (:func:`project_key`, the last line of its description), a
task's its sample, window and content hash (:func:`.push_tasks.task_key`). A push with a data
root keeps what it saw of each project in the push state (``<data root>/annotation/sync/
<round>.push.json``, :mod:`.pushed`): its tasks with their Label Studio ids, its task count and
the newest change Label Studio showed after the push's own writes. The next push asks each
project for its newest change and task count (:meth:`.client.LabelStudioClient.newest_task`;
Label Studio stamps a task whenever it, an annotation or a prediction of it is saved or
deleted): with nothing new that is one small request per project. Tasks changed since are read
again; a task count that differs from the state's, or a task it does not know, means a full
listing, as does any task about to be updated or deleted that is not as the state says. The
state is a cache: without it a push lists every project.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pipeline import taxonomy
from pipeline.annotation import ls_config
from pipeline.labelstudio.client import SETTLE_S, LabelStudioClient, LabelStudioError, Project, parse_time
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.push_tasks import Prepared, SampleTasks, Wants, task_key
from pipeline.annotation.rounds import Round

KEY_PREFIX = "rescue-project:"
ADJUDICATION_PREFIX = "rescue-adjudication:"  # an adjudication project's key (pipeline.quality.adjudication)


def project_key(round_name: str, scenario: str, annotator: str) -> str:
    """A round project's identity (stored as the last line of its description)."""
    return f"{KEY_PREFIX}{round_name}/{scenario}/{annotator}"


def parse_project_key(key: str) -> tuple[str, str, str] | None:
    """``(round, scenario, annotator)`` of a round project key, else None."""
    if not key.startswith(KEY_PREFIX):
        return None
    parts = key[len(KEY_PREFIX):].split("/")
    if len(parts) == 3 and parts[1] in taxonomy.SCENARIOS:
        return parts[0], parts[1], parts[2]
    return None


def same_project(old: dict | None, client: LabelStudioClient, project_id: int | None) -> bool:
    """Whether a push state record is of this desk's project ``project_id``."""
    return isinstance(old, dict) and project_id is not None and old.get("desk") == client.url \
        and old.get("id") == project_id


def set_instructions(client: LabelStudioClient, project_id: int, html: str) -> None:
    """Fill the project's instruction panel (shown before the first task and on request)."""
    client._json("PATCH", f"/api/projects/{project_id}/", "set the project's instructions",
                 json={"expert_instruction": html, "show_instruction": True})


@dataclass
class Known:
    """A task of a project as the push knows it."""
    id: int
    sha: str | None
    annotated: bool


class ProjectSync:
    """One annotator's project of one scenario: find or make it, learn its tasks (from the push
    state when Label Studio shows the same newest change and task count, reading again only the
    tasks changed since; else by listing them all), write what changed, keep the new tasks to
    import, and record what it then knows (:attr:`record`).

    The record (``<round>.push.json``, per project key): the desk and project id, its task count
    and the newest change (task id and ``updated_at``) after the push's own writes, every task
    ``[sample_id, window index, window count, id, content_sha, annotated]``, duplicates and the
    storages added. A task about to be updated or deleted is read again first (:meth:`_compare`),
    so a record that missed a change (one racing the push's last look) never makes the push
    write over an annotated task; it only leaves a task whose content hash someone else edited
    on the desk in that instant for the next listing."""

    def __init__(self, rnd: Round, scenario: str, annotator: str, entries: list[SampleTasks], version: str,
                 redraft: frozenset[str] = frozenset(), retire: Callable[[ProjectSync, dict], None] | None = None):
        self.rnd, self.scenario, self.annotator, self.entries, self.version = rnd, scenario, annotator, entries, version
        # samples whose answered tasks are replaced (``--redraft``): ``retire(self, {sample: [Known]})``
        # archives and records them before they are deleted (:mod:`.redraft`)
        self.redraft, self.retire = redraft, retire
        self.replaced: list[tuple[str, str, int]] = []  # (annotator, sample, answered tasks replaced)
        self.key = project_key(rnd.name, scenario, annotator)
        self.client: LabelStudioClient | None = None
        self.project_id: int | None = None
        self.known: dict[tuple, Known] = {}
        self.dups: list[list] = []
        self.new: list[tuple[tuple, Prepared]] = []
        self.updated = self.unchanged = 0
        self.duplicates: list[tuple[str, str]] = []
        self.changed_after_annotation: list[tuple[str, str]] = []
        self.record: dict | None = None   # None: nothing to keep (no push state, or not sure of it)
        self.storages: list[str] = []
        self.wrote = False      # the record changes (a write, a listing, tasks that moved)
        self.unsure = False     # the push cannot say which task is which: no record
        self._old_record: dict | None = None
        self.from_state = False  # the tasks known from the push state (not listed now)
        self._newest: tuple | None = None  # (newest task, task count), asked ahead
        self._project: Project | None = None
        self.fresh = False      # made by this push: every task is new
        self._learned = False   # compared with what the project holds

    # --- what the project holds ---------------------------------------------------------------
    def open(self, desks: DeskAccess, client: LabelStudioClient, listed: list[Project],
             old: dict | None, newest: tuple | None = None) -> None:
        """Find or make the project, with its instructions and its media storage (nothing here
        needs the tasks: done while they are built)."""
        rnd, scenario = self.rnd, self.scenario
        self.client = client
        config = ls_config.render_config(rnd, scenario)
        html = ls_config.instructions_html(rnd, scenario)
        self.fresh = not any(p.key == self.key for p in listed)
        project = client.ensure_project(self.key, f"{rnd.name} {scenario} {self.annotator}", config, self.version,
                                        description=rnd.title, listed=listed, instruction=html)
        self.project_id, self._project = project.id, project
        if project.instruction != html or project.show_instruction is not True:
            set_instructions(client, project.id, html)
        same = same_project(old, client, project.id)
        self._newest = newest
        self._old_record = old if same else None
        self.storages = list(old.get("storages") or []) if same else []
        urls = [e.url for e in self.entries]
        for folder in desks.stage_media(self.annotator, urls):  # the desk's own copy of its media
            if str(folder) not in self.storages:  # a storage this push added before is not asked for
                client.add_local_storage(project.id, str(folder), new=self.fresh)
                self.storages.append(str(folder))
                self.wrote = True
        if self.fresh:
            self.wrote = True  # made just now: no task to list

    def to_import(self, wants: Wants) -> Iterator[tuple[tuple, dict]]:
        """The tasks to import, as they become known. A project made by this push takes every
        task of its samples, each sample as soon as its tasks are built (:meth:`.Wants.ready`);
        another is first compared with what it holds (:meth:`_learn`: writes what changed)."""
        if self.fresh:  # what _compare would find: nothing known, every task new
            for entry in self.entries:
                prepared = wants.prepared(entry.sample_id)
                for key, _ in entry.tasks:
                    yield key, prepared[key]
            return
        self._learn(wants)
        yield from self.new

    @property
    def counted(self) -> bool:
        """Whether :meth:`expected` is this push's whole count (a project compared or made now)."""
        return self.fresh or self._learned

    def expected(self) -> int:
        """The new tasks known so far (a project made now: of its samples built so far)."""
        if self.fresh:
            return sum(len(e.tasks) for e in self.entries if e.tasks is not None)
        return len(self.new)

    def _learn(self, wants: Wants) -> None:
        """Learn the project's tasks (push state or listing) and compare them with what is wanted."""
        old, project = self._old_record, self._project
        for entry in self.entries:
            wants.ready(entry)
        if not (old is not None and self._from_state(old, project)):
            self._list_all()
        for _, key in self.dups:
            self.duplicates.append((self.annotator, key[0]))
        self._compare(wants)
        self._learned = True

    def _from_state(self, old: dict, project: Project) -> bool:
        """The project's tasks from the push state, when Label Studio's newest change and task
        count are still those the last push saw (one small request); tasks changed since are
        read again. False when the state cannot be trusted (then everything is listed)."""
        try:
            tasks = [(tuple(t[:3]), Known(int(t[3]), t[4], bool(t[5]))) for t in old["tasks"]]
            dups = [[int(d[0]), tuple(d[1])] for d in old.get("dups") or []]
            newest = old["newest"]
            count = int(old["count"])
            stamp = parse_time(newest[1]) if newest else None
        except (KeyError, TypeError, ValueError, IndexError):
            return False
        if project.counts is None or project.counts[0] != count:
            return False  # a task was added or deleted behind the push's back
        now, total = self._newest if self._newest is not None else self.client.newest_task(self.project_id)
        if total != count:
            return False
        known = dict(tasks)
        if (now and [now["id"], now["updated_at"]]) != (newest or None):
            if stamp is None:
                return False
            # read again every task changed since (and a margin before) the newest the last push saw
            by_id = {k.id: key for key, k in known.items()}
            dup_ids = {d[0] for d in dups}
            fetched, _ = self.client.changed_tasks(self.project_id, stamp - dt.timedelta(seconds=SETTLE_S),
                                                   include="id,data,total_annotations,cancelled_annotations")
            for task in fetched:
                if task["id"] in dup_ids:
                    continue
                key = task_key(task.get("data") or {})
                old_key = by_id.get(task["id"])
                if old_key is not None and old_key != key:
                    return False  # a task now shows another sample or window
                if old_key is None and key in known:
                    dups.append([task["id"], key])
                    continue
                known[key] = Known(task["id"], (task.get("data") or {}).get("content_sha"),
                                    bool(task.get("total_annotations", 0) or task.get("cancelled_annotations", 0)))
            self.wrote = True  # the record changes
        if len(known) + len(dups) != count:
            return False
        self.known, self.dups, self.from_state = known, dups, True
        return True

    def _list_all(self) -> None:
        """Every task of the project, with its data."""
        self.known, self.dups, self.from_state = {}, [], False
        for task in self.client.tasks(self.project_id):
            key = task_key(task.get("data") or {})
            if key in self.known:
                self.dups.append([task["id"], key])
                continue
            self.known[key] = Known(task["id"], (task.get("data") or {}).get("content_sha"),
                                     bool(task.get("total_annotations", 0) or task.get("cancelled_annotations", 0)))
        self.wrote = True  # a record to write

    # --- what changes ---------------------------------------------------------------------------
    def _compare(self, wants: Wants) -> None:
        """Update what may change; keep the new tasks (as the push always did, task by task).
        Before a task known only from the push state is updated or deleted, it is read again
        (one request for all of them): if it is not what the state says, everything is listed."""
        plan = self._plan()
        writes = [task for _, task in plan["delete"]] + [task for _, _, task in plan["update"]]
        writes += [task for _, task in plan["replace"]]
        if writes and self.from_state:
            fetched, _ = self.client.changed_tasks(self.project_id, None, ids=[t.id for t in writes],
                                                   include="id,data,total_annotations,cancelled_annotations")
            now = {t["id"]: (task_key(t.get("data") or {}), (t.get("data") or {}).get("content_sha"),
                             bool(t.get("total_annotations", 0) or t.get("cancelled_annotations", 0))) for t in fetched}
            by_id = {k.id: key for key, k in self.known.items()}
            if any(now.get(t.id) != (by_id[t.id], t.sha, t.annotated) for t in writes):
                self._list_all()
                plan = self._plan()
        client, version = self.client, self.version
        retired: dict[str, list[Known]] = {}
        for key, task in plan["delete"] + plan["replace"]:
            if task.annotated and key[0] in self.redraft:
                retired.setdefault(key[0], []).append(task)
        if retired:  # their answers archived and recorded before the tasks go
            if self.retire is None:
                raise ValueError("replacing answered tasks needs a data root to archive their answers in")
            self.retire(self, retired)
            self.replaced += [(self.annotator, sid, len(tasks)) for sid, tasks in sorted(retired.items())]
        for key, task in plan["replace"]:
            client.request("DELETE", f"/api/tasks/{task.id}/", "delete an answered task of replaced drafts")
            del self.known[key]
            self.wrote = True
        for key, task in plan["delete"]:
            client.request("DELETE", f"/api/tasks/{task.id}/", "delete an outdated window")
            del self.known[key]
            self.updated += 1
            self.wrote = True
        self.changed_after_annotation += plan["changed"]
        self.unchanged += plan["unchanged"]
        for sample_id, key, task in plan["update"]:
            p = wants.prepared(sample_id)[key]
            client.update_task(task.id, p.data)
            client.replace_predictions(task.id, p.prediction, version)
            task.sha = p.data["content_sha"]
            self.updated += 1
            self.wrote = True
        for sample_id, key in plan["new"]:
            self.new.append((key, wants.prepared(sample_id)[key]))

    def _plan(self) -> dict:
        """What the push does to the project, from what it knows of its tasks (no request)."""
        annotator = self.annotator
        wanted = {key for e in self.entries for key, _ in e.tasks}
        pushed_ids = {e.sample_id for e in self.entries}
        # A sample whose tasks are cut differently now (re-segmented, other window size): while any
        # of its old tasks carries annotations, it is left as it is (like any task changed after
        # annotation); otherwise its old tasks are replaced.
        # ``--redraft`` samples (:attr:`redraft`) are not left: their answered tasks are replaced.
        kept = {key[0] for key, task in self.known.items()
                if key[0] in pushed_ids and key not in wanted and task.annotated and key[0] not in self.redraft}
        plan: dict = {"delete": [(key, task) for key, task in self.known.items()
                                 if key[0] in pushed_ids and key not in wanted and key[0] not in kept],
                      "changed": [(annotator, sid) for sid in sorted(kept)], "unchanged": 0, "update": [], "new": [],
                      "replace": []}
        for entry in self.entries:
            if entry.sample_id in kept:
                continue
            for key, sha in entry.tasks:
                task = self.known.get(key)
                if task is not None and task.sha == sha:
                    plan["unchanged"] += 1
                elif task is not None and task.annotated and entry.sample_id in self.redraft:
                    plan["replace"].append((key, task))  # deleted (answers archived first), then imported anew
                    plan["new"].append((entry.sample_id, key))
                elif task is not None and task.annotated:
                    plan["changed"].append((annotator, entry.sample_id))
                elif task is not None:
                    plan["update"].append((entry.sample_id, key, task))
                else:
                    plan["new"].append((entry.sample_id, key))
        return plan

    def imported(self, chunk: list[tuple[tuple, Prepared]], ids: list[int]) -> None:
        """A chunk of new tasks is in Label Studio (``ids``: its task ids, in order)."""
        self.wrote = True
        if len(ids) != len(chunk):
            self.unsure = True  # which id is which task is not known: list them next time
            return
        for (key, p), task_id in zip(chunk, ids):
            self.known[key] = Known(int(task_id), p.data["content_sha"], False)

    def settle(self) -> None:
        """Record what the push knows of the project now, with Label Studio's newest change and
        task count (one small request after the push's own writes)."""
        if not self.wrote:
            self.record = self._old_record
            return
        if self.unsure:
            self.record = None
            return
        try:
            newest, total = self.client.newest_task(self.project_id)
        except LabelStudioError:
            self.record = None  # the push itself is done; the next one lists the project
            return
        count = len(self.known) + len(self.dups)
        if total != count:
            self.record = None  # tasks added or deleted meanwhile by someone else: list them next time
            return
        self.record = {
            "desk": self.client.url, "id": self.project_id, "count": count,
            "newest": [newest["id"], newest["updated_at"]] if newest else None, "storages": sorted(self.storages),
            "tasks": sorted(([*key, k.id, k.sha, int(k.annotated)] for key, k in self.known.items()), key=json.dumps),
            "dups": sorted(([d[0], list(d[1])] for d in self.dups), key=json.dumps)}
