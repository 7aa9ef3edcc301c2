"""The Prefect API in one and in several processes: how many workers' polls a second it serves,
and the server's CPU per poll, on PostgreSQL with Redis carrying its events.

docs/SCALING.md's projection of 10,000 interviews is bounded by one API process (one event loop,
one core): every worker asks its pool for Scheduled runs each second. Prefect's server runs its
API in several processes (`prefect server start --workers N`) when its database is PostgreSQL
and its events, causal ordering and concurrency leases go through Redis (the `prefect-redis`
package); its background services then run in a process of their own
(`prefect server services start`, not started here: a poll needs none).

For each N in ``--processes``: a fresh PostgreSQL database (127.0.0.1:5432, user root; dropped at
the end), Redis database ``--redis-db`` of 127.0.0.1:6379 (emptied before and after: give one
nothing else uses), `prefect server start --workers N --no-services`, a process work pool with
``--queued`` Scheduled runs (a batch's `max_in_flight` window), then ``--clients`` threads of one
client process posting a worker's poll (`POST /api/work_pools/<pool>/get_scheduled_flow_runs`,
what Prefect's worker sends each `PREFECT_WORKER_QUERY_SECONDS`) as fast as answers come, for
``--seconds``. Printed per N: polls a second, median latency, the server's CPU per poll (every
process of the server, from /proc) and the cores it used; then the ratio of each N's polls a
second to the first N's, measured in the same run. The client shares the machine's cores: on a
2-core machine it takes part of what a second API process could use.

    .venv/bin/python benchmarks/bench_server_processes.py [--processes 1 2] [--clients 8] [--seconds 20]
        [--queued 32] [--redis-db 13]

Needs `prefect-redis` in the environment (`uv pip install --python .venv/bin/python prefect-redis==0.3.0`;
not a dependency of the pipeline: the stack runs one API process).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ops.prefect_setup import prefect_bin  # noqa: E402 - after the path
from ops.processes import free_server_port, healthy  # noqa: E402


def tree_cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` and every live descendant (the server's uvicorn workers)."""
    ticks, total, todo = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        todo += [int(c) for c in children]
    return total


def redis_flush(db: int) -> None:
    import redis

    redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()


def server_env(home: Path, url: str, redis_db: int) -> dict[str, str]:
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_DATABASE_CONNECTION_URL": url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PREFECT_SERVER_UI_ENABLED": "false",
            "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging", "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
            "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
            "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
            "PREFECT_REDIS_MESSAGING_HOST": "127.0.0.1", "PREFECT_REDIS_MESSAGING_PORT": "6379",
            "PREFECT_REDIS_MESSAGING_DB": str(redis_db), "PREFECT_SERVER_LOGGING_LEVEL": "WARNING"}


