"""Task builders on the published RESCUE samples: the spec's worked examples (§4), the
selection helpers, determinism, context windows, and that no gold reaches any input."""
from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest

from pipeline import schemas
from pipeline.benchmark import tasks
from pipeline.benchmark.tasks.common import even_sample, instance_id, pick_evenly

S1 = "alan_and_evelyn/001_s01e01_ct25_segment04"


def _rows(table: pa.Table, sample_id: str) -> list[dict]:
    return [r for r in table.to_pylist() if r["sample_id"] == sample_id]


# --- selection helpers -------------------------------------------------------------------

def test_even_sample_spreads_and_uses_bankers_rounding():
    assert even_sample(list(range(6)), 4) == [0, 2, 3, 5]  # 0, 1.67, 3.33, 5
    # 2.5 rounds to 2 (banker's), not 3; 3.5 rounds to 4
    assert even_sample(list(range(6)), 3) == [0, 2, 5]
    assert even_sample(list(range(8)), 3) == [0, 4, 7]
    assert pick_evenly(list(range(6)), 3) == [0, 2, 5]


def test_single_pick_and_edge_cases_differ_between_helpers():
    items = ["a", "b", "c", "d", "e"]
    assert even_sample(items, 1) == ["c"]  # middle item
    assert pick_evenly(items, 1) == ["a"]  # first item
    assert even_sample(items, 0) == items and pick_evenly(items, -1) == items
    assert even_sample(items, 5) == items and pick_evenly(items[:2], 5) == ["a", "b"]
    assert even_sample([], 3) == []


# --- worked examples (spec §4) ---------------------------------------------------------

def test_itp_sample1_is_balanced_4_plus_4(head_samples):
    got = _rows(tasks.build_task("itp", head_samples), S1)
    yes = [r["row_index"] for r in got if r["label"] == "yes"]
    no = [r["row_index"] for r in got if r["label"] == "no"]
    assert yes == [2, 9, 11, 15] and no == [1, 6, 7, 8]
    assert instance_id(S1, "itp", 9) in {r["instance_id"] for r in got}
    assert [r["row_index"] for r in got] == sorted(r["row_index"] for r in got)
    r9 = next(r for r in got if r["row_index"] == 9)
    # context of 3 ends with the decision row (the scripts' window); the next row is hidden
    assert [c["row_index"] for c in r9["prior_context"]] == [7, 8, 9]
    assert r9["decision_after_row"]["row_index"] == 9 and r9["label_boundary_type"] == "therapist_entry"


def test_rpp_sample1_instances_and_full_prior_context(head_samples):
    got = _rows(tasks.build_task("rpp", head_samples), S1)
    assert [(r["row_index"], r["label"]) for r in got] == [
        (3, "attack_attack"), (5, "attack_attack"), (14, "withdraw_withdraw"), (16, "withdraw_withdraw")]
    assert [c["row_index"] for c in got[2]["prior_context"]] == list(range(1, 14))  # context -1 = all prior
    assert got[0]["turn_id"] == "001_s01e01_ct25_segment04__row3" and got[0]["instance_id"] == instance_id(S1, "rpp", 3)
    assert got[0]["label_evidence_rows"] == [1, 2]  # moved from the release's shifted copy on row 2
    assert "pursue_withdraw" in got[0]["candidate_relation_labels"]


def test_er_sample1_checkpoints(head_samples):
    got = _rows(tasks.build_task("er", head_samples), S1)
    assert [r["row_index"] for r in got] == [6, 8, 9]
    first = got[0]
    assert first["label"] == "feels mischaracterized and a need to justify her reactions"
    assert first["label_intensity"] == 7 and first["timestamp"] == "32.090-42.920"
    assert [c["row_index"] for c in first["prior_context"]] == [3, 4, 5]


def test_vp_first_instance_matches_released_record(head_samples):
    first = tasks.build_task("vp", head_samples, context_size=-1).to_pylist()[0]  # vp.jsonl holds all prior rows
    assert first["instance_id"] == instance_id(S1, "vp", 2) and first["row_index"] == 2
    assert first["participants"] == ["Alan", "Therapist", "Evelyn"]
    assert first["timestamp"] == "7.760-17.300" and first["speaker"] == "Alan" and first["target"] == ["Therapist"]
    assert first["label"] == [{"source": "Alan", "target": "Evelyn",
                               "viewpoint": "she is perpetually dissatisfied and impossible to please",
                               "attitude": "blaming and resentful"}]
    (ctx,) = first["prior_context"]
    assert ctx == {
        "row_index": 1, "timestamp": "0.000-6.080", "primary_speaker": "Alan", "target": ["Therapist"],
        "dialogue_cleaned": "Like I just wanna be better. I don't wanna do this anymore. Deep down in my heart, "
                            "like maybe it was too far gone already.",
        "background_dialogue": [], "tone_of_voice": "resigned and heavy",
        "body_posture": [{"person": "Alan", "description": "hunched forward, looking down"}],
        "facial_expressions": [{"person": "Alan", "description": "somber, looking away from others"}],
        "self_directed_behavior": [{"person": "Alan", "description": "fidgeting with a tissue in his hands"}],
        "interaction_behavior": [],
    }


