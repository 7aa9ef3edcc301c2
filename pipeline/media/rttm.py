"""Who spoke when, as data: the :class:`Turn`, its one order, RTTM files, and DER.

RTTM is the standard diarization file (one ``SPEAKER`` line per turn, fields separated by
spaces). A speaker label is one field, so whitespace and ``%`` inside a label (an enrolled
voice may carry a person's full name) are written percent-encoded (``Ann%20Lee``) and decoded
on reading: a label round-trips exactly.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence
from urllib.parse import quote, unquote

from pipeline.store import atomic_write_text


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: str


class DiarizationError(RuntimeError):
    """Diarization cannot run or its file cannot be read; the message says which and why."""


def sort_turns(turns: Sequence[Turn]) -> list[Turn]:
    """The one order of turns everywhere (RTTM files, refinement, naming): start, end, speaker."""
    return sorted(turns, key=lambda t: (t.start, t.end, t.speaker))


_UNSAFE = re.compile(r"[%\s]")


def _encode_label(label: str) -> str:
    return _UNSAFE.sub(lambda m: quote(m.group(), safe=""), label) if label else "<NA>"


def rttm_lines(turns: Sequence[Turn], uri: str) -> list[str]:
    return [f"SPEAKER {uri} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> {_encode_label(t.speaker)} <NA> <NA>"
            for t in turns]


def write_rttm(turns: Sequence[Turn], path: str | Path, uri: str | None = None) -> Path:
    """Write ``turns`` atomically; ``uri`` defaults to the file's stem."""
    path = Path(path)
    return atomic_write_text(path, "".join(line + "\n" for line in rttm_lines(turns, uri or path.stem)))


def read_rttm(path: str | Path) -> list[Turn]:
    turns = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split()
        if not parts or parts[0] != "SPEAKER":
            continue
        try:
            start, dur = float(parts[3]), float(parts[4])
            label = parts[7]
        except (IndexError, ValueError) as exc:
            raise DiarizationError(f"{path}:{n}: not an RTTM SPEAKER line: {line!r}") from exc
        turns.append(Turn(start, start + dur, unquote(label) if "%" in label else label))
    return sort_turns(turns)


def to_annotation(turns: Sequence[Turn], uri: str = "audio"):
    from pyannote.core import Annotation, Segment  # heavy: pyannote
    ann = Annotation(uri=uri)
    for i, t in enumerate(turns):
        ann[Segment(t.start, t.end), i] = t.speaker
    return ann


def der(reference: Sequence[Turn], hypothesis: Sequence[Turn], collar: float = 0.0) -> float:
    """Diarization error rate (pyannote.metrics, optimal speaker mapping)."""
    from pyannote.metrics.diarization import DiarizationErrorRate  # heavy: pyannote
    return float(DiarizationErrorRate(collar=collar, skip_overlap=False)(
        to_annotation(reference), to_annotation(hypothesis)))
