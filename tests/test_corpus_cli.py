"""`rescue import-rescue` and `rescue validate` end to end, and corpus merging."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
from typer.testing import CliRunner

from pipeline import corpus
from pipeline.cli import app
from pipeline.paths import DataRoot

runner = CliRunner(env={"COLUMNS": "240"})  # rich wraps at the terminal width


def test_import_rescue_writes_corpus_and_report(tmp_path, benchmark_head_path):
    root = tmp_path / "data"
    res = runner.invoke(app, ["import-rescue", str(benchmark_head_path), "--data-root", str(root)])
    assert res.exit_code == 0, res.output
    assert "3 samples (69 rows) imported" in res.output
    samples = corpus.load_corpus(DataRoot(root))
    assert [len(s["rows"]) for s in samples] == [16, 17, 36]
    report = next((root / "reports").glob("import-*-violations.parquet"))
    assert set(pq.read_table(report).column("rule").to_pylist()) == {"mojibake"}
    again = runner.invoke(app, ["import-rescue", str(benchmark_head_path), "--data-root", str(root)])
    assert "0 added, 0 replaced, 3 unchanged" in again.output
    assert runner.invoke(app, ["validate", "--data-root", str(root)]).exit_code == 0


def test_import_reports_bad_rows_and_keeps_the_rest(tmp_path, benchmark_head_path):
    lines = benchmark_head_path.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[2])
    bad["rows"][3]["internal_emotion"] = [{"person": "Alan", "emotion_description": "feels x", "intensity": 11}]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([lines[0], "not json", lines[1], json.dumps(bad)]) + "\n", encoding="utf-8")
    root = tmp_path / "data"
    res = runner.invoke(app, ["import-rescue", str(path), "--data-root", str(root)])
    assert res.exit_code == 0, res.output
    assert "3 samples (69 rows) imported, 1 skipped" in res.output
    assert "in.jsonl line 2: malformed JSON" in res.output
    assert "alan_and_evelyn/003_s01e02_ct81_segment02 row 4: V8: intensity 11 is outside 0-10" in res.output
    # the invalid sample is kept (and reported), so `rescue validate` fails until it is fixed
    val = runner.invoke(app, ["validate", "--data-root", str(root)])
    assert val.exit_code == 1 and "intensity 11" in val.output


def test_merge_replaces_changed_samples_only(tmp_path, benchmark_head_path):
    from pipeline.benchmark.paper_format import load_rescue_jsonl

    samples = load_rescue_jsonl(benchmark_head_path).samples
    corpus.merge_into_corpus(DataRoot(tmp_path), samples[:2])
    changed = json.loads(json.dumps(samples[1]))
    changed["rows"][0]["tone_of_voice"] = "flat"
    summary = corpus.merge_into_corpus(DataRoot(tmp_path), [samples[0], changed, samples[2]])
    assert (summary.added, summary.replaced, summary.unchanged) == ([samples[2]["sample_id"]], [changed["sample_id"]], [samples[0]["sample_id"]])
    assert corpus.load_corpus(DataRoot(tmp_path))[1]["rows"][0]["tone_of_voice"] == "flat"
