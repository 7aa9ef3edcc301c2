"""Cancelling a fanned-out batch cancels the child runs it started; finished work is kept.

A stack of its own (``ops.stack.up``: Prefect server on SQLite, one worker with two slots:
the batch run and one interview at a time, the sweeper; no desks: nothing is pushed), three generated
interviews. The ``ingest-batch`` deployment fans them out; once the first child run has
completed and the second is running (the third still queued), the batch run is cancelled the
way an operator does (``prefect flow-run cancel``).

Two things cancel the children: the batch run itself, as the runner stops it, sets its
unfinished children to Cancelling (``flows.ingest_batch._cancel_children_if_cancelled``), and
Prefect's own cancellation-cleanup service does the same for subflows of a Cancelled run
(``run_deployment(..., as_subflow=True)`` links them); the worker then stops a running child
and cancels a queued one. Asserted: the batch ends Cancelled, every child that had not
finished ends Cancelled (none Completed or Crashed), the finished child keeps its Completed
state and readable result, and a rerun of the batch computes only what did not finish.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from unittest import mock

import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.slow

N = 3
PARENT_CANCELLED = "The parent flow run was cancelled"  # Prefect's words; the batch adds its name


@pytest.fixture(scope="module")
def small_stack(tmp_path_factory):
    """Server + one worker (2 slots) + sweeper under a fresh data root, and the batch (made while
    the server starts)."""
    from concurrent.futures import ThreadPoolExecutor

    from ops import stack as st
    from pipeline.synthetic import interviews as synth

    root = tmp_path_factory.mktemp("cancel-data")
    env = {"RESCUE_DATA_ROOT": str(root), "RESCUE_PREFECT_PORT": str(free_port()),
           "RESCUE_DESK_BASE_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}  # one torch thread per run
    batch = tmp_path_factory.mktemp("cancel-batch")
    specs = [{"name": f"c{i}", "scenario": "couple", "seed": 40 + i, "n_rows": 6, "group": "cancel"} for i in range(N)]
    with mock.patch.dict(os.environ, env), ThreadPoolExecutor(1) as pool:
        for k in ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_RESULTS_LOCAL_STORAGE_PATH",
                  "PREFECT_API_DATABASE_CONNECTION_URL"):  # this stack's own, not the caller's
            os.environ.pop(k, None)
        made = pool.submit(synth.make_batch, batch, specs)
        try:
            env.update(st.up(root, label_studio=False, worker_limit=2, log=lambda *_: None))
            made.result()
            yield root, env, batch, [f"cancel/c{i}" for i in range(N)]
        finally:
            st.down(root, label_studio=False, log=lambda *_: None)


def _settings(env):
    from prefect.settings import (PREFECT_API_AUTH_STRING, PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH,
                                   temporary_settings)

    return temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"], PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"],
                               PREFECT_RESULTS_LOCAL_STORAGE_PATH: env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"]})


def _children(client, parent_name: str):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    return [r for r in client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(
        like_=f"{parent_name}:"))) if r.name.startswith(f"{parent_name}:")]


def test_cancelled_batch_cancels_its_unfinished_children_and_a_rerun_keeps_the_finished(small_stack):
    from prefect.client.orchestration import get_client

    from ops.demo import start_deployment, wait_flow_run

    root, env, batch, ids = small_stack
    params = {"batch_dir": str(batch), "data_root": str(root), "backend": "subtitles", "push": False,
              "chunk_size": 1}  # a child run per interview
    with _settings(env), mock.patch.dict(os.environ, env):
        parent_id = start_deployment("ingest-batch/default", {**params, "fan_out": True})
        with get_client(sync_client=True) as client:
            deadline = time.monotonic() + 300
            while True:  # until one child has finished and the next one is running
                parent = client.read_flow_run(parent_id)
                assert not parent.state.is_final(), f"the batch ended {parent.state.name} before a cancel"
                children = _children(client, parent.name)
                states = [r.state.name for r in children]
                if "Completed" in states and "Running" in states:
                    break
                assert time.monotonic() < deadline, [(r.name, r.state.name) for r in children]
                time.sleep(0.3)
            at_cancel = {r.name: r.state.name for r in children}
            open_at_cancel = [n for n, s in at_cancel.items() if s != "Completed"]
            assert len(at_cancel) == N and open_at_cancel, at_cancel  # something left to cancel
            # what an operator does: `prefect flow-run cancel <id>` (or the UI's Cancel)
            t_cancel = time.monotonic()
            cancel = subprocess_prefect(env, "flow-run", "cancel", str(parent_id))
            assert cancel.returncode == 0, cancel.stdout + cancel.stderr

            deadline = time.monotonic() + 120  # Prefect's cleanup looks every 20 s, then the worker acts
            while True:
                parent = client.read_flow_run(parent_id)
                children = {r.name: r for r in _children(client, parent.name)}
                if parent.state.is_final() and all(r.state.is_final() for r in children.values()):
                    break
                assert time.monotonic() < deadline, (parent.state.name, {n: r.state.name for n, r in children.items()})
                time.sleep(0.5)
            print(f"\ncancel: the batch and its children final {time.monotonic() - t_cancel:.0f} s after "
                  f"`prefect flow-run cancel` (at cancel: {at_cancel}), load {os.getloadavg()[0]:.1f}")
            assert parent.state.type.value == "CANCELLED", parent.state
            finished = {n for n, r in children.items() if r.state.is_completed()}
            assert set(at_cancel) - set(open_at_cancel) <= finished  # finished before: still Completed
            for name in set(children) - finished:
                run = children[name]
                assert run.state.type.value == "CANCELLED", (name, run.state)  # not Crashed, not run on
                history = [(st.name, st.message or "") for st in client.read_flow_run_states(run.id)]
                if at_cancel[name] == "Running":  # stopped by its worker; set Cancelling by the batch itself
                    assert any(f"{PARENT_CANCELLED}: batch run {parent.name}" in m for _, m in history), \
                        (name, history)  # Prefect's own cleanup (the backstop) would say it without the name
                else:  # queued: Prefect's server cancels a run with no process at once, silently
                    assert "Running" not in [n for n, _ in history], (name, history)
            assert "Running" in at_cancel.values() and set(at_cancel.values()) - {"Running", "Completed"}, \
                at_cancel  # both cases were seen: a running child and a queued one
            assert len(finished) < N, "nothing was cancelled"
            for name in finished:  # the finished children keep their results
                res = children[name].state.result()
                assert res["items"][0]["status"] == "done", res

        # the rerun (in one process) computes only what did not finish
        rerun = wait_flow_run(start_deployment("ingest-batch/default", {**params, "fan_out": False}),
                              timeout_s=300).state.result()
    items = rerun["items"]
    kept = {name.rpartition(":")[2] for name in finished}
    for i in ids:
        if i in kept:
            assert items[i]["status"] == "cached" and items[i]["executed"] == [], (i, items[i])
        else:
            assert items[i]["status"] in ("done", "cached"), (i, items[i])
    assert any(items[i]["executed"] for i in ids if i not in kept), items  # the unfinished work is redone
    assert all((root / "drafts" / f"{i}.parquet").is_file() for i in ids)


def subprocess_prefect(env, *args):
    import subprocess
    import sys

    from pipeline.config import REPO_ROOT

    return subprocess.run([str(Path(sys.executable).with_name("prefect")), *args], cwd=REPO_ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
