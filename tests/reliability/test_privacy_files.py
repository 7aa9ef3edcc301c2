"""Private data stays private: WAVs, subtitle copies, transcripts, RTTM, drafts and voice prints
are owner-only (0600 files in 0700 folders) while releases stay shared; a whole CLI run
(ingest, transcribe, diarize, segment, voices enroll) writes nothing into the user's home, and
onnxruntime's telemetry (a device id and an event queue under ~/.cache/Microsoft/) stays off."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.store import atomic_write_text, make_private_dir, write_once_dir
from pipeline.synthetic import interviews as synth

REPO = Path(__file__).resolve().parents[2]
RESCUE = Path(sys.executable).with_name("rescue")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def bare_env(home: Path) -> dict:
    """No inherited caches or settings: only PATH, the empty HOME and the models directory."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
            "RESCUE_MODELS_DIR": str(Settings.from_env().models_dir)}


def test_store_writes_private_files_in_private_folders_and_shared_ones_elsewhere(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    old = os.umask(0o022)
    try:
        private = make_private_dir(shared / "transcripts")
        assert mode(atomic_write_text(private / "a" / "b.json", "{}")) == 0o600
        assert mode(private / "a") == 0o700 and mode(private) == 0o700
        assert mode(atomic_write_text(shared / "work" / "rows.json", "{}")) == 0o644
        with write_once_dir(shared / "releases" / "1.0.0") as tmp:  # releases are meant to be shared
            atomic_write_text(tmp / "manifest.json", "{}")
        assert mode(shared / "releases" / "1.0.0") == 0o755
        assert mode(shared / "releases" / "1.0.0" / "manifest.json") == 0o644
    finally:
        os.umask(old)


def test_importing_pipeline_switches_onnxruntime_telemetry_off(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    code = "import pipeline, onnxruntime, os; print(os.environ['ORT_DISABLE_TELEMETRY'])"
    out = subprocess.run([sys.executable, "-c", code], env=bare_env(home), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "true"
    assert list(home.rglob("*")) == []  # without the switch: .cache/Microsoft/DeveloperTools/.onnxruntime/deviceid


@pytest.mark.timeout(600)
def test_a_cli_run_leaves_home_empty_and_private_data_owner_only(tmp_path):
    batch = synth.make_batch(tmp_path / "batch", [{"name": "s1", "scenario": "couple", "seed": 3, "n_rows": 8}])
    voice = synth.speak_lines(tmp_path / "therapist.wav", 0, ["Hello, thank you for coming in today.",
                                                              "Tell me what happened on Sunday."] * 2)
    home, root = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    env = bare_env(home)
    for args in (["ingest", str(batch)], ["transcribe", "--all"], ["diarize", "--all"], ["segment", "--all"],
                 ["voices", "enroll", "Therapist", str(voice)]):
        run = subprocess.run([str(RESCUE), *args, "--data-root", str(root)], env=env, capture_output=True,
                             text=True, cwd=tmp_path, timeout=400)
        assert run.returncode == 0, (args, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []

    sid = "synthetic_couple/s1"
    private_files = [*(root / "media").glob("*.wav"), *(root / "subtitles").rglob("*.srt"),
                     root / "transcripts" / f"{sid}.json", root / "diarization" / f"{sid}.rttm",
                     root / "drafts" / f"{sid}.parquet", *(root / "voices").glob("*.json")]
    assert len(private_files) == 6 and all(p.is_file() for p in private_files)
    assert {str(p.relative_to(root)): oct(mode(p)) for p in private_files} == {
        str(p.relative_to(root)): "0o600" for p in private_files}
    folders = [root / area for area in ("media", "subtitles", "transcripts", "diarization", "drafts", "voices")]
    folders += [p for area in folders for p in area.rglob("*") if p.is_dir()]
    assert {str(p.relative_to(root)): oct(mode(p)) for p in folders} == {
        str(p.relative_to(root)): "0o700" for p in folders}
