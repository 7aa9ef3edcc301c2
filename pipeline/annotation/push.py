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
already carry annotations. A task's identity is its sample id, window and content hash, never a
Label Studio id.

A push with a data root keeps what it saw (``<data root>/annotation/sync/<round>.push.json``,
:class:`_ProjectSync`): per sample, the hash of its inputs and its tasks' content hashes; per
project, its tasks with their Label Studio ids, its task count and the newest change Label Studio
showed after the push's own writes. The next push builds tasks only for samples whose inputs changed,
lists each desk's projects once, and asks each project for its newest change and task count
(:meth:`.client.LabelStudioClient.newest_task`; Label Studio stamps a task whenever it, an
annotation or a prediction of it is saved or deleted): with nothing new that is one small request
per project, and nothing is written. Tasks changed since are read again; a task count that
differs from the state's, or a task it does not know, means a full listing, as does any task
about to be updated or deleted that is not as the state says. The state is a cache: without it a
push lists every project, as it always did.

Pre-annotations go in as inline predictions, and only what someone or something proposed: by
default the round's field values already in the input rows (the segmenter's draft for the
transcript round, earlier gold or a release for later rounds) - never an empty one, which is
what the stores hold for a field nobody answered yet (:func:`input_values`); optionally a
model's answers (:mod:`.prelabel`); and the round's defaults (``default:`` in its YAML). A form
the prediction fills in full needs the annotator's "pre-fill checked" tick before Label Studio
takes it (:func:`.ls_config.mark_prefilled`).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import taxonomy
from pipeline.annotation import ls_config, naming, voice_naming, windows
from pipeline.annotation import rounds as rounds_module
from pipeline.annotation.client import SETTLE_S, LabelStudioClient, LabelStudioError, Project, chunks, parse_time
from pipeline.annotation.desks import DeskAccess
from pipeline.annotation.rounds import Round, load_round
from pipeline.rows import tables_to_samples
from pipeline.annotation import pushed
from pipeline.catalog import read_catalog
from pipeline.errors import TransientError

KEY_PREFIX = "rescue-project:"
IMPORT_CHUNK = 100  # tasks per import request: one request per chunk, committed as a whole


class PushError(RuntimeError):
    """A push could not finish; the message says how far it got and that a re-run is safe."""


class PushInterrupted(PushError, TransientError):
    """A push stopped by a transient fault of a desk (it did not answer, or answered HTTP 5xx):
    the same push again, once the desk is back, imports only what is missing."""


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


def model_version(rnd: Round, source: str) -> str:
    # Label Studio pre-fills only predictions whose model_version equals the project's.
    return f"{rnd.name}-v{rnd.version}-{source}"


# --- pre-annotation ------------------------------------------------------------------------

def proposed(value) -> bool:
    """A value someone gave: not null, not empty ("", [] or records holding nothing)."""
    if isinstance(value, list):
        return any(proposed(v) for v in value)
    if isinstance(value, dict):
        return any(proposed(v) for v in value.values())
    return value is not None and not (isinstance(value, str) and not value.strip())


def input_values(rnd: Round, sample: dict) -> dict[int, dict]:
    """The round's field values present (non-null) in the input rows: the default pre-annotation.

    Empty ones ("", []) are returned too (they are what the rows hold, e.g. a test's answers),
    but the push never pre-fills them (:func:`_prepare`): the work store holds "" and [] for every
    field a later round has not answered yet (gold fills the row shape), and an empty value shown
    as "no clear pattern" or "no strategy" would be an answer nobody gave. (A release's "" can be
    a real "none"; the rows cannot tell the two apart, so neither is pre-filled.)"""
    names = [f.name for f in rnd.fields]
    return {r["row_index"]: {n: r[n] for n in names if r.get(n) is not None} for r in sample["rows"]}


input_values.empty_means_unanswered = True  # its "" and [] are the stores' placeholders: never pre-filled

