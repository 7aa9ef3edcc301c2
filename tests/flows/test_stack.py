"""The real stack: `rescue stack` management, and deployments run through server + worker."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_stack_status_reports_everything_running(stack):
    proc = stack.rescue("stack", "status", "--data-root", str(stack.root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for name in ("prefect-server", "prefect-worker", "label-studio"):
        assert "state=running" in lines[name], proc.stdout
    assert f"127.0.0.1:{stack.env['RESCUE_PREFECT_PORT']}" in lines["prefect-server"]


def test_stack_up_is_idempotent(stack):
    pids = {p.name: p.read_text() for p in (stack.root / "stack" / "pids").glob("*.json")}
    proc = stack.rescue("stack", "up", "--data-root", str(stack.root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "already running" in proc.stdout
    assert pids == {p.name: p.read_text() for p in (stack.root / "stack" / "pids").glob("*.json")}


def test_server_and_state_live_under_the_data_root(stack):
    assert (stack.root / "stack" / "prefect-home").is_dir()
    assert stack.env["PREFECT_HOME"].startswith(str(stack.root))
    assert stack.env["PREFECT_API_URL"].startswith("http://127.0.0.1:")


def test_deployments_registered_on_the_process_pool(stack):
    proc = stack.prefect("deployment", "ls")
    assert proc.returncode == 0, proc.stderr
    for name in ("ingest-batch/default", "ingest-batch/gpu", "ingest-interview/default", "ingest-interview/gpu",
                 "annotation-round/default", "build-release/default"):
        assert name in proc.stdout
    pool = stack.prefect("work-pool", "inspect", "rescue-cpu")
    assert pool.returncode == 0 and "process" in pool.stdout
    gcl = stack.prefect("gcl", "inspect", "gpu", "--output", "json")
    assert gcl.returncode == 0, gcl.stderr
    assert json.loads(gcl.stdout)["limit"] == 1
    push = stack.prefect("gcl", "inspect", "rescue-push", "--output", "json")  # pushes across hosts
    assert push.returncode == 0 and json.loads(push.stdout)["limit"] == 1, push.stdout + push.stderr


def test_build_release_deployment_run_watch(stack):
    proc = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                         "--param", "source=synthetic:0.05", "--param", f"data_root={stack.root}", "--watch")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((stack.root / "releases" / "1.0.0" / "manifest.json").read_text())
    assert manifest["version"] == "1.0.0" and manifest["files"]
    # Rerun of the same version and source is a no-op success (resume after a crash)...
    again = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                          "--param", "source=synthetic:0.05", "--param", f"data_root={stack.root}", "--watch")
    assert again.returncode == 0, again.stdout[-3000:]
    # ...but the same version from another source fails: releases are immutable.
    other = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                          "--param", "source=synthetic:0.06", "--param", f"data_root={stack.root}", "--watch")
    assert other.returncode == 1
