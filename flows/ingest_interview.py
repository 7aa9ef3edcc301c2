"""`ingest-interview`: ONE manifest entry -> ingest -> transcript + diarize -> segment.

The unit of fan-out. ``ingest-batch`` (:mod:`flows.ingest_batch`) submits one run of this
flow's deployment per interview with ``run_deployment``, so every worker polling the pool
takes interviews (``ingest-interview/default`` on ``rescue-cpu``; ``ingest-interview/gpu`` on
``rescue-gpu`` when ``device`` is ``cuda``). Without a deployment (the CLI path, the demo,
``fan_out=False``) the batch flow submits the very same task chain (:func:`submit_interview`)
to its own thread pool instead.

Per interview, each task calls its stage's one entry point (the CLI calls the same ones) with the
:class:`pipeline.paths.DataRoot` the flow built once from its ``data_root`` parameter, and
passes its typed, content-addressed record on (the later stages never read the catalog):
ingest (:func:`pipeline.media.ingest.ingest_entry`: probe, sha256, 16 kHz wav, catalog line ->
``Ingested``) -> transcript (:func:`pipeline.media.transcribe.transcribe_stage`: subtitles or
WhisperX, chosen by ``transcribe.resolve_backend`` -> ``Transcribed``) and diarize
(:func:`pipeline.media.diarize.diarize_stage` -> ``Diarized``), side by side -> segment
(:func:`pipeline.media.turns.segment_stage`: draft rows -> ``Segmented``). Every stage is
cached in the shared result storage under its result's key (:mod:`pipeline.media.keys`, the one
the CLI uses: its inputs' content, the digest of the code that computes it, the models it loads,
the settings that change it), so a rerun on any worker redoes only what did not finish, or what a
change of code or models touched. A stage that runs records its key, the key's parts and why it
ran beside its result (``DataRoot.result_key``); ``rescue status --stale`` and the batch's
summary read them.

The flow's result (persisted: the parent reads it from the shared result storage) says what
ran, what came from the cache and where it ran (:func:`where_running`). An expected problem of
the interview (:data:`EXPECTED`: a bad video, no speech, an empty subtitle file) quarantines
it: its stage and the later ones end Completed, named "Quarantined", the run says it in one
WARNING line and ends Completed, named "Quarantined", with the reason in its result, which the
parent reports. No ERROR line, no traceback; anything else (a bug) fails with its traceback.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import socket
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.states import Completed
from prefect.task_runners import ThreadPoolTaskRunner

from flows import QUARANTINED, Quarantine, gpu_slot, quarantined, settle, stage_resume
from pipeline import lineage
from pipeline.catalog import Catalog, Ingested
from pipeline.config import Settings
from pipeline.media import diarize as dz
from pipeline.media import keys
from pipeline.media import transcribe as tr
from pipeline.media import turns
from pipeline.media.diarize import Diarized
from pipeline.media.audio import MediaError
from pipeline.media.ingest import ingest_entry
from pipeline.media.manifest import ManifestEntry, outside_batch
from pipeline.media.rttm import DiarizationError
from pipeline.media.subtitles import SubtitleError
from pipeline.media.vad import VadError
from pipeline.media.voices import VoiceError
from pipeline.media.transcribe import Transcribed
from pipeline.media.turns import Segmented
from pipeline.paths import DataRoot
from pipeline.store import prepare_data_root

STAGES = ("ingest", "transcript", "diarize", "segment")
# the task's name -> the stage's name in pipeline.media.keys (and in `rescue status --stale`)
KEY_STAGE = {"ingest": "ingest", "transcript": "transcribe", "diarize": "diarize", "segment": "segment"}


# What a bad interview raises (its input, not the code, is at fault): quarantined with one line.
EXPECTED = (MediaError, SubtitleError, DiarizationError, VadError, VoiceError)


def quarantine_expected(fn):
    """A stage task's function that, on an :data:`EXPECTED` problem, returns a
    :class:`flows.Quarantine` (``"<Error>: <reason>"``) instead of raising it, and that passes an
    earlier stage's quarantine on without running: the task ends Completed, named "Quarantined"
    (:func:`flows.quarantined`). Prefect logs a raised exception, or a Failed state, as an ERROR
    with a traceback, and marks each later stage NotReady with an ERROR of its own; a bad input is
    no error of the code. :func:`flows.settle` reads the stage and the reason."""
    @functools.wraps(fn)  # Prefect reads the parameters and the cache key's source through __wrapped__
    def stage(*args, **kwargs):
        earlier = next((v for v in (*args, *kwargs.values()) if isinstance(v, Quarantine)), None)
        if earlier is not None:
            return quarantined(earlier, f"not run: {earlier.stage} quarantined {earlier.sample_id}")
        try:
            return fn(*args, **kwargs)
        except EXPECTED as exc:
            return quarantined(Quarantine(_sample_id(args, kwargs), fn.__name__, f"{type(exc).__name__}: {exc}"))
    return stage


def _sample_id(args, kwargs) -> str:
    """The sample id of a stage's call (its ``entry`` or ``ingested``), for the quarantine's name."""
    for value in (*args, *kwargs.values()):
        if hasattr(value, "sample_id"):
            return str(value.sample_id)
    return "?"


def where_running() -> str:
    """Where this run runs, for the batch summary's worker column: ``NAME@HOST pid P``, the
    worker's name (the stack sets ``RESCUE_WORKER_NAME``; any Prefect worker passes its own name
    to its flow-run processes) and the worker's pid (this process's parent); ``this process
    (HOST pid P)`` when no worker started it."""
    host = socket.gethostname()
    name = os.environ.get("RESCUE_WORKER_NAME") or os.environ.get("PREFECT__WORKER_NAME")
    return f"{name}@{host} pid {os.getppid()}" if name else f"this process ({host} pid {os.getpid()})"


def _subtitles(entry: ManifestEntry, batch_dir: str, video: str) -> str | None:
    """The entry's subtitle file, read for the key only when the entry's files are read at all."""
    return str(Path(batch_dir) / entry.subtitles) if entry.subtitles and video else None


def ingest_key(params: dict) -> lineage.StageKey:
    entry = params["entry"]
    return keys.ingest_key(entry.sample_id, dataclasses.asdict(entry), params["video"] or None,
                           _subtitles(entry, params["batch_dir"], params["video"]),
                           allow_outside_batch=params.get("allow_outside_batch", False),
                           cache=lineage.cache_for(params["root"]))


def transcript_key(params: dict) -> lineage.StageKey:
    return keys.transcribe_key(params["ingested"], params["backend"], params["asr_model"], params["align_model"],
                               params["device"], settings=Settings.from_env(params["root"].root),
                               cache=lineage.cache_for(params["root"]))


def diarize_key(params: dict) -> lineage.StageKey:
    return keys.diarize_key(params["ingested"], params["root"], params["diarization"], params["device"],
                            cache=lineage.cache_for(params["root"]))


def segment_key(params: dict) -> lineage.StageKey:
    return keys.segment_key(params["ingested"], params["root"], cache=lineage.cache_for(params["root"]))


def _made(root: DataRoot, key: lineage.StageKey, why: list[str], output_sha256: str | None = None) -> None:
    """Record what made the result just written, and why it was made (the task ran: its key was
    not in the flow's cache)."""
    lineage.record(root, key, why or ["not in the flow's cache"], output_sha256)


@task(name="ingest", task_run_name="ingest[{entry.sample_id}]", cache_policy=stage_resume(ingest_key))
@quarantine_expected
def ingest(video: str, entry: ManifestEntry, batch_dir: str, root: DataRoot,
           subtitles_sha256: str | None = None, allow_outside_batch: bool = False) -> Ingested:
    """``video``: the entry's video file (the key follows its bytes; "" for a file outside the
    batch folder, which is refused unread). ``subtitles_sha256``: no longer used (the key reads
    the subtitle file); kept so that older callers still work. A result made by other code or
    from another manifest line than the catalog's is ingested again, not taken from the catalog."""
    key = ingest_key({"video": video, "entry": entry, "batch_dir": batch_dir, "root": root,
                      "allow_outside_batch": allow_outside_batch})
    before = Catalog.read(root)
    row = before.rows.get(entry.sample_id)
    previous = lineage.read_record(root, "ingest", entry.sample_id)
    wav = root.resolve(row["audio_path"]) if row and row.get("audio_path") else None
    why = lineage.reasons(root, key, wav)
    if previous is not None and previous.get("key") != key.key:  # made otherwise: not "cached" by ingest's own check
        before = Catalog(before.root, {sid: r for sid, r in before.rows.items() if sid != entry.sample_id})
    result = ingest_entry(entry, root, batch_dir, allow_outside_batch=allow_outside_batch, catalog=before)
    if result.ingested is None:
        raise MediaError(result.reason)
    _made(root, key, why)
    return result.ingested


@task(name="transcript", task_run_name="transcript[{ingested.sample_id}]", cache_policy=stage_resume(transcript_key))
@quarantine_expected
def transcript(ingested: Ingested, root: DataRoot, backend: str, asr_model: str | None, align_model: str | None,
               device: str) -> Transcribed:
    key = transcript_key(dict(ingested=ingested, root=root, backend=backend, asr_model=asr_model,
                              align_model=align_model, device=device))
    why = lineage.reasons(root, key, root.transcript(ingested.sample_id))
    chosen = tr.resolve_backend(backend, ingested.subtitle_path)
    with gpu_slot(device) if chosen == "whisperx" else contextlib.nullcontext():  # subtitles: no model, no slot
        done = tr.transcribe_stage(ingested, root, chosen, asr_model, align_model, device)
    _made(root, key, why, done.sha256)
    return done


@task(name="diarize", task_run_name="diarize[{ingested.sample_id}]", cache_policy=stage_resume(diarize_key))
@quarantine_expected
def diarize(ingested: Ingested, root: DataRoot, diarization: str | None, device: str, voices: str = "") -> Diarized:
    """``voices``: the enrolled voices' fingerprint (the key reads the voices under the data root
    itself; kept so that older callers still work)."""
    key = diarize_key(dict(ingested=ingested, root=root, diarization=diarization, device=device))
    why = lineage.reasons(root, key, root.rttm(ingested.sample_id))
    model = dz.load_pipeline(diarization, device, Settings.from_env(root.root))  # once per process
    with gpu_slot(device):
        done = dz.diarize_stage(ingested, root, pipeline=model, device=device)
    _made(root, key, why, done.sha256)
    return done


@task(name="segment", task_run_name="segment[{ingested.sample_id}]", cache_policy=stage_resume(segment_key))
@quarantine_expected
def segment(ingested: Ingested, transcribed: Transcribed, diarized: Diarized, root: DataRoot) -> Segmented:
    """``transcribed`` and ``diarized``: what segment waits for; its key reads the transcript and
    RTTM files they wrote."""
    key = segment_key(dict(ingested=ingested, root=root))
    why = lineage.reasons(root, key, root.drafts(ingested.sample_id))
    done = turns.segment_stage(ingested, root)
    _made(root, key, why, done.drafts_sha256)
    return done


def entry_of(raw: dict) -> ManifestEntry:
    """A manifest entry from its JSON form (a deployment parameter)."""
    return ManifestEntry(**{**raw, "participants": tuple(raw.get("participants") or ())})


def submit_interview(runner, entry: ManifestEntry, batch: Path, root: DataRoot, *, backend: str,
                     asr_model: str | None, align_model: str | None, diarization: str | None, device: str,
                     voices: str, allow_outside_batch: bool) -> list[tuple[str, object]]:
    """Submit one interview's chain to ``runner``; its ``(stage, future)`` pairs for :func:`flows.settle`."""
    inside = allow_outside_batch or not any(
        outside_batch(batch, name) for name in (entry.video, entry.subtitles) if name)
    f_in = runner.submit(ingest, {"video": str(batch / entry.video) if inside else "", "entry": entry,
                                  "batch_dir": str(batch), "root": root, "allow_outside_batch": allow_outside_batch})
    f_tr = runner.submit(transcript, {"ingested": f_in, "root": root, "backend": backend,
                                      "asr_model": asr_model, "align_model": align_model, "device": device})
    f_dz = runner.submit(diarize, {"ingested": f_in, "root": root, "diarization": diarization,
                                   "device": device, "voices": voices})
    f_sg = runner.submit(segment, {"ingested": f_in, "transcribed": f_tr, "diarized": f_dz, "root": root})
    return [("ingest", f_in), ("transcript", f_tr), ("diarize", f_dz), ("segment", f_sg)]


@flow(name="ingest-interview", log_prints=True, persist_result=True)
def ingest_interview_flow(entry: dict | list[dict], batch_dir: str, data_root: str, backend: str = "auto",
                          asr_model: str | None = None, align_model: str | None = None,
                          diarization: str | None = None, device: str = "cpu", voices: str = "",
                          allow_outside_batch: bool = False) -> dict:
    """One interview of a batch (``entry``: a manifest entry as a dict) - or a chunk of them (a
    list: one process, one model load for several short interviews); called by ``ingest-batch``.

    Returns ``{"items": [{"item", "status": done|cached|quarantined, "reason", "executed",
    "cached", "result": Segmented}], "worker": where_running(), "host", "pid", "worker_pid"}``.
    An interview that cannot be drafted is one WARNING line ``<id> quarantined: <stage>: <reason>``
    and the run ends Completed, named "Quarantined" (every interview of the run quarantined) or
    "Completed (N quarantined)", its message the same lines, its result as data: no ERROR, no
    traceback, since it is no error of the run. In a chunk the others go on."""
    chunk = [entry_of(e) for e in entry] if isinstance(entry, list) else [entry_of(entry)]
    root = prepare_data_root(DataRoot(data_root))  # built and checked once, handed to every stage
    with ThreadPoolTaskRunner(max_workers=2) as runner:  # transcript and diarize side by side
        outs = settle({one.sample_id: submit_interview(
            runner, one, Path(batch_dir), root, backend=backend, asr_model=asr_model, align_model=align_model,
            diarization=diarization, device=device, voices=voices, allow_outside_batch=allow_outside_batch)
            for one in chunk})
    logger = get_run_logger()
    bad = [o for o in outs if o.status == "quarantined"]
    for out in bad:
        logger.warning("%s quarantined: %s", out.item, out.reason)
    result = {"items": [{"item": o.item, "status": o.status, "reason": o.reason, "executed": o.executed,
                         "cached": o.cached, "result": o.result} for o in outs],
              "worker": where_running(), "host": socket.gethostname(), "pid": os.getpid(), "worker_pid": os.getppid()}
    if not bad:
        return result
    # Completed (it is no error of the run), named for it; the parent reads the items' reasons
    name = QUARANTINED if len(bad) == len(outs) else f"Completed ({len(bad)} quarantined)"
    return Completed(name=name, data=result, message="; ".join(f"{o.item} quarantined: {o.reason}" for o in bad)[:2000])
