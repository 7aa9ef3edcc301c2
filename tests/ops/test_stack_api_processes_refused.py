"""`rescue stack up --api-processes N` asks of the operator what several API processes need, and
says what is missing before it starts anything: the server's database in PostgreSQL, a Redis
that answers (named by host, port and database, never by its password). The stack itself on
PostgreSQL and Redis: tests/flows/test_stack_api_processes.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ops.prefect_setup import REDIS_SERVER_MODULES, several_processes_env
from ops.processes import StackError
from pipeline.config import REPO_ROOT
from tests.helpers import free_port

PG = "postgresql+asyncpg://root@127.0.0.1:5432/prefect"


def test_sqlite_is_refused_naming_the_variable():
    for environ in ({}, {"PREFECT_API_DATABASE_CONNECTION_URL": "sqlite+aiosqlite:///x.db",
                         "PREFECT_REDIS_MESSAGING_URL": "redis://127.0.0.1:6379/0"}):
        with pytest.raises(StackError, match="PREFECT_API_DATABASE_CONNECTION_URL=postgresql"):
            several_processes_env(environ)


def test_no_redis_url_is_refused_naming_the_variable():
    with pytest.raises(StackError, match="set PREFECT_REDIS_MESSAGING_URL=redis://"):
        several_processes_env({"PREFECT_API_DATABASE_CONNECTION_URL": PG})


def test_a_redis_that_does_not_answer_is_named_without_its_password():
    port = free_port()  # nothing listens there
    with pytest.raises(StackError) as err:
        several_processes_env({"PREFECT_SERVER_DATABASE_CONNECTION_URL": PG,
                               "PREFECT_REDIS_MESSAGING_URL": f"redis://ops:s3cret-pw@127.0.0.1:{port}/3"})
    assert f"Redis at 127.0.0.1:{port}/3 (PREFECT_REDIS_MESSAGING_URL) does not answer" in str(err.value)
    assert "s3cret-pw" not in str(err.value)


def test_what_the_processes_get_with_a_redis_that_answers():
    import redis

    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=3).ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"needs Redis at 127.0.0.1:6379 ({exc})")
    url = "redis://127.0.0.1:6379/11"
    got = several_processes_env({"PREFECT_API_DATABASE_CONNECTION_URL": PG, "PREFECT_REDIS_MESSAGING_URL": url})
    assert got == {**REDIS_SERVER_MODULES, "PREFECT_SERVER_DOCKET_URL": url}
    assert "memory" not in "".join(got.values())  # Prefect refuses several processes with any in-memory part
    other = several_processes_env({"PREFECT_API_DATABASE_CONNECTION_URL": PG, "PREFECT_REDIS_MESSAGING_URL": url,
                                   "PREFECT_SERVER_DOCKET_URL": "redis://127.0.0.1:6379/12"})
    assert other["PREFECT_SERVER_DOCKET_URL"] == "redis://127.0.0.1:6379/12"


def test_the_cli_refuses_before_it_starts_anything(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RESCUE_"))}
    env.update(RESCUE_DATA_ROOT=str(tmp_path / "data"), RESCUE_PREFECT_PORT=str(free_port()))
    proc = subprocess.run([str(Path(sys.executable).with_name("rescue")), "stack", "up", "--no-label-studio",
                           "--api-processes", "2"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error: several API processes need the server's database in PostgreSQL" in proc.stderr, proc.stderr
    pids = tmp_path / "data" / "stack" / "pids"
    assert not (pids.is_dir() and list(pids.iterdir())), "nothing may start"


def test_prepare_database_without_a_database_url_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RESCUE_"))}
    env.update(RESCUE_DATA_ROOT=str(tmp_path / "data"))
    proc = subprocess.run([str(Path(sys.executable).with_name("rescue")), "stack", "prepare-database"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "set PREFECT_API_DATABASE_CONNECTION_URL" in proc.stderr, proc.stderr