def test_stp_and_ssp_share_rows_and_targets(head_samples):
    stp, ssp = tasks.build_task("stp", head_samples), tasks.build_task("ssp", head_samples)
    assert stp.select(["sample_id", "row_index"]).equals(ssp.select(["sample_id", "row_index"]))
    s1 = _rows(stp, S1)
    assert [(r["row_index"], r["label"]) for r in s1] == [(5, "Evelyn")]
    assert s1[0]["candidate_target_labels"] == ["Alan", "Evelyn", "Couple"]
    s3 = _rows(ssp, "alan_and_evelyn/003_s01e02_ct81_segment02")
    r8 = next(r for r in s3 if r["row_index"] == 8)
    assert r8["known_support_target"] == "Couple" and r8["label"] == "goal_align"
    assert r8["target_internal_emotion"] is None  # off by default


def test_ssp_target_emotion_option_reads_only_prior_rows(head_samples):
    table = tasks.build_task("ssp", head_samples, include_target_emotion=True)
    s3 = _rows(table, "alan_and_evelyn/003_s01e02_ct81_segment02")
    r9 = next(r for r in s3 if r["row_index"] == 9)  # target Alan; rows 6..8 in the window
    sample = next(s for s in head_samples if s["sample_id"].endswith("003_s01e02_ct81_segment02"))
    # the most recent row before 9 (within 3 rows) with an Alan emotion is row 6
    expected = [e for e in sample["rows"][5]["internal_emotion"] if e["person"] == "Alan"]
    assert expected and r9["target_internal_emotion"] == expected


# --- properties ------------------------------------------------------------------------

def test_builds_are_deterministic_and_ids_unique(head_samples):
    a = tasks.build_all(head_samples)
    b = tasks.build_all(copy.deepcopy(head_samples[::-1]))  # input order must not matter
    for task in tasks.TASKS:
        assert a[task].equals(b[task]), task
        ids = a[task]["instance_id"].to_pylist()
        assert len(ids) == len(set(ids)), task
        assert a[task].schema.equals(schemas.TASK_SCHEMAS[task])


GOLD_TEXT = {  # row field -> sub-field holding free text that is gold for some task
    "internal_emotion": "emotion_description",
    "viewpoints_attitudes": "viewpoint",
    "support_strategy": "strategy_content",
}


def _plant(samples: list[dict], label_names_too: bool) -> tuple[list[dict], set[str]]:
    samples = copy.deepcopy(samples)
    markers: set[str] = set()
    for s in samples:
        for row in s["rows"]:
            tag = f"{s['sample_id']}#{row['row_index']}"
            def mark(kind: str) -> str:
                m = f"GOLDLEAK<{kind}:{tag}>"
                markers.add(m)
                return m
            row["utterance_type"] = mark("ut")
            for field, sub in GOLD_TEXT.items():
                for item in row[field]:
                    item[sub] = mark(field)
            for item in row["viewpoints_attitudes"]:
                item["attitude"] = mark("attitude")
            if row.get("relation_cycle_state") is not None:
                row["relation_cycle_reason"] = mark("reason")
                if label_names_too:
                    row["relation_cycle_state"] = mark("relation")
            if label_names_too:
                for item in row["support_strategy"]:
                    item["strategy_type"] = mark("strategy")
    return samples, markers


@pytest.mark.parametrize("label_names_too", [False, True])
def test_no_gold_reaches_any_input_column(head_samples, label_names_too):
    planted, markers = _plant(head_samples, label_names_too)
    tables = tasks.build_all(planted, options={"ssp": {"include_target_emotion": False}})
    found_in_labels = 0
    for task, table in tables.items():
        assert table.num_rows > 0 or (label_names_too and task in ("rpp", "ssp")), task
        for col in table.column_names:
            text = json.dumps(table[col].to_pylist())
            hits = [m for m in markers if m in text] if "GOLDLEAK" in text else []
            if col.startswith("label"):
                found_in_labels += len(hits)
            else:
                assert not hits, f"{task}.{col} leaks gold: {hits[:3]}"
    assert found_in_labels > 0  # the markers did reach the gold columns, so the check has teeth
    assert set(schemas.CONTEXT_ROW_KEYS).isdisjoint(
        {"internal_emotion", "viewpoints_attitudes", "support_strategy", "utterance_type",
         "relation_cycle_state", "relation_cycle_reason", "relation_cycle_evidence_rows"})


def test_context_size_zero_and_custom(head_samples):
    t0 = tasks.build_task("er", head_samples, context_size=0)
    assert all(c == [] for c in t0["prior_context"].to_pylist())
    t1 = tasks.build_task("stp", head_samples, context_size=1)
    for r in t1.to_pylist():
        assert [c["row_index"] for c in r["prior_context"]] == [r["row_index"] - 1]


def test_itp_sample_without_negatives_is_dropped():
    base = {"sample_id": "g/s", "scenario": "couple", "participants": ["A", "B"], "group_id": "g"}
    rows = []
    for k, spk in enumerate(["A", "Therapist", "B", "Therapist"], 1):  # no two client rows in a row
        rows.append({"row_index": k, "start_time": k, "end_time": k + 0.5, "primary_speaker": spk,
                     "target": ["Therapist"] if spk != "Therapist" else ["A"], "dialogue_cleaned": "x"})
    assert tasks.build_task("itp", [{**base, "rows": rows}]).num_rows == 0
