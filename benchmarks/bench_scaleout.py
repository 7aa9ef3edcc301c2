"""Wall time of one `ingest-batch` run fanned out over 1 and then 2 workers of one pool.

    .venv/bin/python benchmarks/bench_scaleout.py [--interviews 6] [--rows 6] [--local] [--chunk 3]

A local stack of its own under a temporary data root (Prefect server on SQLite - or on
PostgreSQL with ``--database-url`` -, the sweeper; no desks: nothing is pushed),
generated interviews (subtitles; espeak-ng, ffmpeg, the offline pyannote pipeline, one torch
thread per flow run). Worker 1 has two slots: the batch run (it only submits and waits) and
one interview; worker 2, started for the second run, has one. So "1 worker" runs one interview
at a time and "2 workers" two. Each run goes into a fresh data root (nothing cached).
``--local`` adds the batch without fan-out (one flow-run process, ``max_workers=2``);
``--chunk N`` adds 2 workers with N interviews per child run (one process and model load each).

Prints each run's wall time, each worker's share of the interviews and the load average.
On a 2-core machine two workers compete for the same cores as everything else running: the
speed-up is bounded by 2 and lower when the machine is busy. Stops everything it started.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_batch(env: dict, batch: Path, root: Path, **params) -> tuple[float, dict]:
    from prefect.settings import (PREFECT_API_AUTH_STRING, PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH,
                                  temporary_settings)

    from ops.demo import start_deployment, wait_flow_run

    with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"], PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"],
                             PREFECT_RESULTS_LOCAL_STORAGE_PATH: env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"]}):
        t0 = time.perf_counter()
        run_id = start_deployment("ingest-batch/default", {"batch_dir": str(batch), "data_root": str(root),
                                                           "backend": "subtitles", "push": False, **params})
        result = wait_flow_run(run_id, timeout_s=3600).state.result()
        return time.perf_counter() - t0, result


def shares(result: dict) -> str:
    count = Counter(item["worker"].split("@")[0] or "(in the batch's process)" for item in result["items"].values())
    return ", ".join(f"{w}: {n}" for w, n in sorted(count.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interviews", type=int, default=6)
    ap.add_argument("--rows", type=int, default=6, help="rows per generated interview (6: about 25 s of speech)")
    ap.add_argument("--local", action="store_true", help="also time the batch without fan-out")
    ap.add_argument("--chunk", type=int, default=0,
                    help="also time 2 workers with this many interviews per child run (chunk_size)")
    ap.add_argument("--database-url", default=None, help="PREFECT_API_DATABASE_CONNECTION_URL (default: SQLite)")
    args = ap.parse_args()

    from ops import stack as st
    from pipeline.synthetic import interviews as synth

    tmp = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    root = tmp / "data"
    env = {"RESCUE_DATA_ROOT": str(root), "RESCUE_PREFECT_PORT": str(free_port()), "OMP_NUM_THREADS": "1",
           "RESCUE_SWEEP_EVERY_S": "2"}
    if args.database_url:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = args.database_url
    batch = tmp / "batch"
    t0 = time.perf_counter()
    synth.make_batch(batch, [{"name": f"b{i}", "scenario": "couple" if i % 2 == 0 else "family", "seed": 40 + i,
                              "n_rows": args.rows, "group": "bench_scaleout"} for i in range(args.interviews)])
    print(f"{args.interviews} generated interviews in {time.perf_counter() - t0:.0f} s", flush=True)
    lines = []
    with mock.patch.dict(os.environ, env):
        try:
            t0 = time.perf_counter()
            env.update(st.up(root, label_studio=False, worker_limit=2, log=lambda *_: None))
            print(f"stack up in {time.perf_counter() - t0:.0f} s", flush=True)
            if args.local:
                wall, res = run_batch(env, batch, root / "local", fan_out=False)
                lines.append(f"no fan-out (1 process, 2 threads)  {wall:7.1f} s   load {os.getloadavg()[0]:.1f}")
                print(lines[-1], flush=True)
            wall1, res = run_batch(env, batch, root / "one")
            lines.append(f"fan-out, 1 worker (1 interview at a time)  {wall1:7.1f} s   "
                         f"load {os.getloadavg()[0]:.1f}   shares: {shares(res)}")
            print(lines[-1], flush=True)
            st.add_worker(root, "prefect-worker-2", 1, log=lambda *_: None)
            wall2, res = run_batch(env, batch, root / "two")
            lines.append(f"fan-out, 2 workers (2 at a time)           {wall2:7.1f} s   "
                         f"load {os.getloadavg()[0]:.1f}   shares: {shares(res)}")
            print(lines[-1], flush=True)
            lines.append(f"speed-up 1 -> 2 workers: {wall1 / wall2:.2f}x on {os.cpu_count()} cores")
            if args.chunk > 1:
                wall3, res = run_batch(env, batch, root / "chunked", chunk_size=args.chunk)
                lines.append(f"fan-out, 2 workers, {args.chunk} per child run      {wall3:7.1f} s   "
                             f"load {os.getloadavg()[0]:.1f}   shares: {shares(res)}")
                print(lines[-1], flush=True)
        finally:
            st.down(root, label_studio=False, log=lambda *_: None)
    print("\n" + "\n".join(lines))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
