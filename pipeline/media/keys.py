"""The keys of the four media stages' results: what makes each one (``pipeline.lineage``).

One builder per stage, called with the stage call's own arguments; the ``ingest-batch`` flow's
cache (``flows.stage_resume``) and the CLI (``rescue ingest | transcribe | diarize | segment``,
``rescue status --stale``) call the same ones:

=========== ====================================== ============================ ==========================
stage       inputs                                 models                       settings
=========== ====================================== ============================ ==========================
ingest      the video's and subtitles' bytes, the  -                            minimum duration
            manifest entry
transcribe  the ingested record (audio sha256,     WhisperX: the ASR and        backend; WhisperX: device,
            subtitle copy, participants)           alignment models, punkt      compute type, batch size
diarize     the ingested record, enrolled voices   the pyannote pipeline        device, segmentation step,
                                                                                shared partials, speakers,
                                                                                refinement
segment     the ingested record, the transcript    -                            segmenter config, speaking
            and RTTM files                                                      order hint
=========== ====================================== ============================ ==========================

Each stage's code is its module (``MODULES``) and what it imports. :func:`stage_states` says
per sample and stage whether the result is ``fresh``, ``stale`` (and why) or ``missing``: each
record's options make the key of now again, with settings from the environment read anew.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from pipeline import lineage
from pipeline.catalog import Catalog, Ingested, ingested as ingested_of
from pipeline.config import Settings
from pipeline.lineage import DigestCache, StageKey, file_digest, model_digest
from pipeline.media import voices
from pipeline.media.diarize import bfloat16_voice_prints
from pipeline.media.ingest import MIN_DURATION_S
from pipeline.media.transcribe import resolve_backend
from pipeline.media.turns import SegmenterConfig, hint_of
from pipeline.paths import DataRoot

STAGES = ("ingest", "transcribe", "diarize", "segment")
MODULES = {"ingest": "pipeline.media.ingest", "transcribe": "pipeline.media.transcribe",
           "diarize": "pipeline.media.diarize", "segment": "pipeline.media.turns"}
UPSTREAM = {"ingest": (), "transcribe": ("ingest",), "diarize": ("ingest",),
            "segment": ("ingest", "transcribe", "diarize")}
# The offline pipeline's folder under the models dir: pipeline.media.models.OFFLINE_DIARIZATION
# (that module loads torch; tests/media/test_stage_keys.py checks the two agree).
OFFLINE_DIARIZATION = "diarization-offline"
NLTK_DATA = "nltk_data"


def _ingested_digest(ingested: Ingested) -> str:
    return lineage.digest_of(dataclasses.asdict(ingested))


def _model(path: Path, cache: DigestCache | None, name: str | None = None) -> tuple[str, dict]:
    return name or path.name, {"path": str(path), "sha256": model_digest(path, cache)}


def _named_model(source: str | None, cache: DigestCache | None) -> tuple[str, dict]:
    """A model given as a local folder or file (digested) or as a hub name (recorded as named)."""
    path = Path(source).expanduser()
    if path.exists():
        return _model(path.parent if path.is_file() and path.suffix in (".yaml", ".yml") else path, cache)
    return str(source), {"path": None, "sha256": f"named:{source}"}


# --- the four builders ------------------------------------------------------------------------

def ingest_key(sample_id: str, entry: Mapping, video: str | None, subtitles: str | None = None,
               min_duration_s: float | None = None, allow_outside_batch: bool = False,
               cache: DigestCache | None = None) -> StageKey:
    """``entry``: the manifest entry's fields (scenario, participants, speaking_order, synthetic);
    ``video`` / ``subtitles``: the files (a file outside the batch, refused unread: ``None``)."""
    min_duration_s = MIN_DURATION_S if min_duration_s is None else min_duration_s
    fields = {k: entry.get(k) for k in ("scenario", "participants", "speaking_order", "synthetic")}
    fields["participants"] = list(fields["participants"] or ())
    inputs = {"entry": lineage.digest_of({"sample_id": sample_id, **fields}),
              "video": file_digest(video, cache) if video else "none"}
    if subtitles:
        inputs["subtitles"] = file_digest(subtitles, cache)
    return StageKey("ingest", sample_id, lineage.code_files(MODULES["ingest"]),
                    # allow_outside_batch changes nothing of a file inside the batch; outside, the
                    # video's digest (or "none": refused unread) says it
                    settings={"min_duration_s": min_duration_s},
                    inputs=inputs,
                    options={"entry": fields, "video": str(video) if video else None,
                             "subtitles": str(subtitles) if subtitles else None,
                             "min_duration_s": min_duration_s, "allow_outside_batch": bool(allow_outside_batch)})


def transcribe_key(ingested: Ingested, backend: str = "auto", asr_model: str | Path | None = None,
                   align_model: str | Path | None = None, device: str = "cpu", compute_type: str = "int8",
                   batch_size: int = 8, settings: Settings | None = None,
                   cache: DigestCache | None = None) -> StageKey:
    """Subtitles: no model and no device. WhisperX: the ASR and alignment models (a folder is
    digested; a model name is recorded as named) and whisperx's sentence splitter data."""
    chosen = resolve_backend(backend, ingested.subtitle_path)
    models, values = {}, {"backend": chosen}
    if chosen == "whisperx":
        settings = settings or Settings.from_env()
        for source in (asr_model, align_model):
            if source is not None:
                name, model = _named_model(str(source), cache)
                models[name] = model
        if align_model is None:
            models["alignment-default"] = {"path": None, "sha256": "named:whisperx default for en"}
        punkt = settings.models_dir / NLTK_DATA
        if punkt.exists():
            models.update([_model(punkt, cache)])
        values.update(device=device, compute_type=compute_type, batch_size=batch_size)
    return StageKey("transcribe", ingested.sample_id, lineage.code_files(MODULES["transcribe"]), models, values,
                    {"ingested": _ingested_digest(ingested)},
                    options={"backend": backend, "asr_model": str(asr_model) if asr_model else None,
                             "align_model": str(align_model) if align_model else None, "device": device,
                             "compute_type": compute_type, "batch_size": batch_size})


