"""Media ingest: a batch folder of interview videos + a manifest -> 16 kHz mono WAVs + a catalog.

Batch layout::

    BATCH_DIR/manifest.csv   (or manifest.yaml / manifest.yml)
    BATCH_DIR/<video files>  BATCH_DIR/<optional subtitle files>

Manifest columns: ``sample_id, scenario (couple|family), video, participants, subtitles``.
``participants`` lists the clients (CSV: ``;``-separated) in speaking order; the therapist is
implicit. ``subtitles`` is optional (SRT/VTT beside the video).

Data root layout (``Settings.data_root``)::

    media/<sha256>.wav           16 kHz mono PCM, one per distinct source file (content addressed)
    subtitles/<sha256>/<name>    copies of the subtitle files (the data root is self-contained)
    catalog.parquet              schemas.CATALOG, one line per sample_id

A file that cannot be used (missing, empty, corrupt, no audio, too short) gets a catalog line
with ``status=quarantined`` and the reason; the batch goes on. Re-ingesting an unchanged file
(same sha256, WAV present) does nothing; a changed file is redone.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import threading
import wave
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import ffmpeg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas
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


@dataclass
class IngestReport:
    rows: list[dict] = field(default_factory=list)  # catalog rows touched by this run
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
    """Parse a manifest. Structural problems raise ManifestError naming the file and line."""
    path = Path(path)
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8-sig") as fh:
            records = [(n, r) for n, r in enumerate(csv.DictReader(fh), start=2)]
    else:
        import yaml
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
        people = rec.get("participants") or []
        if isinstance(people, str):
            people = [p for p in (x.strip() for x in people.replace(",", ";").split(";")) if p]
        subs = str(rec.get("subtitles") or "").strip() or None
        entries.append(ManifestEntry(sample_id, scenario, str(rec["video"]).strip(), tuple(people), subs, line))
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
        self.tmp = self.dst.with_name(f".{self.dst.name}.tmp.wav")
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

def catalog_path(data_root: str | Path) -> Path:
    return Path(data_root) / "catalog.parquet"


def read_catalog(data_root: str | Path) -> pa.Table:
    path = catalog_path(data_root)
    if not path.exists():
        return schemas.CATALOG.empty_table()
    return pq.read_table(path, schema=schemas.CATALOG)


def write_catalog(data_root: str | Path, rows_by_id: dict[str, dict]) -> Path:
    ordered = [rows_by_id[k] for k in sorted(rows_by_id)]
    table = pa.Table.from_pylist(ordered, schema=schemas.CATALOG)
    return write_parquet(table, catalog_path(data_root))


def catalog_entry(data_root: str | Path, sample_id: str) -> dict:
    for row in read_catalog(data_root).to_pylist():
        if row["sample_id"] == sample_id:
            return row
    raise KeyError(f"{sample_id!r} is not in the catalog of {data_root}")


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
) -> tuple[dict, str]:
    """Ingest one video. Returns (catalog row, outcome) with outcome done | cached | quarantined.

    Never raises for a bad media file: the row is quarantined with the reason instead.
    ``previous`` is this sample's current catalog row (if any): an unchanged file is cached.
    """
    video, root = Path(video), Path(data_root)
    row = {"sample_id": sample_id, "scenario": scenario, "source_name": video.name, "sha256": "",
           "duration_s": None, "audio_path": None, "status": "quarantined", "reason": None,
           "participants": list(participants), "subtitle_path": None}
    try:
        if not video.exists():
            raise MediaError(f"{video.name}: file not found")
        digest = sha256_file(video)
        row["sha256"] = digest
        if subtitles:
            row["subtitle_path"] = _copy_subtitles(Path(subtitles), root)
        wav_rel = f"media/{digest}.wav"
        with _lock_for(wav_rel):  # one extraction per content even when a batch holds the file twice
            return _ingest_content(video, root, row, wav_rel, previous, min_duration_s)
    except (MediaError, OSError) as exc:
        row["reason"] = str(exc)
        return row, "quarantined"


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def _ingest_content(video: Path, root: Path, row: dict, wav_rel: str, previous: dict | None,
                    min_duration_s: float) -> tuple[dict, str]:
    if (previous and previous.get("status") == "done" and previous.get("sha256") == row["sha256"]
            and (root / wav_rel).exists() and previous.get("subtitle_path") == row["subtitle_path"]
            and list(previous.get("participants") or []) == row["participants"]
            and previous.get("scenario") == row["scenario"]):
        return previous, "cached"
    if (root / wav_rel).exists():  # same content under another sample id or an earlier run
        meta = probe(video)
    else:
        # extraction runs while ffprobe inspects the file: probing costs no extra wall time
        job = _Extraction(video, root / wav_rel) if video.stat().st_size else None
        try:
            meta = probe(video)
            if meta["duration_s"] < min_duration_s:
                raise MediaError(f"{video.name}: too short ({meta['duration_s']:.2f} s < {min_duration_s:g} s)")
        except MediaError:
            if job:
                job.cancel()
            raise
        job.finish()
    duration = wav_duration(root / wav_rel)  # what was decoded, not what the container claims
    if duration < min_duration_s:
        raise MediaError(f"{video.name}: too short ({duration:.2f} s of audio < {min_duration_s:g} s)")
    row.update(duration_s=round(duration, 3), audio_path=wav_rel, status="done", media_format=meta["format"],
               audio_codec=meta["audio_codec"], source_sample_rate=meta["sample_rate"],
               source_channels=meta["channels"], has_video=meta["has_video"])
    return row, "done"


def _copy_subtitles(src: Path, root: Path) -> str:
    if not src.exists():
        raise MediaError(f"{src.name}: subtitle file not found")
    rel = f"subtitles/{sha256_file(src)}/{src.name}"  # content addressed; the name stays for messages
    if not (root / rel).exists():
        atomic_write_bytes(root / rel, src.read_bytes())
    return rel


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def ingest_batch(batch_dir: str | Path, data_root: str | Path, progress: bool = False,
                 min_duration_s: float = MIN_DURATION_S, jobs: int | None = None) -> IngestReport:
    """Ingest every manifest entry of a batch, ``jobs`` videos at a time (default: one per core, at
    most 4; each is one ffmpeg process). The catalog is rewritten (atomically) after each video,
    so an interrupted batch keeps everything already done. The report lists samples in manifest order."""
    batch_dir, root = Path(batch_dir), Path(data_root)
    entries = read_manifest(find_manifest(batch_dir))
    catalog = {r["sample_id"]: r for r in read_catalog(root).to_pylist()}
    previous = dict(catalog)
    outcomes: dict[str, tuple[dict, str]] = {}

    def one(entry: ManifestEntry) -> tuple[ManifestEntry, dict, str]:
        subs = batch_dir / entry.subtitles if entry.subtitles else None
        return (entry, *ingest_video(batch_dir / entry.video, entry.sample_id, entry.scenario, root,
                                     entry.participants, subs, previous.get(entry.sample_id), min_duration_s))

    from rich.progress import Progress
    with Progress(disable=not progress, transient=False) as bar, \
            ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        task = bar.add_task(f"ingest {batch_dir.name}", total=len(entries))
        for entry, row, outcome in pool.map(one, entries):
            outcomes[entry.sample_id] = (row, outcome)
            if outcome != "cached":
                catalog[entry.sample_id] = row
                write_catalog(root, catalog)
            bar.advance(task)
    report = IngestReport()
    for entry in entries:
        row, outcome = outcomes[entry.sample_id]
        report.rows.append(row)
        if outcome == "quarantined":
            report.quarantined[entry.sample_id] = row["reason"]
        elif outcome == "cached":
            report.cached.append(entry.sample_id)
        else:
            report.done.append(entry.sample_id)
    return report


def remove_stale_media(data_root: str | Path) -> list[Path]:
    """Delete WAVs no catalog row points at (after files changed); returns what was removed."""
    root = Path(data_root)
    used = {r["audio_path"] for r in read_catalog(root).to_pylist() if r["audio_path"]}
    removed = []
    for wav in sorted((root / "media").glob("*.wav")):
        if f"media/{wav.name}" not in used:
            wav.unlink()
            removed.append(wav)
    return removed


def ffmpeg_available() -> bool:
    return shutil.which("ffmpeg") is not None and shutil.which("ffprobe") is not None
