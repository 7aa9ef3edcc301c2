"""The tasks a push wants: each sample's Label Studio tasks (its windows, :mod:`.windows`) with
their pre-annotation, built only when the sample's inputs changed since the last push.

Pre-annotations go in as inline predictions, and only what someone or something proposed: by
default the round's field values already in the input rows (the segmenter's draft for the
transcript round, earlier gold or a release for later rounds) - never an empty one, which is
what the stores hold for a field nobody answered yet (:func:`input_values`); optionally a
model's answers (:mod:`.prelabel`); and the round's defaults (``default:`` in its YAML). Each
field the prediction fills is a proposal: marked as such, it needs the annotator's acceptance,
field by field, before Label Studio takes the window (:func:`.ls_config.mark_prefilled`). Every task carries its ``sample_id``, its window
(``data["window"]``, absent for a one-task sample) and the ``content_sha`` of what it shows: a
task's identity is :func:`task_key`, never a Label Studio id.

A sample whose inputs (the sample, its pre-fill values, media URL, window, round and the code
that builds tasks, :data:`_CODE`) hash as at the last push reuses that push's content hashes
(:class:`Wants`), and its tasks are built only if one must be written.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import taxonomy
from pipeline.annotation import ls_config, ls_results, ls_tasks, naming, pushed, round_ui, voice_naming, windows
from pipeline.annotation import rounds as rounds_module
from pipeline.annotation.rounds import Round
from pipeline.catalog import read_catalog
from pipeline.paths import DataRoot


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
    but the push never pre-fills them (:func:`prepare`): the work store holds "" and [] for every
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


@dataclass
class Prepared:
    """One task as built: its data (with ``content_sha``) and prediction, and both as the JSON
    text that address was taken of (:func:`.ls_tasks.address`)."""
    sample_id: str
    data: dict
    prediction: list[dict]
    data_json: str
    prediction_json: str

    @property
    def key(self) -> tuple[str, int | None, int | None]:
        return task_key(self.data)

    def task_json(self, model_version: str) -> str:
        """The task as Label Studio's import takes it (its prediction, if any, under ``model_version``)."""
        if not self.prediction:
            return f'{{"data": {self.data_json}}}'
        return (f'{{"data": {self.data_json}, "predictions": [{{"model_version": {json.dumps(model_version)}, '
                f'"result": {self.prediction_json}}}]}}')


def task_key(data: dict) -> tuple[str, int | None, int | None]:
    """A task's identity: ``(sample_id, window index, window count)`` (None, None: one task)."""
    window = data.get("window") or {}
    return data.get("sample_id"), window.get("index"), window.get("count")


def local_media_url(audio_path: str) -> str:
    """Label Studio's URL for a file under the data root (its local-files document root)."""
    return f"/data/local-files/?d={audio_path}"


def catalog_media_urls(root: DataRoot) -> Callable[[dict], str]:
    """sample -> the Audio player's URL of its extracted WAV, from the ingest catalog ("" if none)."""

    audio = {r["sample_id"]: r["audio_path"] for r in read_catalog(root).to_pylist()
             if r["status"] == "done" and r["audio_path"]}
    return lambda sample: local_media_url(audio[sample["sample_id"]]) if sample["sample_id"] in audio else ""


def prefill_values(rnd: Round, sample: dict, prelabel: Prelabeler | None,
                   defaults: bool | None = None) -> dict[int, dict]:
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


def build_tasks(rnd: Round, sample: dict, values: dict[int, dict], url: str, window: int | None) -> list[Prepared]:
    out = []
    for data in ls_config.build_tasks_data(rnd, sample, url, window):
        prediction = ls_config.values_to_results(rnd, data, values) if values else []
        prediction = voice_naming.prefill(rnd, data, values, prediction)  # rows on their voice, named once
        prediction = ls_config.mark_prefilled(rnd, data, prediction)  # each field filled: a proposal
        data_json, prediction_json = ls_tasks.address(data, prediction)
        out.append(Prepared(sample["sample_id"], data, prediction, data_json, prediction_json))
    return out


def prepare(rnd: Round, sample: dict, prelabel: Prelabeler | None, media_url: Callable[[dict], str] | None,
            window: int | None = None) -> list[Prepared]:
    """A sample's tasks, built now (:class:`Wants` builds only what a push must write)."""
    url = media_url(sample) if media_url else ""
    return build_tasks(rnd, sample, prefill_values(rnd, sample, prelabel), url, window)


def prefilled_fields(prepared: Sequence[Prepared]) -> list[str]:
    """The round's fields some prediction of a sample's tasks fills."""
    return sorted({parsed[0] for p in prepared for r in p.prediction
                   if (parsed := naming.parse_control_name(r.get("from_name", "")))})


# What makes a sample's tasks: their content hash is a function of these files and the sample's
# inputs (:func:`Wants`); any change in them makes the push build the tasks again.
_CODE = tuple(Path(m.__file__) for m in (ls_config, ls_results, ls_tasks, round_ui, voice_naming, windows, naming,
                                         rounds_module, taxonomy)) + (
    Path(__file__), taxonomy.SCHEMAS_DIR / "taxonomies.yaml")



