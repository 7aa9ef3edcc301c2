"""The shared flow machinery (flows/__init__.py) on the real Prefect engine, in-process: a
content-addressed cache key, resume across flow runs, failures isolated per item, and the
summary artifacts. One test harness (temporary server) for the module; each test has its
own result storage."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from flows import RESUME, file_key, report, settle, submit_window


def test_file_key_follows_content_and_target_not_file_name(tmp_path):
    key = file_key("video")
    ctx = SimpleNamespace(task=SimpleNamespace(name="ingest"))
    a, b = tmp_path / "a.mp4", tmp_path / "b.mp4"
    a.write_bytes(b"same bytes")
    b.write_bytes(b"same bytes")
    assert key(ctx, {"video": str(a), "data_root": "/r"}) == key(ctx, {"video": str(b), "data_root": "/r"})
    assert key(ctx, {"video": str(a), "data_root": "/r"}) != key(ctx, {"video": str(a), "data_root": "/other"})
    before = key(ctx, {"video": str(a), "data_root": "/r"})
    a.write_bytes(b"edited bytes")
    assert key(ctx, {"video": str(a), "data_root": "/r"}) != before


@pytest.fixture
def storage(prefect_harness, tmp_path):
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "results"}):
        yield tmp_path


@task(cache_policy=RESUME)
def first(item: str, log: str) -> str:
    with open(log, "a") as fh:
        fh.write(f"first {item}\n")
    if item.startswith("bad"):
        raise ValueError(f"{item}: unreadable input")
    return item.upper()


@task(cache_policy=RESUME)
def second(value: str, log: str) -> str:
    with open(log, "a") as fh:
        fh.write(f"second {value}\n")
    return value + "!"


@flow
def batch(items: list[str], log: str) -> list:
    chains = {}
    with ThreadPoolTaskRunner(max_workers=2) as runner:
        for item in items:
            f1 = runner.submit(first, {"item": item, "log": log})
            f2 = runner.submit(second, {"value": f1, "log": log})
            chains[item] = [("first", f1), ("second", f2)]
        outcomes = settle(chains)
    report("machinery-test", "test batch", outcomes, tables={"extra": [{"a": 1}]})
    return outcomes


def test_failure_is_isolated_and_siblings_finish(storage):
    log = storage / "log.txt"
    outcomes = {o.item: o for o in batch(["x", "bad1", "y"], str(log))}
    assert outcomes["x"].status == "done" and outcomes["x"].result == "X!"
    assert outcomes["y"].status == "done" and outcomes["y"].result == "Y!"
    bad = outcomes["bad1"]
    assert bad.status == "quarantined" and "bad1: unreadable input" in bad.reason and bad.reason.startswith("first")
    lines = log.read_text().splitlines()
    assert "second X" in lines and "second Y" in lines and not any(line.startswith("second BAD") for line in lines)


def test_rerun_recomputes_only_what_did_not_finish(storage):
    log = storage / "log.txt"
    batch(["p", "q"], str(log))
    log.write_text("")
    outcomes = {o.item: o for o in batch(["p", "q", "r"], str(log))}
    assert {i: o.status for i, o in outcomes.items()} == {"p": "cached", "q": "cached", "r": "done"}
    assert outcomes["p"].cached == ["first", "second"] and outcomes["r"].executed == ["first", "second"]
    assert log.read_text().splitlines() == ["first r", "second R"]


def test_summary_artifacts_are_published(storage):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    batch(["z"], str(storage / "log.txt"))
    with get_client(sync_client=True) as client:
        keys = {a.key for a in client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
            any_=["machinery-test-summary", "machinery-test-items", "machinery-test-extra"])))}
    assert keys == {"machinery-test-summary", "machinery-test-items", "machinery-test-extra"}


def test_push_slot_serialises_holders_and_creates_a_missing_limit_with_one_slot(storage, monkeypatch):
    """``push_slot`` (the cross-host lock around pushes) on the real server: a missing limit is
    created with one slot (never unthrottled); two holders at once take turns."""
    import flows
    from flows import ensure_infrastructure, push_slot

    name = f"push-test-{storage.name[-12:].lower().replace('_', '-')}"
    monkeypatch.setattr(flows, "PUSH_LIMIT", name)
    from prefect.client.orchestration import get_client

    with push_slot():
        pass
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(name).limit == 1
    assert ensure_infrastructure([], "", 1, push_limit=name) == [], "already there: nothing made"

    spans = []

    def hold():
        with push_slot():
            start = time.monotonic()
            time.sleep(0.6)
            spans.append((start, time.monotonic()))

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    (a0, a1), (b0, b1) = sorted(spans)
    assert len(spans) == 2 and b0 >= a1, f"two pushes held the slot at once: {spans}"


# --- the batch's own summary and state (ingest-batch in-process, fan_out=False) ----------

def _logs(flow_run_id) -> list[str]:
    """Every log line of a flow run and its task runs, once the run's last line is in."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)
    deadline = time.monotonic() + 30
    with get_client(sync_client=True) as client:
        while True:
            lines = [f"{log.level} {log.message}" for log in client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))]
            if any("Finished in state" in line for line in lines[-3:]) or time.monotonic() > deadline:
                return lines
            time.sleep(0.2)


