"""`ingest-batch`: a batch folder (videos + manifest) -> draft turns in Label Studio.

Per interview, each task calls its stage's one entry point (the CLI calls the same ones) and
passes its typed, content-addressed record on: ingest (:func:`pipeline.media.ingest.ingest_entry`:
probe, sha256, 16 kHz wav, catalog line -> ``Ingested``) -> transcript
(:func:`pipeline.media.transcribe.transcribe_stage`: subtitles or WhisperX, chosen by
``transcribe.resolve_backend`` -> ``Transcribed``) and diarize
(:func:`pipeline.media.diarize.diarize_stage` -> ``Diarized``), side by side -> segment
(:func:`pipeline.media.turns.segment_stage`: draft rows -> ``Segmented``). Then the drafts of
every interview that made it are pushed as the first round (``push_drafts``, idempotent: keyed
on sample_id + content hash, never on Label Studio ids).

Interviews run side by side, at most ``max_workers`` at a time; model inference holds a slot
of the global `gpu` limit. A bad interview is quarantined with its reason and the rest go on; a
manifest entry whose sample id breaks the grammar is quarantined before any task runs.
Every stage is cached on its inputs' CONTENT (file sha256s + task source + pipeline version),
so a rerun after a crash redoes only what did not finish.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from flows import (NETWORK_RETRIES, RESUME, Outcome, file_resume, gpu_slot, note, report, settle, sha256_file,
                   summary_on_failure)
from pipeline.config import Settings
from pipeline.media import diarize as dz
from pipeline.media import ingest as media
from pipeline.media import transcribe as tr
from pipeline.media import turns, voices
from pipeline.media.diarize import Diarized
from pipeline.media.ingest import Ingested, ManifestEntry
from pipeline.media.transcribe import Transcribed
from pipeline.media.turns import Segmented


@task(name="ingest", task_run_name="ingest[{entry.sample_id}]", cache_policy=file_resume("video"))
def ingest(video: str, entry: ManifestEntry, batch_dir: str, data_root: str,
           subtitles_sha256: str | None = None, allow_outside_batch: bool = False) -> Ingested:
    """``video``: the entry's video file (the cache key follows its bytes; "" for a file outside the
    batch folder, which is refused unread); ``subtitles_sha256``: only part of the cache key (a
    changed subtitle file is ingested again)."""
    result = media.ingest_entry(entry, data_root, batch_dir, allow_outside_batch=allow_outside_batch)
    if result.ingested is None:
        raise media.MediaError(result.reason)
    return result.ingested


@task(name="transcript", task_run_name="transcript[{ingested.sample_id}]", cache_policy=RESUME)
def transcript(ingested: Ingested, data_root: str, backend: str, asr_model: str | None, align_model: str | None,
               device: str) -> Transcribed:
    chosen = tr.resolve_backend(backend, ingested.subtitle_path)
    with gpu_slot(device) if chosen == "whisperx" else contextlib.nullcontext():  # subtitles: no model, no slot
        return tr.transcribe_stage(ingested.sample_id, data_root, chosen, asr_model, align_model, device)


@task(name="diarize", task_run_name="diarize[{ingested.sample_id}]", cache_policy=RESUME)
def diarize(ingested: Ingested, data_root: str, diarization: str | None, device: str, voices: str = "") -> Diarized:
    """``voices``: the enrolled voices' fingerprint; only part of the cache key (the names come
    from the voices under the data root)."""
    model = dz.load_pipeline(diarization, device, Settings.from_env(data_root))  # once per process
    with gpu_slot(device):
        return dz.diarize_stage(ingested.sample_id, data_root, pipeline=model, device=device)


@task(name="segment", task_run_name="segment[{ingested.sample_id}]", cache_policy=RESUME)
def segment(ingested: Ingested, transcribed: Transcribed, diarized: Diarized, data_root: str) -> Segmented:
    return turns.segment_stage(ingested.sample_id, data_root)


@task(name="push-transcript-round", cache_policy=RESUME, **NETWORK_RETRIES)
def push_drafts(drafted: list[Segmented], data_root: str, annotators: list[str] | None) -> dict:
    """The first round for this batch's segmented interviews (:func:`pipeline.annotation.intake.open_round`:
    admitted to the work store, then pushed). ``drafted`` (the segment results, with their drafts'
    sha256) is the cache key; pushing is idempotent on its own, the cache just skips the round trip."""
    from pipeline.annotation import intake
    from pipeline.annotation.client import LabelStudioClient

    ids = sorted(d.sample_id for d in drafted)
    opened = intake.open_round(LabelStudioClient.from_settings(Settings.from_env(data_root)), data_root,
                               intake.first_round(), annotators or None, sample_ids=ids)
    rep = opened.report
    return {"round": opened.round, "created": rep.created, "projects": sorted(rep.projects),
            "annotators": list(rep.annotators)}


@flow(name="ingest-batch", log_prints=True, persist_result=True)
@summary_on_failure("ingest-batch", lambda p: f"Batch {Path(str(p.get('batch_dir'))).name}")
def ingest_batch_flow(batch_dir: str, data_root: str | None = None, backend: str = "auto",
                      asr_model: str | None = None, align_model: str | None = None,
                      diarization: str | None = None, device: str = "cpu", max_workers: int = 2,
                      push: bool = True, annotators: list[str] | None = None,
                      allow_outside_batch: bool = False) -> dict:
    """Ingest every interview of ``batch_dir`` (manifest.csv/yaml + videos) and push the drafts.

    backend: auto (subtitles when the manifest gives them, else WhisperX) | subtitles | whisperx.
    diarization: pyannote pipeline directory or hub id (default: the offline one under the models dir).
    allow_outside_batch: use manifest files outside ``batch_dir`` (absolute, ``..``, symlinks out);
    refused unread otherwise.
    """
    logger = get_run_logger()
    root = str(Settings.from_env(data_root).data_root.resolve())
    batch = Path(batch_dir).resolve()
    manifest_warnings: list[str] = []
    try:
        manifest = media.find_manifest(batch)
    except media.ManifestError as exc:  # a configuration error: named by the flow parameter, never retried
        raise media.ManifestError(f"flow parameter batch_dir={batch_dir!r}: {exc}") from None
    entries = media.read_manifest(manifest, manifest_warnings)
    for warning in manifest_warnings:
        logger.warning(warning)
    logger.info("%d interviews in %s", len(entries), batch.name)
    # a refused entry (sample id outside the grammar) never reaches a task; its id is shown escaped
    refused = [Outcome(e.sample_id.encode("unicode_escape").decode("ascii"), "quarantined", f"manifest: {e.refused}")
               for e in entries if e.refused]

    enrolled = voices.fingerprint(root)  # enrolling a voice re-runs diarization (names by voice)
    chains = {}
    with ThreadPoolTaskRunner(max_workers=max_workers) as runner:
        for entry in (e for e in entries if not e.refused):
            subs = batch / entry.subtitles if entry.subtitles else None
            inside = allow_outside_batch or not any(
                media.outside_batch(batch, name) for name in (entry.video, entry.subtitles) if name)
            f_in = runner.submit(ingest, {"video": str(batch / entry.video) if inside else "", "entry": entry,
                                          "batch_dir": str(batch), "data_root": root,
                                          "subtitles_sha256": sha256_file(subs) if inside and subs and subs.is_file()
                                          else None, "allow_outside_batch": allow_outside_batch})
            f_tr = runner.submit(transcript, {"ingested": f_in, "data_root": root, "backend": backend,
                                              "asr_model": asr_model, "align_model": align_model, "device": device})
            f_dz = runner.submit(diarize, {"ingested": f_in, "data_root": root, "diarization": diarization,
                                           "device": device, "voices": enrolled})
            f_sg = runner.submit(segment, {"ingested": f_in, "transcribed": f_tr, "diarized": f_dz, "data_root": root})
            chains[entry.sample_id] = [("ingest", f_in), ("transcript", f_tr), ("diarize", f_dz), ("segment", f_sg)]
        outcomes = sorted(settle(chains) + refused, key=lambda o: o.item)
    note(outcomes)  # shown in the summary even if the push below fails

    drafted = [o.result for o in outcomes if o.status != "quarantined"]
    pushed = push_drafts(drafted, root, annotators) if push and drafted else None
    extra = (f"Round `{pushed['round']}` in Label Studio: {pushed['created']} new tasks in "
             f"{len(pushed['projects'])} projects" if pushed else "Nothing pushed.")
    counts = report("ingest-batch", f"Batch {batch.name}", outcomes, extra_markdown=extra)
    return {"counts": counts, "pushed": pushed,
            "quarantined": {o.item: o.reason for o in outcomes if o.status == "quarantined"}}
