"""Media ingest: a batch folder of interview videos + a manifest -> 16 kHz mono WAVs + a catalog.

Batch layout::

    BATCH_DIR/manifest.csv   (or manifest.yaml / manifest.yml)
    BATCH_DIR/<video files>  BATCH_DIR/<optional subtitle files>

Manifest columns: ``sample_id, scenario (couple|family), video, participants, subtitles``.
``participants`` lists the clients (CSV: ``;``-separated); the therapist is implicit. An optional
``speaking_order`` column (``yes``/``true``/``1``) says the list is in speaking order (therapist
first), so the segmenter may name voices by it (``pipeline.media.turns``); without it draft rows
keep one neutral label per voice. ``subtitles`` is optional (SRT/VTT beside the video). A ``sample_id`` must follow the
sample-id grammar (:func:`pipeline.paths.check_sample_id`); an entry whose id does not is
refused with the manifest file, line and id, and the rest of the batch goes on.

What ingest writes under the data root (every path from :class:`pipeline.paths.DataRoot`)::

    media/<sha256>.wav           16 kHz mono PCM, one per distinct source file (content addressed)
    subtitles/<sha256>/<name>    copies of the subtitle files (the data root is self-contained)
    catalog.parquet              schemas.CATALOG, one line per sample_id

:func:`ingest_entry` is the stage's one entry point (the CLI's ``rescue ingest`` through
:func:`ingest_batch`, and the ``ingest-batch`` flow): it ingests one manifest entry and records
its catalog line under ``catalog.lock`` (``fcntl.flock``), so commands and flow runs working on
one data root at the same time never lose each other's lines. A file that cannot be used
(missing, empty, corrupt, no audio, too short) gets a catalog line with ``status=quarantined``
and the reason; the batch goes on. Re-ingesting an unchanged file (same sha256, WAV present)
does nothing; a changed file is redone.
"""
from __future__ import annotations

import contextlib
import csv
import fcntl
import os
import shutil
import subprocess
import threading
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import ffmpeg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from rich.progress import Progress

from pipeline import schemas
from pipeline.paths import DataRoot, InvalidId, check_name, check_sample_id, slug
from pipeline.store import atomic_write_bytes, sha256_file, write_parquet

SAMPLE_RATE = 16000
MIN_DURATION_S = 5.0  # shorter clips hold no usable interaction (the paper drops clips < 2 min)
SCENARIOS = ("couple", "family")
MANIFEST_NAMES = ("manifest.csv", "manifest.yaml", "manifest.yml")


class MediaError(Exception):
    """A media file that cannot be used; the message says which file and why."""


class ManifestError(ValueError):
    pass


@dataclass(frozen=True)
class ManifestEntry:
    sample_id: str
    scenario: str
    video: str
    participants: tuple[str, ...] = ()
    subtitles: str | None = None
    line: int = 0  # manifest line (CSV) or item number (YAML), for error messages
    refused: str | None = None  # why this entry is not ingested at all (a sample id outside the grammar)
    speaking_order: bool = False  # participants are listed in speaking order (a naming hint)


@dataclass(frozen=True)
class Ingested:
    """What the later stages need of an ingested sample; content addressed by ``sha256``."""

    sample_id: str
    scenario: str
    participants: tuple[str, ...]
    sha256: str
    audio_path: str            # relative to the data root (DataRoot.resolve)
    subtitle_path: str | None  # relative to the data root, None when the manifest gave none
    duration_s: float


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


# --- manifest ---------------------------------------------------------------------------

def find_manifest(batch_dir: Path) -> Path:
    for name in MANIFEST_NAMES:
        if (batch_dir / name).exists():
            return batch_dir / name
    raise ManifestError(f"{batch_dir}: no manifest (expected one of {', '.join(MANIFEST_NAMES)})")