def _artifact(flow_run_id, key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]), key=ArtifactFilterKey(any_=[key])))
    assert found, f"no artifact {key}"
    return found[0].data


def test_a_batch_with_quarantined_interviews_says_so_in_its_state_and_names_the_manifest_lines(storage):
    import json

    from flows.ingest_batch import ingest_batch_flow

    batch = storage / "batch"
    batch.mkdir()
    (batch / "manifest.csv").write_text("sample_id,scenario,video,participants\n"
                                        "summary/001,couple,missing.mp4,Ann;Bo\n"
                                        "bad id,family,x.mp4,Cy;Di\n")
    state = ingest_batch_flow(batch_dir=str(batch), data_root=str(storage / "data"), push=False, fan_out=False,
                              return_state=True)
    # Completed (the batch went on), named for what it quarantined
    assert state.is_completed() and state.name == "Completed (2 quarantined)", (state.name, state.message)
    assert "2 of 2 interviews quarantined" in state.message and "summary/001 (manifest.csv line 2)" in state.message
    result = state.result()
    assert result["items"]["summary/001"]["source"] == "manifest.csv line 2"
    assert result["items"]["bad id"]["source"] == "manifest.csv line 3"
    run_id = state.state_details.flow_run_id
    summary = _artifact(run_id, "ingest-batch-summary")
    assert "| item | source | reason |" in summary
    assert "| summary/001 | manifest.csv line 2 | ingest: MediaError: missing.mp4: file not found |" in summary
    assert "| bad id | manifest.csv line 3 | manifest: " in summary
    rows = {r["item"]: r for r in json.loads(_artifact(run_id, "ingest-batch-items"))}
    assert rows["summary/001"]["source"] == "manifest.csv line 2"
    # a bad video is no error of the code: one line in the log, no traceback
    logs = _logs(run_id)
    assert not any("Traceback" in line for line in logs), logs
    assert any("MediaError: missing.mp4: file not found" in line for line in logs), logs


