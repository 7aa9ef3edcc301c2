"""Every port the stack uses is an option with an environment default, shown in --help: the
Prefect server's on the stack's commands, a new desk's and its front's on `annotators add`
(kept in the registry, so later starts use the same ports)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ops.cli import app
from pipeline.labelstudio.desks import Desks
from tests.helpers import free_port
from pipeline.paths import DataRoot

RESCUE = Path(sys.executable).with_name("rescue")


def _api_url(out: str) -> str:
    return next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("export PREFECT_API_URL="))


def test_the_prefect_port_is_an_option_over_its_environment_default(tmp_path, monkeypatch):
    monkeypatch.delenv("RESCUE_PREFECT_PORT", raising=False)
    runner = CliRunner()
    default = runner.invoke(app, ["stack", "env", "--data-root", str(tmp_path)])
    assert default.exit_code == 0, default.output
    assert _api_url(default.output) == "http://127.0.0.1:4200/api"
    from_env = runner.invoke(app, ["stack", "env", "--data-root", str(tmp_path)], env={"RESCUE_PREFECT_PORT": "4312"})
    assert _api_url(from_env.output) == "http://127.0.0.1:4312/api"
    given = runner.invoke(app, ["stack", "env", "--data-root", str(tmp_path), "--prefect-port", "4311"],
                          env={"RESCUE_PREFECT_PORT": "4312"})
    assert _api_url(given.output) == "http://127.0.0.1:4311/api"
    monkeypatch.delenv("RESCUE_PREFECT_PORT", raising=False)
    for cmd in ("up", "down", "status", "env"):
        shown = runner.invoke(app, ["stack", cmd, "--help"], env={"COLUMNS": "200"})
        assert "--prefect-port" in shown.output and "RESCUE_PREFECT_PORT" in shown.output, (cmd, shown.output)
    bad = runner.invoke(app, ["stack", "env", "--prefect-port", "70000"], env={"COLUMNS": "200"})
    assert bad.exit_code == 2 and "less than or equal to 65535" in bad.output, bad.output


@pytest.mark.slow
def test_a_new_desk_takes_its_ports_from_the_options_and_keeps_them(tmp_path):
    desk_base, front_base = free_port(), free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RESCUE_DESK_BASE_PORT", "RESCUE_FRONT_BASE_PORT", "RESCUE_ANNOTATOR_PASSWORD")}
    try:
        done = subprocess.run([str(RESCUE), "annotators", "add", "ports@rescue.test", "--data-root", str(tmp_path),
                               "--password-stdin", "--desk-base-port", str(desk_base),
                               "--front-base-port", str(front_base)],
                              input="a-long-enough-password\n", env=env, capture_output=True, text=True, timeout=600)
    finally:  # the add started the desk: it must not outlive the test
        Desks(DataRoot(tmp_path)).down()
    assert done.returncode == 0, done.stdout + done.stderr
    desk = Desks(DataRoot(tmp_path)).registered_fronts()[0]
    assert desk_base <= desk.port < desk_base + 100 and front_base <= desk.front_port < front_base + 100, desk
    shown = CliRunner().invoke(app, ["annotators", "add", "--help"], env={"COLUMNS": "200"})
    assert "RESCUE_DESK_BASE_PORT" in shown.output and "RESCUE_FRONT_BASE_PORT" in shown.output
