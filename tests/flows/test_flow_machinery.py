"""The shared flow machinery (flows/__init__.py) on the real Prefect engine, in-process: a
content-addressed cache key, resume across flow runs, failures isolated per item, and the
summary artifacts. One test harness (temporary server) for the module; each test has its
own result storage."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from flows import RESUME, file_key, report, settle


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


@pytest.fixture(scope="module")
def harness():
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):  # ~1 s less per flow call
            yield


@pytest.fixture
def storage(harness, tmp_path):
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
    import threading
    import time

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
