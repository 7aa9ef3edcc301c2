"""A fanned-out batch keeps at most ``max_in_flight`` child runs queued or running.

Every worker's poll reads every Scheduled run of its pool, so a batch that queued all its
interviews at once made each poll's cost grow with the batch. Here, on Prefect's real engine
and a throw-away server (Prefect's test harness), ``ingest-batch``'s fan-out submits to a real
deployment that no worker serves; the test plays the worker: once the batch has filled its
window it takes the Scheduled runs two at a time, counting how many were queued or running at
once, and ends them Completed or Failed.
Asserted: never more than the window at once, every interview submitted exactly once and its
outcome read, and a window larger than the batch queues the whole batch at once (as before).
"""
from __future__ import annotations

import logging
import threading
import time

import pytest

from pipeline.media.manifest import ManifestEntry

pytestmark = pytest.mark.slow

N = 7


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def _play_worker(deployment_id, window: int, stop: threading.Event, seen: dict) -> None:
    """Wait until the batch has filled its window (``min(window, children not yet ended)`` runs
    queued; after 60 s without that, note ``underfilled`` and go on, so the batch still ends),
    then take up to two Scheduled runs and end them (every third Failed). Records the most runs
    of the deployment not final at once, and every run's name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.states import Completed, Failed, Running

    since = time.monotonic()
    with get_client(sync_client=True) as client:
        while not stop.is_set():
            time.sleep(0.2)
            runs = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                         limit=200)
            for run in runs:
                seen["names"].add(run.name)
            open_runs = [r for r in runs if not (r.state and r.state.is_final())]
            seen["most"] = max(seen["most"], len(open_runs))
            if len(open_runs) < min(window, N - len(seen["ended"])):
                if time.monotonic() - since < 60:
                    continue
                seen["underfilled"] += 1
            for i, run in enumerate(r for r in open_runs if r.state and r.state.is_scheduled()):
                if i == 2:
                    break
                client.set_flow_run_state(run.id, Running(), force=True)
                ended = Failed(message="planted") if len(seen["ended"]) % 3 == 2 else Completed()
                client.set_flow_run_state(run.id, ended, force=True)
                seen["ended"].append(run.name)
                since = time.monotonic()


@pytest.mark.parametrize("window", [3, 50])
def test_a_batch_keeps_at_most_its_window_of_children_queued_or_running(harness, window, monkeypatch):
    from prefect import flow
    from prefect.client.orchestration import get_client

    from flows import ingest_batch

    monkeypatch.setattr(ingest_batch, "POLL_S", 0.2)

    @flow(name=f"window-child-{window}")
    def child(entry: dict, batch_dir: str) -> None:  # never run here: the test plays its worker
        return None

    with get_client(sync_client=True) as client:
        deployment_id = client.create_deployment(flow_id=client.create_flow_from_name(child.name), name="default")
    entries = [ManifestEntry(sample_id=f"s{i:02d}", scenario="couple", video=f"s{i:02d}.mp4") for i in range(N)]

    @flow(name=f"window-batch-{window}")
    def batch() -> list:
        return ingest_batch._fan_out(f"{child.name}/default", entries, {"batch_dir": "/nowhere"},
                                     logging.getLogger("test"), chunk_size=1, max_in_flight=window)

    stop, seen = threading.Event(), {"most": 0, "names": set(), "ended": [], "underfilled": 0}
    worker = threading.Thread(target=_play_worker, args=(deployment_id, window, stop, seen), daemon=True)
    worker.start()
    try:
        outcomes = batch()
    finally:
        stop.set()
        worker.join(10)

    assert seen["underfilled"] == 0 and seen["most"] == min(window, N)  # the window is filled, never passed
    assert sorted(o.item for o in outcomes) == [e.sample_id for e in entries]
    assert len(seen["ended"]) == N == len(seen["names"])  # each submitted exactly once
    failed = {name.rsplit(":", 1)[1] for name in seen["ended"][2::3]}
    assert {o.item for o in outcomes if "ended Failed" in o.reason} == failed
    assert all(o.status == "quarantined" for o in outcomes)  # no result was stored: said, not lost
