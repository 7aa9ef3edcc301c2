"""Transcripts behind one interface: subtitles (SRT/VTT, the paper's path) or WhisperX.

Both backends return a :class:`Transcript`: timed text units in time order. Subtitle units are
cues (one per spoken line); WhisperX units are aligned words. ``Unit.speaker`` holds a speaker
label found in the source itself (a subtitle prefix such as ``JOSH:`` or ``[Therapist]``, or a
WebVTT ``<v Josh>`` tag); diarization fills the rest (``pipeline.media.assign`` via the turn
segmenter).

:func:`transcribe_stage` is the stage's one entry point (``rescue transcribe`` and the
``ingest-batch`` flow): it transcribes a catalogued sample, writes
``transcripts/<sample_id>.json`` (``DataRoot.transcript``) and returns a :class:`Transcribed`.
:func:`resolve_backend` is the one place the ``auto`` backend is decided (subtitles when the
manifest gave them, else WhisperX).
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from pipeline import taxonomy
from pipeline.config import Settings
from pipeline.media.ingest import catalog_entry, load_wav
from pipeline.paths import DataRoot
from pipeline.store import atomic_write_text, sha256_file

log = logging.getLogger(__name__)


BACKENDS = ("auto", "subtitles", "whisperx")


class SubtitleError(ValueError):
    """A subtitle file that cannot be read; the message names the file and the cue."""


@dataclass
class Unit:
    start: float | None
    end: float | None
    text: str
    speaker: str | None = None  # label given by the source (subtitle prefix), else None


@dataclass
class Transcript:
    kind: str  # "cue" | "word"
    units: list[Unit]
    warnings: list[str] = field(default_factory=list)
    language: str | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "language": self.language, "warnings": self.warnings,
                "units": [asdict(u) for u in self.units]}

    @classmethod
    def from_dict(cls, d: dict) -> "Transcript":
        return cls(d["kind"], [Unit(**u) for u in d["units"]], list(d.get("warnings", [])), d.get("language"))


# --- subtitles --------------------------------------------------------------------------

_TIME = r"(?:(\d+):)?(\d{1,2}):(\d{2})[,.](\d{1,3})"
_TIMING = re.compile(rf"^\s*{_TIME}\s*-->\s*{_TIME}(?:\s+.*)?$")
_TAG = re.compile(r"</?(?:i|b|u|font|c|ruby|rt|lang)[^>]*>|\{\\[^}]*\}", re.I)
_VOICE = re.compile(r"^<v(?:\.[^ >]*)?\s+([^>]+)>", re.I)
_PREFIX_COLON = re.compile(r"^\s*-?\s*([A-Za-z][A-Za-z .'\-]{0,30}?)\s*:\s+(?=\S)")
_PREFIX_BRACKET = re.compile(r"^\s*-?\s*[\[(]([A-Za-z][A-Za-z .'\-]{0,30})[\])]\s*(?=\S)")
_NONLEXICAL = re.compile(r"^\s*[\[(♪][^\])]*[\])♪]?\s*$")


def _seconds(h, m, s, frac) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(frac.ljust(3, "0")) / 1000


def _split_speaker(text: str, names: Sequence[str]) -> tuple[str | None, str]:
    """Strip a speaker label prefix. A prefix counts as a label when it names a known person
    (case-insensitive) or is written in capitals (``JOSH:``), so "Note: ..." stays text."""
    m = _VOICE.match(text)
    if m:
        return m.group(1).strip(), text[m.end():].strip()
    known = {n.lower(): n for n in names}
    for rx in (_PREFIX_BRACKET, _PREFIX_COLON):
        m = rx.match(text)
        if m:
            label = m.group(1).strip()
            if label.lower() in known:
                return known[label.lower()], text[m.end():].strip()
            if label.isupper() and len(label) > 1:
                return label.title(), text[m.end():].strip()
    return None, text.strip()


def parse_subtitles(path: str | Path, duration_s: float | None = None, names: Sequence[str] = ()) -> Transcript:
    """Read an SRT or WebVTT file into cue units.

    Tolerates a BOM, CRLF line ends, missing cue numbers, VTT headers/NOTE blocks, formatting
    tags, speaker prefixes (stripped into ``Unit.speaker``) and overlapping cues (kept: they are
    real overlapping speech). Cues running past ``duration_s`` are clipped (warning); cues that
    start after it are dropped (warning). Unreadable input raises SubtitleError naming file and cue.
    """
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SubtitleError(f"{path.name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); "
                            "re-save the file as UTF-8") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = re.split(r"\n[ \t]*\n", text.strip("\n"))
    units, warnings = [], []
    line_no = 1
    cue_no = 0
    for block in blocks:
        lines = block.split("\n")
        start_line = line_no
        line_no += len(lines) + 1
        while lines and not lines[0].strip():
            lines.pop(0)
            start_line += 1
        if not lines:
            continue
        head = lines[0].strip()
        if head.startswith("WEBVTT") or head.startswith(("NOTE", "STYLE", "REGION")):
            continue
        cue_no += 1
        timing_idx = next((i for i, ln in enumerate(lines[:2]) if "-->" in ln), None)
        where = f"{path.name} cue {cue_no} (line {start_line})"
        if timing_idx is None:
            raise SubtitleError(f"{where}: no timing line ('00:00:01,000 --> 00:00:02,000') in {head!r}")
        m = _TIMING.match(lines[timing_idx])
        if not m:
            raise SubtitleError(f"{where}: cannot read the timing line {lines[timing_idx].strip()!r}")
        start, end = _seconds(*m.groups()[:4]), _seconds(*m.groups()[4:])
        if end < start:
            raise SubtitleError(f"{where}: ends ({end:.3f} s) before it starts ({start:.3f} s)")
        body = [_TAG.sub("", ln).strip() for ln in lines[timing_idx + 1:]]
        body = [ln for ln in body if ln]
        if duration_s is not None and start >= duration_s:
            warnings.append(f"{where}: starts at {start:.3f} s, after the end of the media ({duration_s:.3f} s); dropped")
            continue
        if duration_s is not None and end > duration_s:
            warnings.append(f"{where}: ends at {end:.3f} s, past the end of the media ({duration_s:.3f} s); clipped")
            end = duration_s
        # "- line" dialogue dashes: two speakers in one cue -> two units sharing the cue's time
        if len(body) > 1 and all(ln.startswith("-") for ln in body):
            parts = [ln.lstrip("- ").strip() for ln in body]
        else:
            parts = [" ".join(body)]
        parts = [p for p in parts if p and not _NONLEXICAL.match(p)]
        total = sum(len(p) for p in parts) or 1
        t = start
        for p in parts:
            speaker, content = _split_speaker(p, names)
            if not content:
                continue
            span = (end - start) * len(p) / total
            units.append(Unit(round(t, 3), round(t + span, 3), content, speaker))
            t += span
    for w in warnings:
        log.warning(w)
    units.sort(key=lambda u: (u.start, u.end))
    return Transcript("cue", units, warnings)


# --- WhisperX ---------------------------------------------------------------------------

_ASR: dict[tuple, object] = {}
_ALIGN: dict[tuple, object] = {}


def load_asr(model: str | Path, device: str = "cpu", compute_type: str = "int8", language: str = "en",
             download_root: str | Path | None = None, max_new_tokens: int | None = None):
    """whisperx.load_model from a local CTranslate2 directory or a model name (loaded once per process)."""
    import whisperx  # heavy
    key = (str(model), device, compute_type, language)
    if key not in _ASR:
        offline = os.environ.get("HF_HUB_OFFLINE", "1") != "0"
        if offline and not Path(model).exists() and "/" in str(model):
            raise FileNotFoundError(f"ASR model directory {model} does not exist")
        _ASR[key] = whisperx.load_model(str(model), device, compute_type=compute_type, language=language,
                                        download_root=str(download_root) if download_root else None,
                                        local_files_only=offline, threads=max(1, os.cpu_count() or 1))
    pipe = _ASR[key]
    if max_new_tokens:
        pipe.model.max_length = max_new_tokens  # whisperx ignores max_new_tokens (generates up to 448)
    return pipe


def load_aligner(model: str | Path | None, language: str = "en", device: str = "cpu"):
    import nltk  # heavy: whisperx's sentence splitter
    import whisperx  # heavy
    punkt = Settings.from_env().models_dir / "nltk_data"
    if punkt.exists() and str(punkt) not in nltk.data.path:
        nltk.data.path.insert(0, str(punkt))  # offline punkt_tab (rescue models prepare-offline)
    key = (str(model), language, device)
    if key not in _ALIGN:
        _ALIGN[key] = whisperx.load_align_model(language, device, model_name=str(model) if model else None)
    return _ALIGN[key]


def whisperx_transcribe(audio_path: str | Path, asr_model: str | Path, align_model: str | Path | None,
                        device: str = "cpu", compute_type: str = "int8", batch_size: int = 8,
                        language: str = "en", max_new_tokens: int | None = None) -> Transcript:
    """Batched ASR + forced alignment; returns word units (words the aligner could not place keep
    start/end None; pipeline.media.assign.fill_word_times interpolates them)."""
    import whisperx  # heavy

    audio = load_wav(audio_path)
    asr = load_asr(asr_model, device, compute_type, language, max_new_tokens=max_new_tokens)
    result = asr.transcribe(audio, batch_size=batch_size, language=language)
    model, meta = load_aligner(align_model, language, device)
    aligned = whisperx.align(result["segments"], model, meta, audio, device, return_char_alignments=False)
    units = []
    for seg in aligned["segments"]:
        for w in seg.get("words", []):
            text = str(w.get("word", "")).strip()
            if text:
                units.append(Unit(w.get("start"), w.get("end"), text))
    return Transcript("word", units, language=result.get("language", language))


# --- one call per interview -------------------------------------------------------------

@dataclass(frozen=True)
class Transcribed:
    """A stored transcript; content addressed by ``sha256`` (the JSON file's bytes)."""

    sample_id: str
    backend: str                 # subtitles | whisperx (never auto)
    kind: str                    # cue | word
    units: int
    warnings: tuple[str, ...]
    sha256: str


def resolve_backend(backend: str, subtitle_path: str | None) -> str:
    """``auto`` -> ``subtitles`` when the manifest gave a subtitle file, else ``whisperx``; checks the
    others. The one place this choice is made (the flow asks it to know whether a model runs)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown transcript backend {backend!r} ({' | '.join(BACKENDS)})")
    if backend == "auto":
        return "subtitles" if subtitle_path else "whisperx"
    return backend


def transcribe_sample(sample_id: str, data_root: str | Path, backend: str = "auto",
                      asr_model: str | Path | None = None, align_model: str | Path | None = None,
                      device: str = "cpu", compute_type: str = "int8", batch_size: int = 8,
                      max_new_tokens: int | None = None, write: bool = True) -> Transcript:
    """Transcript of a catalogued sample. backend: auto (:func:`resolve_backend`) | subtitles |
    whisperx. Written to ``transcripts/<sample_id>.json`` when ``write``."""
    root = DataRoot(data_root)
    entry = catalog_entry(root, sample_id)
    if entry["status"] != "done":
        raise ValueError(f"{sample_id}: quarantined at ingest ({entry['reason']})")
    backend = resolve_backend(backend, entry.get("subtitle_path"))
    if backend == "subtitles":
        if not entry.get("subtitle_path"):
            raise ValueError(f"{sample_id}: the manifest gave no subtitle file; use --backend whisperx")
        names = [taxonomy.THERAPIST, *(entry.get("participants") or [])]
        transcript = parse_subtitles(root.resolve(entry["subtitle_path"]), entry["duration_s"], names)
    else:
        if asr_model is None:
            raise ValueError("the WhisperX backend needs --asr-model (a CTranslate2 directory or a model name)")
        transcript = whisperx_transcribe(root.resolve(entry["audio_path"]), asr_model, align_model, device,
                                         compute_type, batch_size, max_new_tokens=max_new_tokens)
    if write:
        atomic_write_text(root.transcript(sample_id), json.dumps(transcript.to_dict(), indent=1))
    return transcript


def transcribe_stage(sample_id: str, data_root: str | Path, backend: str = "auto",
                     asr_model: str | Path | None = None, align_model: str | Path | None = None,
                     device: str = "cpu", compute_type: str = "int8", batch_size: int = 8,
                     max_new_tokens: int | None = None) -> Transcribed:
    """The transcript stage (CLI and flow): :func:`transcribe_sample`, written, as a typed record."""
    root = DataRoot(data_root)
    entry = catalog_entry(root, sample_id)
    chosen = resolve_backend(backend, entry.get("subtitle_path"))
    transcript = transcribe_sample(sample_id, root, chosen, asr_model, align_model, device, compute_type,
                                   batch_size, max_new_tokens, write=True)
    return Transcribed(sample_id, chosen, transcript.kind, len(transcript.units), tuple(transcript.warnings),
                       sha256_file(root.transcript(sample_id)))


def read_transcript(sample_id: str, data_root: str | Path) -> Transcript:
    """The stored transcript of a sample (``FileNotFoundError`` when it was not transcribed yet)."""
    return Transcript.from_dict(json.loads(DataRoot(data_root).transcript(sample_id).read_text()))
