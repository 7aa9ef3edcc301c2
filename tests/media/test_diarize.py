"""Real diarization with the offline default pipeline (real pyannote code, real weights that ship
in packages) on real and synthetic speech; and the subtitle path end to end."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import diarize, transcribe, turns

pytestmark = pytest.mark.slow


def sample_dir() -> Path:
    import pyannote.audio
    return Path(pyannote.audio.__file__).parent / "sample"


def test_pyannote_sample_call_der(diar_pipeline):
    reference = diarize.read_rttm(sample_dir() / "sample.rttm")
    hypothesis = diarize.diarize_audio(sample_dir() / "sample.wav", num_speakers=2, pipeline=diar_pipeline)
    assert len({t.speaker for t in hypothesis}) == 2
    score = diarize.der(reference, hypothesis, collar=0.0)
    print(f"DER pyannote sample (2 speakers, collar 0): {score:.3f}")
    assert score <= 0.25


def test_couple_interview_der_and_subtitle_rows(diar_pipeline, couple):
    reference = diarize.read_rttm(couple["rttm"])
    hypothesis = diarize.diarize_audio(couple["wav16"], num_speakers=3, pipeline=diar_pipeline)
    score = diarize.der(reference, hypothesis)
    print(f"DER synthetic couple interview: {score:.3f}")
    # Target 0.10 is NOT met yet: measured 0.19-0.20 (13% false alarm: the bundled segmentation model
    # bridges the 0.25-0.5 s pauses between one voice's sentences; 7% confusion between espeak voices).
    # This bound guards against regressions only.
    assert score <= 0.25

    truth = couple["truth"]
    transcript = transcribe.parse_subtitles(couple["srt"], truth["duration_s"])
    table = turns.segment("synthetic/couple", transcript, hypothesis, "couple", truth["participants"])
    got = [(r["primary_speaker"], r["dialogue_cleaned"]) for r in table.to_pylist()]
    expected = [(r["primary_speaker"], r["dialogue_cleaned"]) for r in truth["rows"]]
    matched = len(set(got) & set(expected))
    print(f"subtitle path rows matching the script: {matched}/{len(expected)} (got {len(got)} rows)")
    # Target 90% is met with the true speaker turns (tests/media/test_cli.py) but not with this
    # diarization (measured ~60%); guard against regressions.
    assert matched >= 0.4 * len(expected)
    words = lambda rows: sum(len(r["dialogue_cleaned"].split()) + sum(len(b["content"].split())
                             for b in r["background_dialogue"]) for r in rows)
    assert words(table.to_pylist()) == words(truth["rows"])  # every subtitle word lands in some row


def test_cli_diarize_writes_rttm(tmp_path, models_dir, diar_pipeline):
    from typer.testing import CliRunner
    from pipeline.cli import app

    out = tmp_path / "sample.rttm"
    result = CliRunner().invoke(app, ["diarize", str(sample_dir() / "sample.wav"), "--num-speakers", "2",
                                      "--out", str(out), "--pipeline", str(models_dir / "diarization-offline")])
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert lines and all(line.startswith("SPEAKER sample 1 ") and len(line.split()) == 10 for line in lines)
    assert len({line.split()[7] for line in lines}) == 2


def test_pipeline_source_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(diarize.DiarizationError, match="HF_HUB_OFFLINE=0 and HF_TOKEN"):
        diarize.load_pipeline("pyannote/speaker-diarization-community-1")
    with pytest.raises(diarize.DiarizationError, match="does not exist; build the offline default"):
        diarize.load_pipeline(tmp_path / "nowhere")
