"""Flow runs left Pending by a worker that died: the gap ``bench_rehearsal.py --faults`` found.
A worker proposes Pending when it takes a run and only the flow-run process it then
spawns sets it Running; a worker SIGKILLed in between left the run Pending for ever, and the
``ingest-batch`` run waiting for it waited for ever. The sweeper (:mod:`ops.sweeper`) marks it
Crashed once its worker (or process) is gone.

The first test reproduces it with real workers on the module's temporary Prefect server: a real
``prefect worker start`` process whose ``ProcessWorker.run`` (the spawn) never comes takes a run
from a deployment - it proposes Pending, labels the run with its name, proposes Submitting, as
any process worker does - and is SIGKILLed there; it is then started again under the same name
(as ``rescue stack up`` does), which Prefect's per-name heartbeats cannot tell from the first.
The second sets the states with the client as a worker would (no worker process), for the cases
the first cannot reach: a worker killed before it labelled the run, a flow-run process recorded
and dead or alive, an in-process run, a run waiting for a concurrency slot.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.slow

RERUN = "run the deployment again - finished work is reused from the cache"

# A real process worker whose spawn never comes: it takes runs as any worker does, then waits
# where a worker on a loaded host spends its seconds (resolving the job, starting the process).
SLOW_WORKER = """
import sys

import anyio
from prefect.workers.process import ProcessWorker


async def spawn_never_comes(self, flow_run, configuration, task_status=None):
    await anyio.sleep_forever()


ProcessWorker.run = spawn_never_comes
from prefect.cli import app  # noqa: E402 - after the patch, as `prefect worker start` would run

sys.exit(app())
"""


@pytest.fixture
def server(prefect_harness, tmp_path):
    """The module's Prefect server; environment for worker processes against it."""
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_HOME": str(tmp_path / "home"),
            "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_HEARTBEAT_SECONDS": "5"}


def _pool_and_deployment(client, what: str):
    """A fresh process work pool and a deployment on it (its flow's code is never loaded)."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.process import ProcessWorker

    pool = f"sweep-{what}-{uuid.uuid4().hex[:6]}"
    client.create_work_pool(WorkPoolCreate(name=pool, type="process",
                                           base_job_template=ProcessWorker.get_default_base_job_template()))
    flow_id = client.create_flow_from_name("sweep-pending-victim")
    return pool, client.create_deployment(flow_id, pool, work_pool_name=pool, entrypoint="nowhere.py:victim")


def _start_worker(argv: list[str], env: dict, log) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait(what: str, ok, timeout_s: float, log_path):
    deadline = time.monotonic() + timeout_s
    while not (got := ok()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s; worker log:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    return got


def test_a_run_whose_worker_was_killed_before_spawning_it_is_crashed_not_while_it_lives(server, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType

    from ops import sweeper
    from ops.prefect_setup import prefect_bin

    script = tmp_path / "slow_worker.py"
    script.write_text(SLOW_WORKER)
    log_path = tmp_path / "workers.log"
    workers = []
    with get_client(sync_client=True) as client, open(log_path, "ab") as log:
        pool, deployment = _pool_and_deployment(client, "killed")
        name = f"{pool}-worker"
        try:
            workers.append(_start_worker([sys.executable, str(script), "worker", "start", "--pool", pool,
                                          "--type", "process", "--name", name], server, log))
            run = client.create_flow_run_from_deployment(deployment)
            taken = _wait("the worker takes the run (Submitting, labelled with its name)",
                          lambda: (r := client.read_flow_run(run.id)).state.name == "Submitting"
                          and r.labels.get("prefect.worker.name") == name and r, 180, log_path)
            assert taken.state.type == StateType.PENDING and not taken.infrastructure_pid, taken

            # its worker lives, merely slow to spawn: left alone even with no grace at all
            swept = sweeper.sweep(log=lambda *_: None, pending_grace_s=0)
            assert client.read_flow_run(run.id).state.name == "Submitting" and not _mentions(swept, run.id)

            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait()
            killed_at = time.time()
            # its worker is gone but the grace has not passed: left alone
            swept = sweeper.sweep(log=lambda *_: None, pending_grace_s=3600)
            assert client.read_flow_run(run.id).state.name == "Submitting" and not _mentions(swept, run.id)

            # the worker is started again under its name: Prefect sees that name heartbeat again,
            # yet the new process never heard of the run (it polls Scheduled runs only)
            workers.append(_start_worker([prefect_bin(), "worker", "start", "--pool", pool, "--type", "process",
                                          "--name", name], server, log))
            _wait("the restarted worker heartbeats", lambda: any(
                w.name == name and w.last_heartbeat_time and w.last_heartbeat_time.timestamp() > killed_at
                for w in client.read_workers_for_work_pool(pool)), 180, log_path)
            assert client.read_flow_run(run.id).state.name == "Submitting"

            said = []
            swept = sweeper.sweep(log=said.append, pending_grace_s=0)
            state = client.read_flow_run(run.id).state
        finally:
            for w in workers:
                w.kill()
                w.wait()
    assert state.type == StateType.CRASHED, state
    assert f"its worker '{name}' is gone" in state.message and RERUN in state.message, state.message
    assert _mentions(swept, run.id) and any(f"worker '{name}' is gone" in line for line in said), (swept, said)


def test_pending_runs_as_a_worker_leaves_them_crash_only_when_nothing_can_start_them(server):
    """States set with the client as a worker sets them; no worker process polls the pool."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import Pending, Scheduled

    from ops import sweeper

    @flow(name="in-process-victim")
    def victim():
        return None

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "prefect-flow-run"])
    try:
        with get_client(sync_client=True) as client:
            pool, deployment = _pool_and_deployment(client, "client")
            runs, names = {}, {}
            for case, pid in (("no worker label", None), ("process dead", dead.pid), ("process alive", alive.pid)):
                run = client.create_flow_run_from_deployment(deployment)
                client.set_flow_run_state(run.id, Pending())  # as the worker proposes it
                if pid:
                    client.update_flow_run(run.id, infrastructure_pid=f"host:{pid}")
                runs[case] = run.id
                names[case] = run.name
            runs["in process"] = client.create_flow_run(victim, state=Pending()).id  # no work pool
            runs["awaiting a slot"] = client.create_flow_run_from_deployment(deployment, state=Scheduled(
                name="AwaitingConcurrencySlot")).id
            said = []
            swept = sweeper.sweep(log=said.append, pending_grace_s=0)
            states = {case: client.read_flow_run(i).state for case, i in runs.items()}
    finally:
        alive.kill()
        alive.wait()
    assert {case: s.type for case, s in states.items()} == {
        "no worker label": StateType.CRASHED, "process dead": StateType.CRASHED, "process alive": StateType.PENDING,
        "in process": StateType.PENDING, "awaiting a slot": StateType.SCHEDULED}, states
    assert f"its worker of pool '{pool}' is gone" in states["no worker label"].message
    assert f"its process (pid {dead.pid}) is gone before it ran" in states["process dead"].message
    assert all(RERUN in states[c].message for c in ("no worker label", "process dead"))
    assert sorted(c for c, i in runs.items() if _mentions(swept, i)) == ["no worker label", "process dead"], swept
    assert [c for c in names if any(names[c] in line for line in said)] == ["no worker label", "process dead"], said


