"""The sweeper: flow runs left Running by a process that is gone (a killed worker) are marked
Crashed, naming the pid, so that an operator sees it at once and a rerun of the deployment
resumes from the cache (Cancelling ones whose process is gone end Cancelled: a cancel was asked for).

``rescue stack up`` runs it as its own process, ``python -m ops.sweeper`` (a sweep now, then
every ``RESCUE_SWEEP_EVERY_S``, 30 s); ``down`` stops it. ``python -m ops.sweeper --once``
sweeps once against the server at PREFECT_API_URL and exits.

The local stack's server listens on 127.0.0.1 only, so every flow-run process it knows ran on
this host; multi-host stacks use Prefect's flow-run heartbeats with the zombie automation
(:func:`ops.prefect_setup.ensure_zombie_automation`), which a dead host cannot escape either.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

SWEEP_EVERY_S = float(os.environ.get("RESCUE_SWEEP_EVERY_S", "30"))


def flow_process_alive(pid: int) -> bool:
    """A live process that runs Prefect (a reused pid running something else counts as dead)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"prefect" in cmdline or b"flows" in cmdline


def sweep(log=print) -> list[str]:
    """Mark flow runs left RUNNING by a process that is gone as Crashed (CANCELLING ones as
    Cancelled), naming the pid; uses the Prefect server at PREFECT_API_URL. The runs swept,
    as ``name (id)``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled, Crashed

    swept = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
            type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.CANCELLING]))))
        for run in runs:
            raw = str(run.infrastructure_pid or "").rpartition(":")[2]
            if not raw.isdigit() or flow_process_alive(int(raw)):
                continue  # not started by a worker (in-process run), or still running
            if run.state.type == StateType.CANCELLING:
                # someone asked to cancel it and its process is gone: that is what they asked for
                # (the worker's runner may be about to say so itself; either way it ends Cancelled)
                client.set_flow_run_state(run.id, Cancelled(
                    message=f"cancelled; its process (pid {raw}) is gone"), force=True)
                what = "Cancelled"
            else:
                client.set_flow_run_state(run.id, Crashed(
                    message=f"its process (pid {raw}) is gone: the worker or host died while it ran; "
                            f"run the deployment again - finished work is reused from the cache"), force=True)
                what = "Crashed"
            swept.append(f"{run.name} ({run.id})")
            log(f"sweeper: flow run {run.name} marked {what} (process {raw} is gone)")
    return swept


def loop(every: float = SWEEP_EVERY_S) -> None:
    """A sweep now (runs left Running by the previous stack), then every ``every`` seconds; a
    failed sweep (the server restarting) is said and tried again next time."""
    while True:
        try:
            sweep(log=lambda line: print(line, flush=True))
        except Exception as exc:  # noqa: BLE001 - the server may be restarting: try again later
            print(f"sweeper: {type(exc).__name__}: {exc}", flush=True)
        time.sleep(every)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.sweeper", description=__doc__.split("\n\n")[0])
    parser.add_argument("--once", action="store_true", help="sweep once and exit (1 if the sweep failed)")
    parser.add_argument("--every", type=float, default=SWEEP_EVERY_S, help="seconds between sweeps")
    args = parser.parse_args(argv)
    if args.once:
        try:
            sweep(log=lambda line: print(line, flush=True))
        except Exception as exc:  # noqa: BLE001 - said in one line, as the loop does
            print(f"sweeper: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 1
        return 0
    loop(args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
