"""Voice enrolment: speakers named by their enrolled voice, through the real CLI and the real
offline diarization pipeline; the matching rule on known vectors; clear errors."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.synthetic import interviews as synth
from pipeline.media import voices
from pipeline.cli import app
from pipeline.media.rttm import read_rttm
from pipeline.paths import DataRoot


def enrolment_lines(truth: dict, therapist: bool, n: int = 4) -> list[str]:
    """Sentences of the speaker's kind that the interview itself does not contain."""
    spoken = " ".join(r["dialogue_cleaned"] for r in truth["rows"])
    pool = synth.THERAPIST_LINES if therapist else synth.CLIENT_LINES
    return [line for line in pool if line not in spoken][:n]


def test_vote_needs_a_floor_and_a_lead():
    a, b, c = np.eye(3)
    enrolled = [voices.VoicePrint("Ann", a, "m", 5.0, ()), voices.VoicePrint("Bob", b, "m", 5.0, ())]
    near_a = (0.95 * a + 0.31 * c) / np.linalg.norm(0.95 * a + 0.31 * c)
    between = (a + b) / np.linalg.norm(a + b)  # as close to Ann as to Bob: no lead
    assert voices.match({"S0": near_a, "S1": b}, enrolled) == {"S0": "Ann", "S1": "Bob"}
    assert voices.match({"S0": between}, enrolled) == {}
    assert voices.match({"S0": c}, enrolled) == {}  # like no one enrolled: below the floor
    # one to one: two labels cannot both become Ann
    assert list(voices.match({"S0": near_a, "S1": a}, enrolled[:1]).values()) == ["Ann"]


@pytest.mark.slow
def test_enrolled_voices_fix_a_wrong_speaking_order(tmp_path, models_dir, row_match):
    batch = synth.make_batch(tmp_path / "batch", [{"name": "c0", "scenario": "couple", "seed": 0}])
    manifest = batch / "manifest.csv"
    # the manifest lists the clients in the wrong order: speaking order alone swaps their names
    manifest.write_text(manifest.read_text().replace("Alan;Evelyn", "Evelyn;Alan"))
    truth = json.loads((batch / "c0.rows.json").read_text())
    root, sid, runner = tmp_path / "data", "synthetic_couple/c0", CliRunner()
    pipeline_dir = str(models_dir / "diarization-offline")
    for args in (["ingest", str(batch)], ["transcribe", sid]):
        result = runner.invoke(app, [*args, "--data-root", str(root)])
        assert result.exit_code == 0, result.output

    def diarize_and_segment() -> float:
        result = runner.invoke(app, ["diarize", sid, "--pipeline", pipeline_dir, "--data-root", str(root)])
        assert result.exit_code == 0, result.output
        assert runner.invoke(app, ["segment", sid, "--data-root", str(root)]).exit_code == 0
        return row_match(pq.read_table(root / "drafts" / f"{sid}.parquet").to_pylist(), truth["rows"])

    without = diarize_and_segment()
    for index, name in enumerate(["Therapist", "Alan", "Evelyn"]):  # the generator's voice order
        recording = synth.speak_lines(tmp_path / f"{name}.wav", index, enrolment_lines(truth, index == 0))
        result = runner.invoke(app, ["voices", "enroll", name, str(recording), "--pipeline", pipeline_dir,
                                     "--data-root", str(root)])
        assert result.exit_code == 0 and f"{name}: " in result.output, result.output
    listed = runner.invoke(app, ["voices", "list", "--data-root", str(root)]).output
    assert all(n in listed for n in ("Therapist", "Alan", "Evelyn")) and "DVectorEmbedding/256" in listed

    with_voices = diarize_and_segment()
    labels = {t.speaker for t in read_rttm(root / "diarization" / f"{sid}.rttm")}
    print(f"rows matching the script: speaking order only {without:.2f}, with enrolled voices {with_voices:.2f}")
    assert without < 0.5
    assert with_voices >= 0.9
    assert {"Therapist", "Alan"} <= labels  # named by voice in the RTTM itself

    assert runner.invoke(app, ["voices", "remove", "Alan", "--data-root", str(root)]).exit_code == 0
    assert "Alan" not in runner.invoke(app, ["voices", "list", "--data-root", str(root)]).output


@pytest.mark.slow
def test_enrol_errors_name_the_file(tmp_path, models_dir, make_video):
    runner = CliRunner()
    base = ["--pipeline", str(models_dir / "diarization-offline"), "--data-root", str(tmp_path / "data")]
    short = synth.speak_lines(tmp_path / "short.wav", 1, ["Okay."])
    result = runner.invoke(app, ["voices", "enroll", "Alan", str(short), *base])
    assert result.exit_code == 1 and "short.wav" in result.output and "at least 3 s" in result.output
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all")
    result = runner.invoke(app, ["voices", "enroll", "Alan", str(junk), *base])
    assert result.exit_code == 1 and "junk.mp4: cannot read its audio" in result.output
    result = runner.invoke(app, ["voices", "enroll", "../etc", str(short), *base])
    assert result.exit_code == 1 and "not a usable speaker name" in result.output
    assert not (tmp_path / "data" / "voices").exists() or not list((tmp_path / "data" / "voices").iterdir())


def test_fingerprint_follows_the_enrolled_voices(tmp_path):
    root = DataRoot(tmp_path)
    assert voices.fingerprint(root) == ""
    folder = root.voices_dir()
    folder.mkdir()
    (folder / "Ann.json").write_text('{"name": "Ann"}')
    first = voices.fingerprint(root)
    (folder / "Ann.json").write_text('{"name": "Ann", "again": 1}')  # re-enrolled
    second = voices.fingerprint(root)
    (folder / "Ann.json").unlink()
    assert first and second and first != second and voices.fingerprint(root) == ""
