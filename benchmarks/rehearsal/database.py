"""The Prefect server's own PostgreSQL database: created for one rehearsal, dropped at its end
(the machine's PostgreSQL at 127.0.0.1:5432, user root, or RESCUE_TEST_PG_*)."""
from __future__ import annotations

import os
import uuid

from . import say

PG = dict(host=os.environ.get("RESCUE_TEST_PG_HOST", "127.0.0.1"),
          port=int(os.environ.get("RESCUE_TEST_PG_PORT", "5432")),
          user=os.environ.get("RESCUE_TEST_PG_USER", "root"))


def _pg(sql: list[str], database: str = "postgres") -> None:
    import asyncio

    import asyncpg

    async def go():
        conn = await asyncpg.connect(database=database, timeout=5, **PG)
        try:
            for stmt in sql:
                await conn.execute(stmt)
        finally:
            await conn.close()

    asyncio.run(go())


def create_database() -> tuple[str | None, str | None, str]:
    """(connection URL, database name to drop, what was chosen) - (None, None, why) for SQLite."""
    name = f"rescue_rehearsal_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    where = f"PostgreSQL at {PG['host']}:{PG['port']} (user {PG['user']})"
    try:
        _pg([f'CREATE DATABASE "{name}"'])
    except Exception as exc:  # noqa: BLE001 - unreachable, no asyncpg, no right to create: say which
        return None, None, (f"{where} is not usable ({type(exc).__name__}: {exc}); the Prefect server runs on "
                            f"SQLite instead (give --database-url to use another PostgreSQL)")
    try:
        _pg(["CREATE EXTENSION IF NOT EXISTS pg_trgm"], database=name)  # Prefect's migrations need it
    except Exception:
        drop_database(name)
        raise
    return f"postgresql+asyncpg://{PG['user']}@{PG['host']}:{PG['port']}/{name}", name, f"{where}, database {name}"


def drop_database(name: str) -> None:
    try:
        _pg([f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'])
    except Exception as exc:  # noqa: BLE001 - say it, the caller is already cleaning up
        say(f"could not drop PostgreSQL database {name}: {type(exc).__name__}: {exc}")
