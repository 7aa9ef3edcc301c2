"""`ingest-batch`: a batch folder (videos + manifest) -> draft turns in Label Studio.

Per interview: ingest (:func:`pipeline.media.ingest.ingest_video`: probe, sha256, 16 kHz wav) ->
transcript (:func:`pipeline.media.transcribe.transcribe_sample`: subtitles or WhisperX) and diarize
(:func:`pipeline.media.diarize.diarize_audio`), side by side -> segment
(:func:`pipeline.media.turns.segment_sample`: draft rows). Then the drafts of every interview that
made it are pushed as the `transcript` round (:func:`pipeline.annotation.push.push_round`,
idempotent: keyed on sample_id + content hash, never on Label Studio ids).

Interviews run side by side, at most ``max_workers`` at a time; model inference holds a slot
of the global `gpu` limit. A bad interview is quarantined with its reason and the rest go on.
Every stage is cached on its inputs' CONTENT (file sha256s + task source + pipeline version),
so a rerun after a crash redoes only what did not finish.
"""
from __future__ import annotations

import threading
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from flows import NETWORK_RETRIES, RESUME, Outcome, file_resume, gpu_slot, report, settle, sha256_file
from pipeline.config import Settings

FIRST_ROUND = "transcript"
_catalog_lock = threading.Lock()     # the catalog is one file; interviews finish in parallel threads
_load_lock = threading.Lock()        # diarize.load_pipeline caches per process; load it once


@task(name="ingest", cache_policy=file_resume("video"))
def ingest(video: str, entry: dict, data_root: str) -> dict:
    from pipeline.media import ingest as media

    root = Path(data_root)
    with _catalog_lock:
        previous = {r["sample_id"]: r for r in media.read_catalog(root).to_pylist()}.get(entry["sample_id"])
    row, outcome = media.ingest_video(video, entry["sample_id"], entry["scenario"], root,
                                      entry["participants"], entry["subtitles"], previous)
    with _catalog_lock:
        catalog = {r["sample_id"]: r for r in media.read_catalog(root).to_pylist()}
        catalog[entry["sample_id"]] = row
        media.write_catalog(root, catalog)
    if outcome == "quarantined":
        raise media.MediaError(row["reason"])
    return {"sample_id": row["sample_id"], "sha256": row["sha256"], "audio_path": row["audio_path"],
            "subtitle_path": row["subtitle_path"], "participants": row["participants"],
            "scenario": row["scenario"], "duration_s": row["duration_s"]}


@task(name="transcript", cache_policy=RESUME)
def transcript(ingested: dict, data_root: str, backend: str, asr_model: str | None, align_model: str | None,
               device: str) -> dict:
    from pipeline.media import transcribe

    sid = ingested["sample_id"]
    if backend == "subtitles" or (backend == "auto" and ingested["subtitle_path"]):
        transcribe.transcribe_sample(sid, data_root, "subtitles")      # no model: no GPU slot
    else:
        with gpu_slot():
            transcribe.transcribe_sample(sid, data_root, "whisperx", asr_model, align_model, device)
    return {"sample_id": sid, "sha256": sha256_file(transcribe.transcript_path(data_root, sid))}


@task(name="diarize", cache_policy=RESUME)
def diarize(ingested: dict, data_root: str, diarization: str | None, device: str, voices: str = "") -> dict:
    """``voices``: the enrolled voices' fingerprint; only part of the cache key (the names come
    from the voices under the data root)."""
    from pipeline.media import diarize as dz
    from pipeline.media.turns import rttm_path

    sid, root = ingested["sample_id"], Path(data_root)
    with _load_lock:
        model = dz.load_pipeline(diarization, device, Settings.from_env(root))
    with gpu_slot():
        dz.diarize_sample(sid, root, pipeline=model, device=device)
    return {"sample_id": sid, "sha256": sha256_file(rttm_path(root, sid))}


@task(name="segment", cache_policy=RESUME)
def segment(ingested: dict, transcribed: dict, diarized: dict, data_root: str) -> dict:
    from pipeline.media import turns

    sid = ingested["sample_id"]
    table = turns.segment_sample(sid, data_root)
    return {**ingested, "rows": table.num_rows, "drafts_sha256": sha256_file(turns.drafts_path(data_root, sid))}


