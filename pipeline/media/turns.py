"""The turn segmenter: timed units -> draft rows (``schemas.DRAFT_ROWS``) and the interview's
voices (``schemas.DRAFT_VOICES``), so that people are named once per voice.

Rules, in this order (spec §2.2-2.4):

1. attribution (:func:`attribute`): a unit named by its source (a subtitle prefix) keeps that
   name. Otherwise it gets the diarization speaker it overlaps most (``assign.assign_speakers``),
   except for speech heard *over* someone else's:

   * a cue lying inside another, longer cue's span (enclosing speaker X: that cue's speaker),
     or starting inside an earlier cue of speaker X and overlapping it by at least
     ``MIN_ACTIVE_S`` (an interruption), goes to the speaker other than X most active during it
     (``assign.speaker_overlaps``; active: at least ``MIN_ACTIVE_S`` = 0.3 s of it, as a shorter
     diarization piece carries pyannote's unchecked label). When diarization hears nobody else
     then, an interruption keeps the largest overlap, and a cue inside another still is not X's
     (one voice's cues never overlap each other): it goes to the listener, the last other voice
     heard before the enclosing cue (else the next one);
   * an ASR word whose neighbours on both sides are X's goes to another speaker only when that
     speaker is active for at least half of the word (a transcript holds one voice at a time,
     so a word in the middle of X's speech stays X's unless diarization clearly hears another);

2. units are put in time order (start, then end, speaker, text: overlapping speech gives the
   same rows on every run), and text inside a row is always in that order;
3. consecutive units of one speaker form a run (speech over another speaker's run ends a run
   at that run's end: a backchannel never absorbs the turn its speaker takes next); a short
   run (a backchannel: at most ``backchannel_max_words`` words and ``backchannel_max_s``
   seconds) by someone else inside
   another speaker's ongoing turn (it ends before that turn's last unit ends, or that speaker
   resumes within ``max_pause_s``) becomes that row's ``background_dialogue`` entry (speaker,
   target: the row's speaker, content), in time order; a short answer to a question stays a row;
4. runs of the same speaker are merged unless the pause between them (a backchannel inside
   counts as sound) exceeds ``max_pause_s``;
5. a row longer than ``max_row_s`` is split at the last sentence end before the limit; each
   background entry stays with the piece whose span holds it;
6. ``target`` is a draft: the previous row's speaker (the ongoing exchange, spec §2.4), the
   group label for an opening therapist row. Annotators confirm it in the transcript round.

Naming voices (rows carry one stable label per diarized voice, and the voice table lists each
with a stretch where it speaks alone, so an annotator names each voice once):
:mod:`pipeline.media.voice_labels`.

:func:`segment_stage` is the stage's one entry point (``rescue segment`` and the ``ingest-batch``
flow): an ingested sample (its :class:`pipeline.catalog.Ingested` record: the catalog is not read
again), its stored transcript and RTTM -> ``drafts/<sample_id>.parquet`` (``DataRoot.drafts``)
and the voice table (``DataRoot.draft_voices``) -> a :class:`Segmented`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas
from pipeline.catalog import Ingested
from pipeline.media.assign import MAX_WORD_S, assign_speakers, fill_word_times, speaker_overlaps
from pipeline.media.refine import MIN_PIECE_S
from pipeline.media.rttm import Turn, read_rttm
from pipeline.media.transcribe import Transcript, Unit, read_transcript
from pipeline.media.voice_labels import (SENTENCE_END, VoiceName, apply_voice_names,  # noqa: F401 (re-exported:
                                         default_speaking_order, hint_of, speaker_names,  # the segmenter's API)
                                         voice_labels, voice_table)
from pipeline.paths import DataRoot
from pipeline.store import private_areas, sha256_file, write_parquet
from pipeline.taxonomy import THERAPIST, group_label

WORD_OTHER_SHARE = 0.5        # an enclosed ASR word changes speaker when another is active this much of it
MIN_ACTIVE_S = MIN_PIECE_S    # a speaker counts as active during a cue from this much overlap: a shorter
                              # piece kept pyannote's label, which no voice print checked (pipeline.media.refine)


@dataclass
class SegmenterConfig:
    max_pause_s: float = 1.5
    max_row_s: float = 30.0
    backchannel_max_words: int = 3
    backchannel_max_s: float = 1.5


@dataclass
class _Run:
    speaker: str
    units: list[Unit]
    background: list[dict] = field(default_factory=list)
    background_at: list[float] = field(default_factory=list)  # start of each background entry
    heard_until: float = 0.0  # end of the last backchannel inside this run (the floor was not silent)
    within: float | None = None  # the run lies inside another speaker's run ending then (heard over it)

    @property
    def start(self) -> float:
        return min(u.start for u in self.units)

    @property
    def end(self) -> float:
        return max(u.end for u in self.units)

    @property
    def n_words(self) -> int:
        return sum(len(u.text.split()) for u in self.units)

    def add_background(self, at: float, entry: dict) -> None:
        k = sum(1 for t in self.background_at if t <= at)  # time order
        self.background.insert(k, entry)
        self.background_at.insert(k, at)


def attribute(units: Sequence[Unit], turns: Sequence[Turn], names: Mapping[str, str] | None = None,
              words: bool = False) -> list[Unit]:
    """Units with speakers (rule 1 of the module docstring): a speaker named by the source wins;
    otherwise the diarization speaker overlapping most, except speech heard over another voice's
    (a cue inside a longer cue, a word between two words of one speaker). For ASR words,
    timeless words are interpolated and durations capped; subtitle cues keep their intervals.
    ``names`` maps diarization labels to the labels the units get."""
    units = list(units)
    if not units:
        return []
    starts, ends = fill_word_times([u.start for u in units], [u.end for u in units],
                                   max_word_s=MAX_WORD_S if words else float("inf"))
    labels = assign_speakers(starts, ends, turns) if turns else [None] * len(units)
    if turns:
        labels = (_reattribute_words if words else _reattribute_cues)(units, starts, ends, labels, turns)
    out = []
    for u, s, e, label in zip(units, starts, ends, labels):
        speaker = u.speaker or (names or {}).get(label, label) or "SPEAKER_00"
        out.append(Unit(round(float(s), 3), round(float(e), 3), u.text, speaker))
    return out


def _overlapped_by(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, bool] | None]:
    """For each cue, the earlier cue reaching furthest that it overlaps by at least MIN_ACTIVE_S
    (or lies inside, being shorter), and whether it lies inside that cue; else None."""
    order = np.lexsort((-ends, starts))  # a longer cue first among cues starting together
    out: list[tuple[int, bool] | None] = [None] * len(starts)
    longest: int | None = None  # among cues started so far: the one reaching furthest
    for i in order:
        if longest is not None:
            inside = ends[i] <= ends[longest] and ends[longest] - starts[longest] > ends[i] - starts[i]
            if inside or min(ends[i], ends[longest]) - starts[i] >= MIN_ACTIVE_S:
                out[i] = (int(longest), bool(inside))
        if longest is None or ends[i] > ends[longest]:
            longest = int(i)
    return out


def _reattribute_cues(units, starts, ends, labels, turns) -> list[str | None]:
    over = _overlapped_by(starts, ends)
    if not any(over):
        return labels
    speakers, overlap, _ = speaker_overlaps(starts, ends, turns)
    labels = list(labels)
    for i, hit in enumerate(over):
        if hit is None or units[i].speaker:
            continue
        j, inside = hit
        host = units[j].speaker or labels[j]
        others = [(overlap[i, k], -k) for k, s in enumerate(speakers) if s != host and overlap[i, k] >= MIN_ACTIVE_S]
        if others:
            labels[i] = speakers[-max(others)[1]]
        elif inside:
            labels[i] = _listener(turns, host, starts[j]) or labels[i]
    return labels


def _listener(turns: Sequence[Turn], host: str | None, before: float, min_turn_s: float = 0.3) -> str | None:
    """The last voice other than ``host`` heard before ``before`` (turns of at least
    ``min_turn_s``), else the first one after."""
    others = [t for t in turns if t.speaker != host and t.end - t.start >= min_turn_s]
    earlier = [t for t in others if t.start < before]
    if earlier:
        return max(earlier, key=lambda t: (t.end, t.start)).speaker
    return min(others, key=lambda t: t.start).speaker if others else None


def _reattribute_words(units, starts, ends, labels, turns) -> list[str | None]:
    speakers, overlap, _ = speaker_overlaps(starts, ends, turns)
    index = {s: k for k, s in enumerate(speakers)}
    out = list(labels)
    for i in range(1, len(units) - 1):
        host = labels[i - 1]
        if units[i].speaker or host is None or labels[i + 1] != host or labels[i] not in (host,):
            continue
        dur = ends[i] - starts[i]
        if dur <= 0:
            continue
        best = max(((overlap[i, k], s) for s, k in index.items() if s != host), default=(0.0, None))
        if best[1] is not None and best[0] >= WORD_OTHER_SHARE * dur:
            out[i] = best[1]
    return out


def segment_units(units: Sequence[Unit], config: SegmenterConfig | None = None) -> list[_Run]:
    """Rules 2-5 over units that already carry speakers."""
    cfg = config or SegmenterConfig()
    ordered = sorted(units, key=lambda u: (u.start, u.end, u.speaker or "", u.text))
    runs: list[_Run] = []
    for u in ordered:
        last = runs[-1] if runs else None
        if last and last.speaker == u.speaker and u.start - last.end <= cfg.max_pause_s \
                and (last.within is None or u.end <= last.within):  # speech over a turn ends with it
            last.units.append(u)
        else:
            inside = last is not None and last.speaker != u.speaker and u.end <= last.end
            runs.append(_Run(u.speaker, [u], within=last.end if inside else None))
    # 3. backchannels: a short run between two runs of one other speaker, or inside one's span
    kept: list[_Run] = []
    i = 0
    while i < len(runs):
        run = runs[i]
        host = kept[-1] if kept else None
        short = run.n_words <= cfg.backchannel_max_words and run.end - run.start <= cfg.backchannel_max_s
        answers = host is not None and host.units[-1].text.rstrip().endswith("?")  # an answer is a turn
        if host and short and host.speaker != run.speaker and not answers:
            resumes = i + 1 < len(runs) and runs[i + 1].speaker == host.speaker and \
                runs[i + 1].start - run.end <= cfg.max_pause_s
            inside = run.end <= host.end
            if resumes or inside:
                host.add_background(run.start, {"speaker": run.speaker, "target": [host.speaker],
                                                "content": _join(run.units)})
                host.heard_until = max(host.heard_until, run.end)
                i += 1
                continue
        # 4. merge with the previous run of the same speaker after a short pause
        if host and host.speaker == run.speaker and run.start - max(host.end, host.heard_until) <= cfg.max_pause_s:
            host.units.extend(run.units)
        else:
            kept.append(_Run(run.speaker, list(run.units)))
        i += 1
    for run in kept:  # 2. text inside a row in time order
        run.units.sort(key=lambda u: (u.start, u.end, u.text))
    # 5. split long rows at sentence ends
    rows: list[_Run] = []
    for run in kept:
        rows.extend(_split_long(run, cfg.max_row_s))
    return rows


def _split_long(run: _Run, max_row_s: float) -> list[_Run]:
    if run.end - run.start <= max_row_s:
        return [run]
    out, current = [], []
    for j, u in enumerate(run.units):
        current.append(u)
        too_long = current[-1].end - current[0].start >= max_row_s
        if SENTENCE_END.search(u.text) and j + 1 < len(run.units):
            nxt = run.units[j + 1]
            if too_long or nxt.end - current[0].start > max_row_s:
                out.append(_Run(run.speaker, current))
                current = []
    if current:
        out.append(_Run(run.speaker, current))
    # background lines go to the piece whose span holds them (else the last piece started before)
    for at, bg in zip(run.background_at, run.background):
        piece = max((p for p in out if p.start <= at), key=lambda p: p.start, default=out[0])
        piece.add_background(at, bg)
    return out


def _join(units: Sequence[Unit]) -> str:
    return re.sub(r"\s+", " ", " ".join(u.text for u in units)).strip()


def draft_rows(sample_id: str, runs: Sequence[_Run], scenario: str) -> pa.Table:
    """Runs -> a DRAFT_ROWS table (row_index is 1-based, spec §1.3)."""
    group = group_label(scenario)
    records = []
    prev_speaker = None
    for i, run in enumerate(runs):
        if prev_speaker and prev_speaker != run.speaker:
            target = [prev_speaker]
        elif run.speaker == THERAPIST:
            target = [group]
        else:
            target = [records[-1]["target"][0]] if records and records[-1]["target"][0] != run.speaker else [THERAPIST]
        records.append({
            "sample_id": sample_id, "row_index": i + 1,
            "start_time": round(run.start, 3), "end_time": round(max(run.end, run.start + 0.001), 3),
            "primary_speaker": run.speaker, "target": target, "dialogue_cleaned": _join(run.units),
            "background_dialogue": run.background,
        })
        prev_speaker = run.speaker
    return pa.Table.from_pylist(records, schema=schemas.DRAFT_ROWS)


def segment(sample_id: str, transcript: Transcript, turns: Sequence[Turn], scenario: str,
            participants: Sequence[str] = (), speaking_order: Sequence[str] | None = None,
            config: SegmenterConfig | None = None) -> pa.Table:
    """One interview: transcript + diarization turns -> DRAFT_ROWS table. Without
    ``speaking_order`` (a hint) the voices nobody enrolled get neutral labels (module docstring)."""
    return segment_with_voices(sample_id, transcript, turns, scenario, participants, speaking_order, config)[0]


def segment_with_voices(sample_id: str, transcript: Transcript, turns: Sequence[Turn], scenario: str,
                        participants: Sequence[str] = (), speaking_order: Sequence[str] | None = None,
                        config: SegmenterConfig | None = None) -> tuple[pa.Table, pa.Table]:
    """:func:`segment`, and the interview's voice table (DRAFT_VOICES)."""
    raw = attribute(transcript.units, turns, None, words=transcript.kind == "word")
    from_source = [u.speaker is not None for u in transcript.units]
    names = voice_labels(turns, [u for u, src in zip(raw, from_source) if not src], participants,
                         list(speaking_order) if speaking_order else None)
    units = [u if src else Unit(u.start, u.end, u.text, names[u.speaker].label if u.speaker in names else u.speaker)
             for u, src in zip(raw, from_source)]
    rows = draft_rows(sample_id, segment_units(units, config), scenario)
    return rows, voice_table(sample_id, rows, turns, names)