def read_manifest(path: str | Path) -> list[ManifestEntry]:
    """Parse a manifest. Structural problems raise ManifestError naming the file and line; an
    entry whose sample id breaks the grammar comes back with ``refused`` set (file, line, id and
    the grammar), so the rest of the batch still goes on."""
    path = Path(path)
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8-sig") as fh:
            records = [(n, r) for n, r in enumerate(csv.DictReader(fh), start=2)]
    else:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        items = data.get("samples", data) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ManifestError(f"{path}: expected a list of samples (or a 'samples:' list)")
        records = list(enumerate(items, start=1))
    entries, seen = [], set()
    for line, rec in records:
        where = f"{path.name} line {line}" if path.suffix == ".csv" else f"{path.name} item {line}"
        if not isinstance(rec, dict):
            raise ManifestError(f"{where}: not a mapping")
        rec = {str(k).strip().lower(): v for k, v in rec.items() if k is not None}
        missing = [k for k in ("sample_id", "scenario", "video") if not str(rec.get(k) or "").strip()]
        if missing:
            raise ManifestError(f"{where}: missing {', '.join(missing)}")
        scenario = str(rec["scenario"]).strip().lower()
        if scenario not in SCENARIOS:
            raise ManifestError(f"{where}: scenario {rec['scenario']!r} is not one of {SCENARIOS}")
        sample_id = str(rec["sample_id"]).strip()
        if sample_id in seen:
            raise ManifestError(f"{where}: duplicate sample_id {sample_id!r}")
        seen.add(sample_id)
        try:
            check_sample_id(sample_id)
            refused = None
        except InvalidId as exc:
            refused = f"{path}, {where.split(' ', 1)[1]}: {exc}"
        people = rec.get("participants") or []
        if isinstance(people, str):
            people = [p for p in (x.strip() for x in people.replace(",", ";").split(";")) if p]
        subs = str(rec.get("subtitles") or "").strip() or None
        in_order = str(rec.get("speaking_order") or "").strip().lower() in ("yes", "true", "1", "y")
        entries.append(ManifestEntry(sample_id, scenario, str(rec["video"]).strip(), tuple(people), subs, line,
                                     refused, in_order))
    return entries


# --- probing, hashing, extraction -------------------------------------------------------

def probe(path: str | Path) -> dict:
    """ffprobe metadata: duration, audio stream facts. Raises MediaError with the reason."""
    path = Path(path)
    if not path.exists():
        raise MediaError(f"{path.name}: file not found")
    if path.stat().st_size == 0:
        raise MediaError(f"{path.name}: empty file (0 bytes)")
    try:
        info = ffmpeg.probe(str(path))
    except ffmpeg.Error as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise MediaError(f"{path.name}: unreadable or corrupt media ({detail[-1] if detail else 'ffprobe failed'})") from exc
    audio = [s for s in info.get("streams", []) if s.get("codec_type") == "audio"]
    if not audio:
        raise MediaError(f"{path.name}: no audio stream")
    fmt = info.get("format", {})
    duration = _float(fmt.get("duration")) or _float(audio[0].get("duration"))
    if not duration:
        raise MediaError(f"{path.name}: unknown duration (truncated or corrupt file)")
    return {
        "duration_s": duration,
        "format": fmt.get("format_name"),
        "audio_codec": audio[0].get("codec_name"),
        "sample_rate": int(audio[0].get("sample_rate") or 0),
        "channels": int(audio[0].get("channels") or 0),
        "has_video": any(s.get("codec_type") == "video" for s in info.get("streams", [])),
    }


def _float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def extraction_command(src: str | Path, dst: str | Path) -> list[str]:
    """The ffmpeg command that writes 16 kHz mono 16-bit PCM WAV (built with ffmpeg-python)."""
    stream = ffmpeg.input(str(src)).output(str(dst), vn=None, ac=1, ar=SAMPLE_RATE, acodec="pcm_s16le",
                                           f="wav", map_metadata=-1, fflags="+bitexact")
    return ffmpeg.compile(stream.global_args("-nostdin", "-v", "error"), overwrite_output=True)