def test_a_quarantined_interview_run_logs_one_line_and_says_where_it_ran(storage):
    """The child run of the fan-out (``ingest-interview``), called here without a worker: Completed,
    named "Quarantined", with its reason and its result (where it ran) as data; its log holds one
    WARNING line naming the interview and the reason, and no ERROR (no NotReady stage, no
    traceback, no Prefect TypeError about the state's data)."""
    from flows.ingest_interview import ingest_interview_flow

    batch = storage / "batch"
    batch.mkdir()
    (batch / "broken.mp4").write_bytes(b"this is not a video")
    reason = "ingest: MediaError: broken.mp4: unreadable or corrupt media"
    state = ingest_interview_flow(entry={"sample_id": "summary/002", "scenario": "couple", "video": "broken.mp4",
                                         "participants": ["Ann", "Bo"], "line": 2},
                                  batch_dir=str(batch), data_root=str(storage / "data"), return_state=True)
    assert state.is_completed() and state.name == "Quarantined", (state.name, state.message)
    assert state.message.startswith(f"summary/002 quarantined: {reason}"), state.message
    res = state.result()
    assert res["items"][0]["status"] == "quarantined" and res["items"][0]["reason"].startswith(reason)
    assert res["worker"].startswith("this process (")
    logs = _logs(state.state_details.flow_run_id)
    warnings = [line for line in logs if line.startswith("30 ")]
    assert len(warnings) == 1 and warnings[0].startswith(f"30 summary/002 quarantined: {reason}"), logs
    assert not [line for line in logs if int(line.split()[0]) >= 40], logs
    assert not any("Traceback" in line or "NotReady" in line or "TypeError" in line for line in logs), logs
    # the stages after it were not run, and nothing of the quarantine was cached: run again, the
    # bad video is read again (here: fixed to a missing file, so the reason changes)
    (batch / "broken.mp4").unlink()
    again = ingest_interview_flow(entry={"sample_id": "summary/002", "scenario": "couple", "video": "broken.mp4",
                                         "participants": ["Ann", "Bo"], "line": 2},
                                  batch_dir=str(batch), data_root=str(storage / "data"), return_state=True)
    assert again.name == "Quarantined" and "broken.mp4: file not found" in again.message, again.message


def test_a_wrong_batch_dir_is_one_line_and_the_run_refused(storage):
    from flows.ingest_batch import ingest_batch_flow

    missing = storage / "no-such-batch"
    state = ingest_batch_flow(batch_dir=str(missing), data_root=str(storage / "data"), return_state=True)
    line = f"flow parameter batch_dir={str(missing)!r}: batch folder {missing} does not exist"
    assert state.is_failed() and state.name == "Refused" and state.message == line, (state.name, state.message)
    logs = _logs(state.state_details.flow_run_id)
    assert [entry for entry in logs if entry.startswith("40 ")][0] == f"40 {line}", logs
    assert not any("Traceback" in entry for entry in logs), logs


def test_only_expected_problems_lose_their_traceback(storage):
    from flows.ingest_interview import quarantine_expected
    from pipeline.media.audio import MediaError

    @task
    @quarantine_expected
    def stage(kind: str) -> str:
        if kind == "bad video":
            raise MediaError("v.mp4: not a video")
        raise KeyError("a bug")

    @flow
    def run():
        return [(s.name, s.message) for s in (stage(k, return_state=True) for k in ("bad video", "bug"))]

    state = run(return_state=True)
    expected, bug = state.result()
    assert expected == ("Quarantined", "stage: MediaError: v.mp4: not a video")
    assert bug[0] == "Failed" and "KeyError" in bug[1]
    tracebacks = [line for line in _logs(state.state_details.flow_run_id) if "Traceback" in line]
    assert len(tracebacks) == 1 and "KeyError" in tracebacks[0], tracebacks


def test_the_worker_column_never_shows_a_bare_pid(monkeypatch):
    from flows.ingest_batch import _run_worker
    from flows.ingest_interview import where_running

    monkeypatch.delenv("RESCUE_WORKER_NAME", raising=False)
    monkeypatch.setenv("PREFECT__WORKER_NAME", "ProcessWorker 1f2e")
    assert where_running().startswith("ProcessWorker 1f2e@") and " pid " in where_running()
    monkeypatch.setenv("RESCUE_WORKER_NAME", "rescue-local-1")
    assert where_running().startswith("rescue-local-1@")
    monkeypatch.delenv("RESCUE_WORKER_NAME")
    monkeypatch.delenv("PREFECT__WORKER_NAME")
    assert where_running().startswith("this process (")
    crashed = SimpleNamespace(infrastructure_pid="hostA:4242", work_pool_name="rescue-cpu")
    assert _run_worker(crashed) == "a worker of pool rescue-cpu@hostA (flow-run pid 4242)"
    assert _run_worker(SimpleNamespace(infrastructure_pid=None, work_pool_name="rescue-cpu")) == \
        "not started by a worker of pool rescue-cpu"


