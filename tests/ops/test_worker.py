"""``rescue worker start``: Prefect's worker, which does not ask the server for runs while all its
slots are taken (:mod:`ops.worker`).

The sequence test runs the real command against the module's temporary Prefect server, both ways:
a worker with one slot takes a run whose process sleeps, so it is full; it must not ask again
until the slot frees, and must then take the next run within a tick. With the skip off it is
Prefect's own worker, which asks every second throughout. The asks are counted from the worker's
own debug lines ("Querying for flow runs"), which Prefect writes once per ask.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from tests.ops.test_sweeper_pending import _wait

pytestmark = pytest.mark.slow

HOLD_S = 6  # how long each run's process holds the worker's only slot
ASK = "Querying for flow runs"


@pytest.fixture
def server(prefect_harness, tmp_path):
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_HOME": str(tmp_path / "home"),
            "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "DEBUG"}


def _pool_and_deployment(client):
    """A fresh process pool and a deployment whose runs' process only sleeps HOLD_S."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.process import ProcessWorker

    pool = f"slots-{uuid.uuid4().hex[:6]}"
    client.create_work_pool(WorkPoolCreate(name=pool, type="process",
                                           base_job_template=ProcessWorker.get_default_base_job_template()))
    flow_id = client.create_flow_from_name("slot-holder")
    return pool, client.create_deployment(flow_id, pool, work_pool_name=pool, entrypoint="nowhere.py:holder",
                                          job_variables={"command": f"{sys.executable} -c 'import time; "
                                                                    f"time.sleep({HOLD_S})'"})


def _taken_at(client, run_id) -> float | None:
    """When the worker took the run (its first Pending state), as a timestamp; None before."""
    states = client.read_flow_run_states(run_id)
    return next((s.timestamp.timestamp() for s in states if s.type.value == "PENDING"), None)


def _two_runs_on_one_slot(server, tmp_path, skip: bool) -> tuple[int, float]:
    """Asks the worker made while its only slot was held by the first run, and how long after
    the first run's process ended it took the second."""
    from prefect.client.orchestration import get_client

    log_path = tmp_path / f"worker-{skip}.log"
    env = {**server, "RESCUE_WORKER_SKIP_WHEN_FULL": "1" if skip else "0"}
    with get_client(sync_client=True) as client, open(log_path, "wb") as log:
        pool, deployment = _pool_and_deployment(client)
        first, second = (client.create_flow_run_from_deployment(deployment) for _ in range(2))
        worker = subprocess.Popen([sys.executable, "-m", "ops.cli", "worker", "start", "--pool", pool,
                                   "--type", "process", "--limit", "1"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            runs = [first.id, second.id]
            _wait("the worker takes a first run", lambda: any(_taken_at(client, r) for r in runs), 120, log_path)
            asks_when_full = log_path.read_text().count(ASK)
            then = _wait("the worker takes the second run", lambda: all(_taken_at(client, r) for r in runs) and
                         sorted(_taken_at(client, r) for r in runs), 120, log_path)
            asks_until_second = log_path.read_text().count(ASK)
        finally:
            worker.terminate()
            worker.wait(30)
    return asks_until_second - asks_when_full, then[1] - then[0] - HOLD_S


def test_a_full_worker_does_not_ask_for_runs_and_takes_the_next_one_when_a_slot_frees(server, tmp_path):
    asks, delay = _two_runs_on_one_slot(server, tmp_path, skip=True)
    # the one ask that finds the second run after the slot frees (a KEEP_READY_S ask cannot fall
    # inside HOLD_S: the last ask was the one that took the first run)
    assert asks <= 1, asks
    assert delay < 3.0, f"the second run was taken {delay:.1f} s after the slot freed"


def test_with_the_skip_off_it_is_prefects_worker_which_asks_every_second(server, tmp_path):
    asks, delay = _two_runs_on_one_slot(server, tmp_path, skip=False)
    assert asks >= HOLD_S - 2, asks
    assert delay < 3.0


def test_the_skip_is_tied_to_the_prefect_version_and_the_setting(monkeypatch):
    import prefect

    from ops import worker

    monkeypatch.delenv(worker.SKIP_SETTING, raising=False)
    assert worker.skip_when_full() == (prefect.__version__ == worker.SKIP_TESTED_ON)
    monkeypatch.setattr(prefect, "__version__", worker.SKIP_TESTED_ON)
    assert worker.skip_when_full()
    monkeypatch.setenv(worker.SKIP_SETTING, "0")
    assert not worker.skip_when_full()
    monkeypatch.delenv(worker.SKIP_SETTING)
    monkeypatch.setattr(prefect, "__version__", "3.9.2")
    assert not worker.skip_when_full()


def test_a_full_worker_still_asks_once_every_keep_ready_s(monkeypatch):
    """Prefect marks a queue Not Ready after 60 s without an ask: a worker full for longer asks
    every KEEP_READY_S all the same; it asks each time it has a free slot; never before syncing."""
    import anyio

    from ops import worker

    cls = worker.slot_aware_process_worker()
    asked = []

    async def fake_ask(self):
        asked.append(time.monotonic())
        return []

    monkeypatch.setattr(cls, "_get_scheduled_flow_runs", fake_ask)

    async def scenario():
        w = cls(work_pool_name="nowhere", limit=1)
        w._limiter = anyio.CapacityLimiter(1)
        w._has_successfully_synced = True
        await w.get_and_submit_flow_runs()            # a free slot: asks
        w._limiter.acquire_on_behalf_of_nowait("run")
        polled = w._last_polled_time
        for _ in range(3):
            await w.get_and_submit_flow_runs()        # full: skips, yet the loop counts as alive
        assert len(asked) == 1 and w.skipped_asks == 3 and w._last_polled_time > polled
        w._last_asked -= worker.KEEP_READY_S + 1      # full for longer than KEEP_READY_S
        await w.get_and_submit_flow_runs()
        assert len(asked) == 2
        w._limiter.release_on_behalf_of("run")
        await w.get_and_submit_flow_runs()
        assert len(asked) == 3
        w._has_successfully_synced = False            # before it synced: Prefect's own path (no ask)
        w._limiter.acquire_on_behalf_of_nowait("run")
        w._last_asked -= worker.KEEP_READY_S + 1
        await w.get_and_submit_flow_runs()
        assert len(asked) == 3

    anyio.run(scenario)
