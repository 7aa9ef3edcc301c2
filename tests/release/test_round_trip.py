"""Every round trip exact: a release -> its ``paper/benchmark.jsonl`` -> ``rescue import-rescue`` ->
a release gives the same samples, rows and labels, through the real CLI.

Over a small generated release that has what the published shape cannot carry (a relation on an
interview's first row, evidence never given, clip durations) - the demo's full run (stack, desks,
simulated annotators) takes minutes, this takes seconds - and over the published head.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import taxonomy
from pipeline.benchmark import paper_format, release
from pipeline.cli import app
from pipeline.synthetic import corpus as synth_corpus
from pipeline.paths import DataRoot

CONFIGS = ("samples", "rows", "itp", "rpp", "stp", "ssp", "er", "vp")


def _first_row_therapist(sample: dict, state: str, reason: str | None, evidence: list[int] | None) -> None:
    row = sample["rows"][0]
    client = row["primary_speaker"]
    row.update(primary_speaker=taxonomy.THERAPIST, target=[client], utterance_type="", internal_emotion=[],
               viewpoints_attitudes=[], support_strategy=[], background_dialogue=[], relation_cycle_state=state,
               relation_cycle_reason=reason, relation_cycle_evidence_rows=evidence)
    for key in ("body_posture", "facial_expressions"):
        row[key] = [dict(i, person=taxonomy.THERAPIST) for i in row[key]]
    row["interaction_behavior"] = []


def generated() -> tuple[release.ReleaseInput, dict]:
    """Synthetic couples and families with the cases the published shape cannot carry."""
    samples = synth_corpus.load_synthetic(scale=0.05, seed=3).samples
    couple = next(s for s in samples if s["scenario"] == "couple")
    family = next(s for s in samples if s["scenario"] == "family")
    # the case: a relation on row 1 with reason 'unclear' and evidence [83] (here: the last row)
    _first_row_therapist(couple, taxonomy.relation_patterns("couple")[0], "unclear", [len(couple["rows"]) - 1])
    # a first-row "no clear pattern" without reason or evidence: the published file's own form
    _first_row_therapist(family, "", None, [])
    # evidence never given on a later therapist row (None, not [])
    later = next(r for r in family["rows"][1:] if r["primary_speaker"] == taxonomy.THERAPIST)
    later["relation_cycle_evidence_rows"] = None
    family["duration_s"] = None  # a clip duration that is not known stays unknown
    inp = release.ReleaseInput(samples, {"kind": "test"})
    release.validate(inp)
    assert not inp.problems, inp.problems[:3]
    return inp, {"couple": couple, "family": family, "later": later}


def _cli(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def _round_trip(root: Path, first: Path) -> Path:
    """import-rescue the release's own paper/benchmark.jsonl into the (empty) corpus, build 9.9.9 from it."""
    out = _cli("import-rescue", str(first / "paper" / "benchmark.jsonl"), "--data-root", str(root))
    assert "0 violations" in out and "0 skipped" in out, out
    _cli("release", "build", "--version", "9.9.9", "--data-root", str(root))
    return root / "releases" / "9.9.9"


def _assert_same(a: Path, b: Path) -> None:
    for config in CONFIGS:
        ta, tb = release.read_config(a, config), release.read_config(b, config)
        assert ta.equals(tb), (config, [c for c in ta.column_names if not ta[c].equals(tb[c])])
    paper = lambda p: {f.relative_to(p).as_posix(): f.read_bytes() for f in sorted((p / "paper").rglob("*")) if f.is_file()}  # noqa: E731
    assert paper(a) == paper(b)


def test_a_release_survives_its_own_paper_file(tmp_path):
    inp, case = generated()
    first = release.build_release(inp, "1.0.0", DataRoot(tmp_path))
    again = _round_trip(tmp_path, first.path)
    _assert_same(first.path, again)
    rows = {(r["sample_id"], r["row_index"]): r for r in release.read_config(again, "rows").to_pylist()}
    one = rows[(case["couple"]["sample_id"], 1)]
    assert (one["relation_cycle_reason"], one["relation_cycle_evidence_rows"]) == ("unclear", [len(case["couple"]["rows"]) - 1])
    assert rows[(case["family"]["sample_id"], 1)]["relation_cycle_evidence_rows"] == []
    assert rows[(case["family"]["sample_id"], case["later"]["row_index"])]["relation_cycle_evidence_rows"] is None
    durations = {s["sample_id"]: s["duration_s"] for s in release.read_config(again, "samples").to_pylist()}
    assert durations[case["couple"]["sample_id"]] == case["couple"]["duration_s"] > 0
    assert durations[case["family"]["sample_id"]] is None
    # the diff agrees, in both outputs
    report = json.loads(_cli("release", "diff", "1.0.0", "9.9.9", "--data-root", str(tmp_path), "--json"))
    tables = [report["samples"], report["rows"], *report["labels"].values()]
    assert all(t["added"] == t["removed"] == t["changed"] == 0 for t in tables), report
    assert "changed:" not in _cli("release", "diff", "1.0.0", "9.9.9", "--data-root", str(tmp_path))


