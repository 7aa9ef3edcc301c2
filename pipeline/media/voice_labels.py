"""Naming voices: the label draft rows carry for each diarized voice, the interview's voice table
(``schemas.DRAFT_VOICES``), and renaming a sample's rows once a voice is named. The turn
segmenter (:mod:`pipeline.media.turns`) calls :func:`voice_labels` and :func:`voice_table`.

Rows carry one stable label per diarized voice (:func:`voice_labels`):

* a voice an enrolled voice print named (``pipeline.media.voices``, already in the RTTM) keeps
  that name (``named_by="voice"``);
* with a speaking-order hint (the manifest's ``speaking_order`` column, or ``speaking_order=``
  given to :func:`pipeline.media.turns.segment`): the other voices, in the order of their first
  turn of at least 1 s, get the names left in that order (``"order"``: the behaviour before
  voice labels);
* without a hint (the default): the therapist when identified (``"role"``: the first voice to
  speak is also the one whose sentences of three words or more are most often questions, at
  least 30 % of them, ahead of every other voice), and ``Speaker 1``, ``Speaker 2``, ... for
  the others in the order of their first turn; the participants' order is not used.

The voice table (:func:`voice_table`, written to ``draft-voices/<sample_id>.parquet``) lists each
label with its first rows and a few seconds where that voice speaks alone. The transcript round
shows it as one block and the annotator names each voice once; pull applies the names to every
row of the voice, and a row the annotator gave another speaker keeps it
(``pipeline.annotation.voice_naming``). :func:`apply_voice_names` renames a sample's rows from
such a mapping outside Label Studio (speaker, targets, background speakers and targets).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import pyarrow as pa

from pipeline import schemas
from pipeline.catalog import Ingested
from pipeline.media.rttm import Turn
from pipeline.media.subtitles import Unit
from pipeline.taxonomy import THERAPIST, fallback_addressee

SENTENCE_END = re.compile(r"[.?!…][\"')\]]*$")  # text ending a sentence (the segmenter splits long rows there too)
_UNNAMED = re.compile(r"SPEAKER_\d+")   # pyannote's labels; any other RTTM label is a name (enrolled voice)
VOICE_LABEL = "Speaker {n}"   # a voice nobody named yet
MIN_FIRST_TURN_S = 1.0        # a voice's place in the speaking order: its first turn this long
THERAPIST_QUESTION_SHARE = 0.3


@dataclass(frozen=True)
class VoiceName:
    """What the rows call one diarized voice, and how that name was found."""

    label: str
    named_by: str | None  # voice | order | role | None (a neutral "Speaker n")


def _first_turns(turns: Sequence[Turn], skip: set[str], min_turn_s: float = MIN_FIRST_TURN_S) -> list[str]:
    """Labels (not in ``skip``) in the order of their first turn of at least ``min_turn_s`` (a stray
    fragment must not reorder them); labels with only fragments come after."""
    first: dict[str, tuple[int, float]] = {}
    in_time = sorted((t for t in turns if t.speaker not in skip), key=lambda t: (t.start, t.speaker))
    for t in in_time:
        if t.end - t.start >= min_turn_s:
            first.setdefault(t.speaker, (0, t.start))
    for t in in_time:
        first.setdefault(t.speaker, (1, t.start))  # only fragments: after the real speakers
    return sorted(first, key=lambda s: (first[s], s))


def speaker_names(turns: Sequence[Turn], speaking_order: Sequence[str], min_turn_s: float = MIN_FIRST_TURN_S
                  ) -> dict[str, str]:
    """Map diarization labels to names by a speaking-order hint. A label that already is a name of
    the order (an enrolled voice named it: ``pipeline.media.voices``) keeps it; the other labels,
    ordered by their first turn of at least ``min_turn_s`` (a stray fragment must not reorder
    them), are zipped with the names left. Labels beyond the order keep their SPEAKER_xx name."""
    named = {t.speaker for t in turns if t.speaker in speaking_order}
    left = [name for name in speaking_order if name not in named]
    ordered = _first_turns(turns, named, min_turn_s)
    return {name: name for name in named} | {
        label: (left[i] if i < len(left) else label) for i, label in enumerate(ordered)}


def default_speaking_order(participants: Sequence[str]) -> list[str]:
    """The hint read from a manifest whose participants are in speaking order: therapist first
    (interviews open with the therapist) unless the manifest places them."""
    people = list(participants)
    return people if THERAPIST in people else [THERAPIST, *people]


def voice_labels(turns: Sequence[Turn], units: Sequence[Unit] = (), participants: Sequence[str] = (),
                 speaking_order: Sequence[str] | None = None) -> dict[str, VoiceName]:
    """The label of every diarization speaker (and of any other unnamed label the ``units`` carry),
    by the rules of the module docstring: enrolled name, else the speaking-order hint when given,
    else the therapist when identified and ``Speaker n`` for the others."""
    labels = {t.speaker for t in turns}
    if speaking_order:
        names = speaker_names(turns, speaking_order)
        out = {label: VoiceName(name, "voice" if label in speaking_order else
                                ("order" if name != label else None)) for label, name in names.items()}
    else:
        known = {THERAPIST, *participants}
        enrolled = {label for label in labels if label in known or not _UNNAMED.fullmatch(label)}
        out = {label: VoiceName(label, "voice") for label in enrolled}
        ordered = _first_turns(turns, enrolled)
        if THERAPIST not in enrolled and ordered:
            therapist = _therapist_by_role(ordered, units)
            if therapist:
                out[therapist] = VoiceName(THERAPIST, "role")
                ordered = [label for label in ordered if label != therapist]
        taken = {v.label for v in out.values()}
        n = 0
        for label in ordered:
            n += 1
            while VOICE_LABEL.format(n=n) in taken:
                n += 1
            out[label] = VoiceName(VOICE_LABEL.format(n=n), None)
    # labels only the units know (no diarization turns at all: the attribution's fallback label)
    extra = sorted({u.speaker for u in units if u.speaker and _UNNAMED.fullmatch(u.speaker)} - set(out))
    n = sum(1 for v in out.values() if v.named_by is None)
    for label in extra:
        n += 1
        out[label] = VoiceName(label if speaking_order else VOICE_LABEL.format(n=n), None)
    return out


def _therapist_by_role(ordered: Sequence[str], units: Sequence[Unit]) -> str | None:
    """The therapist: the first voice to speak, when its sentences are also the most often
    questions (at least THERAPIST_QUESTION_SHARE, strictly ahead of every other voice)."""
    ends: dict[str, int] = {}
    questions: dict[str, int] = {}
    sentence: list[str] = []
    speaker = None
    for u in sorted(units, key=lambda u: (u.start, u.end)):  # cues, or ASR words joined into sentences
        if u.speaker != speaker:
            sentence, speaker = [], u.speaker
        sentence.append(u.text.strip())
        text = " ".join(sentence)
        if SENTENCE_END.search(text):
            sentence = []
            if speaker and len(text.split()) >= 3:  # not a backchannel
                ends[speaker] = ends.get(speaker, 0) + 1
                questions[speaker] = questions.get(speaker, 0) + text.rstrip("\"')]").endswith("?")
    share = {s: questions.get(s, 0) / ends[s] for s in ends}
    first = ordered[0]
    mine = share.get(first, 0.0)
    if mine >= THERAPIST_QUESTION_SHARE and all(v < mine for s, v in share.items() if s != first):
        return first
    return None


def voice_table(sample_id: str, rows: pa.Table, turns: Sequence[Turn], names: Mapping[str, VoiceName],
                sample_s: float = 5.0) -> pa.Table:
    """DRAFT_VOICES: every label the rows carry (primary or background speaker), in the order of
    its first row, with its first rows and up to ``sample_s`` seconds where that voice speaks
    alone (its first diarization turn of at least 2 s that no other turn overlaps, else its longest turn;
    a voice without turns: its first row)."""
    records = rows.to_pylist()
    by_label: dict[str, list[str]] = {}
    for label, name in names.items():
        by_label.setdefault(name.label, []).append(label)
    seen: list[str] = []
    for r in records:
        for who in [r["primary_speaker"], *(b["speaker"] for b in r["background_dialogue"] or [])]:
            if who not in seen:
                seen.append(who)
    out = []
    for voice in seen:
        labels = by_label.get(voice, [])
        own = sorted((t for t in turns if t.speaker in labels), key=lambda t: (t.start, t.end))
        alone = [t for t in own if t.end - t.start >= 2.0  # no other turn, not even its own voice's, overlaps
                 and not any(o is not t and o.start < t.end and t.start < o.end for o in turns)]
        its_rows = [r for r in records if r["primary_speaker"] == voice]
        if alone or own:
            pick = alone[0] if alone else max(own, key=lambda t: t.end - t.start)
            span = (pick.start, min(pick.end, pick.start + sample_s))
        elif its_rows:
            span = (its_rows[0]["start_time"], min(its_rows[0]["end_time"], its_rows[0]["start_time"] + sample_s))
        else:
            span = (None, None)
        named_by = {names[label].named_by for label in labels} - {None}
        out.append({"sample_id": sample_id, "voice": voice, "diarization_speaker": ",".join(labels) or None,
                    "named_by": (sorted(named_by)[0] if named_by else None) if labels else "subtitles",
                    "first_rows": [r["row_index"] for r in its_rows[:3]],
                    "sample_start": None if span[0] is None else round(span[0], 3),
                    "sample_end": None if span[1] is None else round(span[1], 3),
                    "n_rows": len(its_rows), "speech_s": round(sum(t.end - t.start for t in own), 3)})
    return pa.Table.from_pylist(out, schema=schemas.DRAFT_VOICES)


def apply_voice_names(rows, names: Mapping[str, str], scenario: str | None = None):
    """Rename voices on every row of a sample: ``names`` maps a voice label of the rows ("Speaker 1",
    or any name to correct) to a person's name. Renames ``primary_speaker``, every ``target`` item
    and every ``background_dialogue`` speaker and target. A row whose targets then hold its own
    speaker (two voices named as one person) drops that target; an emptied target becomes
    :func:`pipeline.taxonomy.fallback_addressee`. ``rows``: a DRAFT_ROWS
    table, a list of row dicts, or a sample dict with ``rows``; the same kind comes back."""
    if isinstance(rows, pa.Table):
        return pa.Table.from_pylist(apply_voice_names(rows.to_pylist(), names, scenario), schema=rows.schema)
    if isinstance(rows, Mapping):
        return {**rows, "rows": apply_voice_names(rows["rows"], names, scenario or rows.get("scenario"))}
    rename = lambda who: names.get(who, who)

    def targets(speaker: str, items) -> list[str]:
        got = list(dict.fromkeys(rename(t) for t in items or []))
        kept = [t for t in got if t != speaker]
        if got and not kept:
            kept = fallback_addressee(speaker, scenario)
        return kept

    out = []
    for r in rows:
        speaker = rename(r["primary_speaker"])
        background = [{**b, "speaker": rename(b["speaker"]), "target": targets(rename(b["speaker"]), b["target"])}
                      for b in r.get("background_dialogue") or []]
        out.append({**r, "primary_speaker": speaker, "target": targets(speaker, r.get("target")),
                    "background_dialogue": background})
    return out


def hint_of(ingested: Ingested, speaking_order: Sequence[str] | bool | None = None) -> list[str] | None:
    """The speaking-order hint for an ingested sample: ``speaking_order`` as given (a list: that
    order; True/False: the manifest's participants are / are not in speaking order), else the
    catalog's ``speaking_order`` (the manifest column). None: no hint (voice labels)."""
    if speaking_order is None:
        speaking_order = ingested.speaking_order
    if speaking_order is True:
        return default_speaking_order(ingested.participants)
    if speaking_order is False:
        return None
    return list(speaking_order) or None
