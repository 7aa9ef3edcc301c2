"""The stack's sweeper on a flow run that was being cancelled when its process went away."""
from __future__ import annotations

import subprocess
import sys

import pytest
from prefect import flow


@pytest.fixture(scope="module")
def harness():
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield


def test_a_cancelling_run_whose_process_is_gone_ends_cancelled_not_crashed(harness):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelling

    from ops import stack as st

    @flow(name="cancelled-victim")
    def victim():
        return None

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "prefect-flow-run"])
    try:
        with get_client(sync_client=True) as client:
            ids = []
            for pid in (dead.pid, alive.pid):  # its process is gone / its worker is still stopping it
                run = client.create_flow_run(victim, state=Cancelling(message="asked by an operator"))
                client.update_flow_run(run.id, infrastructure_pid=f"host:{pid}")
                ids.append(run.id)
            swept = st.sweep(log=lambda *_: None)
            states = [client.read_flow_run(i).state for i in ids]
    finally:
        alive.kill()
        alive.wait()
    assert [s.type for s in states] == [StateType.CANCELLED, StateType.CANCELLING], states
    assert f"pid {dead.pid}" in states[0].message and "cancelled" in states[0].message
    assert len(swept) == 1 and str(ids[0]) in swept[0]