def test_the_extra_fields_appear_only_where_the_published_shape_cannot_carry_a_value(tmp_path):
    inp, case = generated()
    lines = {s["sample_id"]: paper_format.release_sample(s) for s in inp.samples}
    couple, family = lines[case["couple"]["sample_id"]], lines[case["family"]["sample_id"]]
    assert couple["duration_s"] == case["couple"]["duration_s"] and "duration_s" not in family
    assert list(couple)[-2:] == ["duration_s", "rows"]
    assert couple["rows"][0]["relation_cycle_reason"] == "unclear"  # row 1: no row before it
    assert "relation_cycle_reason" not in family["rows"][0]  # nothing to carry: the published form
    later = family["rows"][case["later"]["row_index"] - 1]
    assert later["relation_cycle_evidence_rows"] is None and "relation_cycle_reason" in later
    own = [(s["sample_id"], r["row_index"]) for s in lines.values() for r in s["rows"] if "relation_cycle_reason" in r]
    assert sorted(own) == sorted([(case["couple"]["sample_id"], 1), (case["family"]["sample_id"], case["later"]["row_index"])])
    # the release's writer (each row dumped once where both forms agree) gives the same lines
    for s in inp.samples:
        assert paper_format.release_lines(s) == (paper_format.dumps_line(paper_format.release_sample(s)),
                                                 paper_format.dumps_line(paper_format.release_sample(s, True)))


def test_the_published_head_round_trips(benchmark_head_path, tmp_path):
    _cli("release", "build", "--version", "1.0.0", "--input", str(benchmark_head_path), "--data-root", str(tmp_path))
    first = tmp_path / "releases" / "1.0.0"
    assert (first / "paper" / "benchmark.jsonl").read_bytes() == benchmark_head_path.read_bytes()
    _assert_same(first, _round_trip(tmp_path, first))


def test_import_reads_the_own_copy_and_flags_a_disagreement(benchmark_head_path):
    obj = json.loads(benchmark_head_path.read_text(encoding="utf-8").splitlines()[0])
    therapist = obj["rows"][2]  # row 3; row 2 carries the shifted copy
    therapist["relation_cycle_reason"], therapist["relation_cycle_evidence_rows"] = "another reason", [1, 2]
    res = paper_format.read_rescue_lines([json.dumps(obj)])
    row = res.samples[0]["rows"][2]
    assert (row["relation_cycle_reason"], row["relation_cycle_evidence_rows"]) == ("another reason", [1, 2])
    assert [(v.row_index, v.rule) for v in res.violations] == [(3, "V12")]
    assert "relation_pattern_reason of row 2" in res.violations[0].message
    # wrong types: the sample cannot be stored, so it is skipped, naming the row
    bad = copy.deepcopy(obj)
    bad["rows"][2]["relation_cycle_evidence_rows"] = ["1"]
    res = paper_format.read_rescue_lines([json.dumps(bad)])
    assert not res.samples and res.skipped == 1
    assert [(v.row_index, v.rule) for v in res.violations] == [(3, "V1")]
    for duration in (-1, "393.764", True):
        res = paper_format.read_rescue_lines([json.dumps(dict(obj, duration_s=duration))])
        assert not res.samples and "duration_s must be a positive number" in res.violations[0].message


def test_diff_names_sample_row_and_field_in_the_human_output(tmp_path):
    inp, case = generated()
    release.build_release(inp, "1.0.0", DataRoot(tmp_path))
    new = copy.deepcopy(inp)
    sid = case["couple"]["sample_id"]
    first = next(s for s in new.samples if s["sample_id"] == sid)["rows"][0]
    old_reason = next(s for s in inp.samples if s["sample_id"] == sid)["rows"][0]["relation_cycle_reason"]
    first["relation_cycle_reason"] = "clearer"
    changed = [s for s in new.samples if s["scenario"] == "couple"][1:4]
    for s in changed:
        s["rows"][1]["dialogue_cleaned"] += " Really."
    olds = {(s["sample_id"], 2): s["rows"][1]["dialogue_cleaned"] for s in inp.samples}
    release.build_release(new, "1.1.0", DataRoot(tmp_path))
    out = _cli("release", "diff", "1.0.0", "1.1.0", "--data-root", str(tmp_path), "--examples", "2")
    keys = sorted([(sid, 1, "relation_cycle_reason")] + [(s["sample_id"], 2, "dialogue_cleaned") for s in changed])
    assert f"rows changed: {len(keys)}, the first 2:" in out
    shown = {(sid, 1): f"relation_cycle_reason {json.dumps(old_reason)} -> \"clearer\""}
    # a long text is shown round its change: the end of the old text, then the new one
    shown.update({(s["sample_id"], 2): f"dialogue_cleaned \"\u2026{olds[(s['sample_id'], 2)][-20:]}\" -> "
                  f"\"\u2026{olds[(s['sample_id'], 2)][-20:]} Really.\"" for s in changed})
    for s_id, row, field in keys[:2]:
        assert f"\n  sample {s_id} row {row}: {shown[(s_id, row)]}\n" in out, out
    assert f"sample {keys[2][0]} row {keys[2][1]}:" not in out
    assert f"  ... and {len(changed) - 1} more (--examples N, or --json)" in out
    assert "rpp labels changed: 1, the first 1:" in out and f"  sample {sid} row 1: label_reason " in out
    assert f'label_reason {json.dumps(old_reason)} -> "clearer"' in out
    report = json.loads(_cli("release", "diff", "1.0.0", "1.1.0", "--data-root", str(tmp_path), "--json"))
    assert {d["key"]: d["fields"] for d in report["labels"]["rpp"]["examples"]["changed_fields"]} == {f"{sid}/1": ["label_reason"]}
    # the JSON names the old and the new value of each changed field
    assert [d["values"] for d in report["labels"]["rpp"]["examples"]["changed_fields"]] == [
        {"label_reason": {"old": old_reason, "new": "clearer"}}]
