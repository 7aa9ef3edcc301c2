"""Enrolled voices: name diarized speakers by their voice instead of by speaking order.

``rescue voices enroll NAME FILE...`` turns a few clean recordings of one person (any audio or
video ffmpeg reads) into a voice print: the duration-weighted mean of the voice prints of its
speech stretches, made by the diarization pipeline's own embedding model. Prints are stored as
``<data root>/voices/<NAME>.json`` (``DataRoot.voice``: a name with spaces is stored under a
safe file name; the file holds the name) together with the model they came from (prints of
different models cannot be compared) and the sha256 of their sources.

After diarization (``pipeline.media.diarize``) every speaker label gets the print of its turns;
labels and enrolled names are paired one to one (Hungarian assignment on cosine similarity) and
a pair counts only above ``MATCH_THRESHOLD`` and ``MATCH_MARGIN`` ahead of the label's next-best
enrolled voice. Names so found are written into the RTTM; the turn
segmenter maps the labels still unnamed by speaking order (``voice_labels.speaker_names``).

Voice prints are biometric data of private interviews: they stay under the data root like the
media, and are never logged or released.
"""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from pipeline.media.audio import extract_wav, load_wav
from pipeline.media.refine import MIN_PIECE_S, embed_segments, frame_runs, mean_print, speech_frames
from pipeline.media.rttm import Turn, sort_turns
from pipeline.paths import DataRoot
from pipeline.store import atomic_write_text, sha256_file
# Offline d-vector on synthetic voices, enrolment text different from the interview's: same voice
# 0.64-0.94, another voice 0.40-0.81. A pair needs both a floor and a clear lead over the label's
# next-best enrolled voice; an unclear label is left to the speaking order.
MATCH_THRESHOLD = 0.70
MATCH_MARGIN = 0.05
MIN_ENROLL_S = 3.0      # less speech than this gives an unstable print
MAX_SPAN_S = 10.0       # long speech stretches are embedded in pieces of at most this length
_NAME = re.compile(r"^[\w][\w .'-]{0,63}$")


class VoiceError(ValueError):
    pass


@dataclass(frozen=True)
class VoicePrint:
    name: str
    vector: np.ndarray
    model: str
    seconds: float
    sources: tuple[str, ...]  # sha256 of each enrolled file


def _files(root: DataRoot) -> list[Path]:
    folder = root.voices_dir()
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def has_voices(root: DataRoot) -> bool:
    """Whether any voice is enrolled under the data root."""
    return bool(_files(root))


def model_identity(pipeline) -> str:
    """Which embedding model made a print (class and dimension)."""
    emb = pipeline._embedding
    inner = getattr(emb, "model_", emb)
    return f"{type(inner).__name__}/{emb.dimension}"


def speech_spans(samples: np.ndarray, min_s: float = MIN_PIECE_S, max_s: float = MAX_SPAN_S) -> list[tuple[float, float]]:
    """Stretches of speech (``refine.speech_frames``), long ones cut into pieces of <= ``max_s``."""
    spans = []
    for s, e in frame_runs(speech_frames(samples)):
        while e - s >= min_s:
            spans.append((float(s), float(min(e, s + max_s))))
            s += max_s
    return spans


def enroll(name: str, files: Sequence[str | Path], root: DataRoot, pipeline) -> VoicePrint:
    """Make and store ``name``'s voice print from ``files``; replaces an earlier print of ``name``."""
    if not _NAME.match(name):
        raise VoiceError(f"{name!r} is not a usable speaker name (letters, digits, space, . ' - ; at most 64)")
    if not files:
        raise VoiceError(f"{name}: no recordings given")
    prints, weights, sources = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n, f in enumerate(files):
            path = Path(f)
            if not path.is_file():
                raise VoiceError(f"{path}: no such file")
            try:
                samples = load_wav(extract_wav(path, Path(tmp) / f"{n}.wav"))
            except Exception as exc:  # ffmpeg's own message names the problem
                raise VoiceError(f"{path}: cannot read its audio ({exc})") from exc
            spans = speech_spans(samples)
            if spans:
                prints.append(embed_segments(pipeline, samples, spans))
                weights += [b - a for a, b in spans]
            sources.append(sha256_file(path))
    seconds = float(sum(weights))
    vector = mean_print(np.vstack(prints), np.array(weights)) if prints else None
    if vector is None or seconds < MIN_ENROLL_S:
        raise VoiceError(f"{name}: only {seconds:.1f} s of speech in {', '.join(map(str, files))}; "
                         f"enrolment needs at least {MIN_ENROLL_S:.0f} s")
    voice = VoicePrint(name, vector, model_identity(pipeline), round(seconds, 2), tuple(sources))
    atomic_write_text(root.voice(name), json.dumps({
        "name": name, "model": voice.model, "seconds": voice.seconds, "sources": list(voice.sources),
        "vector": [round(float(v), 7) for v in vector]}, indent=1))
    return voice


