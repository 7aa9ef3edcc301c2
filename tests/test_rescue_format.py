"""Import/export of the paper's JSONL, on the real release head and on broken input."""
from __future__ import annotations

import copy
import json

from pipeline.benchmark import paper_format as rf
from pipeline.paths import DataRoot


def test_real_head_imports_without_violations_and_round_trips_byte_exact(benchmark_head_path):
    result = rf.load_rescue_jsonl(benchmark_head_path)
    assert [s["sample_id"] for s in result.samples] == [
        "alan_and_evelyn/001_s01e01_ct25_segment04",
        "alan_and_evelyn/002_s01e02_ct81_segment01",
        "alan_and_evelyn/003_s01e02_ct81_segment02",
    ]
    assert result.violations == []
    # The only findings are the spec's documented mojibake quirk, kept verbatim.
    assert result.quirks and {q.rule for q in result.quirks} == {"mojibake"}
    original = benchmark_head_path.read_text(encoding="utf-8").splitlines()
    assert list(rf.iter_rescue_lines(result.samples)) == original


def test_relation_label_lives_on_the_therapist_row(benchmark_head_path):
    sample = rf.load_rescue_jsonl(benchmark_head_path).samples[0]
    rows = {r["row_index"]: r for r in sample["rows"]}
    assert rows[3]["relation_cycle_state"] == "attack_attack"
    assert rows[3]["relation_cycle_reason"].startswith("Alan is blaming Evelyn as impossible to please")
    assert rows[3]["relation_cycle_evidence_rows"] == [1, 2]
    assert rows[10]["relation_cycle_state"] == ""  # "" = no clear pattern, kept distinct from null
    assert rows[10]["relation_cycle_reason"]
    assert rows[2]["relation_cycle_state"] is None  # client row: no key in the release
    assert rows[2]["relation_cycle_reason"] is None


def test_mojibake_repair_is_opt_in(benchmark_head_path):
    fixed = rf.load_rescue_jsonl(benchmark_head_path, fix_mojibake=True).samples[1]
    reasons = [r["relation_cycle_reason"] for r in fixed["rows"] if r["relation_cycle_reason"]]
    assert any("Evelyn\u2019s" in t for t in reasons)
    assert not any("\u00e2\u0080" in t for t in reasons)
    assert rf.repair_mojibake("plain text, caf\u00e9") == "plain text, caf\u00e9"


def _line(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


def test_bad_input_is_reported_with_sample_and_row_and_the_rest_imported(benchmark_head_path):
    good = [json.loads(l) for l in benchmark_head_path.read_text(encoding="utf-8").splitlines()]
    s1, s2, s3 = good

    wrong_type = copy.deepcopy(s2)
    wrong_type["rows"][4]["start_time"] = "7.5"  # a string where a number belongs
    wrong_type["sample_id"] = "x/wrong_type"

    labels = copy.deepcopy(s3)
    labels["sample_id"] = "x/labels"
    labels["rows"][0]["utterance_type"] = "sarcasm"  # unknown label
    labels["rows"][1]["target"] = [labels["rows"][1]["primary_speaker"]]  # self-target
    labels["rows"][2]["internal_emotion"] = [{"person": "Alan", "emotion_description": "feels tense", "intensity": 11}]

    lines = [_line(s1), '{"sample_id": "x/broken", "rows": [', _line(wrong_type), _line(labels), _line(s1), _line(s3)]
    result = rf.read_rescue_lines(lines, source="batch.jsonl")

    imported = [s["sample_id"] for s in result.samples]
    assert imported == [s1["sample_id"], "x/labels", s3["sample_id"]]
    by_rule = {(v.rule, v.sample_id, v.row_index) for v in result.violations}
    messages = [str(v) for v in result.violations]
    assert any("batch.jsonl line 2: malformed JSON" in m for m in messages)
    assert ("V1", "x/wrong_type", 5) in by_rule and any("start_time must be a number" in m for m in messages)
    assert ("V5", "x/labels", 1) in by_rule and any("'sarcasm'" in m for m in messages)
    assert ("V3", "x/labels", 2) in by_rule and any("self-target" in m for m in messages)
    assert ("V8", "x/labels", 3) in by_rule and any("intensity 11 is outside 0-10" in m for m in messages)
    assert ("duplicate", s1["sample_id"], None) in by_rule
    assert result.skipped == 3  # malformed line, untypeable sample, duplicate


def test_v12_disagreeing_relation_copies_are_reported(benchmark_head_path):
    s1 = json.loads(benchmark_head_path.read_text(encoding="utf-8").splitlines()[0])
    s1["rows"][1]["relation_pattern"] = "withdraw_withdraw"  # row 3 (T) says attack_attack
    s1["rows"][5]["relation_pattern"] = "attack_attack"  # row 7 is a client row
    result = rf.read_rescue_lines([_line(s1)])
    v12 = {(v.row_index, v.rule) for v in result.violations}
    assert v12 == {(2, "V12"), (6, "V12")}


def test_invalid_utf8_line_is_reported_by_line(tmp_path, benchmark_head_path):
    data = benchmark_head_path.read_bytes().split(b"\n")
    data.insert(1, b'{"sample_id": "caf\xe9"}')
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(data))
    result = rf.load_rescue_jsonl(path)
    assert len(result.samples) == 3
    assert any("bad.jsonl line 2: not valid UTF-8" in str(v) for v in result.violations)


BAD_IDS = ["../../x", "/tmp/x", "a/../../b", "a\x00b", "a\\b"]


def test_sample_ids_outside_the_grammar_are_refused_at_import(tmp_path):
    """A sample_id becomes file names later (transcripts, drafts, ...): ids that are no plain
    relative name are a violation naming the line and the id, and nothing is written for them."""
    from typer.testing import CliRunner

    from pipeline import corpus
    from pipeline.cli import app
    from pipeline.synthetic import corpus as synth_corpus

    good = json.loads(next(rf.iter_rescue_lines(synth_corpus.generate(scale=0.02, seed=1)[:1])))
    lines = [json.dumps(good)] + [json.dumps({**good, "sample_id": bad}) for bad in BAD_IDS]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = rf.load_rescue_jsonl(path)
    assert [s["sample_id"] for s in result.samples] == [good["sample_id"]] and result.skipped == len(BAD_IDS)
    for line_no, bad in enumerate(BAD_IDS, start=2):
        [v] = [v for v in result.violations if f"in.jsonl line {line_no}:" in v.message]
        assert v.rule == "format" and repr(bad) in v.message and "is not allowed" in v.message, v

    outside = [tmp_path / "x", tmp_path.parent / "x", tmp_path / "b"]
    existed = {p: p.exists() for p in outside}
    res = CliRunner(env={"COLUMNS": "240"}).invoke(app, ["import-rescue", str(path), "--data-root",
                                                         str(tmp_path / "data" / "root")])
    assert res.exit_code == 0, res.output
    assert "1 samples" in res.output and f"{len(BAD_IDS)} skipped" in res.output
    assert "'../../x' is not allowed" in res.output and "'/tmp/x' is not allowed" in res.output
    assert [s["sample_id"] for s in corpus.load_corpus(DataRoot(tmp_path / "data" / "root"))] == [good["sample_id"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "in.jsonl"]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["root"]
    assert {p: p.exists() for p in outside} == existed
