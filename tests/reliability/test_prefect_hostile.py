"""Prefect under faults, on the real engine in-process (one temporary server for the module):
only the transient family is retried (a real server's HTTP 5xx, a refused connection) and a
task retried on it succeeds, configuration errors, HTTP 4xx and a corrupt file fail at once
with their message, a failed run still publishes its summary artifact, task runs are named per
sample. (Each boundary raising the family: tests/reliability/test_transient.py.)"""
from __future__ import annotations

import contextlib
import itertools
import os
import time
from pathlib import Path

import pytest
from http_util import answering, closed_port
from prefect import flow, task

from flows import NETWORK_RETRIES
from pipeline.labelstudio.client import LabelStudioClient, LabelStudioError
from pipeline.annotation.push import PushError, PushInterrupted
from pipeline.errors import TransientError
from pipeline.paths import DataRoot

FAST = {**NETWORK_RETRIES, "retry_delay_seconds": 0, "retry_jitter_factor": None}


@pytest.fixture
def storage(prefect_harness, tmp_path, monkeypatch):
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    monkeypatch.setenv("RESCUE_GPU_LIMIT", "")
    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "results"}):
        yield tmp_path


def _attempts(errors: list[BaseException]):
    calls = itertools.count(1)
    seen = []

    @task(name="flaky", **FAST)
    def flaky() -> str:
        n = next(calls)
        seen.append(n)
        if n <= len(errors):
            raise errors[n - 1]
        return "ok"

    @flow
    def run():
        state = flaky(return_state=True)
        return {"failed": state.is_failed(), "message": state.message,
                "result": None if state.is_failed() else state.result()}

    return run(), seen


def _calling(url: str):
    """A flow whose one task (retried as the flows' Label Studio tasks are) lists the users of the
    Label Studio at ``url`` with the real client; counts the task's attempts."""
    attempts = []

    @task(name="call-label-studio", **FAST)
    def call() -> list:
        attempts.append(1)
        return LabelStudioClient(url, "0" * 40, timeout=5).users()

    @flow
    def run():
        state = call(return_state=True)
        return {"failed": state.is_failed(), "message": state.message,
                "result": None if state.is_failed() else state.result()}

    return run, attempts


def test_a_task_retried_on_server_errors_succeeds(storage):
    with answering(503, 502) as server:
        run, attempts = _calling(server.url)
        out = run()
    assert not out["failed"] and out["result"] == [] and len(attempts) == 3
    assert server.paths == ["GET /api/users/"] * 3


def test_a_refused_connection_is_retried_until_the_retries_run_out(storage):
    with closed_port() as port:
        run, attempts = _calling(f"http://127.0.0.1:{port}")
        out = run()
    assert out["failed"] and len(attempts) == 1 + NETWORK_RETRIES["retries"]
    assert "LabelStudioUnavailable" in out["message"] and "did not answer" in out["message"]


def test_a_refusal_is_not_retried(storage):
    with answering(400) as server:
        run, attempts = _calling(server.url)
        out = run()
    assert out["failed"] and len(attempts) == 1 and server.paths == ["GET /api/users/"]
    assert "(HTTP 400)" in out["message"]


def test_a_corrupt_file_is_not_retried(storage):
    from pipeline.media.audio import probe

    bad = storage / "corrupt.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(2000))
    attempts = []

    @task(name="probe", **FAST)
    def probe_it() -> dict:
        attempts.append(1)
        return probe(bad)

    @flow
    def run():
        state = probe_it(return_state=True)
        return state.is_failed(), state.message

    failed, message = run()
    assert failed and attempts == [1] and "MediaError" in message and "corrupt.mp4" in message


def test_the_family_is_retried_not_the_words(storage):
    """A push error is retried when the push was interrupted (PushInterrupted, raised by the push
    on a desk's transient fault), never because its message reads like one."""
    said = "push of round 'emotion' stopped before importing: Label Studio at x did not answer (HTTP 503)"
    out, seen = _attempts([PushError(said)] * 4)
    assert out["failed"] and seen == [1]
    out, seen = _attempts([LabelStudioError(said)] * 4)
    assert out["failed"] and seen == [1]
    out, seen = _attempts([PushInterrupted(said)])
    assert not out["failed"] and seen == [1, 2] and issubclass(PushInterrupted, TransientError)


