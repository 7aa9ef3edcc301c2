"""Start-up failures of the server manager, with STAND-IN `label-studio` executables (shell
scripts that behave like a misbehaving server) so no real 35-second start is needed."""
from __future__ import annotations

import os
import time

import pytest

from pipeline.labelstudio.server import LabelStudioServer, LabelStudioServerError
from tests.helpers import free_port


def _fake_venv(tmp_path, body: str):
    exe = tmp_path / "venv" / "bin" / "label-studio"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/usr/bin/env bash\n" + body)
    exe.chmod(0o755)
    return exe.parent.parent


@pytest.fixture
def creds(monkeypatch):
    monkeypatch.setenv("LABEL_STUDIO_USERNAME", "admin@rescue.test")
    monkeypatch.setenv("LABEL_STUDIO_PASSWORD", "not-a-real-one")
    monkeypatch.setenv("LABEL_STUDIO_USER_TOKEN", "ab" * 20)


def test_a_server_that_moved_to_another_port_is_stopped_and_reported(tmp_path, creds):
    port = free_port()
    venv = _fake_venv(tmp_path, f'echo "Starting development server at http://127.0.0.1:{port + 1}/"\nexec sleep 60\n')
    server = LabelStudioServer(tmp_path / "ls", port=port, venv=venv)
    with pytest.raises(LabelStudioServerError, match=f"port {port} was taken, Label Studio moved to port {port + 1}"):
        server.start(timeout=20)
    assert server.status().running is False  # the stray server was stopped


def test_a_server_that_dies_during_start_points_to_its_log(tmp_path, creds):
    venv = _fake_venv(tmp_path, 'echo "django.db.utils.OperationalError: disk I/O error" >&2\nexit 1\n')
    server = LabelStudioServer(tmp_path / "ls", port=free_port(), venv=venv)
    with pytest.raises(LabelStudioServerError, match="exited during start-up; see .*server.log"):
        server.start(timeout=20)
    assert "disk I/O error" in server.log_file.read_text()


def test_an_unhealthy_server_times_out_with_a_clear_message(tmp_path, creds):
    venv = _fake_venv(tmp_path, "exec sleep 60\n")
    server = LabelStudioServer(tmp_path / "ls", port=free_port(), venv=venv)
    start = time.monotonic()
    with pytest.raises(LabelStudioServerError, match=r"did not become healthy at http://127.0.0.1:\d+/health within 3 s"):
        server.start(timeout=3)
    assert time.monotonic() - start < 15
    assert server.stop() is True and server.status().running is False


def test_missing_credentials_and_bad_token_are_named(tmp_path, monkeypatch):
    for var in ("LABEL_STUDIO_USERNAME", "LABEL_STUDIO_PASSWORD", "LABEL_STUDIO_USER_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    server = LabelStudioServer(tmp_path / "ls", port=free_port(), venv=_fake_venv(tmp_path, "exit 0\n"))
    with pytest.raises(LabelStudioServerError, match="set LABEL_STUDIO_USERNAME, LABEL_STUDIO_PASSWORD, LABEL_STUDIO_USER_TOKEN"):
        server.start()
    monkeypatch.setenv("LABEL_STUDIO_USERNAME", "admin@rescue.test")
    monkeypatch.setenv("LABEL_STUDIO_PASSWORD", "x")
    monkeypatch.setenv("LABEL_STUDIO_USER_TOKEN", "not-hex-and-secret")
    with pytest.raises(LabelStudioServerError) as err:
        server.start()
    assert "40 hexadecimal characters" in str(err.value) and "not-hex-and-secret" not in str(err.value)
    assert not os.path.exists(server.pid_file)