def diarization_source(source: str | Path | None, settings: Settings) -> Path | str:
    """The pipeline folder ``diarize.load_pipeline`` loads (the offline one by default), or a hub id."""
    if source is None:
        return settings.models_dir / OFFLINE_DIARIZATION
    path = Path(source).expanduser()
    if path.is_file():
        return path.parent  # its config.yaml
    return path if path.exists() else str(source)


def diarize_key(ingested: Ingested, root: DataRoot, source: str | Path | None = None, device: str = "cpu",
                num_speakers: int | None = None, min_speakers: int | None = None,
                max_speakers: int | None = None, refine: bool = True, settings: Settings | None = None,
                cache: DigestCache | None = None) -> StageKey:
    settings = settings or Settings.from_env(root.root)
    where = diarization_source(source, settings)
    name, model = _model(where, cache) if isinstance(where, Path) else _named_model(where, cache)
    values = {"device": device, "diarization_step": settings.diarization_step,
              "diarization_shared_partials": settings.diarization_shared_partials,
              "diarization_bfloat16": bfloat16_voice_prints(device, settings), "num_speakers": num_speakers,
              "min_speakers": min_speakers, "max_speakers": max_speakers, "refine": refine}
    inputs = {"ingested": _ingested_digest(ingested), "voices": voices.fingerprint(root) or "none"}
    return StageKey("diarize", ingested.sample_id, lineage.code_files(MODULES["diarize"]), {name: model}, values,
                    inputs, options={"source": str(source) if source is not None else None, "device": device,
                                     "num_speakers": num_speakers, "min_speakers": min_speakers,
                                     "max_speakers": max_speakers, "refine": refine})


def segment_key(ingested: Ingested, root: DataRoot, config=None, speaking_order=None,
                cache: DigestCache | None = None) -> StageKey:
    """``config``: a ``SegmenterConfig`` (or its fields), default the segmenter's own;
    ``speaking_order``: the hint as ``segment_stage`` takes it."""
    fields = dataclasses.asdict(SegmenterConfig()) if config is None else \
        dict(config) if isinstance(config, Mapping) else dataclasses.asdict(config)
    hint = speaking_order if speaking_order is None or isinstance(speaking_order, bool) else list(speaking_order)
    rttm = root.rttm(ingested.sample_id)
    inputs = {"ingested": _ingested_digest(ingested), "transcript": file_digest(root.transcript(ingested.sample_id), cache),
              "rttm": file_digest(rttm, cache) if rttm.exists() else "none"}
    return StageKey("segment", ingested.sample_id, lineage.code_files(MODULES["segment"]),
                    settings={"config": fields, "speaking_order": hint_of(ingested, hint)}, inputs=inputs,
                    options={"config": fields, "speaking_order": hint})


