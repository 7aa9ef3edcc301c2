"""Importing the package switches telemetry off (outside the repo too) unless the operator chose."""
from __future__ import annotations

import os
import subprocess
import sys


def _env_after_import(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYANNOTE_METRICS_ENABLED", "DO_NOT_TRACK", "HF_HUB_OFFLINE")}
    env.update(extra)
    code = "import json, os, pipeline; print(json.dumps({k: os.environ.get(k) for k in ('PYANNOTE_METRICS_ENABLED', 'DO_NOT_TRACK', 'HF_HUB_OFFLINE', 'PREFECT_SERVER_ANALYTICS_ENABLED')}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, check=True)
    import json

    return json.loads(out.stdout)


def test_telemetry_is_off_by_default():
    assert _env_after_import({}) == {"PYANNOTE_METRICS_ENABLED": "0", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
                                     "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def test_operator_choice_wins():
    assert _env_after_import({"HF_HUB_OFFLINE": "0"})["HF_HUB_OFFLINE"] == "0"


def test_secret_never_prints_itself(monkeypatch):
    from pipeline.config import Secret, Settings

    s = Secret("abcdef0123456789")
    assert "abcdef" not in repr(s) and "abcdef" not in str(s)
    # monkeypatch puts back what was there (the session's Label Studio token, when it runs first)
    monkeypatch.setenv("LABEL_STUDIO_USER_TOKEN", "feedfacefeedface")
    assert "feedface" not in repr(Settings.from_env()) and "feedface" not in str(Settings.from_env().describe())


def test_a_flow_process_writes_owner_only_whatever_umask_it_started_with():
    code = "import os; os.umask(0o022); import flows; print(oct(os.umask(0o022)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0o77"


def test_a_command_writes_owner_only_and_gives_the_umask_back(tmp_path):
    """In process (a notebook, a test): the command's own files are private; the caller's umask
    is put back afterwards."""
    import stat

    from typer.testing import CliRunner

    from pipeline.cli import app

    old = os.umask(0o022)
    try:
        res = CliRunner().invoke(app, ["release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                                       "--data-root", str(tmp_path / "data")])
        assert res.exit_code == 0, res.output
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(old)
    written = [tmp_path / "data", *(tmp_path / "data").rglob("*")]
    assert any(p.name == "manifest.json" for p in written)
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in written if stat.S_IMODE(p.stat().st_mode) & 0o077} == {}