def test_a_worker_of_another_stack_on_this_host_does_not_keep_a_run_pending(server):
    """Two data roots' stacks on one host have work pools and workers of the same names: a live
    worker that polls another Prefect server is not the run's worker, one that polls this
    server is. Stand-ins for the workers: processes whose command line is a worker's and whose
    environment names their server, as a worker's does (they never poll anything)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import Pending

    from ops import sweeper

    def stand_in(pool: str, api_url: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "worker", "start",
                                 "--pool", pool], env={**server, "PREFECT_API_URL": api_url})

    with get_client(sync_client=True) as client:
        foreign_pool, foreign = _pool_and_deployment(client, "foreign")
        own_pool, own = _pool_and_deployment(client, "own")
        workers = [stand_in(foreign_pool, "http://127.0.0.1:9/api"), stand_in(own_pool, server["PREFECT_API_URL"])]
        try:
            time.sleep(1.1)  # started before the runs went Pending, to the clock tick
            runs = {}
            for case, deployment in (("another server's worker", foreign), ("this server's worker", own)):
                runs[case] = client.create_flow_run_from_deployment(deployment).id
                client.set_flow_run_state(runs[case], Pending())  # taken, not yet labelled
            seen = {w.pid: w.api_url for w in sweeper.live_workers()}
            swept = sweeper.sweep(log=lambda *_: None, pending_grace_s=0)
            states = {case: client.read_flow_run(i).state for case, i in runs.items()}
        finally:
            for w in workers:
                w.kill()
                w.wait()
    assert seen[workers[0].pid] == "http://127.0.0.1:9/api"
    assert seen[workers[1].pid] == server["PREFECT_API_URL"].rstrip("/")
    assert {case: s.type for case, s in states.items()} == {
        "another server's worker": StateType.CRASHED, "this server's worker": StateType.PENDING}, states
    assert f"its worker of pool '{foreign_pool}' is gone" in states["another server's worker"].message
    assert _mentions(swept, runs["another server's worker"]) and not _mentions(swept, runs["this server's worker"])


def _mentions(swept: list[str], run_id) -> bool:
    return any(str(run_id) in line for line in swept)
