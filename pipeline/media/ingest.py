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

import codecs
import contextlib
import csv
import errno
import json
import fcntl
import io
import logging
import os
import shutil
import stat
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
from pipeline.config import Settings, check_data_root
from pipeline.media.subtitles import SubtitleError, parse_subtitles
from pipeline.paths import DataRoot, InvalidId, check_name, check_sample_id, slug
from pipeline.store import atomic_write_bytes, make_private_dir, private_dir, sha256_file, write_parquet

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
MIN_DURATION_S = 5.0  # shorter clips hold no usable interaction (the paper drops clips < 2 min)
SCENARIOS = ("couple", "family")
MANIFEST_NAMES = ("manifest.csv", "manifest.yaml", "manifest.yml")
TRUNCATED_SHARE = 0.9       # decoded audio shorter than this share of what the file declares: truncated
TRUNCATED_MIN_GAP_S = 1.0   # ... and at least this much shorter (container rounding is not truncation)


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
    speaking_order: bool = False  # the manifest's naming hint (part of the segment task's cache key)


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


# --- manifest ---------------------------------------------------------------------------

def find_manifest(batch_dir: Path) -> Path:
    batch_dir = Path(batch_dir)
    if not batch_dir.exists():
        raise ManifestError(f"batch folder {batch_dir} does not exist")
    if not batch_dir.is_dir():
        raise ManifestError(f"batch folder {batch_dir} is not a folder")
    for name in MANIFEST_NAMES:
        if (batch_dir / name).exists():
            return batch_dir / name
    raise ManifestError(f"{batch_dir}: no manifest (expected one of {', '.join(MANIFEST_NAMES)})")


KNOWN_COLUMNS = ("sample_id", "scenario", "video", "participants", "subtitles", "speaking_order")


