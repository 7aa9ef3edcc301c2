"""What one poll of `ingest-batch`'s wait for its children costs, with N children waiting.

The batch run waits for its child runs by polling the Prefect server every ``POLL_S``
(`flows/ingest_batch.py`). It used to read every waiting child each second; it now asks only
for the children that ended since (`ended_only`), and reads them all once a minute for its
progress line. Each worker polls its pool each second for every Scheduled run; the batch used to
queue all its children at once and now keeps at most ``MAX_IN_FLIGHT`` queued or running, so
the bench also times a worker's poll with the whole batch queued and with the window. This
starts a throw-away Prefect server (Prefect's test harness: SQLite under a temporary home), creates N flow runs left Scheduled (none ends, as at the start of a batch) and
times both queries, alternately, each ``--polls`` times: the wall per poll at the client, the
server's work included (the call is synchronous).

    .venv/bin/python benchmarks/bench_batch_wait.py [--children 191] [--polls 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--children", type=int, default=191, help="child runs waiting (default 191: RESCUE)")
    ap.add_argument("--polls", type=int, default=20, help="polls timed per query (default 20)")
    args = ap.parse_args()

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import TERMINAL_STATES
    from prefect.states import Scheduled
    from prefect.testing.utilities import prefect_test_harness

    @flow(name="bench-child")
    def child(entry: dict) -> None:  # never run: its runs stay Scheduled
        return None

    with prefect_test_harness(), get_client(sync_client=True) as client:
        entry = {"sample_id": "x" * 40, "video": "/data/batch/" + "y" * 60 + ".mp4", "subtitles": None,
                 "scenario": "couple", "participants": ["A", "B"]}  # a child's parameters, about this size
        ids = [client.create_flow_run(child, parameters={"entry": entry}, state=Scheduled()).id
               for _ in range(args.children)]

        def poll(ended_only: bool) -> int:
            state = FlowRunFilterState(type=FlowRunFilterStateType(any_=sorted(TERMINAL_STATES))) if ended_only else None
            n = 0
            for i in range(0, len(ids), 200):
                n += len(client.read_flow_runs(flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=ids[i:i + 200]), state=state), limit=200))
            return n

        times: dict[str, list[float]] = {"every waiting child (before)": [], "only those that ended (now)": []}
        for _ in range(args.polls):
            for name, ended_only in (("every waiting child (before)", False), ("only those that ended (now)", True)):
                t0 = time.perf_counter()
                got = poll(ended_only)
                times[name].append(time.perf_counter() - t0)
                assert got == (0 if ended_only else args.children), got
        base = statistics.median(times["every waiting child (before)"])
        print(f"{args.children} children waiting, {args.polls} polls each (median wall per poll, the server's work included):")
        for name, values in times.items():
            med = statistics.median(values)
            print(f"  {name:30s} {med * 1000:8.1f} ms   {med / base:5.2f}x the before figure")

        # A worker's poll: every Scheduled run of its pool (Prefect's worker, each second). The
        # batch queued all its children at once; it now keeps MAX_IN_FLIGHT queued or running.
        from prefect.client.schemas.actions import WorkPoolCreate
        from prefect.states import Cancelled

        from flows.ingest_batch import MAX_IN_FLIGHT

        client.create_work_pool(WorkPoolCreate(name="bench-pool", type="process"))
        deployment = client.create_deployment(flow_id=client.create_flow(child), name="bench",
                                              work_pool_name="bench-pool")
        queued = [client.create_flow_run_from_deployment(deployment, parameters={"entry": entry}).id
                  for _ in range(args.children)]

        def worker_poll() -> float:
            t0 = time.perf_counter()
            client.get_scheduled_flow_runs_for_work_pool("bench-pool", scheduled_before=datetime.now(timezone.utc)
                                                         + timedelta(seconds=10))
            return time.perf_counter() - t0

        whole = statistics.median(worker_poll() for _ in range(args.polls))
        for run_id in queued[min(MAX_IN_FLIGHT, args.children):]:
            client.set_flow_run_state(run_id, Cancelled(), force=True)
        window = statistics.median(worker_poll() for _ in range(args.polls))
        print(f"a worker's poll of its pool (median wall, {args.polls} polls each):")
        print(f"  {args.children} children queued at once (before) {whole * 1000:8.1f} ms")
        print(f"  {min(MAX_IN_FLIGHT, args.children)} queued, the batch's window (now)  {window * 1000:8.1f} ms"
              f"   {window / whole:5.2f}x the before figure")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
