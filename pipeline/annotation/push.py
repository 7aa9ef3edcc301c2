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
already carry annotations. Label Studio task ids are never stored.

Pre-annotations go in as inline predictions, and only what someone or something proposed: by
default the round's field values already in the input rows (the segmenter's draft for the
transcript round, earlier gold or a release for later rounds) - never an empty one, which is
what the stores hold for a field nobody answered yet (:func:`input_values`); optionally a
model's answers (:mod:`.prelabel`); and the round's defaults (``default:`` in its YAML). A form
the prediction fills in full needs the annotator's "pre-fill checked" tick before Label Studio
takes it (:func:`.ls_config.mark_prefilled`).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import taxonomy
from pipeline.annotation import ls_config, naming, voice_naming
from pipeline.annotation.client import LabelStudioClient, LabelStudioError, LabelStudioUnavailable, chunks
from pipeline.annotation.desks import DeskAccess
from pipeline.annotation.rounds import Round, load_round
from pipeline.rows import tables_to_samples
from pipeline.annotation import pushed
from pipeline.media.ingest import read_catalog

KEY_PREFIX = "rescue-project:"
IMPORT_CHUNK = 100  # tasks per import request: one request per chunk, committed as a whole


class PushError(RuntimeError):
    """A push could not finish; the message says how far it got and that a re-run is safe."""


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


def _prepare(rnd: Round, sample: dict, prelabel: Prelabeler | None, media_url: Callable[[dict], str] | None,
             window: int | None = None) -> list[_Prepared]:
    values = prelabel(rnd, sample) if prelabel else {}
    if getattr(prelabel, "empty_means_unanswered", False):  # only what someone proposed is pre-filled
        values = {ri: kept for ri, row in values.items() if (kept := {k: v for k, v in row.items() if proposed(v)})}
    # the round's defaults fill fields the pre-annotation does not give at all (an explicit
    # empty value, e.g. a model's "no emotion", stays): shown pre-filled, one key to keep
    for ri, defaults in ls_config.default_values(rnd, sample).items():
        given = values.setdefault(ri, {})
        for name, value in defaults.items():
            given.setdefault(name, value)
    out = []
    for data in ls_config.build_tasks_data(rnd, sample, media_url(sample) if media_url else "", window):
        prediction = ls_config.values_to_results(rnd, data, values) if values else []
        prediction = voice_naming.prefill(rnd, data, values, prediction)  # rows on their voice, named once
        prediction = ls_config.mark_prefilled(rnd, data, prediction)  # a form filled in full needs a tick
        data["content_sha"] = ls_config.content_sha(data, prediction)
        out.append(_Prepared(sample["sample_id"], data, prediction))
    return out