# (round, sample) -> {row_index: {field: value}}. An explicit empty value of a prelabeler (a
# model's "no strategy") is its proposal and is pre-filled, unless the prelabeler says that its
# empty values mean "nobody answered" (``empty_means_unanswered = True``, as :func:`input_values`).
Prelabeler = Callable[[Round, dict], dict[int, dict]]


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

    def summary(self) -> str:
        s = (f"round {self.round}: {len(self.projects)} projects for {len(self.annotators)} annotators; "
             f"{self.created} tasks created, {self.updated} updated, {self.unchanged} unchanged")
        if self.changed_after_annotation:
            s += f"; {len(self.changed_after_annotation)} changed after annotation (left as they are)"
        if self.duplicates:
            s += f"; {len(self.duplicates)} duplicate tasks found"
        fields = sorted({f for fs in self.prefilled.values() for f in fs})
        return s + (f"; pre-filled: {', '.join(fields)}" if fields else "; nothing pre-filled")


@dataclass
class _Prepared:
    sample_id: str
    data: dict
    prediction: list[dict]

    @property
    def key(self) -> tuple[str, int | None, int | None]:
        return task_key(self.data)


def task_key(data: dict) -> tuple[str, int | None, int | None]:
    """A task's identity: ``(sample_id, window index, window count)`` (None, None: one task)."""
    window = data.get("window") or {}
    return data.get("sample_id"), window.get("index"), window.get("count")


def local_media_url(audio_path: str) -> str:
    """Label Studio's URL for a file under the data root (its local-files document root)."""
    return f"/data/local-files/?d={audio_path}"


def catalog_media_urls(data_root: str | Path) -> Callable[[dict], str]:
    """sample -> the Audio player's URL of its extracted WAV, from the ingest catalog ("" if none)."""

    audio = {r["sample_id"]: r["audio_path"] for r in read_catalog(data_root).to_pylist()
             if r["status"] == "done" and r["audio_path"]}
    return lambda sample: local_media_url(audio[sample["sample_id"]]) if sample["sample_id"] in audio else ""


def _values(rnd: Round, sample: dict, prelabel: Prelabeler | None, defaults: bool | None = None) -> dict[int, dict]:
    """What the push pre-fills in ``sample``'s tasks: the pre-annotation (only what someone
    proposed), then the round's defaults where it gives a field nothing (``defaults``: whether
    the round has any, :func:`.ls_config.has_defaults`; read from the YAML when None)."""
    values = prelabel(rnd, sample) if prelabel else {}
    if getattr(prelabel, "empty_means_unanswered", False):  # only what someone proposed is pre-filled
        values = {ri: kept for ri, row in values.items() if (kept := {k: v for k, v in row.items() if proposed(v)})}
    # the round's defaults fill fields the pre-annotation does not give at all (an explicit
    # empty value, e.g. a model's "no emotion", stays): shown pre-filled, one key to keep
    if ls_config.has_defaults(rnd) if defaults is None else defaults:
        for ri, given_defaults in ls_config.default_values(rnd, sample).items():
            given = values.setdefault(ri, {})
            for name, value in given_defaults.items():
                given.setdefault(name, value)
    return values


def _build(rnd: Round, sample: dict, values: dict[int, dict], url: str, window: int | None) -> list[_Prepared]:
    out = []
    for data in ls_config.build_tasks_data(rnd, sample, url, window):
        prediction = ls_config.values_to_results(rnd, data, values) if values else []
        prediction = voice_naming.prefill(rnd, data, values, prediction)  # rows on their voice, named once
        prediction = ls_config.mark_prefilled(rnd, data, prediction)  # a form filled in full needs a tick
        data["content_sha"] = ls_config.content_sha(data, prediction)
        out.append(_Prepared(sample["sample_id"], data, prediction))
    return out


