"""The server's API in several processes, as an operator starts it: `rescue stack up
--api-processes 2` on the machine's PostgreSQL and Redis. The API runs in two processes and
Prefect's services in a third; a deployment runs through them to its end (the worker's polls, the
run's states, its events through Redis to `prefect deployment run --watch`); the zombie
automation crashes a silent run (the services process judging events the API processes took
in); every process wants the auth string; services that died are named by `rescue stack status`
and `rescue doctor` and started again by `up`; `rescue stack down` stops them all. Skipped, saying
why, where PostgreSQL or Redis is not reachable. What the operator is told when either is
missing: tests/ops/test_stack_api_processes_refused.py."""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.flows.conftest import Stack, crash_a_silent_run
from tests.helpers import free_port

pytestmark = pytest.mark.slow

REDIS_DB = 11  # a database number of the machine's Redis only this module uses (emptied before and after)
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"


def _redis():
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"needs Redis at 127.0.0.1:6379 for the server's processes to share events ({exc})")
    return client


def _pid(root: Path, name: str) -> int:
    from ops.processes import StackPaths, read_pid
    from pipeline.paths import DataRoot

    pid = read_pid(StackPaths(DataRoot(root)), name)
    assert pid, f"{name} is not running"
    return pid


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _alive(pid: int) -> bool:
    from pipeline.processes import start_time

    return start_time(pid) is not None


@pytest.fixture(scope="module")
def several(tmp_path_factory):
    from benchmarks.rehearsal.database import create_database, drop_database
    from ops.prefect_setup import prefect_env
    from pipeline.paths import DataRoot

    redis = _redis()
    url, name, where = create_database()
    if url is None:
        pytest.skip(f"needs PostgreSQL: {where}")
    redis.flushdb()
    root = tmp_path_factory.mktemp("several-api")
    port = free_port()
    env = {"RESCUE_DATA_ROOT": str(root), "RESCUE_PREFECT_PORT": str(port), "RESCUE_WARM_START": "0",
           "PREFECT_API_DATABASE_CONNECTION_URL": url, "PREFECT_REDIS_MESSAGING_URL": REDIS_URL}
    stack = Stack(root, env)
    try:
        up = stack.rescue("stack", "up", "--no-label-studio", "--api-processes", "2", "--worker-limit", "2")
        assert up.returncode == 0, up.stdout + up.stderr
        stack.env.update(prefect_env(DataRoot(root), port))
        yield stack, up.stdout
    finally:
        stack.rescue("stack", "down", "--no-label-studio")
        drop_database(name)
        redis.flushdb()
        redis.close()


def test_prepare_database_migrates_and_registers_blocks_once(tmp_path):
    """What compose's prefect-db-init runs: a new database comes out migrated with Prefect's
    block types in it, and the scratch server it used is gone."""
    import asyncio

    import asyncpg

    from benchmarks.rehearsal.database import PG, create_database, drop_database

    url, name, where = create_database()
    if url is None:
        pytest.skip(f"needs PostgreSQL: {where}")
    try:
        stack = Stack(tmp_path, {"RESCUE_DATA_ROOT": str(tmp_path), "PREFECT_API_DATABASE_CONNECTION_URL": url})
        proc = stack.rescue("stack", "prepare-database")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "migrated, Prefect's blocks registered" in proc.stdout

        async def counts():
            conn = await asyncpg.connect(database=name, **PG)
            try:
                return (await conn.fetchval("SELECT count(*) FROM block_type"),
                        await conn.fetchval("SELECT count(*) FROM alembic_version"))
            finally:
                await conn.close()

        blocks, versions = asyncio.run(counts())
        assert blocks > 10 and versions == 1, (blocks, versions)
        log = (tmp_path / "stack" / "logs" / "prefect-prepare.log").read_text()
        assert "Failed to register block" not in log
    finally:
        drop_database(name)


