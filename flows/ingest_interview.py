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
cached on its inputs' CONTENT (file sha256s + task source + pipeline version) in the shared
result storage, so a rerun on any worker redoes only what did not finish.

The flow's result (persisted: the parent reads it from the shared result storage) says what
ran, what came from the cache and where it ran (:func:`where_running`); a bad interview ends
the run Failed with its reason (``InterviewQuarantined: ...``), which the parent reports as
quarantined. An expected problem of the interview (:data:`EXPECTED`: a bad video, no speech,
an empty subtitle file) is one line in the run's log, no traceback; anything else keeps its
traceback.
"""
from __future__ import annotations

import contextlib
import functools
import os
import socket
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.states import Failed
from prefect.task_runners import ThreadPoolTaskRunner

from flows import RESUME, file_resume, gpu_slot, settle, sha256_file
from pipeline.catalog import Ingested
from pipeline.config import Settings
from pipeline.media import diarize as dz
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

STAGES = ("ingest", "transcript", "diarize", "segment")


class InterviewQuarantined(RuntimeError):
    """The interview could not be drafted; the message is the stage and the reason."""


# What a bad interview raises (its input, not the code, is at fault): quarantined with one line.
EXPECTED = (MediaError, SubtitleError, DiarizationError, VadError, VoiceError)


def quarantine_expected(fn):
    """A stage task's function that ends Failed with ``"<Error>: <reason>"`` on an :data:`EXPECTED`
    problem instead of raising it: Prefect logs a raised exception with its traceback, a returned
    Failed state as one line. :func:`flows.settle` reads the reason from the message."""
    @functools.wraps(fn)  # Prefect reads the parameters and the cache key's source through __wrapped__
    def stage(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EXPECTED as exc:
            return Failed(message=f"{type(exc).__name__}: {exc}")
    return stage


def where_running() -> str:
    """Where this run runs, for the batch summary's worker column: ``NAME@HOST pid P``, the
    worker's name (the stack sets ``RESCUE_WORKER_NAME``; any Prefect worker passes its own name
    to its flow-run processes) and the worker's pid (this process's parent); ``this process
    (HOST pid P)`` when no worker started it."""
    host = socket.gethostname()
    name = os.environ.get("RESCUE_WORKER_NAME") or os.environ.get("PREFECT__WORKER_NAME")
    return f"{name}@{host} pid {os.getppid()}" if name else f"this process ({host} pid {os.getpid()})"


@task(name="ingest", task_run_name="ingest[{entry.sample_id}]", cache_policy=file_resume("video"))
@quarantine_expected
def ingest(video: str, entry: ManifestEntry, batch_dir: str, root: DataRoot,
           subtitles_sha256: str | None = None, allow_outside_batch: bool = False) -> Ingested:
    """``video``: the entry's video file (the cache key follows its bytes; "" for a file outside the
    batch folder, which is refused unread); ``subtitles_sha256``: only part of the cache key (a
    changed subtitle file is ingested again)."""
    result = ingest_entry(entry, root, batch_dir, allow_outside_batch=allow_outside_batch)
    if result.ingested is None:
        raise MediaError(result.reason)
    return result.ingested


@task(name="transcript", task_run_name="transcript[{ingested.sample_id}]", cache_policy=RESUME)
@quarantine_expected
def transcript(ingested: Ingested, root: DataRoot, backend: str, asr_model: str | None, align_model: str | None,
               device: str) -> Transcribed:
    chosen = tr.resolve_backend(backend, ingested.subtitle_path)
    with gpu_slot(device) if chosen == "whisperx" else contextlib.nullcontext():  # subtitles: no model, no slot
        return tr.transcribe_stage(ingested, root, chosen, asr_model, align_model, device)


@task(name="diarize", task_run_name="diarize[{ingested.sample_id}]", cache_policy=RESUME)
@quarantine_expected
def diarize(ingested: Ingested, root: DataRoot, diarization: str | None, device: str, voices: str = "") -> Diarized:
    """``voices``: the enrolled voices' fingerprint; only part of the cache key (the names come
    from the voices under the data root)."""
    model = dz.load_pipeline(diarization, device, Settings.from_env(root.root))  # once per process
    with gpu_slot(device):
        return dz.diarize_stage(ingested, root, pipeline=model, device=device)


@task(name="segment", task_run_name="segment[{ingested.sample_id}]", cache_policy=RESUME)
@quarantine_expected
def segment(ingested: Ingested, transcribed: Transcribed, diarized: Diarized, root: DataRoot) -> Segmented:
    """``transcribed`` and ``diarized``: what segment waits for, and part of its cache key (the
    stage reads the transcript and RTTM they wrote)."""
    return turns.segment_stage(ingested, root)


def entry_of(raw: dict) -> ManifestEntry:
    """A manifest entry from its JSON form (a deployment parameter)."""
    return ManifestEntry(**{**raw, "participants": tuple(raw.get("participants") or ())})


def submit_interview(runner, entry: ManifestEntry, batch: Path, root: DataRoot, *, backend: str,
                     asr_model: str | None, align_model: str | None, diarization: str | None, device: str,
                     voices: str, allow_outside_batch: bool) -> list[tuple[str, object]]:
    """Submit one interview's chain to ``runner``; its ``(stage, future)`` pairs for :func:`flows.settle`."""
    subs = batch / entry.subtitles if entry.subtitles else None
    inside = allow_outside_batch or not any(
        outside_batch(batch, name) for name in (entry.video, entry.subtitles) if name)
    f_in = runner.submit(ingest, {"video": str(batch / entry.video) if inside else "", "entry": entry,
                                  "batch_dir": str(batch), "root": root,
                                  "subtitles_sha256": sha256_file(subs) if inside and subs and subs.is_file()
                                  else None, "allow_outside_batch": allow_outside_batch})
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
    A single interview that cannot be drafted ends the run Failed, message ``InterviewQuarantined:
    <stage>: <reason>``, with the same result as its data (no traceback: it is no error of the
    run); in a chunk it is listed with its reason and the others go on."""
    chunk = [entry_of(e) for e in entry] if isinstance(entry, list) else [entry_of(entry)]
    root = DataRoot(data_root)  # built once, handed to every stage
    with ThreadPoolTaskRunner(max_workers=2) as runner:  # transcript and diarize side by side
        outs = settle({one.sample_id: submit_interview(
            runner, one, Path(batch_dir), root, backend=backend, asr_model=asr_model, align_model=align_model,
            diarization=diarization, device=device, voices=voices, allow_outside_batch=allow_outside_batch)
            for one in chunk})
    logger = get_run_logger()
    for out in outs:
        if out.status == "quarantined":
            logger.warning("%s quarantined: %s", out.item, out.reason)
    result = {"items": [{"item": o.item, "status": o.status, "reason": o.reason, "executed": o.executed,
                         "cached": o.cached, "result": o.result} for o in outs],
              "worker": where_running(), "host": socket.gethostname(), "pid": os.getpid(), "worker_pid": os.getppid()}
    if not isinstance(entry, list) and outs[0].status == "quarantined":
        return Failed(message=f"{InterviewQuarantined.__name__}: {outs[0].reason}", data=result)
    return result