def _prepare(rnd: Round, sample: dict, prelabel: Prelabeler | None, media_url: Callable[[dict], str] | None,
             window: int | None = None) -> list[_Prepared]:
    return _build(rnd, sample, _values(rnd, sample, prelabel), media_url(sample) if media_url else "", window)


def _prefilled_fields(prepared: Sequence[_Prepared]) -> list[str]:
    """The round's fields some prediction of a sample's tasks fills."""
    return sorted({parsed[0] for p in prepared for r in p.prediction
                   if (parsed := naming.parse_control_name(r.get("from_name", "")))})


# What makes a sample's tasks: their content hash is a function of these files and the sample's
# inputs (:func:`_Wants`); any change in them makes the push build the tasks again.
_CODE = tuple(Path(m.__file__) for m in (ls_config, voice_naming, windows, naming, rounds_module, taxonomy)) + (
    Path(__file__), taxonomy.SCHEMAS_DIR / "taxonomies.yaml")



@dataclass
class _Sample:
    """One sample as the push wants it in every project of its scenario: its tasks' keys and
    content hashes, the fields its predictions fill, and (built when needed) the tasks."""
    sample_id: str
    scenario: str
    digest: str
    tasks: list[tuple[tuple, str]]            # (task key, content_sha), in window order
    prefilled: list[str]
    url: str
    prepared: list[_Prepared] | None = None  # built now, or when a task must be written


class _Wants:
    """The tasks a push wants, per scenario. A sample whose inputs (the sample, its pre-fill
    values, media URL, window, round and the code that builds tasks) hash as at the last push
    (``cache``: the push state's samples) reuses that push's content hashes, and its tasks are
    built only if one must be written."""

    def __init__(self, rnd: Round, samples: Sequence[dict], prelabel: Prelabeler | None,
                 media_url: Callable[[dict], str] | None, window: int | None, cache: dict):
        self.rnd, self.window, self.prelabel = rnd, window, prelabel
        self._lock = threading.Lock()
        code = pushed.files_digest((*_CODE, rnd.source))
        self._defaults = ls_config.has_defaults(rnd)
        # the input rows' values (and the round's defaults) follow from the sample and this code:
        # they need not be computed to know whether a sample's tasks changed; a model's answers do
        pure = prelabel is None or prelabel is input_values
        self.samples: dict[str, _Sample] = {}
        self._inputs: dict[str, tuple[dict, dict | None]] = {}
        self.by_scenario: dict[str, list[_Sample]] = {}
        for s in sorted(samples, key=lambda s: s["sample_id"]):
            scenario = taxonomy.check_scenario(s["scenario"])
            values = None if pure else _values(rnd, s, prelabel, self._defaults)
            url = media_url(s) if media_url else ""
            given = ("input" if prelabel else "none") if pure else values
            # a cache key: the same inputs in another key order only cost a rebuild
            digest = hashlib.sha256(json.dumps([code, rnd.name, rnd.version, window, url, s, given],
                                               ensure_ascii=False, default=str).encode("utf-8")).hexdigest()
            hit = cache.get(s["sample_id"])
            if isinstance(hit, dict) and hit.get("digest") == digest:
                entry = _Sample(s["sample_id"], scenario, digest, [((s["sample_id"], i, n), sha)
                                                                  for i, n, sha in hit["tasks"]],
                                list(hit["prefilled"]), url)
            else:
                if values is None:
                    values = _values(rnd, s, prelabel, self._defaults)
                prepared = _build(rnd, s, values, url, window)
                entry = _Sample(s["sample_id"], scenario, digest, [(p.key, p.data["content_sha"]) for p in prepared],
                                _prefilled_fields(prepared), url, prepared)
            self._inputs[s["sample_id"]] = (s, values)
            self.samples[s["sample_id"]] = entry
            self.by_scenario.setdefault(scenario, []).append(entry)

    def prepared(self, sample_id: str) -> dict[tuple, _Prepared]:
        """The sample's tasks by key, built on first need (thread-safe)."""
        with self._lock:
            entry = self.samples[sample_id]
            if entry.prepared is None:
                sample, values = self._inputs[sample_id]
                if values is None:
                    values = _values(self.rnd, sample, self.prelabel, self._defaults)
                entry.prepared = _build(self.rnd, sample, values, entry.url, self.window)
            return {p.key: p for p in entry.prepared}

    def cache(self) -> dict:
        """The push state's samples: ``{sample_id: {digest, tasks: [[index, count, sha]], prefilled}}``."""
        return {sid: {"digest": e.digest, "tasks": [[k[1], k[2], sha] for k, sha in e.tasks],
                      "prefilled": e.prefilled} for sid, e in self.samples.items()}


