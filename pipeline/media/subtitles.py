"""Subtitle files (SRT and WebVTT) -> timed cue units: the paper's transcript path.

Why our own parser and not pysubs2 or webvtt-py: errors must name the file, the cue and its line
(``bad.srt cue 2 (line 5): cannot read the timing line``) and the batch must go on, while both
libraries either skip a malformed cue silently (pysubs2) or stop at the first one with a generic
message (webvtt-py), and neither splits dialogue dashes or reads ``JOSH:`` speaker prefixes. Its
text cleaning follows the WebVTT cue-text rules (every tag removed, ``<br>`` a space, inline
timestamps removed, entities unescaped, ``<v Name>`` gives the speaker) and is checked against
webvtt-py on a set of tricky files (``tests/reliability/test_subtitles_markup.py``).

:class:`Unit` and :class:`Transcript` are the transcript types both backends return
(``pipeline.media.transcribe`` re-exports them).
"""
from __future__ import annotations

import html
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)


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
_TAG = re.compile(r"</?[A-Za-z][^<>]*>|\{\\[^}]*\}")       # every markup tag; ASS override blocks
_BR = re.compile(r"<\s*br\s*/?\s*>", re.I)
_HIDDEN = re.compile(r"<(script|style|rt)\b[^>]*>.*?</\1\s*>", re.I | re.S)  # elements whose content is no speech
_INLINE_TIME = re.compile(r"<\d{1,2}(?::\d{2}){1,2}[.,]\d{1,3}>")       # WebVTT karaoke timestamps
_VOICE = re.compile(r"<v(?:\.[^\s>]*)?\s+([^>]+)>", re.I)
_PREFIX_COLON = re.compile(r"^\s*-?\s*([A-Za-z][A-Za-z .'\-]{0,30}?)\s*:\s+(?=\S)")
_PREFIX_BRACKET = re.compile(r"^\s*-?\s*[\[(]([A-Za-z][A-Za-z .'\-]{0,30})[\])]\s*(?=\S)")
_NONLEXICAL = re.compile(r"^\s*[\[(♪][^\])]*[\])♪]?\s*$")


def _clean(text: str) -> str:
    """Cue text without markup: ``<br>`` a space, inline timestamps and every tag removed,
    entities unescaped, whitespace collapsed."""
    text = _INLINE_TIME.sub("", _BR.sub(" ", text))
    text = html.unescape(_TAG.sub("", text))
    return " ".join(text.split())


def _seconds(h, m, s, frac) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(frac.ljust(3, "0")) / 1000


def _split_speaker(text: str, names: Sequence[str]) -> tuple[str | None, str]:
    """Strip a speaker label prefix. A prefix counts as a label when it names a known person
    (case-insensitive) or is written in capitals (``JOSH:``), so "Note: ..." stays text."""
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
        voice = _VOICE.search("\n".join(lines[timing_idx + 1:]))
        body = [_clean(ln) for ln in _HIDDEN.sub("", "\n".join(lines[timing_idx + 1:])).split("\n")]
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
            if voice and speaker is None:  # a WebVTT voice tag names the speaker
                speaker = _clean(voice.group(1)) or None
            if not content:
                continue
            span = (end - start) * len(p) / total
            units.append(Unit(round(t, 3), round(t + span, 3), content, speaker))
            t += span
    for w in warnings:
        log.warning(w)
    units.sort(key=lambda u: (u.start, u.end))
    return Transcript("cue", units, warnings)