@dataclass(frozen=True)
class Segmented:
    """A sample's written draft rows; content addressed by ``drafts_sha256``."""

    sample_id: str
    scenario: str
    participants: tuple[str, ...]
    duration_s: float | None
    rows: int
    drafts_sha256: str


def segment_sample(ingested: Ingested, root: DataRoot, config: SegmenterConfig | None = None,
                   write: bool = True, speaking_order: Sequence[str] | bool | None = None) -> pa.Table:
    """Segment an ingested sample from its stored transcript and RTTM (no RTTM: no diarization
    turns); writes ``drafts/<sample_id>.parquet`` and its voice table
    (``draft-voices/<sample_id>.parquet``) when ``write``. ``speaking_order``: :func:`hint_of`."""
    sample_id = ingested.sample_id
    transcript = read_transcript(sample_id, root)
    rttm = root.rttm(sample_id)
    turns = read_rttm(rttm) if rttm.exists() else []
    table, voices = segment_with_voices(sample_id, transcript, turns, ingested.scenario, ingested.participants,
                                        hint_of(ingested, speaking_order), config)
    if write:
        private_areas(root, "drafts", "draft-voices")  # inputs read first: a missing one writes nothing
        write_parquet(voices, root.draft_voices(sample_id))
        write_parquet(table, root.drafts(sample_id))
    return table


def read_voice_table(sample_id: str, root: DataRoot) -> pa.Table:
    """The voice table :func:`segment_sample` wrote for a sample."""
    return pq.read_table(root.draft_voices(sample_id), schema=schemas.DRAFT_VOICES)


def segment_stage(ingested: Ingested, root: DataRoot, config: SegmenterConfig | None = None,
                  speaking_order: Sequence[str] | bool | None = None) -> Segmented:
    """The segment stage (CLI and flow): :func:`segment_sample`, written, as a typed record."""
    table = segment_sample(ingested, root, config, write=True, speaking_order=speaking_order)
    return Segmented(ingested.sample_id, ingested.scenario, ingested.participants, ingested.duration_s,
                     table.num_rows, sha256_file(root.drafts(ingested.sample_id)))