def push_round(desks: DeskAccess, round_name: str, samples: Sequence[dict],
               annotators: Sequence[str] | None = None, *, data_root=None, **options) -> PushReport:
    """:func:`_push_round` (see there); with ``data_root`` it holds the round's push lock
    (:func:`.pushed.round_lock`: two pushes at once make no duplicate project or task),
    records who was given which samples (:func:`.pushed.record_pushed`; pull reports deleted
    tasks) and keeps what it saw of each project (:func:`.pushed.write_sync`): a push again
    with nothing new asks each desk for its projects once and each project for the tasks
    changed since, and writes nothing."""
    samples = voice_naming.attach_voice_tables(load_round(round_name), samples, data_root)  # the voice block
    if data_root is None:
        return _push_round(desks, round_name, samples, annotators, **options)
    with pushed.round_lock(data_root, round_name):
        state = pushed.read_sync(data_root, load_round(round_name).name, "push")
        report = _push_round(desks, round_name, samples, annotators, state=state, **options)
        pushed.write_sync(data_root, report.round, "push", state)
        scenario_of = {s["sample_id"]: s["scenario"] for s in samples}
        given = [(sc, ann, sid) for key in report.projects if (parsed := parse_project_key(key))
                 for _, sc, ann in [parsed] for sid, s_sc in scenario_of.items() if s_sc == sc]
        pushed.record_pushed(data_root, report.round, given, report.prefilled)
    return report


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

    def look_desk(who: str) -> tuple[list[Project], dict[str, tuple]]:
        """The desk's projects (one listing) and, for each project the push state knows, its
        newest change and task count (reads: asked while the tasks are prepared)."""
        client = desks.client(who)
        listed = client.projects()
        ids = {p.key: p.id for p in listed}
        known = [key for key in keys[who] if _same(projects_state.get(key), client, ids.get(key))]
        with ThreadPoolExecutor(max(1, min(len(known), 4))) as pool:
            return listed, dict(zip(known, pool.map(lambda key: client.newest_task(ids[key]), known)))

    with ThreadPoolExecutor(max(1, min(len(chosen), DESK_WORKERS))) as ahead:
        looked = {who: ahead.submit(look_desk, who) for who in chosen}
        wants = _Wants(rnd, samples, prelabel, media_url, window, state.get("samples") or {})
        for entry in wants.samples.values():
            if entry.prefilled:
                report.prefilled[entry.sample_id] = entry.prefilled
        scenarios = sorted(wants.by_scenario.items())
        syncs = {who: [_ProjectSync(rnd, scenario, who, entries, version) for scenario, entries in scenarios]
                 for who in chosen}

        def prepare_desk(who: str) -> None:
            listed, newest = looked[who].result()  # once per desk: every project with its config and counts
            client = desks.client(who)
            for sync in syncs[who]:
                sync.prepare(desks, client, listed, wants, projects_state.get(sync.key), newest.get(sync.key))

        try:
            each_desk(desks, chosen, prepare_desk)
        except TransientError as exc:
            raise PushInterrupted(f"push of round {rnd.name!r} stopped before importing: {exc}. Nothing was lost; "
                                  "restart the desk (`rescue label-studio up`) and run the push again.") from None
    ordered = [sync for scenario, _ in scenarios for who in chosen for sync in syncs[who] if sync.scenario == scenario]
    for sync in ordered:
        report.projects[sync.key] = sync.project_id

    total = sum(len(sync.new) for sync in ordered)
    progress = {"done": 0}
    lock = threading.Lock()

    def import_desk(who: str) -> None:
        for sync in syncs[who]:
            for chunk in chunks(sync.new, IMPORT_CHUNK):
                ids = sync.client.import_tasks(sync.project_id, [task for _, task in chunk])
                sync.imported(chunk, ids)
                with lock:
                    progress["done"] += len(chunk)
                    report.created += len(chunk)
                    if on_chunk:
                        on_chunk(progress["done"], total)
            if keep:
                sync.settle()  # what Label Studio now shows of the project, for the next push

    try:
        each_desk(desks, chosen, import_desk)
    except LabelStudioError as exc:  # the push state is left as it was: still safe to use
        raise (PushInterrupted if isinstance(exc, TransientError) else PushError)(
            f"push of round {rnd.name!r} stopped after {progress['done']} of {total} new tasks: {exc}. "
            "Tasks already in Label Studio and their annotations are kept; restart Label "
            "Studio and run the same push again - it imports only what is missing.") from None
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


