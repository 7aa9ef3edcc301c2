"""The sample rules V2-V15 (and V16 on a sample's own strings) of :mod:`pipeline.validate`, for
samples in the shape of ``pipeline.rows``: every check runs to the end and returns *all*
violations, each a :class:`Violation` naming the sample, the row and the rule.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import pyarrow as pa

from pipeline import schemas, taxonomy
from pipeline.taxonomy import THERAPIST
from pipeline.validate.private_scan import private_strings, rows_flagged, string_fields


@dataclass(frozen=True)
class Violation:
    sample_id: str | None
    row_index: int | None
    rule: str
    message: str

    def __str__(self) -> str:
        where = self.sample_id or "<unknown sample>"
        if self.row_index is not None:
            where += f" row {self.row_index}"
        return f"{where}: {self.rule}: {self.message}"


def violations_table(violations: Iterable[Violation]) -> pa.Table:
    return pa.Table.from_pylist([asdict(v) for v in violations], schema=schemas.VIOLATIONS)


_WORD = re.compile(r"[A-Za-z0-9']+")


def _check_source_file(c: "_RowChecker", value) -> None:
    if value is None:
        return
    bad = private_strings(value) if isinstance(value, str) else []
    if not isinstance(value, str) or bad or value.startswith(("/", "~", "\\")) or "\\" in value \
            or ".." in value.split("/") or re.match(r"[A-Za-z]:", value):
        c.add(None, "V16", f"source_file {value!r} must be a plain relative path (no absolute path, "
                           "home or drive path, '..' or URL)")


def _check_private(c: "_RowChecker", ri, row: dict) -> None:
    for path, text in string_fields(row, ""):
        for hit in private_strings(text):
            c.add(ri, "V16", f"{path} holds an absolute path or URL {hit[:120]!r}; releases never carry them")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text or "")]


class _RowChecker:
    """Collects violations for one sample; ``add`` keeps the sample and row context."""

    def __init__(self, sample: dict):
        self.sample = sample
        self.sid = sample.get("sample_id")
        self.scenario = sample.get("scenario")
        self.out: list[Violation] = []
        self.entities = taxonomy.allowed_entities(self.scenario, sample.get("participants") or [])
        self.group = taxonomy.group_label(self.scenario)

    def add(self, row_index: int | None, rule: str, message: str) -> None:
        self.out.append(Violation(self.sid, row_index, rule, message))

    def entity(self, ri: int, field: str, value) -> bool:
        if not isinstance(value, str) or not value:
            self.add(ri, "V2", f"{field} is empty")
            return False
        if value not in self.entities:
            self.add(ri, "V2", f"{field} {value!r} is not a participant, {THERAPIST} or {self.group}")
            return False
        return True

    def targets(self, ri: int, field: str, targets, owner: str | None, rule: str) -> None:
        if not isinstance(targets, list) or not targets:
            self.add(ri, rule, f"{field} must be a non-empty list")
            return
        for t in targets:
            self.entity(ri, field, t)
        if owner and owner in targets:
            self.add(ri, rule, f"{field} contains its own speaker {owner!r} (self-target)")


def validate_sample(sample: dict, subtitle_lines: list[str] | None = None) -> list[Violation]:
    """V2-V11 (and V13 when the sample's subtitle lines are given) for one sample."""
    return _validate_sample(sample, subtitle_lines, rows_flagged([sample])[0])


def _validate_sample(sample: dict, subtitle_lines: list[str] | None, flagged: bool) -> list[Violation]:
    sid = sample.get("sample_id")
    scenario = sample.get("scenario")
    if scenario not in taxonomy.SCENARIOS:
        return [Violation(sid, None, "V2", f"unknown scenario {scenario!r}")]
    c = _RowChecker(sample)
    _check_source_file(c, sample.get("source_file"))
    for key in ("participants", "group_id"):
        for path, text in string_fields(sample.get(key), key):
            for hit in private_strings(text):
                c.add(None, "V16", f"{path} holds an absolute path or URL {hit[:120]!r}")
    all_rows = sample.get("rows") or []
    if not all_rows:
        c.add(None, "V15", "the sample has no rows (nothing was transcribed or every row was lost)")
    n_rows = len(all_rows)
    utterance_types = set(taxonomy.utterance_types())
    strategies = set(taxonomy.support_strategies(scenario))
    relations = set(taxonomy.relation_patterns(scenario))
    duration = sample.get("duration_s")
    prev_start = None
    for pos, row in enumerate(all_rows):
        ri = row.get("row_index")
        if flagged:  # its rows' JSON text may hold a private string: walk them
            _check_private(c, ri, row)
        if ri != pos + 1:
            c.add(ri, "V4", f"row_index {ri} at position {pos + 1} (must be contiguous from 1)")
        speaker = row.get("primary_speaker")
        c.entity(ri, "primary_speaker", speaker)
        is_t = speaker == THERAPIST

        # V3
        c.targets(ri, "target", row.get("target"), speaker, "V3")

        # V4 timing
        start, end = row.get("start_time"), row.get("end_time")
        if not (isinstance(start, (int, float)) and isinstance(end, (int, float))):
            c.add(ri, "V4", "start_time/end_time must be numbers")
        else:
            if not 0 <= start < end:
                c.add(ri, "V4", f"times must satisfy 0 <= start < end (got {start}-{end})")
            if duration is not None and end > duration + 1e-6:
                c.add(ri, "V4", f"end_time {end} is past the clip duration {duration}")
            if prev_start is not None and start < prev_start:
                c.add(ri, "V4", f"rows out of order: start {start} before previous start {prev_start}")
            prev_start = start

        # V5
        ut = row.get("utterance_type")
        if is_t and ut != "":
            c.add(ri, "V5", f"therapist row must have utterance_type \"\" (got {ut!r})")
        elif not is_t and ut not in utterance_types:
            c.add(ri, "V5", f"utterance_type {ut!r} is not one of the 10 utterance types")

        # V6
        for bd in row.get("background_dialogue") or []:
            c.entity(ri, "background_dialogue.speaker", bd.get("speaker"))
            c.targets(ri, "background_dialogue.target", bd.get("target"), bd.get("speaker"), "V6")
            if not (bd.get("content") or "").strip():
                c.add(ri, "V6", "background_dialogue.content is empty")

        for field in ("body_posture", "facial_expressions", "self_directed_behavior"):
            for item in row.get(field) or []:
                c.entity(ri, f"{field}.person", item.get("person"))

        # V7
        for ib in row.get("interaction_behavior") or []:
            c.entity(ri, "interaction_behavior.initiator", ib.get("initiator"))
            c.targets(ri, "interaction_behavior.target", ib.get("target"), ib.get("initiator"), "V7")

        # V8
        for em in row.get("internal_emotion") or []:
            c.entity(ri, "internal_emotion.person", em.get("person"))
            if not (em.get("emotion_description") or "").strip():
                c.add(ri, "V8", "internal_emotion.emotion_description is empty")
            inten = em.get("intensity")
            if isinstance(inten, bool) or not isinstance(inten, int):
                c.add(ri, "V8", f"intensity must be an integer (got {inten!r})")
            elif not 0 <= inten <= 10:
                c.add(ri, "V8", f"intensity {inten} is outside 0-10")

        # V9
        for vp in row.get("viewpoints_attitudes") or []:
            src, tgt = vp.get("source"), vp.get("target")
            if not isinstance(tgt, str):
                c.add(ri, "V9", f"viewpoints_attitudes.target must be one label (got {tgt!r})")
                continue
            if c.entity(ri, "viewpoints_attitudes.source", src) and c.entity(
                ri, "viewpoints_attitudes.target", tgt
            ) and src == tgt:
                c.add(ri, "V9", f"viewpoint source and target are both {src!r} (self-target)")
            if not (vp.get("viewpoint") or "").strip():
                c.add(ri, "V9", "viewpoints_attitudes.viewpoint is empty")

        # V10
        support = row.get("support_strategy") or []
        if support and not is_t:
            c.add(ri, "V10", f"support_strategy on a non-therapist row ({speaker!r})")
        for st in support:
            if st.get("provider") != THERAPIST:
                c.add(ri, "V10", f"support_strategy.provider must be {THERAPIST} (got {st.get('provider')!r})")
            tg = st.get("target")
            c.targets(ri, "support_strategy.target", tg, THERAPIST, "V10")
            if st.get("strategy_type") not in strategies:
                c.add(ri, "V10", f"strategy_type {st.get('strategy_type')!r} is not a {scenario} strategy")
            if taxonomy.group_label_alone(scenario) and isinstance(tg, list) and c.group in tg and len(tg) != 1:
                c.add(ri, "V10", f"{c.group} must be the only support target when used")

        # V11
        state = row.get("relation_cycle_state")
        if is_t and state is None:
            c.add(ri, "V11", "therapist row has no relation_cycle_state")
        elif not is_t and state is not None:
            c.add(ri, "V11", "relation_cycle_state on a non-therapist row")
        elif is_t and state != "" and state not in relations:
            c.add(ri, "V11", f"relation_cycle_state {state!r} is not a {scenario} relation pattern")

        # V14 evidence rows (0-based positions of this sample's rows; later rows allowed, spec §1.6)
        evidence = row.get("relation_cycle_evidence_rows")
        if evidence and not is_t:
            c.add(ri, "V14", f"relation_cycle_evidence_rows {evidence!r} on a non-therapist row")
        elif evidence is not None and not isinstance(evidence, (list, tuple)):
            c.add(ri, "V14", f"relation_cycle_evidence_rows must be a list of row positions (got {evidence!r})")
        elif evidence:
            seen: set[int] = set()
            for e in evidence:
                if isinstance(e, bool) or not isinstance(e, int):
                    c.add(ri, "V14", f"relation_cycle_evidence_rows holds {e!r}, not a row position")
                elif not 0 <= e < n_rows:
                    c.add(ri, "V14", f"relation_cycle_evidence_rows holds {e}, outside the sample's rows "
                                     f"(0-based positions 0-{n_rows - 1})")
                elif e in seen:
                    c.add(ri, "V14", f"relation_cycle_evidence_rows names row position {e} more than once")
                else:
                    seen.add(e)

    if subtitle_lines is not None:
        c.out.extend(check_subtitle_coverage(sample, subtitle_lines))
    return c.out


def check_subtitle_coverage(sample: dict, subtitle_lines: list[str]) -> list[Violation]:
    """V13: every lexical subtitle line is covered by some row's dialogue or background content.

    A line counts as covered when its words appear, in order, inside one row's text
    (speaker prefixes such as ``JOSH:`` may have been stripped, so they are ignored).
    """
    texts = []
    for row in sample.get("rows") or []:
        texts.append(" ".join(_words(row.get("dialogue_cleaned") or "")))
        for bd in row.get("background_dialogue") or []:
            texts.append(" ".join(_words(bd.get("content") or "")))
    haystack = "\n".join(texts)
    out = []
    for n, line in enumerate(subtitle_lines, 1):
        line = re.sub(r"^\s*(\[[^\]]+\]|[A-Z][A-Z .'-]{1,30}:)\s*", "", line)
        words = _words(line)
        if words and " ".join(words) not in haystack:
            out.append(Violation(sample.get("sample_id"), None, "V13",
                                 f"subtitle line {n} is not covered by any row: {line.strip()[:80]!r}"))
    return out


def validate_samples(samples: Iterable[dict]) -> list[Violation]:
    samples = list(samples)
    out: list[Violation] = []
    for s, flagged in zip(samples, rows_flagged(samples)):
        out.extend(_validate_sample(s, None, flagged))
    return out