class _Extraction:
    """A running ffmpeg extraction into a temp file; ``finish`` renames it into place (atomic)."""

    def __init__(self, src: str | Path, dst: str | Path):
        self.src, self.dst = Path(src), Path(dst)
        self.dst.parent.mkdir(parents=True, exist_ok=True)
        # a name of its own per process and thread: two commands extracting the same content at
        # once each write their own file; both renames put identical bytes in place
        self.tmp = self.dst.with_name(f".{self.dst.name}.{os.getpid()}.{threading.get_ident()}.tmp.wav")
        self.proc = subprocess.Popen(extraction_command(self.src, self.tmp), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)

    def finish(self) -> Path:
        _, err = self.proc.communicate()
        if self.proc.returncode != 0 or not self.tmp.exists() or self.tmp.stat().st_size <= 44:
            self.tmp.unlink(missing_ok=True)
            last = (err.strip().splitlines() or ["no audio samples decoded"])[-1]
            raise MediaError(f"{self.src.name}: audio extraction failed ({last})")
        self.tmp.replace(self.dst)
        return self.dst

    def cancel(self) -> None:
        self.proc.kill()
        self.proc.communicate()
        self.tmp.unlink(missing_ok=True)


def extract_wav(src: str | Path, dst: str | Path) -> Path:
    """Extract the audio to ``dst`` atomically (temp file + rename)."""
    return _Extraction(src, dst).finish()


def load_wav(path: str | Path) -> np.ndarray:
    """A 16 kHz mono 16-bit WAV as float32 in [-1, 1]."""
    with wave.open(str(path), "rb") as w:
        if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise MediaError(f"{path}: expected 16 kHz mono 16-bit PCM WAV")
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def wav_duration(path: str | Path) -> float:
    with wave.open(str(path), "rb") as w:
        return w.getnframes() / w.getframerate()


# --- catalog ----------------------------------------------------------------------------

def read_catalog(data_root: str | Path) -> pa.Table:
    path = DataRoot(data_root).catalog()
    if not path.exists():
        return schemas.CATALOG.empty_table()
    return pq.read_table(path, schema=schemas.CATALOG)


def write_catalog(data_root: str | Path, rows_by_id: dict[str, dict]) -> Path:
    """Replace the whole catalog (atomic). Callers that update it hold :func:`catalog_lock`;
    :func:`record_catalog` does both."""
    ordered = [rows_by_id[k] for k in sorted(rows_by_id)]
    table = pa.Table.from_pylist(ordered, schema=schemas.CATALOG)
    return write_parquet(table, DataRoot(data_root).catalog())


@contextlib.contextmanager
def catalog_lock(data_root: str | Path) -> Iterator[None]:
    """Hold the catalog's lock: an exclusive ``flock`` on ``catalog.lock``. Every holder opens the
    file anew, so the lock excludes other threads of this process as well as other processes."""
    path = DataRoot(data_root).catalog_lock()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def record_catalog(data_root: str | Path, row: dict) -> None:
    """Put ``row`` into the catalog (its sample_id's line), read-modify-write under the lock."""
    with catalog_lock(data_root):
        rows = {r["sample_id"]: r for r in read_catalog(data_root).to_pylist()}
        rows[row["sample_id"]] = row
        write_catalog(data_root, rows)


def catalog_entry(data_root: str | Path, sample_id: str) -> dict:
    check_sample_id(sample_id)
    for row in read_catalog(data_root).to_pylist():
        if row["sample_id"] == sample_id:
            return row
    raise KeyError(f"{sample_id!r} is not in the catalog of {data_root}")


def ingested(row: dict) -> Ingested:
    """The typed record of a catalog line with ``status=done``."""
    return Ingested(row["sample_id"], row["scenario"], tuple(row.get("participants") or ()), row["sha256"],
                    row["audio_path"], row.get("subtitle_path"), row["duration_s"])


# --- ingest -----------------------------------------------------------------------------