def _manifest_text(path: Path) -> str:
    """The manifest's text: UTF-8 (with or without BOM) or UTF-16 with a BOM; anything else is an
    error naming the file and the encoding expected."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the manifest ({exc.strerror or exc})") from None
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError:
            raise ManifestError(f"{path}: starts with a UTF-16 byte-order mark but is not valid UTF-16; "
                                "save the manifest as UTF-8") from None
    if len(raw) >= 4 and max(raw[0::2].count(0), raw[1::2].count(0)) >= len(raw) // 4:
        raise ManifestError(f"{path}: looks like UTF-16 without a byte-order mark (NUL bytes); "
                            "save the manifest as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ManifestError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}; Latin-1 or "
                            "Windows-1252?); save the manifest as UTF-8") from None


def _yaml_type_problem(rec: dict) -> str | None:
    """Wrong types in a YAML entry (YAML reads 001 as a number, ``[a]`` as a list): the field and what it is."""
    for key in ("sample_id", "scenario", "video", "subtitles"):
        value = rec.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} must be text, got {type(value).__name__} {value!r} (put it in quotes)"
    people = rec.get("participants")
    if people is not None and not isinstance(people, str):
        if not isinstance(people, list) or not all(isinstance(p, str) for p in people):
            return f"participants must be a list of names (text), got {type(people).__name__} {people!r}"
    order = rec.get("speaking_order")
    if order is not None and not isinstance(order, (bool, str, int)):
        return f"speaking_order must be yes/no, got {type(order).__name__} {order!r}"
    return None


def read_manifest(path: str | Path, warnings: list[str] | None = None) -> list[ManifestEntry]:
    """Parse a manifest. Structural problems raise ManifestError naming the file and line (an
    unreadable encoding, no entries, a missing column or value, a bad scenario, a duplicate id);
    an entry that cannot be ingested (a sample id outside the grammar, an empty participant name,
    a wrong YAML type, more CSV fields than columns) comes back with ``refused`` set (file, line,
    field and why), so the rest of the batch still goes on. Unknown columns are ignored with a
    warning (appended to ``warnings`` and logged)."""
    path = Path(path)
    text = _manifest_text(path)
    notes: list[str] = []
    if path.suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [str(h).strip().lower() for h in (reader.fieldnames or []) if h is not None]
        if not header:
            raise ManifestError(f"{path}: empty manifest (expected a header: {','.join(KNOWN_COLUMNS[:5])})")
        absent = [c for c in ("sample_id", "scenario", "video") if c not in header]
        if absent:
            raise ManifestError(f"{path}: no column {', '.join(absent)} in the header ({','.join(header)})")
        unknown = sorted({h for h in header if h not in KNOWN_COLUMNS})
        try:
            records = [(n, r) for n, r in enumerate(reader, start=2)]
        except csv.Error as exc:
            raise ManifestError(f"{path} line {reader.line_num}: {exc}") from None
    else:
        try:
            data = yaml.safe_load(text) or []
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            raise ManifestError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or 'syntax'})") from None
        items = data.get("samples", data) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ManifestError(f"{path}: expected a list of samples (or a 'samples:' list)")
        records = list(enumerate(items, start=1))
        unknown = sorted({str(k).strip().lower() for _, r in records if isinstance(r, dict) for k in r}
                         - set(KNOWN_COLUMNS))
    if not records:
        raise ManifestError(f"{path}: no entries (only a header)" if path.suffix == ".csv" else f"{path}: no entries")
    if unknown:
        notes.append(f"{path.name}: unknown column(s) {', '.join(map(repr, unknown))} ignored "
                     f"(known: {', '.join(KNOWN_COLUMNS)})")
    entries, seen = [], set()
    for line, rec in records:
        where = f"{path.name} line {line}" if path.suffix == ".csv" else f"{path.name} item {line}"
        if not isinstance(rec, dict):
            raise ManifestError(f"{where}: not a mapping")
        extra = rec.get(None)
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
        at = f"{path}, {where.split(' ', 1)[1]}"
        refused = None
        try:
            check_sample_id(sample_id)
        except InvalidId as exc:
            refused = f"{at}: {exc}"
        problem = _yaml_type_problem(rec) if path.suffix != ".csv" else None
        if refused is None and problem:
            refused = f"{at}: {problem}"
        if refused is None and extra:
            refused = (f"{at}: {len(extra)} more field(s) than the header's {len(rec)} columns "
                       "(a value holding a comma must be in double quotes)")
        people = rec.get("participants")
        if problem:
            people = []
        elif isinstance(people, str):
            names = [x.strip() for x in people.split(";")]
            if refused is None and any(not n for n in names):
                refused = (f"{at}: participants {people!r} has an empty name "
                           "(list the clients ';'-separated, e.g. Dana;Mark)")
            people = [n for n in names if n]
        elif people is None:
            people = []
        else:
            people = [str(p).strip() for p in people]
            if refused is None and (not people or any(not p for p in people)):
                refused = f"{at}: participants {rec.get('participants')!r} is empty or has an empty name"
        subs = str(rec.get("subtitles") or "").strip() or None if not problem else None
        in_order = str(rec.get("speaking_order") or "").strip().lower() in ("yes", "true", "1", "y")
        video = str(rec["video"]).strip() if not problem else ""
        entries.append(ManifestEntry(sample_id, scenario, video, tuple(people), subs, line,
                                     refused, in_order))
    for note in notes:
        log.warning(note)
    if warnings is not None:
        warnings.extend(notes)
    return entries


# --- probing, hashing, extraction -------------------------------------------------------

def check_regular_file(path: str | Path, what: str = "file") -> os.stat_result:
    """``path`` must be a regular file (a symlink to one is fine): a FIFO, device, socket or
    folder is refused at once (reading a FIFO would hang), a symlink loop is named as one."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MediaError(f"{path.name}: symlink loop ({what} {path} points back at itself)") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise MediaError(f"{path.name}: {'file' if what == 'file' else what + ' file'} not found") from None
        raise MediaError(f"{path.name}: cannot read the {what} ({exc.strerror or exc})") from None
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
            else "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a folder" if stat.S_ISDIR(st.st_mode) else None)
    if kind:
        raise MediaError(f"{path.name}: is {kind}, not a regular {what} file; refused")
    return st


def _timeouts() -> tuple[float, float]:
    settings = Settings.from_env()
    return settings.ffprobe_timeout_s, settings.ffmpeg_timeout_s