def _same(old: dict | None, client: LabelStudioClient, project_id: int | None) -> bool:
    """Whether a push state record is of this desk's project ``project_id``."""
    return isinstance(old, dict) and project_id is not None and old.get("desk") == client.url \
        and old.get("id") == project_id


def set_instructions(client: LabelStudioClient, project_id: int, html: str) -> None:
    """Fill the project's instruction panel (shown before the first task and on request)."""
    client._json("PATCH", f"/api/projects/{project_id}/", "set the project's instructions",
                 json={"expert_instruction": html, "show_instruction": True})


@dataclass
class _Known:
    """A task of a project as the push knows it."""
    id: int
    sha: str | None
    annotated: bool


class _ProjectSync:
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

    def __init__(self, rnd: Round, scenario: str, annotator: str, entries: list[_Sample], version: str):
        self.rnd, self.scenario, self.annotator, self.entries, self.version = rnd, scenario, annotator, entries, version
        self.key = project_key(rnd.name, scenario, annotator)
        self.client: LabelStudioClient | None = None
        self.project_id: int | None = None
        self.known: dict[tuple, _Known] = {}
        self.dups: list[list] = []
        self.new: list[tuple[tuple, dict]] = []
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

    # --- what the project holds ---------------------------------------------------------------
    def prepare(self, desks: DeskAccess, client: LabelStudioClient, listed: list[Project],
                wants: _Wants, old: dict | None, newest: tuple | None = None) -> None:
        rnd, scenario = self.rnd, self.scenario
        self.client = client
        config = ls_config.render_config(rnd, scenario)
        project = client.ensure_project(self.key, f"{rnd.name} {scenario} {self.annotator}", config, self.version,
                                        description=rnd.title, listed=listed)
        self.project_id = project.id
        html = ls_config.instructions_html(rnd, scenario)
        if project.instruction != html or project.show_instruction is not True:
            set_instructions(client, project.id, html)
        same = _same(old, client, project.id)
        self._newest = newest
        self._old_record = old if same else None
        self.storages = list(old.get("storages") or []) if same else []
        urls = [e.url for e in self.entries]
        for folder in desks.stage_media(self.annotator, urls):  # the desk's own copy of its media
            if str(folder) not in self.storages:  # a storage this push added before is not asked for
                client.add_local_storage(project.id, str(folder))
                self.storages.append(str(folder))
                self.wrote = True
        if not any(p.key == self.key for p in listed):
            self.wrote = True  # made just now: no task to list
        elif not (same and self._from_state(old, project)):
            self._list_all()
        for _, key in self.dups:
            self.duplicates.append((self.annotator, key[0]))
        self._compare(wants)

    def _from_state(self, old: dict, project: Project) -> bool:
        """The project's tasks from the push state, when Label Studio's newest change and task
        count are still those the last push saw (one small request); tasks changed since are
        read again. False when the state cannot be trusted (then everything is listed)."""
        try:
            tasks = [(tuple(t[:3]), _Known(int(t[3]), t[4], bool(t[5]))) for t in old["tasks"]]
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
                known[key] = _Known(task["id"], (task.get("data") or {}).get("content_sha"),
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
            self.known[key] = _Known(task["id"], (task.get("data") or {}).get("content_sha"),
                                     bool(task.get("total_annotations", 0) or task.get("cancelled_annotations", 0)))
        self.wrote = True  # a record to write

    # --- what changes ---------------------------------------------------------------------------
    def _compare(self, wants: _Wants) -> None:
        """Update what may change; keep the new tasks (as the push always did, task by task).
        Before a task known only from the push state is updated or deleted, it is read again
        (one request for all of them): if it is not what the state says, everything is listed."""
        plan = self._plan()
        writes = [task for _, task in plan["delete"]] + [task for _, _, task in plan["update"]]
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
            p = wants.prepared(sample_id)[key]
            new = {"data": p.data}
            if p.prediction:
                new["predictions"] = [{"model_version": version, "result": p.prediction}]
            self.new.append((key, new))

    def _plan(self) -> dict:
        """What the push does to the project, from what it knows of its tasks (no request)."""
        annotator = self.annotator
        wanted = {key for e in self.entries for key, _ in e.tasks}
        pushed_ids = {e.sample_id for e in self.entries}
        # A sample whose tasks are cut differently now (re-segmented, other window size): while any
        # of its old tasks carries annotations, it is left as it is (like any task changed after
        # annotation); otherwise its old tasks are replaced.
        kept = {key[0] for key, task in self.known.items()
                if key[0] in pushed_ids and key not in wanted and task.annotated}
        plan: dict = {"delete": [(key, task) for key, task in self.known.items()
                                 if key[0] in pushed_ids and key not in wanted and key[0] not in kept],
                      "changed": [(annotator, sid) for sid in sorted(kept)], "unchanged": 0, "update": [], "new": []}
        for entry in self.entries:
            if entry.sample_id in kept:
                continue
            for key, sha in entry.tasks:
                task = self.known.get(key)
                if task is not None and task.sha == sha:
                    plan["unchanged"] += 1
                elif task is not None and task.annotated:
                    plan["changed"].append((annotator, entry.sample_id))
                elif task is not None:
                    plan["update"].append((entry.sample_id, key, task))
                else:
                    plan["new"].append((entry.sample_id, key))
        return plan

    def imported(self, chunk: list[tuple[tuple, dict]], ids: list[int]) -> None:
        """A chunk of new tasks is in Label Studio (``ids``: its task ids, in order)."""
        self.wrote = True
        if len(ids) != len(chunk):
            self.unsure = True  # which id is which task is not known: list them next time
            return
        for (key, task), task_id in zip(chunk, ids):
            self.known[key] = _Known(int(task_id), task["data"]["content_sha"], False)

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


# --- inputs --------------------------------------------------------------------------------

def load_samples(samples_path: str | Path, rows_path: str | Path) -> list[dict]:
    """Samples from a samples table (``schemas.SAMPLES``) and a rows or draft-rows table."""
    for p in (samples_path, rows_path):
        if not Path(p).is_file():
            raise FileNotFoundError(f"{p}: no such table")
    return tables_to_samples(pq.read_table(samples_path), pq.read_table(rows_path))


def dumps_report(report: PushReport) -> str:
    return json.dumps(report.__dict__, indent=2, sort_keys=True)
