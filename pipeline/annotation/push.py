"""Push a round's samples to the annotators' desks: one project per annotator per round and
scenario, on that annotator's own Label Studio (:mod:`.desks`).

Community Label Studio can neither assign tasks nor keep one login from another's projects, so
a blind round gives each of its K annotators a project holding identical tasks on a server of
their own, with the media of those tasks in their own file root. A long sample becomes several
tasks, one per window of at most ``windows.WINDOW_UNITS`` rows with controls (:mod:`.windows`; pull stitches them back).
Pushing is idempotent: every task carries its ``sample_id``, its window (``data["window"]``,
absent for a one-task sample) and the ``content_sha`` of what it shows; a re-push imports only
missing tasks, refreshes changed tasks nobody has annotated yet (and removes unannotated
windows a re-segmented sample no longer has), and reports (never touches) changed tasks that
already carry annotations - unless the sample is named in ``redraft`` (``--redraft``, :mod:`.redraft`):
then the project's export is archived, the old tasks' content hashes recorded, and the tasks
replaced. A task's identity is its sample id, window and content hash, never a Label Studio id.

A push with a data root keeps what it saw (``<data root>/annotation/sync/<round>.push.json``):
per sample, the hash of its inputs and its tasks' content hashes (:mod:`.push_tasks`: tasks are
built only for samples whose inputs changed); per project, its tasks with their Label Studio
ids, its task count and the newest change Label Studio showed after the push's own writes
(:mod:`.push_project`). The next push lists each desk's projects once and asks each project for
its newest change and task count: with nothing new that is one small request per project, and
nothing is written.

What goes in as pre-annotation (only what someone or something proposed) and how a task is
built: :mod:`.push_tasks`. This module chooses the annotators, works on the desks side by side
(:func:`each_desk`): first each desk's projects are found or made, then the tasks are built while
the desks import them in chunks (a project made now takes each sample as soon as it is built).
Then it reports.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import taxonomy
from pipeline.annotation import ls_config, pushed, redraft, voice_naming
from pipeline.labelstudio.client import LabelStudioError, chunks
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.push_project import (KEY_PREFIX, ProjectSync, parse_project_key, project_key,
                                              same_project, set_instructions)
from pipeline.annotation.push_tasks import (Prelabeler, Wants, catalog_media_urls, input_values, local_media_url,
                                            proposed, task_key)
from pipeline.annotation.push_tasks import prepare as _prepare  # the name tests and bench_annotator_ui use
from pipeline.annotation.rounds import Round, load_round
from pipeline.errors import TransientError
from pipeline.paths import DataRoot
from pipeline.rows import tables_to_samples

# The push's names, as callers import them (the project and task builders live beside it).
__all__ = ["DESK_WORKERS", "IMPORT_CHUNK", "KEY_PREFIX", "Prelabeler", "PushError", "PushInterrupted", "PushReport",
           "_prepare", "catalog_media_urls", "choose_annotators", "dumps_report", "each_desk", "input_values",
           "load_samples", "local_media_url", "model_version", "parse_project_key", "project_key", "proposed",
           "push_round", "set_instructions", "task_key"]

IMPORT_CHUNK = 100  # tasks per import request: one request per chunk, committed as a whole


class PushError(RuntimeError):
    """A push could not finish; the message says how far it got and that a re-run is safe."""


class PushInterrupted(PushError, TransientError):
    """A push stopped by a transient fault of a desk (it did not answer, or answered HTTP 5xx):
    the same push again, once the desk is back, imports only what is missing."""


def model_version(rnd: Round, source: str) -> str:
    # Label Studio pre-fills only predictions whose model_version equals the project's.
    return f"{rnd.name}-v{rnd.version}-{source}"


# --- annotators ----------------------------------------------------------------------------

def choose_annotators(desks: DeskAccess, rnd: Round, annotators: Sequence[str] | None, k: int | None) -> list[str]:
    """The round's annotators: those named, else every annotator with a desk (never an
    adjudicator: roles are explicit, :mod:`.desks`); at least ``k`` (default the round's)."""
    k = k or rnd.annotators
    known = desks.people("annotator")
    chosen = list(annotators) if annotators else known
    unknown = [a for a in chosen if a not in known]
    if unknown:
        raise PushError(f"not annotators with a desk: {', '.join(unknown)}; add them with "
                        "`rescue annotators add EMAIL`")
    if len(chosen) < k:
        raise PushError(f"round {rnd.name!r} needs {k} annotators, {len(chosen)} available "
                        f"({', '.join(chosen) or 'none'}); add more with `rescue annotators add EMAIL`")
    return chosen


# --- push ----------------------------------------------------------------------------------

@dataclass
class PushReport:
    round: str
    annotators: list[str]
    projects: dict[str, int] = field(default_factory=dict)  # project key -> project id (for links)
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    changed_after_annotation: list[tuple[str, str]] = field(default_factory=list)  # (annotator, sample_id)
    duplicates: list[tuple[str, str]] = field(default_factory=list)  # (annotator, sample_id) seen twice
    prefilled: dict[str, list[str]] = field(default_factory=dict)  # sample_id -> fields its prediction fills
    # (annotator, sample_id, answered tasks): replaced by ``redraft``, their answers archived (:mod:`.redraft`)
    replaced: list[tuple[str, str, int]] = field(default_factory=list)

    def summary(self) -> str:
        s = (f"round {self.round}: {len(self.projects)} projects for {len(self.annotators)} annotators; "
             f"{self.created} tasks created, {self.updated} updated, {self.unchanged} unchanged")
        if self.changed_after_annotation:
            s += f"; {len(self.changed_after_annotation)} changed after annotation (left as they are)"
        if self.replaced:
            s += (f"; {sum(n for _, _, n in self.replaced)} answered tasks of re-drafted samples replaced "
                  "(answers archived, not counted)")
        if self.duplicates:
            s += f"; {len(self.duplicates)} duplicate tasks found"
        fields = sorted({f for fs in self.prefilled.values() for f in fs})
        return s + (f"; pre-filled: {', '.join(fields)}" if fields else "; nothing pre-filled")


def push_round(desks: DeskAccess, round_name: str, samples: Sequence[dict],
               annotators: Sequence[str] | None = None, *, root: DataRoot | None = None,
               **options) -> PushReport:
    """:func:`_push_round` (see there); with ``root`` it holds the round's push lock
    (:func:`.pushed.round_lock`: two pushes at once make no duplicate project or task),
    records who was given which samples (:func:`.pushed.record_pushed`; pull reports deleted
    tasks) and keeps what it saw of each project (:func:`.pushed.write_sync`): a push again
    with nothing new asks each desk for its projects once and each project for the tasks
    changed since, and writes nothing."""
    samples = voice_naming.attach_voice_tables(load_round(round_name), samples, root)  # the voice block
    if root is None:
        if options.get("redraft"):
            raise PushError("replacing answered tasks (redraft) needs a data root to archive their answers in")
        return _push_round(desks, round_name, samples, annotators, **options)
    with pushed.round_lock(root, round_name):
        state = pushed.read_sync(root, load_round(round_name).name, "push")
        report = _push_round(desks, round_name, samples, annotators, state=state,
                             retire=_retirer(root, load_round(round_name).name), **options)
        pushed.write_sync(root, report.round, "push", state)
        scenario_of = {s["sample_id"]: s["scenario"] for s in samples}
        given_shas = {sid: [t[2] for t in (state.get("samples") or {}).get(sid, {}).get("tasks") or []]
                      for sid in scenario_of}
        redraft.keep_current(root, report.round, given_shas)  # a hash given again is no longer replaced
        given = [(sc, ann, sid) for key in report.projects if (parsed := parse_project_key(key))
                 for _, sc, ann in [parsed] for sid, s_sc in scenario_of.items() if s_sc == sc]
        pushed.record_pushed(root, report.round, given, report.prefilled)
    return report


def _retirer(root: DataRoot, round_name: str) -> Callable[[ProjectSync, dict], None]:
    """What a project does before deleting answered tasks of ``redraft`` samples: archive its
    export (as a pull would) and record the old tasks' content hashes in the push record."""
    lock = threading.Lock()  # projects of several desks at once: one writer of the record

    def retire(sync: ProjectSync, retired: dict) -> None:
        path = redraft.archive_project(root, round_name, sync.scenario, sync.annotator, sync.client,
                                       sync.project_id)
        with lock:
            for sid, tasks in sorted(retired.items()):
                redraft.record_replaced(root, round_name, sid, sync.annotator, [t.sha for t in tasks if t.sha],
                                        len(tasks), path)
    return retire


def _push_round(
    desks: DeskAccess,
    round_name: str,
    samples: Sequence[dict],
    annotators: Sequence[str] | None = None,
    *,
    k: int | None = None,
    prelabel: Prelabeler | None = input_values,
    prelabel_source: str = "input",
    media_url: Callable[[dict], str] | None = None,
    on_chunk: Callable[[int, int], None] | None = None,
    window: int | None = None,
    state: dict | None = None,
    redraft: Sequence[str] = (),
    retire: Callable[[ProjectSync, dict], None] | None = None,
) -> PushReport:
    """Push ``samples`` (``pipeline.rows`` shape) to every chosen annotator's project of the
    round, each on the annotator's own desk.

    ``annotators``: e-mails (default: every annotator with a desk; at least ``k``, default the
    round's ``annotators``). ``prelabel``: values for predictions (default: the input rows;
    None for none). ``media_url``: sample -> URL shown in the Audio player (e.g.
    ``/data/local-files/?d=media/x.wav``, a path relative to the data root): the file is placed
    in each annotator's file root (:meth:`.desks.Desks.stage_media`) and its folder registered
    as the projects' local storage. ``on_chunk(done, total)`` is called after each imported chunk.
    ``window``: units per task for long samples (default: samples above ``windows.SPLIT_ABOVE``
    units in windows of ``windows.WINDOW_UNITS``). ``state``: what the last push saw (the push
    state, :func:`.pushed.read_sync`), updated in place; None: every project's tasks are listed.
    ``redraft``: samples whose answered tasks that changed are replaced, not left (``retire``
    archives and records them first, :mod:`.redraft`).

    The desks are worked on side by side (:func:`each_desk`: never two at once on one server).
    """
    rnd = load_round(round_name)
    chosen = choose_annotators(desks, rnd, annotators, k)
    report = PushReport(rnd.name, chosen)
    # without a pre-annotation, a round with defaults still pre-fills: its predictions say so
    version = model_version(rnd, prelabel_source if prelabel else "defaults" if ls_config.has_defaults(rnd) else "none")
    keep = state is not None
    state = state if keep else {}
    projects_state = state.setdefault("projects", {})
    keys = {who: [project_key(rnd.name, sc, who) for sc in sorted({taxonomy.check_scenario(s["scenario"])
                                                                   for s in samples})] for who in chosen}

    wants = Wants(rnd, samples, prelabel, media_url, window, state.get("samples") or {})  # no task built yet
    scenarios = sorted(wants.by_scenario.items())
    syncs = {who: [ProjectSync(rnd, scenario, who, entries, version, frozenset(redraft), retire)
                   for scenario, entries in scenarios] for who in chosen}
    ordered = [sync for scenario, _ in scenarios for who in chosen for sync in syncs[who] if sync.scenario == scenario]
    progress = {"done": 0, "importing": False}
    lock = threading.Lock()

    def open_desk(who: str) -> None:
        """The desk's projects (one listing; each project the push state knows, its newest change
        and task count), each found or made, with its instructions and media."""
        client = desks.client(who)
        listed = client.projects()
        ids = {p.key: p.id for p in listed}
        known = [key for key in keys[who] if same_project(projects_state.get(key), client, ids.get(key))]
        with ThreadPoolExecutor(max(1, min(len(known), 4))) as pool:
            newest = dict(zip(known, pool.map(lambda key: client.newest_task(ids[key]), known)))
        for sync in syncs[who]:
            sync.open(desks, client, listed, projects_state.get(sync.key), newest.get(sync.key))

    def import_desk(who: str) -> None:
        """The desk's new tasks, imported in chunks as they are built (:meth:`.ProjectSync.to_import`)."""
        client = desks.client(who)
        for sync in syncs[who]:
            for chunk in chunks(sync.to_import(wants), IMPORT_CHUNK):
                with lock:
                    progress["importing"] = True
                task_ids = client.import_tasks(sync.project_id, [p.task_json(sync.version) for _, p in chunk])
                sync.imported(chunk, task_ids)
                with lock:
                    progress["done"] += len(chunk)
                    report.created += len(chunk)
                    if on_chunk:
                        on_chunk(progress["done"], sum(s.expected() for s in ordered))
            if keep:
                sync.settle()  # what Label Studio now shows of the project, for the next push

    # The projects are opened first (small requests; they would crawl beside the build, which
    # holds the GIL); then the tasks are built here while the desks import them, a project made
    # now taking each sample as soon as it is built: the desks are not idle meanwhile.
    failed: BaseException | None = None
    try:
        each_desk(desks, chosen, open_desk)
    except LabelStudioError as exc:
        failed = exc
    if failed is None:
        with ThreadPoolExecutor(1) as background:
            working = background.submit(each_desk, desks, chosen, import_desk)
            try:
                wants.build()
            finally:
                failed = working.exception()  # waits: a desk waiting for a task is told the build failed
    if isinstance(failed, LabelStudioError):
        total = sum(sync.expected() for sync in ordered)
        of = f"of {total}" if all(sync.counted for sync in ordered) else f"of at least {total}"  # a desk stopped early
        if not progress["importing"]:
            if isinstance(failed, TransientError):
                raise PushInterrupted(f"push of round {rnd.name!r} stopped before importing: {failed}. Nothing was "
                                      "lost; restart the desk (`rescue label-studio up`) and run the push again.") \
                    from None
            raise failed
        # the push state is left as it was: still safe to use
        raise (PushInterrupted if isinstance(failed, TransientError) else PushError)(
            f"push of round {rnd.name!r} stopped after {progress['done']} {of} new tasks: {failed}. "
            "Tasks already in Label Studio and their annotations are kept; restart Label "
            "Studio and run the same push again - it imports only what is missing.") from None
    if failed is not None:
        raise failed
    for entry in wants.samples.values():
        if entry.prefilled:
            report.prefilled[entry.sample_id] = entry.prefilled
    for sync in ordered:
        report.projects[sync.key] = sync.project_id
    if keep:
        state["samples"] = {**(state.get("samples") or {}), **wants.cache()}
        for sync in ordered:
            if sync.record is None:
                projects_state.pop(sync.key, None)
            else:
                projects_state[sync.key] = sync.record
    for sync in ordered:
        report.updated += sync.updated
        report.unchanged += sync.unchanged
        report.duplicates += sync.duplicates
        report.changed_after_annotation += sync.changed_after_annotation
        report.replaced += sync.replaced
    report.changed_after_annotation = list(dict.fromkeys(report.changed_after_annotation))  # once per sample
    return report


DESK_WORKERS = 4  # Label Studio servers worked on at once


def each_desk(desks: DeskAccess, people: Sequence[str], work: Callable[[str], None]) -> None:
    """``work(person)`` for every person: the people of one Label Studio server one after
    another, servers side by side (at most ``DESK_WORKERS``); re-raises the first failure (in
    ``people``'s order) once every server is done. Never two at once on one server: Label Studio
    on SQLite numbers imported tasks itself (``Task.objects.latest('id') + 1``,
    ``tasks.serializers.BaseTaskSerializerBulk.add_tasks``), so imports to two projects of one
    server at once can collide."""
    servers: dict[str, list[str]] = {}
    for who in people:
        servers.setdefault(desks.client(who).url, []).append(who)
    failures: dict[str, BaseException] = {}

    def run(group: list[str]) -> None:
        for who in group:
            try:
                work(who)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in people's order
                failures[who] = exc
                return

    if len(servers) <= 1:
        for group in servers.values():
            run(group)
    else:
        with ThreadPoolExecutor(min(DESK_WORKERS, len(servers))) as pool:
            list(pool.map(run, servers.values()))
    for who in people:
        if who in failures:
            raise failures[who]


# --- inputs --------------------------------------------------------------------------------

def load_samples(samples_path: str | Path, rows_path: str | Path) -> list[dict]:
    """Samples from a samples table (``schemas.SAMPLES``) and a rows or draft-rows table."""
    for p in (samples_path, rows_path):
        if not Path(p).is_file():
            raise FileNotFoundError(f"{p}: no such table")
    return tables_to_samples(pq.read_table(samples_path), pq.read_table(rows_path))


def dumps_report(report: PushReport) -> str:
    return json.dumps(report.__dict__, indent=2, sort_keys=True)
