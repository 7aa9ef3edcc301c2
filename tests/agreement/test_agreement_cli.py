"""The stage from the command line: report files, gate, override, gold build (no server needed)."""
from __future__ import annotations

import json

import pyarrow as pa
from typer.testing import CliRunner

from pipeline import corpus, schemas, store
from pipeline.quality.gates import gate_records, release_blockers
from pipeline.quality import gold
from pipeline.paths import DataRoot
from pipeline.annotation.rounds import load_round, round_names
from pipeline.cli import app
from pipeline.synthetic.annotators import SimulatedAnnotator


def _write_round(root, name, samples, error):
    rnd = load_round(name)
    lines = [x for i in range(2) for x in SimulatedAnnotator(f"a{i}", {"*": error}, seed=i).label_rows(rnd, samples)]
    store.write_parquet(pa.Table.from_pylist(lines, schema=schemas.LABELS), DataRoot(root).labels(name))


def test_agreement_report_gate_override_and_gold(tmp_path, truth_samples, draft_of):
    root = tmp_path / "data"
    corpus.save_corpus(DataRoot(root), draft_of(truth_samples))
    for name in round_names():
        _write_round(root, name, truth_samples, 0.02 if name != "relation" else 0.5)
    runner = CliRunner(env={"COLUMNS": "200"})
    ok = runner.invoke(app, ["agreement", "emotion", "--data-root", str(root)])
    assert ok.exit_code == 0, ok.output
    assert "utterance_type" in ok.output and "pass" in ok.output
    rdir = DataRoot(root).labels("emotion").parent / "emotion.agreement"
    for name in ("report.md", "report.html", "agreement.json", "annotators.alpha.png",
                 "utterance_type.distribution.png", "utterance_type.confusion.0-1.png"):
        assert (rdir / name).stat().st_size > 200, name
    assert (rdir / "report.html").read_text().count("<img") >= 3
    figures = json.loads((rdir / "agreement.json").read_text())
    assert figures["fields"][0]["field"] == "utterance_type" and figures["fields"][0]["pairs"]

    low = runner.invoke(app, ["agreement", "relation", "--data-root", str(root)])
    assert low.exit_code == 3 and "blocks a release" in low.output
    gates = {g["round"]: g for g in gate_records(DataRoot(root))}
    assert gates["emotion"]["blocks_release"] is False
    assert gates["relation"]["blocks_release"] is True
    assert any("relation" in m for m in release_blockers(DataRoot(root)))
    refused = runner.invoke(app, ["agreement", "relation", "--data-root", str(root), "--override", "pilot"])
    assert refused.exit_code == 1 and "reason and the name" in refused.output
    over = runner.invoke(app, ["agreement", "relation", "--data-root", str(root), "--override",
                               "pilot round, re-annotation planned", "--by", "lead"])
    assert over.exit_code == 0, over.output
    gates = {g["round"]: g for g in gate_records(DataRoot(root))}
    assert gates["relation"]["override"]["reason"] == "pilot round, re-annotation planned"
    assert gates["relation"]["blocks_release"] is False and release_blockers(DataRoot(root)) == []
    # new labels make the override stale: the round blocks again
    _write_round(root, "relation", truth_samples, 0.6)
    runner.invoke(app, ["agreement", "relation", "--data-root", str(root)])
    assert any("other labels" in m for m in release_blockers(DataRoot(root)))

    refused = runner.invoke(app, ["gold", "build", "--data-root", str(root)])
    assert refused.exit_code == 1 and "no adjudication" in refused.output
    # all rounds with unresolved fallbacks: speaker and target come from different annotators on some
    # rows, so V3/V5 break there - those samples are reported and kept out of the corpus
    before = {s["sample_id"]: s for s in corpus.load_corpus(DataRoot(root))}
    broken = runner.invoke(app, ["gold", "build", "--data-root", str(root), "--allow-unresolved"])
    assert broken.exit_code == 1 and "violations" in broken.output
    summary = json.loads((DataRoot(root).gold_dir() / "summary.json").read_text())
    assert summary["invalid_samples"] and summary["corpus"]["replaced"] == len(truth_samples) - len(summary["invalid_samples"])
    after = {s["sample_id"]: s for s in corpus.load_corpus(DataRoot(root))}
    assert all(after[sid] == before[sid] for sid in summary["invalid_samples"])
    # rounds whose fallbacks are valid labels: a clean build
    built = runner.invoke(app, ["gold", "build", "--data-root", str(root), "--allow-unresolved",
                                "--round", "emotion", "--round", "strategy"])
    assert built.exit_code == 0, built.output
    import pyarrow.parquet as pq

    t = pq.read_table(DataRoot(root).gold_dir() / "provenance.parquet")
    assert t.schema.equals(gold.PROVENANCE) and t.num_rows > 500
    assert set(t.column("method").to_pylist()) >= {"unanimous", "unresolved"}
    assert set(t.column("round").to_pylist()) == {"emotion", "strategy"}


def test_gold_of_an_interview_in_annotation_goes_back_to_the_work_store_until_finished(tmp_path, truth_samples,
                                                                                     draft_of):
    """After the first round an interview lacks the later rounds' fields (utterance_type, ...):
    its gold returns to the work store without V1-V12 complaints, and reaches the corpus (checked)
    only when every round has labels for it."""
    root = tmp_path / "data"
    samples = truth_samples[:3]
    corpus.merge_into_work(DataRoot(root), draft_of(samples))
    names = list(round_names())
    runner = CliRunner(env={"COLUMNS": "200"})
    _write_round(root, names[0], samples, 0.0)
    first = runner.invoke(app, ["gold", "build", "--data-root", str(root)])
    assert first.exit_code == 0, first.output
    summary = json.loads((DataRoot(root).gold_dir() / "summary.json").read_text())
    assert summary["violations"] == 0 and summary["finished"] == [] and summary["work"]["replaced"] == 3
    assert corpus.load_corpus(DataRoot(root)) == []
    for name in names[1:]:
        _write_round(root, name, samples, 0.0)
    done = runner.invoke(app, ["gold", "build", "--data-root", str(root)])
    assert done.exit_code == 0, done.output
    summary = json.loads((DataRoot(root).gold_dir() / "summary.json").read_text())
    assert summary["finished"] == sorted(s["sample_id"] for s in samples) and summary["violations"] == 0
    assert sorted(s["sample_id"] for s in corpus.load_corpus(DataRoot(root))) == summary["finished"]