def load_voices(root: DataRoot) -> list[VoicePrint]:
    out = []
    for path in _files(root):
        try:
            d = json.loads(path.read_text())
            out.append(VoicePrint(d["name"], np.array(d["vector"], dtype=np.float64), d["model"],
                                  float(d["seconds"]), tuple(d["sources"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise VoiceError(f"{path}: not a voice print ({exc}); re-enrol with `rescue voices enroll`") from exc
    return out


def fingerprint(root: DataRoot) -> str:
    """Changes whenever a voice is enrolled, replaced or removed ("" when none are): part of the
    ingest flow's cache key for diarization, so a rerun names speakers by the current voices."""
    digest = hashlib.sha256()
    paths = _files(root)
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest() if paths else ""


def remove(name: str, root: DataRoot) -> bool:
    if not _NAME.match(name):
        return False  # never enrolled: enroll refuses such names
    path = root.voice(name)
    if path.exists():
        path.unlink()
        return True
    return False


def speaker_prints(samples: np.ndarray, turns: Sequence[Turn], pipeline) -> dict[str, np.ndarray]:
    """One print per diarization label, from its turns of at least ``MIN_PIECE_S``."""
    spans = [(t.start, min(t.end, t.start + MAX_SPAN_S)) for t in turns if t.end - t.start >= MIN_PIECE_S]
    labels = [t.speaker for t in turns if t.end - t.start >= MIN_PIECE_S]
    if not spans:
        return {}
    prints = embed_segments(pipeline, samples, spans)
    weights = np.array([b - a for a, b in spans])
    out = {}
    for label in sorted(set(labels)):
        mine = np.array([lab == label for lab in labels])
        vector = mean_print(prints[mine], weights[mine])
        if vector is not None:
            out[label] = vector
    return out


def match(prints: dict[str, np.ndarray], voices: Sequence[VoicePrint], threshold: float = MATCH_THRESHOLD,
          margin: float = MATCH_MARGIN) -> dict[str, str]:
    """Label -> enrolled name, one to one (Hungarian on cosine similarity); a pair counts only with
    similarity >= ``threshold`` and at least ``margin`` above the label's next-best voice."""
    if not prints or not voices:
        return {}
    labels = sorted(prints)
    sim = np.array([[float(prints[lab] @ v.vector) for v in voices] for lab in labels])
    rows, cols = linear_sum_assignment(-sim)
    out = {}
    for r, c in zip(rows, cols):
        runner_up = max((sim[r, k] for k in range(len(voices)) if k != c), default=-1.0)
        if sim[r, c] >= threshold and sim[r, c] - runner_up >= margin:
            out[labels[r]] = voices[c].name
    return out


def name_speakers(samples: np.ndarray, turns: Sequence[Turn], pipeline, root: DataRoot,
                  candidates: Sequence[str] | None = None) -> tuple[list[Turn], dict[str, str]]:
    """Turns with labels renamed by enrolled voice (only ``candidates`` when given: the interview's
    therapist and participants). Returns the turns (sorted like ``diarize_audio``'s) and the
    label -> name mapping used."""
    model = model_identity(pipeline)
    voices = [v for v in load_voices(root)
              if v.model == model and (candidates is None or v.name in candidates)]
    if not voices:
        return list(turns), {}
    mapping = match(speaker_prints(samples, turns, pipeline), voices)
    renamed = [Turn(t.start, t.end, mapping.get(t.speaker, t.speaker)) for t in turns]
    return sort_turns(renamed), mapping