# --- what is up to date ------------------------------------------------------------------------

def output_of(stage: str, root: DataRoot, row: dict | None) -> Path | None:
    """The file a stage's result lives in (``None``: the sample has no usable catalog line)."""
    sid = row["sample_id"] if row else None
    if row is None or row.get("status") != "done":
        return None
    if stage == "ingest":
        return root.resolve(row["audio_path"])
    return {"transcribe": root.transcript, "diarize": root.rttm, "segment": root.drafts}[stage](sid)


def current_key(stage: str, root: DataRoot, row: dict, recorded: Mapping | None, settings: Settings | None = None,
                cache: DigestCache | None = None) -> StageKey:
    """The key a stage's result would have now, with the options it was last made with
    (``recorded``'s; the defaults when there is no record) and settings read anew."""
    options = dict((recorded or {}).get("options") or {})
    settings = settings or Settings.from_env(root.root)
    if stage == "ingest":
        entry = options.get("entry") or {k: row.get(k) for k in ("scenario", "participants", "speaking_order",
                                                                  "synthetic")}
        key = ingest_key(row["sample_id"], entry, options.get("video"), options.get("subtitles"),
                         options.get("min_duration_s"), bool(options.get("allow_outside_batch")), cache)
        # a batch folder removed after ingest cannot be read again: its files count as unchanged
        gone = {name: (recorded or {}).get("inputs", {}).get(name) for name in ("video", "subtitles")
                if options.get(name) and not Path(options[name]).exists()}
        return dataclasses.replace(key, inputs={**key.inputs, **gone}) if gone else key
    record = ingested_of(row)
    if stage == "transcribe":
        return transcribe_key(record, settings=settings, cache=cache, **options)
    if stage == "diarize":
        return diarize_key(record, root, settings=settings, cache=cache, **options)
    return segment_key(record, root, options.get("config"), options.get("speaking_order"), cache)


@dataclasses.dataclass(frozen=True)
class StageState:
    sample_id: str
    stage: str
    state: str            # fresh | stale | missing
    why: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"sample_id": self.sample_id, "stage": self.stage, "state": self.state, "why": list(self.why)}


def sample_states(root: DataRoot, row: dict, settings: Settings | None = None,
                  cache: DigestCache | None = None) -> list[StageState]:
    """Each stage of one catalogued sample: fresh, stale (why) or missing. A stage after a stale
    or missing one is stale too (it will be made again from what that one makes)."""
    sid, out, states = row["sample_id"], [], {}
    for stage in STAGES:
        path = output_of(stage, root, row)
        recorded = lineage.read_record(root, stage, sid)
        if path is None:
            why = [f"quarantined at ingest: {row.get('reason') or 'no reason given'}"] if stage != "ingest" else \
                [f"quarantined: {row.get('reason') or 'no reason given'}"]
            state = StageState(sid, stage, "missing", tuple(why))
        elif not path.exists():
            state = StageState(sid, stage, "missing", ("not made yet",))
        else:
            why = lineage.why_stale(recorded, current_key(stage, root, row, recorded, settings, cache)) \
                if recorded else [lineage.NO_RECORD]
            why += [f"{up} is {states[up]}" for up in UPSTREAM[stage] if states.get(up) in ("stale", "missing")]
            state = StageState(sid, stage, "stale" if why else "fresh", tuple(why))
        states[stage] = state.state
        out.append(state)
    return out


def stage_states(root: DataRoot, sample_ids: list[str] | None = None) -> list[StageState]:
    """:func:`sample_states` for every catalogued sample (or those given), in id order."""
    catalog = Catalog.read(root)
    settings = Settings.from_env(root.root)
    cache = lineage.cache_for(root)
    ids = sorted(catalog.rows) if sample_ids is None else sample_ids
    out = [s for sid in ids for s in sample_states(root, catalog.entry(sid), settings, cache)]
    try:
        cache.save()
    except OSError:  # a read-only data root: the digests are made again next time
        pass
    return out