def wait_healthy(api: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Prefect server ended ({proc.returncode}) before it answered")
        if healthy(api):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the Prefect server at {api} did not answer in {timeout_s:.0f} s")


def queue_runs(api: str, queued: int) -> str:
    """A process work pool with ``queued`` Scheduled runs of a deployment in it; returns the pool."""
    from prefect import flow
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.actions import WorkPoolCreate

    @flow(name="bench-poll")
    def never_run() -> None:
        return None

    with SyncPrefectClient(api) as client:
        client.create_work_pool(WorkPoolCreate(name="bench-pool", type="process"))
        deployment = client.create_deployment(flow_id=client.create_flow(never_run), name="bench",
                                              work_pool_name="bench-pool")
        for _ in range(queued):
            client.create_flow_run_from_deployment(deployment)
    return "bench-pool"


def hammer(api: str, pool: str, clients: int, seconds: float, queued: int) -> tuple[int, list[float]]:
    """``clients`` threads posting a worker's poll for ``seconds``: (polls answered, latencies)."""
    import httpx

    body = {"scheduled_before": (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()}
    latencies: list[float] = []
    errors: list[str] = []
    lock, stop = threading.Lock(), time.monotonic() + seconds

    def one() -> None:
        try:
            poll()
        except Exception as exc:  # noqa: BLE001 - reported by the caller's thread
            errors.append(f"{type(exc).__name__}: {exc}")

    def poll() -> None:
        mine = []
        with httpx.Client(base_url=api, timeout=30) as http:
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                answer = http.post(f"/work_pools/{pool}/get_scheduled_flow_runs", json=body)
                mine.append(time.perf_counter() - t0)
                # polls at the same moment share the runs (PostgreSQL: rows locked by one poll
                # are skipped by the others), so only a single poll must see them all
                if answer.status_code != 200 or (clients == 1 and len(answer.json()) != queued):
                    raise RuntimeError(f"poll answered {answer.status_code}: {answer.text[:200]}")
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {clients} pollers failed, the first: {errors[0]}")
    return len(latencies), latencies


def start_server(env: dict, port: int, processes: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([prefect_bin(), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port), "--workers", str(processes), "--no-services"],
                            env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"), start_new_session=True)


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def measure(processes: int, args) -> dict:
    from rehearsal.database import create_database, drop_database

    url, name, where = create_database()
    if url is None:
        raise SystemExit(f"needs PostgreSQL: {where}")
    # below the ephemeral range: the measured server starts again on the first one's port
    port, home = free_server_port(), Path(tempfile.mkdtemp(prefix="bench-server-"))
    redis_flush(args.redis_db)
    env = server_env(home, url, args.redis_db)
    api = f"http://127.0.0.1:{port}/api"
    # Every API process migrates the database and registers Prefect's block types as it starts;
    # several at once on a new database race (duplicate keys) and the server stops. So one
    # process starts first and does both, then the measured server starts without either.
    first = start_server(env, port, 1, home / "first.log")
    try:
        wait_healthy(api, first)
    finally:
        stop_server(first)
    env.update(PREFECT_SERVER_DATABASE_MIGRATE_ON_START="false", PREFECT_SERVER_REGISTER_BLOCKS_ON_START="false")
    proc = start_server(env, port, processes, home / "server.log")
    try:
        wait_healthy(api, proc)
        pool = queue_runs(api, args.queued)
        hammer(api, pool, 1, 1.0, args.queued)  # one poller sees every queued run
        hammer(api, pool, args.clients, 2.0, args.queued)  # warm: connections, caches, every process
        cpu0, t0 = tree_cpu_s(proc.pid), time.monotonic()
        polls, latencies = hammer(api, pool, args.clients, args.seconds, args.queued)
        wall, cpu = time.monotonic() - t0, tree_cpu_s(proc.pid) - cpu0
    except Exception:
        print(f"the server's log ({processes} process(es)), its end:\n" + (home / "server.log").read_text()[-3000:])
        raise
    finally:
        stop_server(proc)
        drop_database(name)
        redis_flush(args.redis_db)
    return {"processes": processes, "polls": polls, "polls_per_s": round(polls / wall, 1),
            "median_latency_ms": round(statistics.median(latencies) * 1000, 1),
            "server_cpu_ms_per_poll": round(cpu / max(polls, 1) * 1000, 2), "server_cores": round(cpu / wall, 2),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="API processes to compare (default 1 2)")
    ap.add_argument("--clients", type=int, default=8, help="threads polling at once (default 8)")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long each figure polls (default 20)")
    ap.add_argument("--queued", type=int, default=32, help="Scheduled runs in the pool (default 32: max_in_flight)")
    ap.add_argument("--redis-db", type=int, default=13, help="Redis database (emptied before and after; default 13)")
    args = ap.parse_args(argv)
    try:
        import prefect_redis  # noqa: F401 - the server imports it; say what is missing before starting one
    except ImportError:
        ap.error("needs prefect-redis: uv pip install --python .venv/bin/python prefect-redis==0.3.0")
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.clients} client threads, {args.queued} runs queued, {args.seconds:g} s per figure")
    rows = [measure(n, args) for n in args.processes]
    base = rows[0]["polls_per_s"]
    for row in rows:
        row["vs_first"] = round(row["polls_per_s"] / base, 2)
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