@task(name="push-transcript-round", cache_policy=RESUME, **NETWORK_RETRIES)
def push_drafts(drafted: list[dict], data_root: str, annotators: list[str] | None) -> dict:
    """Push is idempotent on its own (sample_id + content sha in Label Studio); the cache just
    skips the round trip when nothing changed."""
    import pyarrow.parquet as pq

    from pipeline import corpus
    from pipeline.annotation import push
    from pipeline.annotation.client import LabelStudioClient
    from pipeline.rows import group_id_of
    from pipeline.media.turns import drafts_path

    root = Path(data_root)
    samples = []
    for d in sorted(drafted, key=lambda d: d["sample_id"]):
        rows = pq.read_table(drafts_path(root, d["sample_id"])).to_pylist()
        for r in rows:
            r.pop("sample_id", None)
        samples.append({"sample_id": d["sample_id"], "scenario": d["scenario"], "group_id": group_id_of(d["sample_id"]),
                        "participants": d["participants"], "source_file": None, "duration_s": d["duration_s"],
                        "rows": rows})
    # The rounds are pushed from the corpus (adjudication and gold read their base samples
    # there): new interviews enter it as drafts; a sample already there (maybe with gold) stays.
    known = {s["sample_id"] for s in corpus.load_corpus(root)}
    corpus.merge_into_corpus(root, [s for s in samples if s["sample_id"] not in known])
    rep = push.push_round(LabelStudioClient.from_settings(Settings.from_env(root)), FIRST_ROUND, samples,
                          annotators or None, media_dir=root / "media",
                          media_url=push.catalog_media_urls(root))
    return {"round": FIRST_ROUND, "created": rep.created, "projects": sorted(rep.projects),
            "annotators": list(rep.annotators)}


def read_batch(batch_dir: Path) -> list[dict]:
    from pipeline.media import ingest as media

    entries = media.read_manifest(media.find_manifest(batch_dir))
    return [{"sample_id": e.sample_id, "scenario": e.scenario, "video": str(batch_dir / e.video),
             "participants": list(e.participants),
             "subtitles": str(batch_dir / e.subtitles) if e.subtitles else None} for e in entries]


@flow(name="ingest-batch", log_prints=True, persist_result=True)
def ingest_batch_flow(batch_dir: str, data_root: str | None = None, backend: str = "auto",
                      asr_model: str | None = None, align_model: str | None = None,
                      diarization: str | None = None, device: str = "cpu", max_workers: int = 2,
                      push: bool = True, annotators: list[str] | None = None) -> dict:
    """Ingest every interview of ``batch_dir`` (manifest.csv/yaml + videos) and push the drafts.

    backend: auto (subtitles when the manifest gives them, else WhisperX) | subtitles | whisperx.
    diarization: pyannote pipeline directory or hub id (default: the offline one under the models dir).
    """
    logger = get_run_logger()
    root = str(Settings.from_env(data_root).data_root.resolve())
    batch = Path(batch_dir).resolve()
    interviews = read_batch(batch)
    logger.info("%d interviews in %s", len(interviews), batch.name)

    from pipeline.media import voices
    enrolled = voices.fingerprint(root)  # enrolling a voice re-runs diarization (names by voice)
    chains = {}
    with ThreadPoolTaskRunner(max_workers=max_workers) as runner:
        for iv in interviews:
            entry = {k: iv[k] for k in ("sample_id", "scenario", "participants", "subtitles")}
            f_in = runner.submit(ingest, {"video": iv["video"], "entry": entry, "data_root": root})
            f_tr = runner.submit(transcript, {"ingested": f_in, "data_root": root, "backend": backend,
                                              "asr_model": asr_model, "align_model": align_model, "device": device})
            f_dz = runner.submit(diarize, {"ingested": f_in, "data_root": root, "diarization": diarization,
                                           "device": device, "voices": enrolled})
            f_sg = runner.submit(segment, {"ingested": f_in, "transcribed": f_tr, "diarized": f_dz, "data_root": root})
            chains[iv["sample_id"]] = [("ingest", f_in), ("transcript", f_tr), ("diarize", f_dz), ("segment", f_sg)]
        outcomes = settle(chains)

    drafted = [o.result for o in outcomes if o.status != "quarantined"]
    pushed = push_drafts(drafted, root, annotators) if push and drafted else None
    extra = (f"Round `{FIRST_ROUND}` in Label Studio: {pushed['created']} new tasks in "
             f"{len(pushed['projects'])} projects" if pushed else "Nothing pushed.")
    counts = report("ingest-batch", f"Batch {batch.name}", outcomes, extra_markdown=extra)
    return {"counts": counts, "pushed": pushed,
            "quarantined": {o.item: o.reason for o in outcomes if o.status == "quarantined"}}