@dataclass
class SampleTasks:
    """One sample as the push wants it in every project of its scenario: its tasks' keys and
    content hashes, the fields its predictions fill, and (built when needed) the tasks."""
    sample_id: str
    scenario: str
    digest: str
    tasks: list[tuple[tuple, str]] | None     # (task key, content_sha), in window order; None: not built yet
    prefilled: list[str]
    url: str
    prepared: list[Prepared] | None = None  # built now, or when a task must be written


def _digest(key: list) -> str:
    return hashlib.sha256(json.dumps(key, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()


class BuildStopped(RuntimeError):
    """Building the push's tasks failed (:meth:`Wants.build` raises the cause itself)."""


class Wants:
    """The tasks a push wants, per scenario. A sample whose inputs (the sample, its pre-fill
    values, media URL, window, round and the code that builds tasks) hash as at the last push
    (``cache``: the push state's samples) reuses that push's content hashes, and its tasks are
    built only if one must be written. The others are built by :meth:`build`, while the desks
    already take them (:meth:`ready`): a project the push makes starts importing with its first
    sample."""

    def __init__(self, rnd: Round, samples: Sequence[dict], prelabel: Prelabeler | None,
                 media_url: Callable[[dict], str] | None, window: int | None, cache: dict):
        self.rnd, self.window, self.prelabel = rnd, window, prelabel
        self._built = threading.Condition()  # guards every entry's tasks (built here, in build, or on need)
        self._failed: BaseException | None = None
        code = pushed.files_digest((*_CODE, rnd.source))
        self._defaults = ls_config.has_defaults(rnd)
        # the input rows' values (and the round's defaults) follow from the sample and this code:
        # they need not be computed to know whether a sample's tasks changed; a model's answers do
        pure = prelabel is None or prelabel is input_values
        self.samples: dict[str, SampleTasks] = {}
        self._inputs: dict[str, tuple[dict, dict | None, list]] = {}  # sample, values, cache key
        self.by_scenario: dict[str, list[SampleTasks]] = {}
        for s in sorted(samples, key=lambda s: s["sample_id"]):
            scenario = taxonomy.check_scenario(s["scenario"])
            values = None if pure else prefill_values(rnd, s, prelabel, self._defaults)
            url = media_url(s) if media_url else ""
            given = ("input" if prelabel else "none") if pure else values
            # a cache key: the same inputs in another key order only cost a rebuild
            key = [code, rnd.name, rnd.version, window, url, s, given]
            hit = cache.get(s["sample_id"])
            digest = _digest(key) if isinstance(hit, dict) else ""  # else in build(): the desks wait meanwhile
            if digest and hit.get("digest") == digest:
                entry = SampleTasks(s["sample_id"], scenario, digest, [((s["sample_id"], i, n), sha)
                                                                  for i, n, sha in hit["tasks"]],
                                list(hit["prefilled"]), url)
            else:
                entry = SampleTasks(s["sample_id"], scenario, digest, None, [], url)  # built by build()
            self._inputs[s["sample_id"]] = (s, values, key)
            self.samples[s["sample_id"]] = entry
            self.by_scenario.setdefault(scenario, []).append(entry)

    def _build(self, entry: SampleTasks) -> list[Prepared]:
        sample, values, key = self._inputs[entry.sample_id]
        entry.digest = entry.digest or _digest(key)
        if values is None:
            values = prefill_values(self.rnd, sample, self.prelabel, self._defaults)
        return build_tasks(self.rnd, sample, values, entry.url, self.window)

    def build(self) -> None:
        """Build every sample's tasks the cache did not give, in the order the desks import them
        (scenario, then sample id), telling the desks waiting in :meth:`ready` as each is done.
        A failure is raised here, and :meth:`ready` raises :class:`BuildStopped`."""
        try:
            for _, entries in sorted(self.by_scenario.items()):
                for entry in entries:
                    if entry.tasks is not None:
                        continue
                    prepared = self._build(entry)
                    with self._built:
                        entry.prepared = prepared
                        entry.prefilled = prefilled_fields(prepared)
                        entry.tasks = [(p.key, p.data["content_sha"]) for p in prepared]
                        self._built.notify_all()
        except BaseException as exc:
            with self._built:
                self._failed = exc
                self._built.notify_all()
            raise

    def ready(self, entry: SampleTasks) -> None:
        """Wait until ``entry``'s tasks are known (:meth:`build`)."""
        with self._built:
            while entry.tasks is None and self._failed is None:
                self._built.wait()
            if entry.tasks is None:
                raise BuildStopped(f"the push's tasks could not be built: {self._failed}")

    def prepared(self, sample_id: str) -> dict[tuple, Prepared]:
        """The sample's tasks by key, built on first need (thread-safe)."""
        entry = self.samples[sample_id]
        self.ready(entry)
        with self._built:
            if entry.prepared is None:
                entry.prepared = self._build(entry)
            return {p.key: p for p in entry.prepared}

    def cache(self) -> dict:
        """The push state's samples: ``{sample_id: {digest, tasks: [[index, count, sha]], prefilled}}``
        (after :meth:`build`)."""
        return {sid: {"digest": e.digest, "tasks": [[k[1], k[2], sha] for k, sha in e.tasks],
                      "prefilled": e.prefilled} for sid, e in self.samples.items()}