def probe(path: str | Path, timeout_s: float | None = None) -> dict:
    """ffprobe metadata: duration, audio stream facts. Raises MediaError with the reason
    (ffprobe gets ``timeout_s``, default ``Settings.ffprobe_timeout_s``)."""
    path = Path(path)
    if check_regular_file(path).st_size == 0:
        raise MediaError(f"{path.name}: empty file (0 bytes)")
    timeout_s = timeout_s or _timeouts()[0]
    cmd = ["ffprobe", "-v", "error", "-show_format", "-show_streams", "-of", "json", str(path)]
    try:
        done = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise MediaError(f"{path.name}: timeout: ffprobe did not finish within {timeout_s:g} s "
                         "(RESCUE_FFPROBE_TIMEOUT_S)") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise MediaError(f"{path.name}: unreadable or corrupt media ({detail[-1] if detail else 'ffprobe failed'})")
    try:
        info = json.loads(done.stdout or b"{}")
    except ValueError:
        raise MediaError(f"{path.name}: unreadable or corrupt media (ffprobe gave no readable answer)") from None
    audio = [s for s in info.get("streams", []) if s.get("codec_type") == "audio"]
    if not audio:
        raise MediaError(f"{path.name}: no audio stream")
    fmt = info.get("format", {})
    duration = _float(fmt.get("duration")) or _float(audio[0].get("duration"))
    if not duration:
        raise MediaError(f"{path.name}: unknown duration (truncated or corrupt file)")
    return {
        "duration_s": duration,
        "audio_duration_s": _float(audio[0].get("duration")) or duration,
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

    def finish(self, timeout_s: float | None = None) -> Path:
        timeout_s = timeout_s or _timeouts()[1]
        try:
            _, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.cancel()
            raise MediaError(f"{self.src.name}: timeout: ffmpeg did not finish the audio extraction within "
                             f"{timeout_s:g} s (RESCUE_FFMPEG_TIMEOUT_S)") from None
        if self.proc.returncode != 0 or not self.tmp.exists() or self.tmp.stat().st_size <= 44:
            self.tmp.unlink(missing_ok=True)
            last = (err.strip().splitlines() or ["no audio samples decoded"])[-1]
            raise MediaError(f"{self.src.name}: audio extraction failed ({last})")
        if private_dir(self.dst.parent):
            os.chmod(self.tmp, 0o600)
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
                    row["audio_path"], row.get("subtitle_path"), row["duration_s"], bool(row.get("speaking_order")))


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
            and previous.get("scenario") == row["scenario"]):
        return previous, "cached"
    if wav.exists():  # same content under another sample id or an earlier run
        meta = probe(video)
    else:
        private_area(root, "media")
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


PRIVATE_AREAS = ("media", "subtitles", "transcripts", "diarization", "drafts", "draft-voices", "voices")


def prepare_data_root(data_root: str | Path, areas: tuple[str, ...] = ()) -> DataRoot:
    """Check the data root (:func:`pipeline.config.check_data_root`: a writable folder, else
    ``DataRootError`` naming it) and make ``areas`` (of :data:`PRIVATE_AREAS`: WAVs, subtitle
    copies, transcripts, RTTM, drafts, voice prints) owner-only folders (0700), so every file the
    stages write there is 0600. Every media stage entry calls it first."""
    root = DataRoot(check_data_root(DataRoot(data_root).root))
    for name in areas:
        private_area(root, name)
    return root


def private_area(root: DataRoot, name: str) -> Path:
    """The private folder ``name`` of :data:`PRIVATE_AREAS` under the root, created (or narrowed) to 0700."""
    if name not in PRIVATE_AREAS:
        raise ValueError(f"{name!r} is not a private area ({', '.join(PRIVATE_AREAS)})")
    area = root.resolve(name)
    if not private_dir(area):
        make_private_dir(area)
    return area


def outside_batch(batch_dir: str | Path, name: str) -> str | None:
    """Why the manifest's file ``name`` lies outside ``batch_dir`` (absolute, ``..``, a symlink
    out), or None when it is inside. Nothing is read."""
    if Path(name).is_absolute():
        return "is an absolute path"
    if ".." in Path(name).parts:
        return "climbs out of the batch folder with '..'"
    base = Path(batch_dir).resolve()
    try:
        real = (Path(batch_dir) / name).resolve()
    except (RuntimeError, OSError):  # a symlink loop: named as one when the file is opened
        return None
    if real != base and base not in real.parents:
        return "is a symlink that leads out of the batch folder"
    return None


