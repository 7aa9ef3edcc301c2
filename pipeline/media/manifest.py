"""Batch manifests: ``BATCH_DIR/manifest.csv`` (or ``manifest.yaml`` / ``manifest.yml``) -> entries.

Manifest columns: ``sample_id, scenario (couple|family), video, participants, subtitles``.
``participants`` lists the clients (CSV: ``;``-separated); the therapist is implicit. An optional
``speaking_order`` column (``yes``/``true``/``1``) says the list is in speaking order (therapist
first), so the segmenter may name voices by it (``pipeline.media.turns``); without it draft rows
keep one neutral label per voice. An optional ``synthetic`` column says the interview was generated, not
recorded: its text names what made it (``pipeline.synthetic.batch seed=7``; ``yes`` when nothing more is known),
and ingest carries it into the catalog, from where releases and cards take it (provenance, never a name).
``subtitles`` is optional (SRT/VTT beside the video). A ``sample_id`` must follow the
sample-id grammar (:func:`pipeline.paths.check_sample_id`); an entry whose id does not is
refused with the manifest file, line and id, and the rest of the batch goes on.

Nothing here reads a video: the ingest stage (``pipeline.media.ingest``) does.
"""
from __future__ import annotations

import codecs
import csv
import io
import logging
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.paths import InvalidId, check_sample_id
from pipeline.taxonomy import SCENARIOS

log = logging.getLogger(__name__)

MANIFEST_NAMES = ("manifest.csv", "manifest.yaml", "manifest.yml")


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
    synthetic: str | None = None  # what generated this interview (None: a recording)



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


KNOWN_COLUMNS = ("sample_id", "scenario", "video", "participants", "subtitles", "speaking_order", "synthetic")
_NO = ("", "no", "n", "false", "0")
_YES = ("yes", "y", "true", "1")


def synthetic_value(raw) -> str | None:
    """The manifest's ``synthetic`` cell: None for a recording, else what generated the interview."""
    if raw is True:
        return "yes"
    text = "" if raw is None or raw is False else str(raw).strip()
    if text.lower() in _NO:
        return None
    return "yes" if text.lower() in _YES else text


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
                                     refused, in_order, synthetic_value(rec.get("synthetic"))))
    for note in notes:
        log.warning(note)
    if warnings is not None:
        warnings.extend(notes)
    return entries



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


def longest_first(entries: list[ManifestEntry], batch_dir: str | Path,
                  allow_outside_batch: bool = False) -> list[ManifestEntry]:
    """``entries`` by their video's size, largest first (manifest order among equals): workers
    that take the longest interviews first end a batch together, instead of one of them running
    the last long interview while the others wait. A video outside the batch folder (unless
    allowed) or one that cannot be read counts as 0 and goes last; only a file's size is read."""
    def size(entry: ManifestEntry) -> int:
        try:
            if not allow_outside_batch and outside_batch(batch_dir, entry.video):
                return 0
            return (Path(batch_dir) / entry.video).stat().st_size
        except (OSError, ValueError):  # missing, unreadable, a NUL in the name: quarantined later
            return 0

    return sorted(entries, key=lambda entry: -size(entry))

