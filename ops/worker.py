"""``rescue worker start``: Prefect's ``prefect worker start``, except that a process worker does
not ask the server for runs while every one of its slots is taken.

Prefect's worker asks its pool for scheduled runs every ``PREFECT_WORKER_QUERY_SECONDS`` (1 s in
the stack) whether or not it could take one. Each ask costs the server 20-30 ms of CPU, and a
worker that runs interviews is full nearly all the time, so in a rebuild these asks were about a
quarter of the server's CPU. This worker skips them while it is full, and still asks once every
``KEEP_READY_S``, because Prefect marks a queue and its deployments Not Ready after 60 s without
an ask. A freed slot is filled at the next tick, as before.

The skip reads private attributes of Prefect's ``BaseWorker`` (its limiter, whether it has
synced, its last poll time), so it is tied to the exact Prefect version it was written and tested
for (``SKIP_TESTED_ON``). Under any other version, or with ``RESCUE_WORKER_SKIP_WHEN_FULL=0``,
the command is Prefect's own worker, unchanged. The options are Prefect's, passed on to its CLI.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from typing import Optional

import typer

SKIP_TESTED_ON = "3.9.1"   # the Prefect version whose BaseWorker internals the skip reads
KEEP_READY_S = 30.0        # ask at least this often even when full (Prefect: Not Ready after 60 s)
SKIP_SETTING = "RESCUE_WORKER_SKIP_WHEN_FULL"

cli = typer.Typer(help="Prefect workers for the rescue pools.", no_args_is_help=True)


def skip_when_full() -> bool:
    """Whether a worker started here skips its asks while full: the setting (default on) and the
    installed Prefect being the version the skip was tested on."""
    import prefect

    return os.environ.get(SKIP_SETTING, "1") != "0" and prefect.__version__ == SKIP_TESTED_ON


def slot_aware_process_worker():
    """A subclass of Prefect's ``ProcessWorker`` that skips its asks while full. Defining it
    makes it this process's ``process`` worker type (Prefect's registry takes the latest class
    of a type, with a warning silenced here), which ``prefect worker start --type process`` then
    runs."""
    from prefect.types._datetime import now
    from prefect.workers.process import ProcessWorker

    warnings.filterwarnings("ignore", message=".*matches existing registered type 'ProcessWorker'")

    class SlotAwareProcessWorker(ProcessWorker):
        skipped_asks = 0
        _last_asked = float("-inf")

        def is_full(self) -> bool:
            return self._limiter is not None and self._limiter.available_tokens < 1

        async def get_and_submit_flow_runs(self):
            if (self._has_successfully_synced and self.is_full()
                    and time.monotonic() - self._last_asked < KEEP_READY_S):
                self.skipped_asks += 1
                self._last_polled_time = now("UTC")  # the loop is alive: Prefect's healthcheck reads this
                return []
            self._last_asked = time.monotonic()
            return await super().get_and_submit_flow_runs()

    return SlotAwareProcessWorker


@cli.command("start", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def start_command(
    ctx: typer.Context,
    pool: str = typer.Option(..., "--pool", "-p", help="The work pool to take runs from (rescue-cpu, rescue-gpu)."),
    worker_type: str = typer.Option("process", "--type", "-t", help="Prefect's worker type (the skip is the process worker's)."),
    limit: Optional[int] = typer.Option(None, "--limit", "-l", help="At most this many flow runs at once (its slots)."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="The worker's name (default: one Prefect makes)."),
) -> None:
    """Start a worker: `prefect worker start`, whose process worker does not ask for runs while
    all its slots are taken (only every 30 s). Any other option of `prefect worker start` is
    passed on as it is."""
    if skip_when_full():
        slot_aware_process_worker()
    from prefect.cli import app

    sys.argv = ["prefect", "worker", "start", "--pool", pool, "--type", worker_type,
                *(["--limit", str(limit)] if limit is not None else []), *(["--name", name] if name else []), *ctx.args]
    app()
