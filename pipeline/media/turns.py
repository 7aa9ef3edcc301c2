"""The turn segmenter: timed units with speakers -> draft rows (``schemas.DRAFT_ROWS``).

Rules (spec §2.2, in this order):
1. units are put in time order, ties broken by (end, speaker, text): overlapping speech gives
   the same rows on every run;
2. consecutive units of one speaker form a run; a short run (a backchannel: at most
   ``backchannel_max_words`` words and ``backchannel_max_s`` seconds) by someone else inside
   another speaker's ongoing turn becomes that row's ``background_dialogue`` (a short answer
   to a question stays a row of its own);
3. runs of the same speaker are merged unless the pause between them exceeds ``max_pause_s``;
4. a row longer than ``max_row_s`` is split at the last sentence end before the limit;
5. ``target`` is a draft: the previous row's speaker (the ongoing exchange, spec §2.4), the
   group label for an opening therapist row. Annotators confirm it in the transcript round.

Speaker labels from diarization (SPEAKER_00, ...) become names by enrolled voice
(``pipeline.media.voices``, already in the RTTM) or else by the manifest's speaking order (first voice
to speak = first name left), unless a subtitle prefix named the speaker.

:func:`segment_stage` is the stage's one entry point (``rescue segment`` and the ``ingest-batch``
flow): a catalogued sample's stored transcript and RTTM -> ``drafts/<sample_id>.parquet``
(``DataRoot.drafts``) -> a :class:`Segmented` record.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pyarrow as pa

from pipeline import schemas
from pipeline.media.assign import MAX_WORD_S, assign_speakers, fill_word_times
from pipeline.media.ingest import catalog_entry
from pipeline.media.rttm import Turn, read_rttm
from pipeline.media.transcribe import Transcript, Unit, read_transcript
from pipeline.paths import DataRoot
from pipeline.store import sha256_file, write_parquet
from pipeline.taxonomy import THERAPIST, group_label

_SENTENCE_END = re.compile(r"[.?!…][\"')\]]*$")


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
    heard_until: float = 0.0  # end of the last backchannel inside this run (the floor was not silent)

    @property
    def start(self) -> float:
        return min(u.start for u in self.units)

    @property
    def end(self) -> float:
        return max(u.end for u in self.units)

    @property
    def n_words(self) -> int:
        return sum(len(u.text.split()) for u in self.units)


def speaker_names(turns: Sequence[Turn], speaking_order: Sequence[str], min_turn_s: float = 1.0) -> dict[str, str]:
    """Map diarization labels to names. A label that already is a name of the speaking order
    (an enrolled voice named it: ``pipeline.media.voices``) keeps it; the other labels, ordered by
    their first turn of at least ``min_turn_s`` (a stray fragment must not reorder them), are
    zipped with the names left. Labels beyond the order keep their SPEAKER_xx name."""
    named = {t.speaker for t in turns if t.speaker in speaking_order}
    left = [name for name in speaking_order if name not in named]
    first: dict[str, tuple[int, float]] = {}
    in_time = sorted((t for t in turns if t.speaker not in named), key=lambda t: (t.start, t.speaker))
    for t in in_time:
        if t.end - t.start >= min_turn_s:
            first.setdefault(t.speaker, (0, t.start))
    for t in in_time:
        first.setdefault(t.speaker, (1, t.start))  # only fragments: after the real speakers
    ordered = sorted(first, key=lambda s: (first[s], s))
    return {name: name for name in named} | {
        label: (left[i] if i < len(left) else label) for i, label in enumerate(ordered)}


def default_speaking_order(participants: Sequence[str]) -> list[str]:
    """Therapist first (interviews open with the therapist) unless the manifest places them."""
    people = list(participants)
    return people if THERAPIST in people else [THERAPIST, *people]


def attribute(units: Sequence[Unit], turns: Sequence[Turn], names: dict[str, str] | None = None,
              words: bool = False) -> list[Unit]:
    """Units with speakers: a speaker named by the source wins; otherwise the diarization turn
    with the largest overlap. For ASR words, timeless words are interpolated and durations capped;
    subtitle cues keep their real intervals."""
    units = list(units)
    if not units:
        return []
    starts, ends = fill_word_times([u.start for u in units], [u.end for u in units],
                                   max_word_s=MAX_WORD_S if words else float("inf"))
    labels = assign_speakers(starts, ends, turns) if turns else [None] * len(units)
    out = []
    for u, s, e, label in zip(units, starts, ends, labels):
        speaker = u.speaker or (names or {}).get(label, label) or "SPEAKER_00"
        out.append(Unit(round(float(s), 3), round(float(e), 3), u.text, speaker))
    return out


def segment_units(units: Sequence[Unit], config: SegmenterConfig | None = None) -> list[_Run]:
    """Rules 1-4 over units that already carry speakers."""
    cfg = config or SegmenterConfig()
    ordered = sorted(units, key=lambda u: (u.start, u.end, u.speaker or "", u.text))
    runs: list[_Run] = []
    for u in ordered:
        if runs and runs[-1].speaker == u.speaker and u.start - runs[-1].end <= cfg.max_pause_s:
            runs[-1].units.append(u)
        else:
            runs.append(_Run(u.speaker, [u]))
    # 2. backchannels: a short run between two runs of one other speaker, or inside one's span
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
                host.background.append({"speaker": run.speaker, "target": [host.speaker],
                                        "content": _join(run.units)})
                host.heard_until = max(host.heard_until, run.end)
                i += 1
                continue
        # 3. merge with the previous run of the same speaker after a short pause
        if host and host.speaker == run.speaker and run.start - max(host.end, host.heard_until) <= cfg.max_pause_s:
            host.units.extend(run.units)
        else:
            kept.append(_Run(run.speaker, list(run.units)))
        i += 1
    # 4. split long rows at sentence ends
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
        if _SENTENCE_END.search(u.text) and j + 1 < len(run.units):
            nxt = run.units[j + 1]
            if too_long or nxt.end - current[0].start > max_row_s:
                out.append(_Run(run.speaker, current))
                current = []
    if current:
        out.append(_Run(run.speaker, current))
    # background lines go to the piece whose span holds them
    for bg in run.background:
        out[0].background.append(bg)
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
    """One interview: transcript + diarization turns -> DRAFT_ROWS table."""
    order = list(speaking_order) if speaking_order else default_speaking_order(participants)
    names = speaker_names(turns, order)
    units = attribute(transcript.units, turns, names, words=transcript.kind == "word")
    return draft_rows(sample_id, segment_units(units, config), scenario)


@dataclass(frozen=True)
class Segmented:
    """A sample's written draft rows; content addressed by ``drafts_sha256``."""

    sample_id: str
    scenario: str
    participants: tuple[str, ...]
    duration_s: float | None
    rows: int
    drafts_sha256: str


def segment_sample(sample_id: str, data_root: str | Path, config: SegmenterConfig | None = None,
                   write: bool = True) -> pa.Table:
    """Segment a catalogued sample from its stored transcript and RTTM (no RTTM: no diarization
    turns); writes ``drafts/<sample_id>.parquet`` when ``write``."""
    root = DataRoot(data_root)
    entry = catalog_entry(root, sample_id)
    transcript = read_transcript(sample_id, root)
    rttm = root.rttm(sample_id)
    turns = read_rttm(rttm) if rttm.exists() else []
    table = segment(sample_id, transcript, turns, entry["scenario"], entry.get("participants") or [], config=config)
    if write:
        write_parquet(table, root.drafts(sample_id))
    return table


def segment_stage(sample_id: str, data_root: str | Path, config: SegmenterConfig | None = None) -> Segmented:
    """The segment stage (CLI and flow): :func:`segment_sample`, written, as a typed record."""
    root = DataRoot(data_root)
    table = segment_sample(sample_id, root, config, write=True)
    entry = catalog_entry(root, sample_id)
    return Segmented(sample_id, entry["scenario"], tuple(entry.get("participants") or ()), entry["duration_s"],
                     table.num_rows, sha256_file(root.drafts(sample_id)))