def ingest_video(
    video: str | Path,
    sample_id: str,
    scenario: str,
    data_root: str | Path,
    participants: tuple[str, ...] | list[str] = (),
    subtitles: str | Path | None = None,
    previous: dict | None = None,
    min_duration_s: float = MIN_DURATION_S,
    speaking_order: bool = False,
) -> tuple[dict, str]:
    """Ingest one video. Returns (catalog row, outcome) with outcome done | cached | quarantined.

    Never raises for a bad media file: the row is quarantined with the reason instead.
    ``previous`` is this sample's current catalog row (if any): an unchanged file is cached.
    """
    video, root = Path(video), DataRoot(data_root)
    check_sample_id(sample_id)
    row = {"sample_id": sample_id, "scenario": scenario, "source_name": video.name, "sha256": "",
           "duration_s": None, "audio_path": None, "status": "quarantined", "reason": None,
           "participants": list(participants), "subtitle_path": None, "speaking_order": bool(speaking_order)}
    try:
        if not video.exists():
            raise MediaError(f"{video.name}: file not found")
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
            and previous.get("scenario") == row["scenario"]):
        return previous, "cached"
    if wav.exists():  # same content under another sample id or an earlier run
        meta = probe(video)
    else:
        # extraction runs while ffprobe inspects the file: probing costs no extra wall time
        job = _Extraction(video, wav) if video.stat().st_size else None
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
    row.update(duration_s=round(duration, 3), audio_path=root.relative(wav), status="done", media_format=meta["format"],
               audio_codec=meta["audio_codec"], source_sample_rate=meta["sample_rate"],
               source_channels=meta["channels"], has_video=meta["has_video"])
    return row, "done"


def _copy_subtitles(src: Path, root: DataRoot) -> str:
    if not src.is_file():
        raise MediaError(f"{src.name}: subtitle file not found")
    try:
        name = check_name(src.name, "subtitle file name")
    except InvalidId:
        name = slug(src.name)  # e.g. spaces: the copy gets a plain name, the catalog records it
    target = root.subtitles(sha256_file(src), name)  # content addressed; the name stays for messages
    if not target.exists():
        atomic_write_bytes(target, src.read_bytes())
    return root.relative(target)


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def ingest_entry(entry: ManifestEntry, data_root: str | Path, batch_dir: str | Path = ".",
                 min_duration_s: float = MIN_DURATION_S) -> IngestResult:
    """The ingest stage for one manifest entry (video and subtitles relative to ``batch_dir``):
    ingest it and record its catalog line (under the catalog lock; an unchanged, cached entry
    leaves the catalog alone). A refused entry (bad sample id) touches nothing under the data root."""
    if entry.refused:
        return IngestResult(entry.sample_id, "quarantined", entry.refused)
    batch_dir = Path(batch_dir)
    previous = next((r for r in read_catalog(data_root).to_pylist() if r["sample_id"] == entry.sample_id), None)
    subs = batch_dir / entry.subtitles if entry.subtitles else None
    row, outcome = ingest_video(batch_dir / entry.video, entry.sample_id, entry.scenario, data_root,
                                entry.participants, subs, previous, min_duration_s, entry.speaking_order)
    if outcome != "cached":
        record_catalog(data_root, row)
    if outcome == "quarantined":
        return IngestResult(entry.sample_id, outcome, row["reason"], row["duration_s"])
    return IngestResult(entry.sample_id, outcome, None, row["duration_s"], ingested(row))


def ingest_batch(batch_dir: str | Path, data_root: str | Path, progress: bool = False,
                 min_duration_s: float = MIN_DURATION_S, jobs: int | None = None) -> IngestReport:
    """Ingest every manifest entry of a batch (:func:`ingest_entry`), ``jobs`` videos at a time
    (default: one per core, at most 4; each is one ffmpeg process). Each catalog line is recorded
    as soon as its video is done, so an interrupted batch keeps everything already done. The
    report lists samples in manifest order."""
    batch_dir = Path(batch_dir)
    entries = read_manifest(find_manifest(batch_dir))
    report = IngestReport()
    with Progress(disable=not progress, transient=False) as bar, \
            ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        task = bar.add_task(f"ingest {batch_dir.name}", total=len(entries))

        def one(entry: ManifestEntry) -> IngestResult:
            try:
                return ingest_entry(entry, data_root, batch_dir, min_duration_s)
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


def remove_stale_media(data_root: str | Path) -> list[Path]:
    """Delete WAVs no catalog row points at (after files changed); returns what was removed."""
    root = DataRoot(data_root)
    used = {r["audio_path"] for r in read_catalog(root).to_pylist() if r["audio_path"]}
    removed = []
    for wav in sorted(root.media_dir().glob("*.wav")):
        if root.relative(wav) not in used:
            wav.unlink()
            removed.append(wav)
    return removed


def ffmpeg_available() -> bool:
    return shutil.which("ffmpeg") is not None and shutil.which("ffprobe") is not None
