"""Each RESCUE rule V2-V11 and V13 fires on a row that breaks it, and only there."""
from __future__ import annotations

import copy

import pytest

from pipeline.validate import validate_sample


def _row(i, speaker, target, text="Some words here.", **extra):
    row = {
        "start_time": float(i), "end_time": i + 0.9, "primary_speaker": speaker, "target": target,
        "dialogue_cleaned": text, "utterance_type": "" if speaker == "Therapist" else "disclosure",
        "background_dialogue": [], "tone_of_voice": "calm", "body_posture": [], "facial_expressions": [],
        "self_directed_behavior": [], "interaction_behavior": [], "internal_emotion": [],
        "viewpoints_attitudes": [], "support_strategy": [], "row_index": i,
        "relation_cycle_state": "" if speaker == "Therapist" else None,
        "relation_cycle_reason": None, "relation_cycle_evidence_rows": [] if speaker == "Therapist" else None,
    }
    row.update(extra)
    return row


@pytest.fixture
def sample():
    return {
        "sample_id": "ann_and_bo/001", "scenario": "couple", "participants": ["Ann", "Bo"], "duration_s": 10.0,
        "rows": [
            _row(1, "Ann", ["Therapist"], "I just feel alone in this.",
                 internal_emotion=[{"person": "Ann", "emotion_description": "feels alone", "intensity": 6}],
                 viewpoints_attitudes=[{"source": "Ann", "target": "Bo", "viewpoint": "he is absent", "attitude": "hurt"}]),
            _row(2, "Therapist", ["Ann"], "You feel alone?", relation_cycle_state="pursue_withdraw",
                 support_strategy=[{"provider": "Therapist", "target": ["Ann"], "strategy_type": "evoke", "strategy_content": "x"}]),
            _row(3, "Bo", ["Ann"], "I am right here.",
                 background_dialogue=[{"speaker": "Therapist", "target": ["Bo"], "content": "Mm-hm."}],
                 interaction_behavior=[{"initiator": "Bo", "target": ["Ann"], "description": "turns to her"}]),
        ],
    }


def test_valid_sample_has_no_violations(sample):
    assert validate_sample(sample) == []


BREAKS = [
    ("V2", 1, lambda s: s["rows"][0].update(target=["Mother"])),
    ("V2", 3, lambda s: s["rows"][2]["body_posture"].append({"person": "Dr. Smith", "description": "leans"})),
    ("V3", 1, lambda s: s["rows"][0].update(target=[])),
    ("V3", 3, lambda s: s["rows"][2].update(target=["Bo"])),
    ("V4", 2, lambda s: s["rows"][1].update(end_time=1.5)),
    ("V4", 3, lambda s: s["rows"][2].update(end_time=12.0)),
    ("V4", 7, lambda s: s["rows"][2].update(row_index=7)),  # reported under the index it carries
    ("V5", 2, lambda s: s["rows"][1].update(utterance_type="request")),
    ("V5", 1, lambda s: s["rows"][0].update(utterance_type="")),
    ("V6", 3, lambda s: s["rows"][2]["background_dialogue"][0].update(target=["Therapist"])),
    ("V6", 3, lambda s: s["rows"][2]["background_dialogue"][0].update(content=" ")),
    ("V7", 3, lambda s: s["rows"][2]["interaction_behavior"][0].update(target=[])),
    ("V8", 1, lambda s: s["rows"][0]["internal_emotion"][0].update(intensity=11)),
    ("V8", 1, lambda s: s["rows"][0]["internal_emotion"][0].update(emotion_description="")),
    ("V9", 1, lambda s: s["rows"][0]["viewpoints_attitudes"][0].update(target="Ann")),
    ("V9", 1, lambda s: s["rows"][0]["viewpoints_attitudes"][0].update(target=["Bo"])),
    ("V10", 1, lambda s: s["rows"][0].update(support_strategy=copy.deepcopy(s["rows"][1]["support_strategy"]))),
    ("V10", 2, lambda s: s["rows"][1]["support_strategy"][0].update(strategy_type="boundary")),  # a family label
    ("V10", 2, lambda s: s["rows"][1]["support_strategy"][0].update(target=["Couple", "Ann"])),
    ("V10", 2, lambda s: s["rows"][1]["support_strategy"][0].update(provider="Ann")),
    ("V11", 2, lambda s: s["rows"][1].update(relation_cycle_state="escalation_conflict")),  # a family label
    ("V11", 1, lambda s: s["rows"][0].update(relation_cycle_state="pursue_withdraw")),
    ("V11", 2, lambda s: s["rows"][1].update(relation_cycle_state=None)),
]


@pytest.mark.parametrize("rule,row_index,breaker", BREAKS)
def test_each_rule_reports_the_broken_row(sample, rule, row_index, breaker):
    breaker(sample)
    found = {(v.rule, v.row_index) for v in validate_sample(sample)}
    assert (rule, row_index) in found, found
    assert all(r == row_index for _, r in found), found  # nothing else is blamed


def test_all_violations_are_returned_not_just_the_first(sample):
    sample["rows"][0]["internal_emotion"][0]["intensity"] = -1
    sample["rows"][1]["utterance_type"] = "other"
    sample["rows"][2]["target"] = ["Nobody"]
    assert {(v.rule, v.row_index) for v in validate_sample(sample)} == {("V8", 1), ("V5", 2), ("V2", 3)}


def test_v13_subtitle_coverage(sample):
    lines = ["ANN: I just feel alone in this.", "Mm-hm.", "I am right here.", "[laughs]"]
    assert validate_sample(sample, subtitle_lines=lines) == []
    missing = validate_sample(sample, subtitle_lines=lines + ["Can we go home now?"])
    assert [(v.rule, v.message[:20]) for v in missing] == [("V13", "subtitle line 5 is n")]
