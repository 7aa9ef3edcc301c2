"""Each RESCUE rule V2-V11 and V13 fires on a row that breaks it, and only there."""
from __future__ import annotations

import copy

import pytest

from pipeline.validate import validate_sample
from tests.helpers import PRIVATE_EXAMPLES


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


# --- V16 at column speed: the RE2 hint never misses what the exact pattern finds ------------------

def _hinted(texts: list[str]) -> list[bool]:
    import pyarrow as pa

    from pipeline.validate.private_scan import _hint_mask

    return _hint_mask(pa.array(texts, pa.large_string())).to_pylist()


def _views(text: str) -> list[str]:
    """The text as a cell holds it and as a JSON file writes it (escaped, both ASCII modes)."""
    import json

    return [text, json.dumps(text), json.dumps(text, ensure_ascii=False), json.dumps({"k": [text]})]


@pytest.mark.parametrize("name", sorted(PRIVATE_EXAMPLES))
@pytest.mark.parametrize("before", ["", "see ", "\n", "\t(", "\u00e9 ", "\"", "x\u2028"])
def test_the_column_hint_flags_every_private_pattern_raw_and_json_escaped(name, before):
    from pipeline.validate import private_strings

    text = before + PRIVATE_EXAMPLES[name].replace("ann", "\u00e4nn") + " end"
    assert private_strings(text), text  # the example is private...
    assert all(_hinted(_views(text))), text  # ...and the hint sees it in every form a release writes


def test_the_column_hint_is_a_superset_of_the_exact_pattern_on_random_text():
    """Random strings over the characters the patterns turn on: wherever the exact pattern finds
    something, the hint flags the string, as written and JSON-escaped."""
    import random

    from pipeline.validate import private_strings

    rng = random.Random(28)
    alphabet = list("/\\:~.-_@%?=&+ \n\t\"'aAbCfilwx09\u00e9\u0301\u2028\u00a0") + ["www.", "file:", "://", "C:"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(20000)]
    private = [t for t in texts if private_strings(t)]
    assert len(private) > 500  # the alphabet does produce private strings
    views = [v for t in private for v in _views(t)]
    missed = [v for v, hit in zip(views, _hinted(views)) if not hit]
    assert missed == []
    # and it is selective: most of the random text is not flagged
    clean = [t for t in texts if not private_strings(t)]
    assert sum(_hinted(clean)) < 0.6 * len(clean)


def test_ordinary_text_and_relative_paths_are_not_flagged_by_the_hint():
    assert not any(_hinted(["and/or", "24/7", "synthetic/amara_and_kai_005/001_s06e01_ct83.json",
                            "data/therapy_merged_all/ann_and_bo/001.json", "Time: 10:30", "a 50/50 split"]))


@pytest.mark.parametrize("field", ["dialogue_cleaned", "tone_of_voice"])
def test_batch_validation_finds_the_same_v16_as_one_by_one(sample, field):
    from pipeline.validate import validate_samples

    other = copy.deepcopy(sample)
    other["sample_id"] = "ann_and_bo/002"
    other["rows"][1][field] = "clip at C:\\Users\\ann\\a.wav"
    found = validate_samples([sample, other])
    assert [(v.sample_id, v.row_index, v.rule) for v in found] == [("ann_and_bo/002", 2, "V16")], found
    assert field in found[0].message and [str(v) for v in found] == [str(v) for v in validate_sample(other)]


def test_text_blocks_keep_line_numbers_across_block_boundaries(tmp_path, monkeypatch):
    from pipeline.validate import private_scan as validate  # _TEXT_BLOCK and the scan live there

    monkeypatch.setattr(validate, "_TEXT_BLOCK", 64)  # many blocks, several files per batch
    lines = [f"line {i} is plain text" for i in range(1, 60)]
    lines[40] = "line 41 see /srv/private/a.wav"
    lines[57] = "line 58 see https://intranet.example/b"
    (tmp_path / "a.md").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.md").write_text("ok\nwww.example.org/x\n")
    (tmp_path / "c.txt").write_bytes("caf\xe9 ~ann/x\n".encode("latin-1"))  # not UTF-8: read as Latin-1
    assert validate.scan_release(tmp_path) == [
        "a.md: line 41: /srv/private/a.wav", "a.md: line 58: https://intranet.example/b",
        "b.md: line 2: www.example.org/x", "c.txt: line 1: ~ann/x"]


def test_the_table_scan_opens_every_nested_type_like_the_cell_by_cell_scan():
    """Maps, fixed-size lists, dictionaries, lists of lists of structs, large lists, list views,
    sliced chunks: the column scan reports exactly what reading every cell into Python finds."""
    import pyarrow as pa

    from pipeline.validate.private_scan import private_strings, scan_table, string_fields as _strings

    p = "/home/ann/x.wav"
    table = pa.table({
        "m": pa.array([[("k", p)], None, [("/srv/a/b", "v")]], pa.map_(pa.string(), pa.string())),
        "f": pa.array([["a", "b"], [p, None], None], pa.list_(pa.string(), 2)),
        "d": pa.array(["x", p, "x"]).dictionary_encode(),
        "n": pa.array([[[{"s": "ok"}]], [[{"s": None}], None], [[{"s": "see https://x.org/a"}]]],
                      pa.list_(pa.list_(pa.struct([("s", pa.string())])))),
        "ls": pa.array([["a"], [p], []], pa.large_list(pa.large_string())),
        "lv": pa.array([["a"], ["www.x.org/y"], None], pa.list_view(pa.string())),
        "num": pa.array([1, 2, 3]),
    })
    for t in (table, pa.concat_tables([table.slice(1), table.slice(0, 1)])):  # sliced chunks
        want = [f"x: {path}: {hit}" for name in t.column_names for i, v in enumerate(t.column(name).to_pylist())
                for path, text in _strings(v, f"{name}[{i}]") for hit in private_strings(text)]
        assert len(want) == 7 and sorted(scan_table(t, "x")) == sorted(want)
