"""`ingest-batch`: a folder of interview videos -> draft turns in Label Studio.

Per interview, in order: ingest (probe, sha256, 16 kHz wav) -> transcript (WhisperX or the
interview's subtitles) -> diarize (pyannote) -> segment (turns -> draft rows); then the
batch's drafts are pushed as the first annotation round (`transcript`). Interviews run
side by side (at most ``max_workers``); model inference holds the global `gpu` slot. A bad
interview is quarantined with its reason and the rest go on. Every stage is cached on its
input content, so a rerun after a crash redoes only unfinished interviews; the push is
idempotent (tasks are keyed on a stable id in Label Studio, never on Label Studio ids).
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from flows import NETWORK_RETRIES, RESUME, Outcome, file_resume, gpu_slot, report, settle
from pipeline.config import Settings

FIRST_ROUND = "transcript"


@task(name="ingest", cache_policy=file_resume("video"))
def ingest(video: str, interview: dict, data_root: str) -> dict:
    from pipeline import media

    return media.ingest(Path(video), interview, Path(data_root))


@task(name="transcript", cache_policy=RESUME)
def transcript(ingested: dict, data_root: str, device: str) -> dict:
    from pipeline import transcribe

    with gpu_slot():
        return transcribe.transcribe(ingested, Path(data_root), device=device)


@task(name="diarize", cache_policy=RESUME)
def diarize(transcribed: dict, data_root: str, device: str) -> dict:
    from pipeline import diarize as dz

    with gpu_slot():
        return dz.diarize(transcribed, Path(data_root), device=device)


@task(name="segment", cache_policy=RESUME)
def segment(diarized: dict, data_root: str) -> dict:
    from pipeline import turns

    return turns.segment(diarized, Path(data_root))


@task(name="push-round", cache_policy=RESUME, **NETWORK_RETRIES)
def push_round(round_name: str, drafts: list[dict], data_root: str) -> dict:
    from pipeline.annotation import push

    return push.push_round(round_name, drafts, Settings.from_env(data_root))


def read_batch(batch_dir: Path) -> list[dict]:
    from pipeline import media

    return media.read_batch(batch_dir)


@flow(name="ingest-batch", log_prints=True)
def ingest_batch_flow(batch_dir: str, data_root: str | None = None, device: str = "cpu",
                      max_workers: int = 2, push: bool = True) -> dict:
    """Ingest every interview in ``batch_dir`` and push the drafts for annotation."""
    logger = get_run_logger()
    root = str(Settings.from_env(data_root).data_root.resolve())
    interviews = read_batch(Path(batch_dir))
    logger.info("%d interviews in %s", len(interviews), batch_dir)

    chains = {}
    with ThreadPoolTaskRunner(max_workers=max_workers) as runner:
        for iv in interviews:
            f_in = runner.submit(ingest, {"video": str(iv["video"]), "interview": iv, "data_root": root})
            f_tr = runner.submit(transcript, {"ingested": f_in, "data_root": root, "device": device})
            f_dz = runner.submit(diarize, {"transcribed": f_tr, "data_root": root, "device": device})
            f_sg = runner.submit(segment, {"diarized": f_dz, "data_root": root})
            chains[iv["sample_id"]] = [("ingest", f_in), ("transcript", f_tr), ("diarize", f_dz), ("segment", f_sg)]
        outcomes = settle(chains)

    drafts = [o.result for o in outcomes if o.status != "quarantined"]
    pushed = None
    if push and drafts:
        pushed = push_round(FIRST_ROUND, drafts, root)
    counts = report("ingest-batch", f"Batch {Path(batch_dir).name}", outcomes,
                    extra_markdown=f"Round `{FIRST_ROUND}` pushed: {pushed}" if pushed else "")
    return {"counts": counts, "pushed": pushed,
            "quarantined": {o.item: o.reason for o in outcomes if o.status == "quarantined"}}