def _refused_outside(entry: ManifestEntry, batch_dir: Path) -> str | None:
    for what, name in (("video", entry.video), ("subtitles", entry.subtitles)):
        why = outside_batch(batch_dir, name) if name else None
        if why:
            return (f"manifest entry {entry.line}: {what} {name!r} {why}, outside the batch folder {batch_dir}; "
                    "refused and not read (allow it explicitly: rescue ingest --allow-outside-batch, "
                    "flow parameter allow_outside_batch=true)")
    return None


def ingest_entry(entry: ManifestEntry, data_root: str | Path, batch_dir: str | Path = ".",
                 min_duration_s: float = MIN_DURATION_S, allow_outside_batch: bool = False) -> IngestResult:
    """The ingest stage for one manifest entry (video and subtitles relative to ``batch_dir``):
    ingest it and record its catalog line (under the catalog lock; an unchanged, cached entry
    leaves the catalog alone). A refused entry (bad sample id) touches nothing under the data root.
    A video or subtitle file outside ``batch_dir`` (absolute path, ``..``, a symlink out) is
    quarantined without being read unless ``allow_outside_batch``. An unusable data root raises
    :class:`pipeline.config.DataRootError`."""
    if entry.refused:
        return IngestResult(entry.sample_id, "quarantined", entry.refused)
    if not min_duration_s >= 0:
        raise ValueError(f"min_duration_s must be >= 0 seconds, got {min_duration_s!r}")
    prepare_data_root(data_root)
    batch_dir = Path(batch_dir)
    previous = next((r for r in read_catalog(data_root).to_pylist() if r["sample_id"] == entry.sample_id), None)
    outside = None if allow_outside_batch else _refused_outside(entry, batch_dir)
    if outside:
        row = {"sample_id": entry.sample_id, "scenario": entry.scenario, "source_name": Path(entry.video).name,
               "sha256": "", "duration_s": None, "audio_path": None, "status": "quarantined", "reason": outside,
               "participants": list(entry.participants), "subtitle_path": None,
               "speaking_order": bool(entry.speaking_order)}
        record_catalog(data_root, row)
        return IngestResult(entry.sample_id, "quarantined", outside)
    subs = batch_dir / entry.subtitles if entry.subtitles else None
    row, outcome = ingest_video(batch_dir / entry.video, entry.sample_id, entry.scenario, data_root,
                                entry.participants, subs, previous, min_duration_s, entry.speaking_order)
    if outcome != "cached":
        record_catalog(data_root, row)
    if outcome == "quarantined":
        return IngestResult(entry.sample_id, outcome, row["reason"], row["duration_s"])
    return IngestResult(entry.sample_id, outcome, None, row["duration_s"], ingested(row))


def ingest_batch(batch_dir: str | Path, data_root: str | Path, progress: bool = False,
                 min_duration_s: float = MIN_DURATION_S, jobs: int | None = None,
                 allow_outside_batch: bool = False) -> IngestReport:
    """Ingest every manifest entry of a batch (:func:`ingest_entry`), ``jobs`` videos at a time
    (default: one per core, at most 4; each is one ffmpeg process). Each catalog line is recorded
    as soon as its video is done, so an interrupted batch keeps everything already done. The
    report lists samples in manifest order. ``allow_outside_batch``: see :func:`ingest_entry`."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if not min_duration_s >= 0:
        raise ValueError(f"min_duration_s must be >= 0 seconds, got {min_duration_s!r}")
    batch_dir = Path(batch_dir)
    report = IngestReport()
    entries = read_manifest(find_manifest(batch_dir), report.warnings)
    prepare_data_root(data_root)
    with Progress(disable=not progress, transient=False) as bar, \
            ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        task = bar.add_task(f"ingest {batch_dir.name}", total=len(entries))

        def one(entry: ManifestEntry) -> IngestResult:
            try:
                return ingest_entry(entry, data_root, batch_dir, min_duration_s, allow_outside_batch)
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
