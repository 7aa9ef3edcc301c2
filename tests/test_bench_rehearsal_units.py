"""The rehearsal's own comparisons (benchmarks/bench_rehearsal.py; benchmarks/rehearsal/checks.py),
without a stack: how two releases are compared (--reference) and how a gold value is compared
with the truth."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.rehearsal import checks


def _release(path: Path, recorded_at: str, evidence: tuple = (3,), by: str = "bench_rehearsal") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (path / "data" / "rows").mkdir(parents=True)
    rows = [{"sample_id": "c/one", "row_index": 1, "relation_cycle_evidence_rows": [1]},
            {"sample_id": "c/one", "row_index": 2, "relation_cycle_evidence_rows": list(evidence)}]
    pq.write_table(pa.Table.from_pylist(rows), path / "data" / "rows" / "train.parquet")
    override = {"round": "relation", "by": by, "recorded_at": recorded_at}
    (path / "manifest.json").write_text(json.dumps({"gates": [{"override": override}]}, indent=1))
    (path / "README.md").write_text(f"Override by {by} (recorded_at: {recorded_at}), reason: \"x\"\n")
    return path


def test_releases_equal_but_for_the_time_an_override_was_recorded(tmp_path):
    a = _release(tmp_path / "a", "2026-12-02T13:00:00+00:00")
    b = _release(tmp_path / "b", "2026-12-02T14:11:09+00:00")
    assert checks.compare_releases(a, b) == []


def test_releases_that_differ_are_named_file_by_file(tmp_path):
    a = _release(tmp_path / "a", "2026-12-02T13:00:00+00:00", evidence=(3,))
    b = _release(tmp_path / "b", "2026-12-02T13:00:00+00:00", evidence=(2, 3), by="someone else")
    (a / "extra.txt").write_text("x")
    # a rows table that differs also says which cells, with both values
    assert checks.compare_releases(a, b) == ["only in this run's release: extra.txt", "differs: README.md",
                                            "differs: data/rows/train.parquet", "differs: manifest.json",
                                            "  row c/one #2 relation_cycle_evidence_rows: this run [3], reference [2, 3]"]
    assert checks.compare_releases(a, tmp_path / "none") == [f"{tmp_path / 'none'}: no release there"]


def test_a_release_difference_says_which_half_it_came_from(tmp_path):
    """--save-release keeps the machine half's files beside the release; a faulted run whose
    release differs says whether the generated batch, a transcript, an RTTM or a draft already differed."""
    from pipeline.paths import DataRoot

    data, batch = DataRoot(tmp_path / "data"), tmp_path / "data" / "batches" / "b"
    batch.mkdir(parents=True)
    (batch / "x.srt").write_text("1")
    (data.root / "diarization" / "c").mkdir(parents=True)
    (data.root / "diarization" / "c" / "one.rttm").write_text("SPEAKER one 1 0.5 1.0")
    (data.root / "transcripts" / "c").mkdir(parents=True)
    (data.root / "transcripts" / "c" / "one.json").write_text("{}")
    (data.root / "drafts" / "c").mkdir(parents=True)
    (data.root / "drafts" / "c" / "one.parquet").write_bytes(b"rows")
    before = checks.machine_half_files(data, batch)
    assert sorted(before) == ["batch/x.srt", "diarization/c/one.rttm", "drafts/c/one.parquet", "transcripts/c/one.json"]
    release = tmp_path / "ref" / "release"
    assert checks.machine_record(release) == tmp_path / "ref" / "release.machine.json"
    assert checks.which_half(before, checks.machine_record(release)) == [
        "  (no release.machine.json beside the reference: which half differs is not known)"]
    release.mkdir(parents=True)
    checks.machine_record(release).write_text(json.dumps(before))
    assert "the human half" in checks.which_half(before, checks.machine_record(release))[0]
    (data.root / "drafts" / "c" / "one.parquet").write_bytes(b"other rows")
    (data.root / "drafts" / "c" / "two.parquet").write_bytes(b"rows")
    assert checks.which_half(checks.machine_half_files(data, batch), checks.machine_record(release)) == [
        "  machine half differs: drafts/c/one.parquet", "  machine half differs: drafts/c/two.parquet (only in this run)"]


def test_gold_and_truth_compared_by_content_not_form():
    from pipeline.annotation.rounds import load_round

    transcript, strategy = load_round("transcript"), load_round("strategy")
    target = transcript.field("target")
    assert checks._canonical(target, ["Dana", "Mark"]) == checks._canonical(target, ["Mark", "Dana"])
    assert checks._canonical(target, ["Dana"]) != checks._canonical(target, ["Mark"])
    text = transcript.field("dialogue_cleaned")
    assert checks._canonical(text, " I  never said that ") == checks._canonical(text, "I never said that")
    assert checks._canonical(text, "I never said") != checks._canonical(text, "I never said that")
    records = strategy.field("support_strategy")
    const = [s.name for s in records.subfields if s.type == "const"]
    assert const  # the provider: the therapist, always
    filled = {s.name: ("reframe" if s.type == "choice" else ["Dana"] if s.type == "multichoice" else "softly")
              for s in records.subfields if s.type != "const"}
    with_const = {**filled, **{name: "x" for name in const}}
    assert checks._canonical(records, [with_const]) == checks._canonical(records, [filled])
    changed = {**filled, next(iter(filled)): "someone else"}
    assert checks._canonical(records, [changed]) != checks._canonical(records, [filled])
    assert checks._canonical(records, None) == checks._canonical(records, [])


def test_alpha_judged_by_its_interval_only_where_there_are_units_enough():
    from pipeline.quality.measures import MIN_UNITS

    many = {"alpha": 0.61, "ci_low": 0.55, "ci_high": 0.68, "n_pairable": MIN_UNITS}
    assert checks.alpha_verdict(many, 0.62) == (True, "inside")
    assert checks.alpha_verdict(many, 0.70) == (False, "OUTSIDE")
    assert checks.alpha_verdict({**many, "ci_low": None, "ci_high": None}, 0.62) == (False, "no interval measured")
    assert checks.alpha_verdict(many, None) == (None, "no closed form")
    few = {"alpha": 1.0, "ci_low": 1.0, "ci_high": 1.0, "n_pairable": 5}  # five units, all agreeing
    ok, why = checks.alpha_verdict(few, 0.62)
    assert ok is None and "5 pairable units" in why


def test_an_interview_the_gold_stage_held_back_is_named_with_its_reason(tmp_path):
    """An interview missing from the release is reported with the gold stage's own reason: its
    first violation and their number, or the annotators it still waits for."""
    from pipeline.paths import DataRoot
    from pipeline.validate import Violation, violations_table
    from pipeline import store

    data = DataRoot(tmp_path / "data")
    out = data.gold_dir()
    out.mkdir(parents=True)
    store.write_parquet(violations_table([Violation("c/one", 7, "V3", "speaker 'X' is not a participant"),
                                          Violation("c/one", 9, "V3", "speaker 'Y' is not a participant")]),
                        out / "violations.parquet")
    waiting = {"c/two": ["emotion: 2 of 3 annotators (a, b)"]}
    (out / "summary.json").write_text(json.dumps({"waiting_for_annotators": waiting}))
    held = checks.gold_held_back(data)
    assert held == {"c/one": "2 violation(s), the first row 7: V3: speaker 'X' is not a participant",
                    "c/two": "waiting for annotators: emotion: 2 of 3 annotators (a, b)"}


def test_alpha_just_outside_its_95_interval_is_judged_again_family_wise():
    """Nine fields judged at once: an expected alpha just outside one field's 95% interval is
    judged at family-wise 95% (Bonferroni), and passes saying so; one far outside still fails."""
    from pipeline.quality.measures import MIN_UNITS

    measured = {"alpha": 0.906, "ci_low": 0.899, "ci_high": 0.911, "n_pairable": MIN_UNITS}  # scale 1.0's case
    assert checks.alpha_verdict(measured, 0.898, judged=1) == (False, "OUTSIDE")
    ok, why = checks.alpha_verdict(measured, 0.898, judged=9)
    assert ok is True and why.startswith("inside at family-wise 95% over 9 fields: [0.896, ")
    assert checks.alpha_verdict(measured, 0.890, judged=9) == (False, "OUTSIDE")
    assert checks.alpha_verdict(measured, 0.903, judged=9) == (True, "inside")


def test_an_alpha_outside_passes_only_where_the_round_measured_the_seeded_answers_own():
    """Outside its interval even family-wise, a field passes when the seeded answers, measured
    without Label Studio, give exactly the round's alpha (an unlikely draw of the answers, none
    lost or changed); a round that changed one answer of them fails."""
    from pipeline.annotation.rounds import load_round
    from pipeline.quality.measures import MIN_UNITS, round_agreement
    from pipeline.synthetic import batch, corpus
    from pipeline.synthetic.annotators import simulate_labels

    samples = corpus.generate(scale=0.05, seed=3)
    sims = batch.simulated_annotators(seed=3)
    truth = {"annotators": [{"name": a.name, "error_rates": a.error_rates, "seed": a.seed} for a in sims],
             "interviews": [{**s, "fault": {"kind": "corrupt video"} if i == 0 else None}
                            for i, s in enumerate(samples)]}
    seeded = checks.seeded_alphas(truth, "emotion")
    rnd = load_round("emotion")
    answered = simulate_labels(rnd, samples[1:], sims)  # what the desks hold: the planted fault never annotated
    pulled = {f.field: f for f in round_agreement(answered, "emotion", rnd).fields}
    assert seeded == {name: f.alpha for name, f in pulled.items()}
    everything = {f.field: f.alpha for f in round_agreement(simulate_labels(rnd, samples, sims), "emotion", rnd).fields}
    assert everything != seeded  # the faulted interview's answers are not among the seeded ones

    lines = answered.to_pylist()  # one annotator's utterance type changed in one row
    line = next(ln for ln in lines if ln["field"] == "utterance_type")
    others = sorted({json.loads(ln["value"]) for ln in lines if ln["field"] == "utterance_type"} - {json.loads(line["value"])})
    line["value"] = json.dumps(others[0])
    changed = round_agreement(type(answered).from_pylist(lines, schema=answered.schema), "emotion", rnd)
    changed_alpha = next(f.alpha for f in changed.fields if f.field == "utterance_type")
    assert changed_alpha != seeded["utterance_type"]

    far = {"alpha": seeded["utterance_type"], "ci_low": seeded["utterance_type"] - 0.01,
           "ci_high": seeded["utterance_type"] + 0.01, "n_pairable": MIN_UNITS}
    expected = seeded["utterance_type"] + 0.2  # outside even family-wise
    assert checks.alpha_verdict(far, expected, judged=9) == (False, "OUTSIDE")
    ok, why = checks.alpha_verdict(far, expected, judged=9, seeded=seeded["utterance_type"])
    assert ok is True and "seeded answers measured without Label Studio give the same" in why
    moved = {**far, "alpha": changed_alpha, "ci_low": changed_alpha - 0.01, "ci_high": changed_alpha + 0.01}
    assert checks.alpha_verdict(moved, expected, judged=9, seeded=seeded["utterance_type"]) == (False, "OUTSIDE")


def test_the_seeded_answers_leave_out_what_the_pull_refused_and_nothing_for_a_note():
    """An answer the pull refused (a problem naming its row and field, e.g. a self-target) is left
    out of the seeded answers, as the pull leaves it out of the label table; a task's note (two
    submits: the latest is used) names no answer and leaves every one in."""
    import pyarrow as pa

    from pipeline.annotation.rounds import load_round
    from pipeline.quality.measures import round_agreement
    from pipeline.synthetic import batch, corpus
    from pipeline.synthetic.annotators import simulate_labels

    samples = corpus.generate(scale=0.05, seed=5)
    sims = batch.simulated_annotators(seed=5)
    truth = {"annotators": [{"name": a.name, "error_rates": a.error_rates, "seed": a.seed} for a in sims],
             "interviews": [{**s, "fault": None} for s in samples]}
    rnd = load_round("viewpoints")
    lines = simulate_labels(rnd, samples, sims).to_pylist()
    gone = next(ln for ln in lines if ln["field"] == "viewpoints_attitudes" and json.loads(ln["value"]))
    refused = [{"sample_id": gone["sample_id"], "row_index": gone["row_index"], "annotator": f"{gone['annotator']}@example.org",
                "field": "viewpoints_attitudes.target", "problem": "self-target: X is also the source"}]
    note = [{"sample_id": gone["sample_id"], "row_index": None, "annotator": f"{gone['annotator']}@example.org",
             "field": None, "problem": "part 1 by them: 2 annotations; the latest is used"}]
    kept = pa.Table.from_pylist([ln for ln in lines if ln is not gone], schema=simulate_labels(rnd, [], sims).schema)
    without = {f.field: f.alpha for f in round_agreement(kept, "viewpoints", rnd).fields}
    assert checks.seeded_alphas(truth, "viewpoints", refused) == without
    assert checks.seeded_alphas(truth, "viewpoints", note) == checks.seeded_alphas(truth, "viewpoints") != without
