"""Private data stays private: the store writes owner-only files (0600 in 0700 folders) while
releases stay shared, and importing the pipeline switches onnxruntime's telemetry (a device id
and an event queue under ~/.cache/Microsoft/) off. That a whole CLI run in processes of their own
(ingest, transcribe, diarize, segment, voices enroll) writes nothing into the user's home and
leaves WAVs, subtitle copies, transcripts, RTTM, drafts and voice prints owner-only is checked on
the CLI path's own run (tests/flows/test_cli_path.py), not on a pipeline run of its own."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from pipeline.config import Settings
from pipeline.store import atomic_write_text, make_private_dir, write_once_dir

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