def test_batch_watch_names_each_interview_and_its_reason(storage):
    """`rescue batch watch`'s reading of a finished batch run that ran its interviews itself
    (fan_out=false; the fanned-out batch on the real stack: tests/flows/test_terminal_truth.py)."""
    import io

    from prefect.client.orchestration import get_client
    from rich.console import Console

    from flows.ingest_batch import ingest_batch_flow
    from ops import batch_watch

    batch = storage / "batch"
    batch.mkdir()
    (batch / "broken.mp4").write_bytes(b"this is not a video")
    (batch / "manifest.csv").write_text("sample_id,scenario,video,participants\n"
                                        "watch/001,couple,missing.mp4,Ann;Bo\n"
                                        "watch/002,family,broken.mp4,Cy;Di\n")
    state = ingest_batch_flow(batch_dir=str(batch), data_root=str(storage / "data"), push=False, fan_out=False,
                              return_state=True)
    assert state.name == "Completed (2 quarantined)", state.name
    out = io.StringIO()
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
        code = batch_watch.watch(client, run.name, Console(file=out, width=80), interval_s=0.2)
        with pytest.raises(batch_watch.WatchError, match="no ingest-batch run named 'no-such-run'"):
            batch_watch.watch(client, "no-such-run", Console(file=io.StringIO()))
    text = out.getvalue()
    assert code == 0, text
    assert "2/2" in text and "done 0, cached 0, quarantined 2" in text, text
    assert f"ingest-batch run {run.name} ended Completed (2 quarantined): 0 done, 0 cached, 2 quarantined" in text
    lines = text.splitlines()
    assert "  watch/001  quarantined (manifest.csv line 2): ingest: MediaError: missing.mp4: file not found" in lines
    assert any(line.startswith("  watch/002  quarantined (manifest.csv line 3): ingest: MediaError: broken.mp4: ")
               for line in lines), text


_busy = {"now": 0, "most": 0}
_lock = threading.Lock()


@task(cache_policy=NO_CACHE)
def start(item: str) -> str:
    return item


@task(cache_policy=NO_CACHE)
def heavy(item: str) -> str:
    """The chain's long stage: counts how many run at once."""
    with _lock:
        _busy["now"] += 1
        _busy["most"] = max(_busy["most"], _busy["now"])
    time.sleep(0.4)
    with _lock:
        _busy["now"] -= 1
    return item


@task(cache_policy=NO_CACHE)
def finish(a: str, b: str) -> str:
    return a + b


@flow
def windowed(items: list[str], window: int) -> list:
    def chain(item):
        f1 = runner.submit(start, {"item": item})
        f2 = runner.submit(start, {"item": f1})
        f3 = runner.submit(heavy, {"item": f1})
        return [("start", f1), ("again", f2), ("heavy", f3), ("finish", runner.submit(finish, {"a": f2, "b": f3}))]

    with ThreadPoolTaskRunner(max_workers=window * 4) as runner:
        return settle(submit_window(((i, i) for i in items), chain, window))


def test_a_window_of_chains_runs_that_many_items_at_once_never_more(storage):
    """ingest-batch's in-process path: each chain's tasks wait for their upstream ones inside the
    runner's threads; submitted all at once into ``window`` threads the chains ran one at a time,
    into more threads more than ``window`` at once."""
    _busy.update(now=0, most=0)
    outcomes = windowed(["a", "b", "c", "d", "e"], 2)
    assert [o.status for o in outcomes] == ["done"] * 5 and [o.result for o in outcomes] == ["aa", "bb", "cc", "dd", "ee"]
    assert _busy["most"] == 2, _busy
