"""The sweeper: flow runs left Running by a process that is gone (a killed worker) are marked
Crashed, naming the pid, so that an operator sees it at once and a rerun of the deployment
resumes from the cache (Cancelling ones whose process is gone end Cancelled: a cancel was asked for).

Runs left Pending are marked Crashed too, once Pending for ``RESCUE_SWEEP_PENDING_GRACE_S``
(90 s): a worker proposes Pending when it takes a run, and only the flow-run process it then
spawns sets it Running - a worker killed in between leaves the run Pending for ever (Prefect's
own workers only poll Scheduled runs), and the batch that waits for it with it. Who could still
start it decides:

- once the worker has recorded the run's flow-run process (``infrastructure_pid``), that
  process: the run is Crashed when it is gone;
- before, the worker: the run is Crashed when no live ``worker start`` process (``rescue worker
  start`` or ``prefect worker start``) on this host polls its work pool on this server (its
  ``PREFECT_API_URL``: another data root's stack on the same host has a pool and workers of the
  same names) under the name of its
  ``prefect.worker.name`` label (under any name, before the worker has labelled it) and started
  before the run went Pending. A worker started again under the same name (``rescue stack up``)
  is a new process that does not know the run; Prefect's worker heartbeats, per name, cannot
  tell the two apart.

A live worker that is merely slow to spawn is left alone, however long it takes; runs waiting
for a concurrency slot are ``AwaitingConcurrencySlot``, a Scheduled state, and in-process runs
(no work pool) are not a worker's: neither is touched.

``rescue stack up`` runs it as its own process, ``python -m ops.sweeper`` (a sweep now, then
every ``RESCUE_SWEEP_EVERY_S``, 30 s); ``down`` stops it. ``python -m ops.sweeper --once``
sweeps once against the server at PREFECT_API_URL and exits.

The local stack's server listens on 127.0.0.1 only, so every flow-run process and worker it
knows ran on this host; multi-host stacks use Prefect's flow-run heartbeats with the zombie
automation (:func:`ops.prefect_setup.ensure_zombie_automation`), which a dead host cannot
escape either (it does not cover runs left Pending: a flow run heartbeats once it runs).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ops.processes import start_time

SWEEP_EVERY_S = float(os.environ.get("RESCUE_SWEEP_EVERY_S", "30"))
# a run Pending this long may be orphaned; a live worker on a loaded 2-core host can take a while
# to resolve the run's job and spawn its process (after that, infrastructure_pid says)
PENDING_GRACE_S = float(os.environ.get("RESCUE_SWEEP_PENDING_GRACE_S", "90"))
RERUN = "run the deployment again - finished work is reused from the cache"


def flow_process_alive(pid: int) -> bool:
    """A live process that runs Prefect (a reused pid running something else counts as dead)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"prefect" in cmdline or b"flows" in cmdline


@dataclass(frozen=True)
class LiveWorker:
    pid: int
    name: str | None     # its --name, None when not given (Prefect made one up)
    pool: str | None     # its --pool
    started: float       # epoch seconds
    api_url: str | None = None  # the Prefect server it polls (its PREFECT_API_URL; None: unreadable)


def _api_url(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"PREFECT_API_URL="):
            return entry.split(b"=", 1)[1].decode(errors="replace").rstrip("/")
    return None


def _option(argv: list[str], long: str, short: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in (long, short) and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(long + "="):
            return arg.split("=", 1)[1]
    return None


def live_workers() -> list[LiveWorker]:
    """The ``rescue worker start`` and ``prefect worker start`` processes running on this host
    (zombies count as gone)."""
    ticks, boot_clock, now = os.sysconf("SC_CLK_TCK"), time.clock_gettime(time.CLOCK_BOOTTIME), time.time()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if not any(argv[i:i + 2] == ["worker", "start"] for i in range(len(argv))):
            continue
        if (since_boot := start_time(int(proc.name))) is None:
            continue
        started = now - (boot_clock - int(since_boot) / ticks)  # by its age: exact to a tick
        found.append(LiveWorker(int(proc.name), _option(argv, "--name", "-n"), _option(argv, "--pool", "-p"), started,
                                _api_url(int(proc.name))))
    return found


def pending_orphan(run, workers: list[LiveWorker], api_url: str | None = None) -> str | None:
    """Why nothing can start this Pending run any more (its process or worker is gone), or None
    while something may still start it. ``api_url``: the run's server; a worker known to poll
    another one is not its worker."""
    raw = str(run.infrastructure_pid or "").rpartition(":")[2]
    if raw.isdigit():  # the worker spawned its process: that process sets it Running
        return None if flow_process_alive(int(raw)) else (
            f"its process (pid {raw}) is gone before it ran: the worker or host died as it started the run")
    took = run.state.timestamp.timestamp()
    name = run.labels.get("prefect.worker.name")  # set by the worker after Pending, before the spawn
    for w in workers:
        if w.started > took:
            continue  # started after the run was taken (the same name started again): not its worker
        if api_url and w.api_url and w.api_url != api_url.rstrip("/"):
            continue  # another stack's worker (another data root on this host)
        if w.pool in (None, run.work_pool_name) and (name is None or w.name in (None, name)):
            return None  # it may be the one (None: not on its command line)
    who = f"worker '{name}'" if name else f"worker of pool '{run.work_pool_name}'"
    return (f"its {who} is gone: it took the run at {run.state.timestamp:%H:%M:%S} UTC and died before "
            f"starting its process")


def sweep(log=print, pending_grace_s: float | None = None) -> list[str]:
    """Mark flow runs left RUNNING by a process that is gone as Crashed (CANCELLING ones as
    Cancelled), naming the pid, and runs left PENDING over ``pending_grace_s`` (default
    ``PENDING_GRACE_S``) by a worker or process that is gone as Crashed; uses the Prefect server
    at PREFECT_API_URL. The runs swept, as ``name (id)``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled, Crashed

    grace = PENDING_GRACE_S if pending_grace_s is None else pending_grace_s
    swept = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
            type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.CANCELLING, StateType.PENDING]))))
        pending = [r for r in runs if r.state.type == StateType.PENDING and r.work_pool_name
                   and time.time() - r.state.timestamp.timestamp() >= grace]  # a worker's, over the grace
        workers = live_workers() if pending else []
        for run in pending:
            if why := pending_orphan(run, workers, str(client.api_url)):
                client.set_flow_run_state(run.id, Crashed(message=f"{why}; {RERUN}"), force=True)
                swept.append(f"{run.name} ({run.id})")
                log(f"sweeper: flow run {run.name} marked Crashed (Pending for "
                    f"{time.time() - run.state.timestamp.timestamp():.0f} s; {why.partition(':')[0]})")
        for run in (r for r in runs if r.state.type != StateType.PENDING):
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
                    message=f"its process (pid {raw}) is gone: the worker or host died while it ran; {RERUN}"),
                    force=True)
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
    from pipeline.store import private_by_default

    private_by_default()  # started by hand too: what it writes is the operator's alone
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
