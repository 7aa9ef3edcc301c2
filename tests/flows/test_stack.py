"""The real stack: `rescue stack` management (the Prefect server, worker and the desks registered
under the stack's data root), and deployments run through server + worker."""
from __future__ import annotations

import json
import os
import time
from unittest import mock

import pytest
from pipeline.paths import DataRoot
from tests.flows.conftest import crash_a_silent_run

pytestmark = pytest.mark.slow


DESK = "stack-desk@example.org"


def _desk_lines(stdout: str) -> dict[str, str]:
    return {line.split()[1]: line for line in stdout.splitlines() if line.startswith("desk ")}


@pytest.fixture(scope="module")
def stack_desk(stack):
    """A person registered (not started) under the stack's own data root; `rescue stack up`
    starts their desk with the rest. The desk is stopped when the module is done."""
    from pipeline.labelstudio.desks import Desks
    from pipeline.config import Settings

    with mock.patch.dict(os.environ, {"RESCUE_DESK_BASE_PORT": stack.env["RESCUE_DESK_BASE_PORT"]}):
        desks = Desks(DataRoot(stack.root), Settings.from_env(stack.root))
    desks.register(DESK, "annotator")
    try:
        assert not desks.server(DESK).status().running
        proc = stack.rescue("stack", "up", "--data-root", str(stack.root))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"desk of {DESK} (annotator)" in proc.stdout, proc.stdout
        yield desks
    finally:
        desks.down([DESK])
        desks.close()


def test_stack_status_reports_everything_running(stack, stack_desk):
    proc = stack.rescue("stack", "status", "--data-root", str(stack.root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for name in ("prefect-server", "prefect-worker"):
        assert "state=running" in lines[name], proc.stdout
    assert f"127.0.0.1:{stack.env['RESCUE_PREFECT_PORT']}" in lines["prefect-server"]
    assert "label-studio" not in lines, proc.stdout  # no shared Label Studio: one desk per person
    desks = _desk_lines(proc.stdout)
    assert list(desks) == [DESK], proc.stdout
    assert "state=running" in desks[DESK] and "role=annotator" in desks[DESK], proc.stdout
    assert f"url={stack_desk.url(DESK)}" in desks[DESK], proc.stdout


def test_stack_up_is_idempotent(stack, stack_desk):
    pids = {p.name: p.read_text() for p in (stack.root / "stack" / "pids").glob("*.json")}
    desk_pid = stack_desk.server(DESK).status().pid
    proc = stack.rescue("stack", "up", "--data-root", str(stack.root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "already running" in proc.stdout
    assert pids == {p.name: p.read_text() for p in (stack.root / "stack" / "pids").glob("*.json")}
    assert desk_pid and stack_desk.server(DESK).status().pid == desk_pid, "the running desk was not restarted"


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


def _starter_log(stack) -> str:
    return (stack.root / "stack" / "logs" / "flow-run-starter.log").read_text()


def test_build_release_deployment_run_watch(stack):
    deadline = time.monotonic() + 300  # the flow-run starter's imports; till then runs start the engine themselves
    while "ready on" not in _starter_log(stack) and time.monotonic() < deadline:
        time.sleep(0.5)
    forked = _starter_log(stack).count(" as pid ")
    proc = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                         "--param", "source=synthetic:0.05", "--param", f"data_root={stack.root}", "--watch")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((stack.root / "releases" / "1.0.0" / "manifest.json").read_text())
    assert manifest["version"] == "1.0.0" and manifest["files"]
    assert _starter_log(stack).count(" as pid ") == forked + 1  # the run was forked from the starter
    # Rerun of the same version and source is a no-op success (resume after a crash)...
    again = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                          "--param", "source=synthetic:0.05", "--param", f"data_root={stack.root}", "--watch")
    assert again.returncode == 0, again.stdout[-3000:]
    # ...but the same version from another source fails: releases are immutable.
    other = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                          "--param", "source=synthetic:0.06", "--param", f"data_root={stack.root}", "--watch")
    assert other.returncode == 1


def test_flow_runs_start_as_the_engine_in_the_stacks_python(stack):
    """`rescue stack up` makes rescue-cpu start each flow run as `<the stack's python> -m
    ops.warm_start prefect.engine` (the engine forked from the stack's flow-run starter; without
    a command Prefect's workspace supervisor starts first, then execs the engine). `rescue stack
    register` alone keeps it; a command somebody else set is kept, the earlier `-m prefect.engine`
    is brought up to date. Deployments run with it (test_build_release_deployment_run_watch), and
    their runs are the starter's children."""
    import sys

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolUpdate

    from ops import prefect_setup as st

    def command() -> str | None:
        with stack.prefect_settings(), get_client(sync_client=True) as client:
            return client.read_work_pool(st.WORK_POOL).base_job_template["variables"]["properties"]["command"]["default"]

    def set_command(value: str | None) -> None:
        with stack.prefect_settings(), get_client(sync_client=True) as client:
            template = client.read_work_pool(st.WORK_POOL).base_job_template
            template["variables"]["properties"]["command"]["default"] = value
            client.update_work_pool(st.WORK_POOL, WorkPoolUpdate(base_job_template=template))

    want = f"{sys.executable} -m ops.warm_start prefect.engine"
    assert command() == want
    proc = stack.rescue("stack", "register", "--data-root", str(stack.root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert command() == want
    with stack.prefect_settings():
        assert st.direct_engine(st.WORK_POOL, sys.executable) == "unchanged"
        try:
            set_command("/opt/site/wrapper --engine")
            assert st.direct_engine(st.WORK_POOL, sys.executable) == "kept /opt/site/wrapper --engine"
            assert command() == "/opt/site/wrapper --engine"
            set_command(None)
            assert st.direct_engine(st.WORK_POOL, sys.executable) == "set"
            set_command(f"{sys.executable} -m prefect.engine")
            assert st.direct_engine(st.WORK_POOL, sys.executable) == "set"
        finally:
            set_command(want)
    assert command() == want


def test_register_creates_the_zombie_automation_once(stack):
    """`rescue stack up` registered it; `rescue stack register` twice more leaves exactly one,
    unchanged, and the workers' flow runs send heartbeats more often than its window."""
    from datetime import timedelta

    from prefect.client.orchestration import get_client

    from ops import prefect_setup as st

    def automations():
        with stack.prefect_settings(), get_client(sync_client=True) as client:
            return client.read_automations_by_name(st.ZOMBIE_AUTOMATION)

    first = automations()
    assert len(first) == 1, first
    auto = first[0]
    assert auto.enabled and auto.trigger.posture.value == "Proactive"
    assert auto.trigger.after == {"prefect.flow-run.heartbeat"}
    assert {"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Crashed"} <= auto.trigger.expect
    assert auto.trigger.within == timedelta(seconds=st.ZOMBIE_AFTER_S)
    assert [(a.type, a.state.value) for a in auto.actions] == [("change-flow-run-state", "CRASHED")]
    assert int(stack.env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"]) < st.ZOMBIE_AFTER_S
    for _ in range(2):
        proc = stack.rescue("stack", "register", "--data-root", str(stack.root))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    again = automations()
    assert [a.id for a in again] == [auto.id], again  # the same one, not a second copy
    assert again[0].trigger == auto.trigger and again[0].actions == auto.actions


def test_the_zombie_automation_crashes_a_run_whose_heartbeats_stop(stack):
    """The same automation with a 35-s window (the registered one waits 300 s), on this stack's
    open-source server: a Running flow run that sent one heartbeat and then fell silent (as if
    its host died) is set Crashed by the server, with the automation's message."""
    crash_a_silent_run(stack)