def push_round(desks: DeskAccess, round_name: str, samples: Sequence[dict],
               annotators: Sequence[str] | None = None, *, data_root=None, **options) -> PushReport:
    """:func:`_push_round` (see there); with ``data_root`` it holds the round's push lock
    (:func:`.pushed.round_lock`: two pushes at once make no duplicate project or task) and
    records who was given which samples (:func:`.pushed.record_pushed`; pull reports deleted tasks)."""
    samples = voice_naming.attach_voice_tables(load_round(round_name), samples, data_root)  # the voice block
    if data_root is None:
        return _push_round(desks, round_name, samples, annotators, **options)
    with pushed.round_lock(data_root, round_name):
        report = _push_round(desks, round_name, samples, annotators, **options)
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
    units in windows of ``windows.WINDOW_UNITS``).
    """
    rnd = load_round(round_name)
    chosen = choose_annotators(desks, rnd, annotators, k)
    report = PushReport(rnd.name, chosen)
    # without a pre-annotation, a round with defaults still pre-fills: its predictions say so
    version = model_version(rnd, prelabel_source if prelabel else "defaults" if ls_config.has_defaults(rnd) else "none")
    by_scenario: dict[str, list[_Prepared]] = {}
    for s in sorted(samples, key=lambda s: s["sample_id"]):
        by_scenario.setdefault(taxonomy.check_scenario(s["scenario"]), []).extend(
            _prepare(rnd, s, prelabel, media_url, window))

    for p in (p for prepared in by_scenario.values() for p in prepared):
        fields = {parsed[0] for r in p.prediction if (parsed := naming.parse_control_name(r.get("from_name", "")))}
        if fields:
            report.prefilled[p.sample_id] = sorted(set(report.prefilled.get(p.sample_id, ())) | fields)

    plan: list[tuple[LabelStudioClient, int, list[dict]]] = []
    try:
        for scenario, prepared in sorted(by_scenario.items()):
            config = ls_config.render_config(rnd, scenario)
            urls = [p.data.get("media_url") or "" for p in prepared]
            for annotator in chosen:
                client = desks.client(annotator)
                key = project_key(rnd.name, scenario, annotator)
                project = client.ensure_project(key, f"{rnd.name} {scenario} {annotator}", config, version,
                                                description=rnd.title)
                report.projects[key] = project.id
                set_instructions(client, project.id, ls_config.instructions_html(rnd, scenario))
                for folder in desks.stage_media(annotator, urls):  # the desk's own copy of its media
                    client.add_local_storage(project.id, str(folder))
                plan.append((client, project.id,
                             _sync_existing(client, project.id, annotator, prepared, version, report)))
    except LabelStudioUnavailable as exc:
        raise PushError(f"push of round {rnd.name!r} stopped before importing: {exc}. "
                        "Nothing was lost; restart the desk (`rescue label-studio up`) and run the push again.") from None

    total = sum(len(tasks) for _, _, tasks in plan)
    done = 0
    for client, project_id, tasks in plan:
        for chunk in chunks(tasks, IMPORT_CHUNK):
            try:
                client.import_tasks(project_id, chunk)
            except LabelStudioError as exc:
                raise PushError(
                    f"push of round {rnd.name!r} stopped after {done} of {total} new tasks: {exc}. "
                    "Tasks already in Label Studio and their annotations are kept; restart Label "
                    "Studio and run the same push again - it imports only what is missing.") from None
            done += len(chunk)
            report.created += len(chunk)
            if on_chunk:
                on_chunk(done, total)
    report.changed_after_annotation = list(dict.fromkeys(report.changed_after_annotation))  # once per sample
    return report


def set_instructions(client: LabelStudioClient, project_id: int, html: str) -> None:
    """Fill the project's instruction panel (shown before the first task and on request)."""
    client._json("PATCH", f"/api/projects/{project_id}/", "set the project's instructions",
                 json={"expert_instruction": html, "show_instruction": True})


def _sync_existing(client: LabelStudioClient, project_id: int, annotator: str, prepared: list[_Prepared],
                   version: str, report: PushReport) -> list[dict]:
    """Compare the project's tasks with the prepared ones; update what may change; return new tasks."""
    existing: dict[tuple, dict] = {}
    for task in client.tasks(project_id):
        key = task_key(task.get("data") or {})
        if key in existing:
            report.duplicates.append((annotator, key[0]))
            continue
        existing[key] = task
    wanted = {p.key for p in prepared}
    pushed = {p.sample_id for p in prepared}
    annotated = lambda t: t.get("total_annotations", 0) or t.get("cancelled_annotations", 0)  # noqa: E731
    # A sample whose tasks are cut differently now (re-segmented, other window size): while any
    # of its old tasks carries annotations, it is left as it is (like any task changed after
    # annotation); otherwise its old tasks are replaced.
    kept: set[str] = set()
    for key, task in existing.items():
        if key[0] in pushed and key not in wanted and annotated(task):
            kept.add(key[0])
    for key, task in existing.items():
        if key[0] in pushed and key not in wanted and key[0] not in kept:
            client.request("DELETE", f"/api/tasks/{task['id']}/", "delete an outdated window")
            report.updated += 1
    for sid in sorted(kept):
        report.changed_after_annotation.append((annotator, sid))
    new = []
    for p in prepared:
        if p.sample_id in kept:
            continue
        task = existing.get(p.key)
        if task is None:
            task = {"data": p.data}
            if p.prediction:
                task["predictions"] = [{"model_version": version, "result": p.prediction}]
            new.append(task)
        elif task["data"].get("content_sha") == p.data["content_sha"]:
            report.unchanged += 1
        elif task.get("total_annotations", 0) or task.get("cancelled_annotations", 0):
            report.changed_after_annotation.append((annotator, p.sample_id))
        else:
            client.update_task(task["id"], p.data)
            client.replace_predictions(task["id"], p.prediction, version)
            report.updated += 1
    return new


# --- inputs --------------------------------------------------------------------------------

def load_samples(samples_path: str | Path, rows_path: str | Path) -> list[dict]:
    """Samples from a samples table (``schemas.SAMPLES``) and a rows or draft-rows table."""
    for p in (samples_path, rows_path):
        if not Path(p).is_file():
            raise FileNotFoundError(f"{p}: no such table")
    return tables_to_samples(pq.read_table(samples_path), pq.read_table(rows_path))


def dumps_report(report: PushReport) -> str:
    return json.dumps(report.__dict__, indent=2, sort_keys=True)
