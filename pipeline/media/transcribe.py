"""Transcripts behind one interface: subtitles (SRT/VTT, the paper's path) or WhisperX.

Both backends return a :class:`Transcript`: timed text units in time order. Subtitle units are
cues (one per spoken line); WhisperX units are aligned words. ``Unit.speaker`` holds a speaker
label found in the source itself (a subtitle prefix such as ``JOSH:`` or ``[Therapist]``, or a
WebVTT ``<v Josh>`` tag); diarization fills the rest (``pipeline.media.assign`` via the turn
segmenter).

:func:`transcribe_stage` is the stage's one entry point (``rescue transcribe`` and the
``ingest-batch`` flow): it transcribes an ingested sample (its :class:`pipeline.catalog.Ingested`
record: the catalog is not read again), writes ``transcripts/<sample_id>.json``
(``DataRoot.transcript``) and returns a :class:`Transcribed`.
:func:`resolve_backend` is the one place the ``auto`` backend is decided (subtitles when the
manifest gave them, else WhisperX).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from pipeline import taxonomy
from pipeline.catalog import Ingested
from pipeline.config import Settings
from pipeline.media.audio import load_wav
from pipeline.media.subtitles import SubtitleError, Transcript, Unit, parse_subtitles  # noqa: F401  (re-exported)
from pipeline.paths import DataRoot
from pipeline.store import atomic_write_text, private_area, private_areas, sha256_file

log = logging.getLogger(__name__)


BACKENDS = ("auto", "subtitles", "whisperx")


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


def transcribe_sample(ingested: Ingested, root: DataRoot, backend: str = "auto",
                      asr_model: str | Path | None = None, align_model: str | Path | None = None,
                      device: str = "cpu", compute_type: str = "int8", batch_size: int = 8,
                      max_new_tokens: int | None = None, write: bool = True) -> Transcript:
    """Transcript of an ingested sample. backend: auto (:func:`resolve_backend`) | subtitles |
    whisperx. Written to ``transcripts/<sample_id>.json`` when ``write``."""
    sample_id = ingested.sample_id
    backend = resolve_backend(backend, ingested.subtitle_path)
    if backend == "subtitles":
        if not ingested.subtitle_path:
            raise ValueError(f"{sample_id}: the manifest gave no subtitle file; use --backend whisperx")
        names = [taxonomy.THERAPIST, *ingested.participants]
        transcript = parse_subtitles(root.resolve(ingested.subtitle_path), ingested.duration_s, names)
        if not transcript.units:
            raise SubtitleError(f"{sample_id}: no cue with text in {Path(ingested.subtitle_path).name} "
                                "(empty subtitle file, or every cue empty or past the end of the media); quarantined")
    else:
        if asr_model is None:
            raise ValueError("the WhisperX backend needs --asr-model (a CTranslate2 directory or a model name)")
        transcript = whisperx_transcribe(root.resolve(ingested.audio_path), asr_model, align_model, device,
                                         compute_type, batch_size, max_new_tokens=max_new_tokens)
    if write:
        private_area(root, "transcripts")
        atomic_write_text(root.transcript(sample_id), json.dumps(transcript.to_dict(), indent=1))
    return transcript


def transcribe_stage(ingested: Ingested, root: DataRoot, backend: str = "auto",
                     asr_model: str | Path | None = None, align_model: str | Path | None = None,
                     device: str = "cpu", compute_type: str = "int8", batch_size: int = 8,
                     max_new_tokens: int | None = None) -> Transcribed:
    """The transcript stage (CLI and flow): :func:`transcribe_sample`, written, as a typed record.
    ``root``: the data root its entry point built and checked (``pipeline.store.prepare_data_root``)."""
    private_areas(root, "transcripts", "drafts", "draft-voices")
    chosen = resolve_backend(backend, ingested.subtitle_path)
    transcript = transcribe_sample(ingested, root, chosen, asr_model, align_model, device, compute_type,
                                   batch_size, max_new_tokens, write=True)
    return Transcribed(ingested.sample_id, chosen, transcript.kind, len(transcript.units),
                       tuple(transcript.warnings), sha256_file(root.transcript(ingested.sample_id)))


def read_transcript(sample_id: str, root: DataRoot) -> Transcript:
    """The stored transcript of a sample (``FileNotFoundError`` when it was not transcribed yet)."""
    return Transcript.from_dict(json.loads(root.transcript(sample_id).read_text()))