def test_the_api_runs_in_two_processes_and_the_services_in_a_third(several):
    stack, said = several
    assert "2 API processes" in said and "prefect-services:" in said, said
    status = stack.rescue("stack", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    lines = {line.split()[0]: line for line in status.stdout.splitlines() if line.strip()}
    assert "state=running" in lines["prefect-services"] and "state=running" in lines["prefect-server"], status.stdout
    api = [c for c in _children(_pid(stack.root, "prefect-server"))
           if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text()]
    assert len(api) == 2, api  # uvicorn's two worker processes (and its resource tracker)
    assert "services start" in Path(f"/proc/{_pid(stack.root, 'prefect-services')}/cmdline").read_bytes().replace(
        b"\0", b" ").decode()
    # One process migrated and registered Prefect's blocks first: the two did not race for them
    logs = stack.root / "stack" / "logs"
    assert "Failed to register block" not in (logs / "prefect-server.log").read_text()
    assert (logs / "prefect-prepare.log").is_file()


def test_a_deployment_runs_to_its_end_through_them(several):
    stack, _ = several
    proc = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                         "--param", "source=synthetic:0.05", "--param", f"data_root={stack.root}", "--watch")
    # --watch follows the run's events: received by one API process, streamed out by either
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Completed" in proc.stdout
    manifest = json.loads((stack.root / "releases" / "1.0.0" / "manifest.json").read_text())
    assert manifest["version"] == "1.0.0" and manifest["files"]


def test_the_services_process_crashes_a_silent_run(several):
    crash_a_silent_run(several[0])


def test_every_api_process_wants_the_auth_string(several):
    stack, _ = several
    api = stack.env["PREFECT_API_URL"]
    codes = []
    for _ in range(12):  # a new connection each: the kernel hands them to either process
        request = urllib.request.Request(f"{api}/flows/filter", data=b"{}", method="POST",
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                codes.append(resp.status)
        except urllib.error.HTTPError as exc:
            codes.append(exc.code)
    assert set(codes) == {401}, codes


def test_services_that_died_are_named_by_doctor_and_started_again_by_up(several):
    import signal

    stack, _ = several
    dead = _pid(stack.root, "prefect-services")
    os.kill(dead, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(dead) and time.monotonic() < deadline:
        time.sleep(0.2)
    status = stack.rescue("stack", "status")
    assert status.returncode == 1 and "prefect-services state=stopped" in status.stdout, status.stdout
    doctor = stack.rescue("doctor", "--json", timeout=300)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    check = {c["name"]: c for c in json.loads(doctor.stdout)["checks"] if c["section"] == "prefect"}["prefect-services"]
    assert check["state"] == "BROKEN" and check["why"].startswith("not running: no automation"), check
    server = _pid(stack.root, "prefect-server")
    up = stack.rescue("stack", "up", "--no-label-studio", "--api-processes", "2", "--worker-limit", "2")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "prefect server: already running" in up.stdout and "prefect-services: the scheduler" in up.stdout
    assert _pid(stack.root, "prefect-server") == server  # the API processes were left alone
    assert _alive(_pid(stack.root, "prefect-services")) and _pid(stack.root, "prefect-services") != dead


def test_up_without_the_option_leaves_the_running_server_as_it_is_and_says_so(several):
    stack, _ = several
    pids = {n: _pid(stack.root, n) for n in ("prefect-server", "prefect-services")}
    env = {k: v for k, v in stack.env.items() if k != "PREFECT_REDIS_MESSAGING_URL"}
    up = Stack(stack.root, env).rescue("stack", "up", "--no-label-studio", "--worker-limit", "2")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "it runs its API in several processes, as it was started; to change that: rescue stack down, " \
           "then rescue stack up --api-processes 1" in up.stdout, up.stdout
    assert {n: _pid(stack.root, n) for n in pids} == pids  # neither stopped nor doubled


def test_down_stops_every_process_of_the_server(several):
    stack, _ = several
    server = _pid(stack.root, "prefect-server")
    pids = [server, *_children(server), _pid(stack.root, "prefect-services")]
    down = stack.rescue("stack", "down", "--no-label-studio")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "prefect-services: stopped" in down.stdout, down.stdout
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in pids if _alive(p)]
    assert not os.path.exists(stack.root / "stack" / "pids" / "prefect-services.json")