@pytest.mark.parametrize("error", [PushError("round 'emotion' needs 2 annotators, 0 available (none)"),
                                   KeyError("no annotation round 'nosuch'"),
                                   LabelStudioError("Label Studio refused to import (HTTP 400): bad")])
def test_a_configuration_error_fails_at_once_with_its_message(storage, error):
    out, seen = _attempts([error] * 4)
    assert out["failed"] and seen == [1]
    assert type(error).__name__ in out["message"] and str(error).strip("'\"") in out["message"]


def test_the_round_push_task_does_not_retry_no_annotators(storage, monkeypatch):
    from flows import annotation_round as ar
    from pipeline.annotation import intake

    calls = []

    def refuse(*args, **kwargs):
        calls.append(1)
        raise PushError("round 'emotion' needs 2 annotators, 0 available (none)")

    monkeypatch.setattr(intake, "open_round", refuse)
    monkeypatch.setattr(ar, "_desks", lambda data_root: None)

    @flow
    def run():
        state = ar.push_next.with_options(retry_delay_seconds=0)("emotion", str(storage), None, return_state=True)
        return state.is_failed(), state.message

    failed, message = run()
    assert failed and calls == [1] and "needs 2 annotators" in message


def _artifacts(flow_run_id) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[flow_run_id])))
    return {a.key: str(a.data) for a in found}


def test_a_failed_ingest_run_publishes_its_summary_naming_the_parameter(storage):
    from flows.ingest_batch import ingest_batch_flow

    state = ingest_batch_flow(batch_dir=str(storage / "no-such-batch"), data_root=str(storage / "data"),
                              return_state=True)
    assert state.is_failed()
    assert "flow parameter batch_dir=" in state.message and "does not exist" in state.message
    arts = _artifacts(state.state_details.flow_run_id)
    summary = arts["ingest-batch-summary"]
    assert "FAILED" in summary and "batch_dir" in summary and "does not exist" in summary
    assert "ingest-batch-items" in arts


def test_a_failed_round_run_publishes_its_summary_and_an_unknown_round_names_the_parameter(storage):
    from flows.annotation_round import annotation_round_flow

    state = annotation_round_flow(round_name="nosuch", data_root=str(storage / "data"), return_state=True)
    assert state.is_failed() and "flow parameter round_name='nosuch'" in state.message
    assert "known rounds" in state.message or "rounds:" in state.message
    summary = _artifacts(state.state_details.flow_run_id)["round-nosuch-summary"]
    assert "FAILED" in summary and "round_name" in summary


def test_a_bad_annotators_parameter_fails_at_once(storage):
    from flows.annotation_round import annotation_round_flow

    state = annotation_round_flow(round_name="emotion", data_root=str(storage / "data"), annotators=[""],
                                  return_state=True)
    assert state.is_failed() and "flow parameter annotators=" in state.message


def test_task_runs_are_named_per_sample_and_a_bad_video_is_quarantined(storage):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.ingest_batch import ingest_batch_flow

    batch = storage / "batch"
    batch.mkdir()
    (batch / "manifest.csv").write_text("sample_id,scenario,video,participants\n"
                                        "rel_names/001,couple,missing.mp4,Ann;Bo\n")
    state = ingest_batch_flow(batch_dir=str(batch), data_root=str(storage / "data"), push=False,
                              return_state=True)
    assert state.is_completed(), state.message
    assert "rel_names/001" in state.result()["quarantined"]
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(
            any_=[state.state_details.flow_run_id])))
    assert "ingest[rel_names/001]" in {r.name for r in runs}, sorted(r.name for r in runs)


@contextlib.contextmanager
def _dead_and_alive_pids():
    """Two pids: a process that has exited, and one still running whose command line says it is
    a flow run (as the sweeper looks for), killed afterwards."""
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "prefect-flow-run"])
    try:
        yield dead.pid, alive.pid
    finally:
        alive.kill()
        alive.wait()


