"""The ingest stage: a batch folder of interview videos + a manifest -> 16 kHz mono WAVs + catalog lines.

Batch layout::

    BATCH_DIR/manifest.csv   (or manifest.yaml / manifest.yml: ``pipeline.media.manifest``)
    BATCH_DIR/<video files>  BATCH_DIR/<optional subtitle files>

What ingest writes under the data root (every path from :class:`pipeline.paths.DataRoot`)::

    media/<sha256>.wav           16 kHz mono PCM, one per distinct source file (content addressed)
    subtitles/<sha256>/<name>    copies of the subtitle files (the data root is self-contained)
    catalog.parquet              schemas.CATALOG, one line per sample_id (``pipeline.catalog``)

:func:`ingest_entry` is the stage's one entry point (the CLI's ``rescue ingest`` through
:func:`ingest_batch`, and the ``ingest-batch`` flow): it ingests one manifest entry and records
its catalog line under ``catalog.lock`` (``fcntl.flock``), so commands and flow runs working on
one data root at the same time never lose each other's lines. A file that cannot be used
(missing, empty, corrupt, no audio, too short) gets a catalog line with ``status=quarantined``
and the reason; the batch goes on. Re-ingesting an unchanged file (same sha256, WAV present)
does nothing; a changed file is redone. Probing and extraction: ``pipeline.media.audio``.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import Progress

from pipeline.catalog import Catalog, Ingested, ingested, record_catalog
from pipeline.media.audio import Extraction, MediaError, check_regular_file, probe, wav_duration
from pipeline.media.manifest import ManifestEntry, find_manifest, outside_batch, read_manifest
from pipeline.media.subtitles import SubtitleError, parse_subtitles
from pipeline.paths import DataRoot, InvalidId, check_name, check_sample_id, slug
from pipeline.store import atomic_write_bytes, private_area, sha256_file

MIN_DURATION_S = 5.0  # shorter clips hold no usable interaction (the paper drops clips < 2 min)
TRUNCATED_SHARE = 0.9       # decoded audio shorter than this share of what the file declares: truncated
TRUNCATED_MIN_GAP_S = 1.0   # ... and at least this much shorter (container rounding is not truncation)


@dataclass(frozen=True)
class IngestResult:
    """One manifest entry after :func:`ingest_entry`."""

    sample_id: str
    outcome: str                      # done | cached | quarantined
    reason: str | None = None         # why it was quarantined
    duration_s: float | None = None
    ingested: Ingested | None = None  # None when quarantined


@dataclass
class IngestReport:
    results: list[IngestResult] = field(default_factory=list)  # manifest order
    done: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    quarantined: dict[str, str] = field(default_factory=dict)  # sample_id -> reason
    warnings: list[str] = field(default_factory=list)  # about the manifest (unknown columns)



def ingest_video(
    video: str | Path,
    sample_id: str,
    scenario: str,
    root: DataRoot,
    participants: tuple[str, ...] | list[str] = (),
    subtitles: str | Path | None = None,
    previous: dict | None = None,
    min_duration_s: float = MIN_DURATION_S,
    speaking_order: bool = False,
    synthetic: str | None = None,
) -> tuple[dict, str]:
    """Ingest one video. Returns (catalog row, outcome) with outcome done | cached | quarantined.

    Never raises for a bad media file: the row is quarantined with the reason instead.
    ``previous`` is this sample's current catalog row (if any): an unchanged file is cached.
    """
    video = Path(video)
    check_sample_id(sample_id)
    row = {"sample_id": sample_id, "scenario": scenario, "source_name": video.name, "sha256": "",
           "duration_s": None, "audio_path": None, "status": "quarantined", "reason": None,
           "participants": list(participants), "subtitle_path": None, "speaking_order": bool(speaking_order),
           "synthetic": synthetic}
    try:
        check_regular_file(video)  # a FIFO would hang the hash; a loop is named as one
        digest = sha256_file(video)
        row["sha256"] = digest
        if subtitles:
            row["subtitle_path"] = _copy_subtitles(Path(subtitles), root)
        with _lock_for(digest):  # one extraction per content even when a batch holds the file twice
            return _ingest_content(video, root, row, root.media(digest), previous, min_duration_s)
    except (MediaError, OSError) as exc:
        row["reason"] = str(exc)
        return row, "quarantined"


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def _ingest_content(video: Path, root: DataRoot, row: dict, wav: Path, previous: dict | None,
                    min_duration_s: float) -> tuple[dict, str]:
    if (previous and previous.get("status") == "done" and previous.get("sha256") == row["sha256"]
            and wav.exists() and previous.get("subtitle_path") == row["subtitle_path"]
            and list(previous.get("participants") or []) == row["participants"]
            and bool(previous.get("speaking_order")) == row["speaking_order"]
            and previous.get("synthetic") == row["synthetic"]
            and previous.get("scenario") == row["scenario"]):
        return previous, "cached"
    if wav.exists():  # same content under another sample id or an earlier run
        meta = probe(video)
    else:
        private_area(root, "media")
        # extraction runs while ffprobe inspects the file: probing costs no extra wall time
        job = Extraction(video, wav) if video.stat().st_size else None
        try:
            meta = probe(video)
            if meta["duration_s"] < min_duration_s:
                raise MediaError(f"{video.name}: too short ({meta['duration_s']:.2f} s < {min_duration_s:g} s)")
        except MediaError:
            if job:
                job.cancel()
            raise
        job.finish()
    duration = wav_duration(wav)  # what was decoded, not what the container claims
    if duration < min_duration_s:
        raise MediaError(f"{video.name}: too short ({duration:.2f} s of audio < {min_duration_s:g} s)")
    declared = meta["audio_duration_s"]
    if duration < TRUNCATED_SHARE * declared and declared - duration > TRUNCATED_MIN_GAP_S:
        # e.g. an MP4 cut short whose index (at the front) still describes the whole file:
        # ffmpeg decodes what is there and exits 0; half an interview must not pass as a whole one
        raise MediaError(f"{video.name}: truncated: {duration:.1f} s of audio decoded, the file declares "
                         f"{declared:.1f} s (cut short or damaged; copy it again)")
    row.update(duration_s=round(duration, 3), audio_path=root.relative(wav), status="done", media_format=meta["format"],
               audio_codec=meta["audio_codec"], source_sample_rate=meta["sample_rate"],
               source_channels=meta["channels"], has_video=meta["has_video"])
    return row, "done"


def _copy_subtitles(src: Path, root: DataRoot) -> str:
    if check_regular_file(src, "subtitle").st_size == 0 or not src.read_bytes().strip():
        raise MediaError(f"{src.name}: empty subtitle file")
    try:
        if not parse_subtitles(src).units:
            raise MediaError(f"{src.name}: no cue with text in the subtitle file (nothing was said?)")
    except SubtitleError:
        pass  # unreadable cues are reported by the transcript stage, naming the cue
    try:
        name = check_name(src.name, "subtitle file name")
    except InvalidId:
        name = slug(src.name)  # e.g. spaces: the copy gets a plain name, the catalog records it
    target = root.subtitles(sha256_file(src), name)  # content addressed; the name stays for messages
    private_area(root, "subtitles")
    if not target.exists():
        atomic_write_bytes(target, src.read_bytes())
    return root.relative(target)


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _refused_outside(entry: ManifestEntry, batch_dir: Path) -> str | None:
    for what, name in (("video", entry.video), ("subtitles", entry.subtitles)):
        why = outside_batch(batch_dir, name) if name else None
        if why:
            return (f"manifest entry {entry.line}: {what} {name!r} {why}, outside the batch folder {batch_dir}; "
                    "refused and not read (allow it explicitly: rescue ingest --allow-outside-batch, "
                    "flow parameter allow_outside_batch=true)")
    return None


def ingest_entry(entry: ManifestEntry, root: DataRoot, batch_dir: str | Path = ".",
                 min_duration_s: float = MIN_DURATION_S, allow_outside_batch: bool = False,
                 catalog: Catalog | None = None) -> IngestResult:
    """The ingest stage for one manifest entry (video and subtitles relative to ``batch_dir``):
    ingest it and record its catalog line (under the catalog lock; an unchanged, cached entry
    leaves the catalog alone). A refused entry (bad sample id) touches nothing under the data root.
    A video or subtitle file outside ``batch_dir`` (absolute path, ``..``, a symlink out) is
    quarantined without being read unless ``allow_outside_batch``. ``root``: the data root its
    entry point built and checked (:func:`pipeline.store.prepare_data_root`). ``catalog``: a
    read of the catalog to find the entry's previous line in (:func:`ingest_batch` reads it once
    for the batch); else it is read."""
    if entry.refused:
        return IngestResult(entry.sample_id, "quarantined", entry.refused)
    if not min_duration_s >= 0:
        raise ValueError(f"min_duration_s must be >= 0 seconds, got {min_duration_s!r}")
    batch_dir = Path(batch_dir)
    previous = (catalog or Catalog.read(root)).rows.get(entry.sample_id)
    outside = None if allow_outside_batch else _refused_outside(entry, batch_dir)
    if outside:
        row = {"sample_id": entry.sample_id, "scenario": entry.scenario, "source_name": Path(entry.video).name,
               "sha256": "", "duration_s": None, "audio_path": None, "status": "quarantined", "reason": outside,
               "participants": list(entry.participants), "subtitle_path": None,
               "speaking_order": bool(entry.speaking_order), "synthetic": entry.synthetic}
        record_catalog(root, row)
        return IngestResult(entry.sample_id, "quarantined", outside)
    subs = batch_dir / entry.subtitles if entry.subtitles else None
    row, outcome = ingest_video(batch_dir / entry.video, entry.sample_id, entry.scenario, root,
                                entry.participants, subs, previous, min_duration_s, entry.speaking_order,
                                entry.synthetic)
    if outcome != "cached":
        record_catalog(root, row)
    if outcome == "quarantined":
        return IngestResult(entry.sample_id, outcome, row["reason"], row["duration_s"])
    return IngestResult(entry.sample_id, outcome, None, row["duration_s"], ingested(row))


def ingest_batch(batch_dir: str | Path, root: DataRoot, progress: bool = False,
                 min_duration_s: float = MIN_DURATION_S, jobs: int | None = None,
                 allow_outside_batch: bool = False) -> IngestReport:
    """Ingest every manifest entry of a batch (:func:`ingest_entry`), ``jobs`` videos at a time
    (default: one per core, at most 4; each is one ffmpeg process). Each catalog line is recorded
    as soon as its video is done, so an interrupted batch keeps everything already done. The
    report lists samples in manifest order. ``allow_outside_batch``: see :func:`ingest_entry`.
    The catalog is read once for the batch (each line is then recorded under its lock)."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if not min_duration_s >= 0:
        raise ValueError(f"min_duration_s must be >= 0 seconds, got {min_duration_s!r}")
    batch_dir = Path(batch_dir)
    report = IngestReport()
    entries = read_manifest(find_manifest(batch_dir), report.warnings)
    before = Catalog.read(root)
    with Progress(disable=not progress, transient=False) as bar, \
            ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        task = bar.add_task(f"ingest {batch_dir.name}", total=len(entries))

        def one(entry: ManifestEntry) -> IngestResult:
            try:
                return ingest_entry(entry, root, batch_dir, min_duration_s, allow_outside_batch, before)
            finally:
                bar.advance(task)

        report.results = list(pool.map(one, entries))
    for result in report.results:
        if result.outcome == "quarantined":
            report.quarantined[result.sample_id] = result.reason or ""
        elif result.outcome == "cached":
            report.cached.append(result.sample_id)
        else:
            report.done.append(result.sample_id)
    return report


def remove_stale_media(root: DataRoot) -> list[Path]:
    """Delete WAVs no catalog row points at (after files changed); returns what was removed."""
    used = {r["audio_path"] for r in Catalog.read(root).rows.values() if r["audio_path"]}
    removed = []
    for wav in sorted(root.media_dir().glob("*.wav")):
        if root.relative(wav) not in used:
            wav.unlink()
            removed.append(wav)
    return removed

