"""The media commands through the real CLI: ingest (with a bad file), subtitle transcripts,
segmenting against the generator's truth RTTM, and the idempotent model preparation."""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
from typer.testing import CliRunner

from pipeline.synthetic import interviews as synth
from pipeline.cli import app


def test_ingest_transcribe_segment_commands(tmp_path):
    batch = synth.make_batch(tmp_path / "batch", [{"name": "s1", "scenario": "family", "seed": 1, "n_rows": 10}])
    with (batch / "manifest.csv").open("a") as fh:
        fh.write("fam/missing,family,gone.mp4,A;B;C,\n")
    root = tmp_path / "data"
    runner = CliRunner()

    result = runner.invoke(app, ["ingest", str(batch), "--data-root", str(root)])
    assert result.exit_code == 0, result.output
    assert "done 1, cached 0, quarantined 1" in result.output and "gone.mp4: file not found" in result.output
    again = runner.invoke(app, ["ingest", str(batch), "--data-root", str(root)])
    assert "done 0, cached 1, quarantined 1" in again.output

    sid = "synthetic_family/s1"
    result = runner.invoke(app, ["transcribe", sid, "--data-root", str(root)])
    assert result.exit_code == 0, result.output
    transcript = json.loads((root / "transcripts" / f"{sid}.json").read_text())
    truth = json.loads((batch / "s1.rows.json").read_text())
    n_cues = (batch / "s1.srt").read_text().count("-->")
    assert transcript["kind"] == "cue" and len(transcript["units"]) == n_cues

    # the generator's own RTTM stands in for diarization here (diarization is tested in test_diarize)
    rttm = root / "diarization" / f"{sid}.rttm"
    rttm.parent.mkdir(parents=True)
    shutil.copy(batch / "s1.rttm", rttm)
    result = runner.invoke(app, ["segment", "--all", "--data-root", str(root)])
    assert result.exit_code == 0 and f"{sid}: {len(truth['rows'])} draft rows" in result.output, result.output
    rows = pq.read_table(root / "drafts" / f"{sid}.parquet").to_pylist()
    assert [(r["primary_speaker"], r["dialogue_cleaned"]) for r in rows] == [
        (r["primary_speaker"], r["dialogue_cleaned"]) for r in truth["rows"]]
    assert [r["background_dialogue"] for r in rows] == [r["background_dialogue"] for r in truth["rows"]]
    assert all(abs(r["start_time"] - t["start_time"]) < 0.01 and abs(r["end_time"] - t["end_time"]) < 0.01
               for r, t in zip(rows, truth["rows"]))


def test_transcribe_reports_unreadable_subtitles(tmp_path):
    batch = synth.make_batch(tmp_path / "batch", [{"name": "s2", "scenario": "couple", "seed": 2, "n_rows": 6}])
    (batch / "s2.srt").write_bytes("1\n00:00:01,000 --> 00:00:02,000\nol\u00e9\n".encode("latin-1"))
    root = tmp_path / "data"
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(batch), "--data-root", str(root)]).exit_code == 0
    result = runner.invoke(app, ["transcribe", "--all", "--data-root", str(root)])
    assert result.exit_code == 1
    assert "synthetic_couple/s2:" in result.output and "not UTF-8 text" in result.output


def test_models_prepare_offline_is_idempotent(models_dir):
    result = CliRunner().invoke(app, ["models", "prepare-offline", "--models-dir", str(models_dir)])
    assert result.exit_code == 0, result.output
    for name in ("diarization-offline", "tiny-whisper-ct2", "tiny-wav2vec2-align"):
        assert (models_dir / name / ".complete").exists() and name in result.output
    config = (models_dir / "diarization-offline" / "config.yaml").read_text()
    assert "$model/embedding" in config and "AgglomerativeClustering" in config