def test_a_flow_run_whose_process_died_is_marked_crashed_and_live_ones_are_left(storage):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import Running

    from ops import sweeper

    @flow(name="victim")
    def victim():
        return None

    with _dead_and_alive_pids() as (dead, alive), get_client(sync_client=True) as client:
        ids = []
        for pid in (dead, alive, None):  # worker run that died / still runs / in-process run
            run = client.create_flow_run(victim, state=Running())
            if pid:
                client.update_flow_run(run.id, infrastructure_pid=str(pid))
            ids.append(run.id)
        messages = []
        swept = sweeper.sweep(log=messages.append)
        states = [client.read_flow_run(i).state for i in ids]
    assert [s.type for s in states] == [StateType.CRASHED, StateType.RUNNING, StateType.RUNNING]
    assert f"pid {dead}" in states[0].message and "run the deployment again" in states[0].message
    swept = [line for line in swept if any(str(i) in line for i in ids)]  # the module's other runs aside
    assert len(swept) == 1 and str(ids[0]) in swept[0] and messages


def test_a_cancelling_run_whose_process_is_gone_ends_cancelled_not_crashed(storage):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelling

    from ops import sweeper

    @flow(name="cancelled-victim")
    def victim():
        return None

    with _dead_and_alive_pids() as (dead, alive), get_client(sync_client=True) as client:
        ids = []
        for pid in (dead, alive):  # its process is gone / its worker is still stopping it
            run = client.create_flow_run(victim, state=Cancelling(message="asked by an operator"))
            client.update_flow_run(run.id, infrastructure_pid=f"host:{pid}")
            ids.append(run.id)
        swept = sweeper.sweep(log=lambda *_: None)
        states = [client.read_flow_run(i).state for i in ids]
    assert [s.type for s in states] == [StateType.CANCELLED, StateType.CANCELLING], states
    assert f"pid {dead}" in states[0].message and "cancelled" in states[0].message
    swept = [line for line in swept if any(str(i) in line for i in ids)]  # the module's other runs aside
    assert len(swept) == 1 and str(ids[0]) in swept[0]


def test_the_stack_runs_the_sweeper_as_a_module_that_sweeps_and_down_stops_it(storage):
    """The sweeper the stack starts is its own process, ``python -m ops.sweeper``: it marks a run
    whose process died Crashed on this module's server without being asked, and ``down`` stops it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME
    from prefect.states import Running

    from ops import processes, stack

    @flow(name="swept-victim")
    def victim():
        return None

    root = (storage / "root").resolve()
    paths = processes.StackPaths(DataRoot(root))
    env = {"PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_HOME": str(PREFECT_HOME.value()),
           "RESCUE_SWEEP_EVERY_S": "1"}
    said: list[str] = []
    with _dead_and_alive_pids() as (dead, _alive), get_client(sync_client=True) as client:
        run = client.create_flow_run(victim, state=Running())
        client.update_flow_run(run.id, infrastructure_pid=str(dead))
        stack._start_sweeper(paths, env, said.append)
        pid = processes.read_pid(paths, "sweeper")
        try:
            assert pid, said
            argv = _argv(pid)
            assert argv[1:3] == [b"-m", b"ops.sweeper"], (pid, argv, said, _log(paths))
            deadline = time.monotonic() + 90
            while client.read_flow_run(run.id).state.type != StateType.CRASHED and time.monotonic() < deadline:
                time.sleep(0.5)
            state = client.read_flow_run(run.id).state
        finally:
            stack.down(root, label_studio=False, log=said.append)
    assert state.type == StateType.CRASHED and f"pid {dead}" in state.message, (state, _log(paths))
    assert "sweeper: stopped" in said and processes.start_time(pid) is None, (said, _log(paths))
    assert "marked Crashed" in _log(paths)


def _argv(pid: int) -> list[bytes]:
    """A process's command line; the kernel shows it empty for a moment after exec, before the new
    program's arguments are mapped (Popen has returned by then)."""
    deadline = time.monotonic() + 10
    while not (raw := Path(f"/proc/{pid}/cmdline").read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return raw.split(b"\0")


def _log(paths) -> str:
    return paths.log_file("sweeper").read_text() if paths.log_file("sweeper").is_file() else "(no log)"


def test_a_sweep_once_against_a_server_that_does_not_answer_says_so_in_one_line(tmp_path):
    """``python -m ops.sweeper --once``: exit 1 with one line naming the error, no traceback."""
    import subprocess
    import sys

    from pipeline.config import REPO_ROOT

    with closed_port() as port:
        proc = subprocess.run([sys.executable, "-m", "ops.sweeper", "--once"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
                                                           "PREFECT_CLIENT_MAX_RETRIES": "0",
                                                           "PREFECT_HOME": str(tmp_path / "home")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("sweeper:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
