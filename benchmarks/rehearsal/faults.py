"""``--faults``: four faults an operator meets, each injected once and recovered by the commands
docs/OPERATIONS.md gives (``Faults``); the batch run again after the worker was killed
(``recover_batch``); whether each was injected and recovered (``fault_check``)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import REPO, batch_params, say
from .sampler import COMMAND_KIND, Sampler, Steps
from .stack import FIRST_WORKER_SLOTS
from pipeline.paths import DataRoot

# a worker is SIGKILLed with the interview it runs, mid-batch: the last one started
# (prefect-worker-N), or an earlier one where that one also runs the batch's own flow run
FAULT_WORKER_AFTER_S = 3.0          # once its interview's flow run has been Running this long (diarizing)
FAULT_DESK_ROUND = "emotion"        # the second annotator's desk dies as this round is pulled
FAULT_TWICE_ROUND = "viewpoints"    # the third annotator submits a task twice in this round
FAULT_SERVER_BEFORE = "relation"    # the Prefect server is restarted before this round
TWICE_PROBLEM = "2 annotations; the latest is used"  # what the pull says of a task submitted twice


class Faults:
    """The four faults of ``--faults``, each injected once and recovered the way
    docs/OPERATIONS.md says; ``events`` records each: what was done, when, how it was recovered."""

    def __init__(self, root: Path, desks, annotators: list[str], sampler: Sampler, workers: int):
        from ops.processes import StackPaths

        self.root, self.desks, self.annotators, self.sampler = root, desks, annotators, sampler
        self.paths = StackPaths(DataRoot(root.resolve()))
        self.workers = workers
        self.fault_worker = f"prefect-worker-{workers}"  # the one killed (kill_worker_mid_batch)
        self.events: dict[str, dict] = {}
        self.halt = threading.Event()

    def _event(self, key: str, **info) -> None:
        self.events.setdefault(key, {"injected": False, "recovered": False}).update(info)
        say(f"  fault [{key}]: " + "; ".join(f"{k} {v}" for k, v in info.items()))

    # 1. a worker SIGKILLed mid-batch (with the flow run it runs: its host or container dies)
    def kill_worker_mid_batch(self, batch_run_id: str) -> threading.Thread:
        """Once an interview's flow run on a worker is Running: the fault this bench plants is a
        worker dying mid-run (one dying between taking a run and starting it leaves the run
        Pending; the sweeper crashes that one after RESCUE_SWEEP_PENDING_GRACE_S,
        tests/ops/test_sweeper_pending.py). A worker that runs the batch's own flow run
        (``batch_run_id``) is passed over: killing it is a different fault (the batch is rerun
        whole), and which worker takes the batch is chance."""
        import contextvars

        from prefect.client.orchestration import get_client

        from ops.processes import read_pid, start_time

        def running_s(client, flow_run_id) -> float:
            run = client.read_flow_run(flow_run_id)
            if not (run.state and run.state.is_running() and run.start_time):
                return 0.0
            return time.time() - run.start_time.timestamp()

        def runs_under(name: str) -> tuple[int | None, list]:
            pid = read_pid(self.paths, name)
            if pid is None:
                return None, []
            key = (pid, start_time(pid))
            alive = self.sampler.alive()
            # its flow runs: its own children, or (the stack's starter) forked there for its commands
            ran = {p.flow_run_id for p in alive if p.kind in ("flow run", COMMAND_KIND) and p.flow_run_id
                   and self.sampler.under(p, key)}
            return pid, [p for p in alive if p.kind == "flow run" and p.flow_run_id in ran]

        def run():
            names = [*(f"prefect-worker-{i}" for i in range(self.workers, 1, -1)), "prefect-worker"]
            with get_client(sync_client=True) as client:
                while not self.halt.wait(0.5):
                    for name in names:
                        pid, victims = runs_under(name)
                        if pid is None or any(str(v.flow_run_id) == str(batch_run_id) for v in victims):
                            continue
                        if any(running_s(client, v.flow_run_id) >= FAULT_WORKER_AFTER_S for v in victims):
                            break
                    else:
                        continue
                    break
                else:
                    return
            self.fault_worker = name
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            for v in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(v.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # started by this process: reaped, so `stack up` sees it gone
            self._event("worker", injected=True, what=f"SIGKILL to {name} (pid {pid}) and its flow run "
                        f"{', '.join(str(v.flow_run_id) for v in victims)} (pid "
                        f"{', '.join(str(v.pid) for v in victims)}), Running for {FAULT_WORKER_AFTER_S:.0f} s",
                        flow_runs=[v.flow_run_id for v in victims])
        context = contextvars.copy_context()  # this thread's Prefect settings (the bench's own server)
        thread = threading.Thread(target=context.run, args=(run,), daemon=True, name="fault-worker")
        thread.start()
        return thread

    def recover_worker(self, log) -> None:
        """`rescue stack up --workers N`: the killed worker is started again (here as the bench
        started it: one slot); then the batch is run again by the caller."""
        from ops import stack as st

        st.add_worker(self.root, self.fault_worker, FIRST_WORKER_SLOTS if self.fault_worker == "prefect-worker" else 1,
                      log=log)
        self.events["worker"]["recovered_by"] = (f"{self.fault_worker} started again (`rescue stack up --workers "
                                                 f"{self.workers}`), then `prefect deployment run ingest-batch/default` "
                                                 "with the same parameters (resumes from the cache)")

    # 2. a desk's Label Studio killed as a round is pulled
    def kill_desk_during_pull(self, run_id) -> threading.Thread:
        import contextvars

        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        email = self.annotators[1]
        done = threading.Event()

        def run():
            with get_client(sync_client=True) as client:
                while not done.wait(0.1):
                    tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
                    pull = [t for t in tasks if t.name.startswith("pull-round")]
                    if not pull:
                        continue
                    status = self.desks.server(email).status()
                    if status.pid:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(status.pid, signal.SIGKILL)
                        with contextlib.suppress(ChildProcessError):
                            os.waitpid(status.pid, 0)  # started by this process: reaped, so it reads as down
                    self._event("desk", injected=bool(status.pid),
                                what=f"SIGKILL to the Label Studio of {email}'s desk (pid {status.pid}) while the "
                                     f"round's pull task was {pull[0].state.name if pull[0].state else '?'}")
                    return
        context = contextvars.copy_context()  # this thread's Prefect settings (the bench's own server)
        thread = threading.Thread(target=context.run, args=(run,), daemon=True, name="fault-desk")
        thread.done = done
        thread.start()
        return thread

    def recover_desk(self) -> None:
        """`rescue label-studio up --annotator EMAIL` (docs/OPERATIONS.md, a desk down during a run)."""
        email = self.annotators[1]
        cmd = [str(Path(sys.executable).with_name("rescue")), "label-studio", "up", "--annotator", email,
               "--data-root", str(self.root)]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        if proc.returncode:
            raise RuntimeError(f"`rescue label-studio up --annotator {email}` failed ({proc.returncode}): "
                               f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        pid = self.desks.server(email).status().pid
        if pid:
            self.sampler.adopt(pid)  # its parent, the command, has exited: followed by pid
        self.events["desk"]["recovered_by"] = (f"`rescue label-studio up --annotator {email}`, then "
                                               f"`prefect deployment run annotation-round/default` again")

    # 3. the Prefect server restarted between rounds
    def restart_server(self, log) -> None:
        """The server stopped (SIGTERM, as `rescue stack down` does) and `rescue stack up` again:
        what is running is left alone, the server starts on its database and re-registers."""
        from ops import stack as st
        from ops.processes import read_pid, stop

        names = ["prefect-server", "prefect-worker", *(f"prefect-worker-{i}" for i in range(2, self.workers + 1))]
        before = {n: read_pid(self.paths, n) for n in names}
        stop(self.paths, "prefect-server")
        time.sleep(5)  # down for a while: the workers' polls fail meanwhile
        st.up(self.root, label_studio=False, worker_limit=2, workers=self.workers, log=log)
        after = {n: read_pid(self.paths, n) for n in names}
        restarted = [n for n in names[1:] if after[n] != before[n]]
        self._event("server", injected=None not in (before["prefect-server"], after["prefect-server"])
                    and after["prefect-server"] != before["prefect-server"],
                    what=f"Prefect server (pid {before['prefect-server']}) stopped before round {FAULT_SERVER_BEFORE}, "
                         f"down 5 s, started again (pid {after['prefect-server']})"
                         + (f"; workers that had died meanwhile and were started again: {', '.join(restarted)}"
                            if restarted else "; the workers outlived it"),
                    recovered_by=f"`rescue stack up --workers {self.workers}` (idempotent: it starts what is down)")
        self.events["server"]["recovered"] = self.events["server"]["injected"]

    # 4. an annotator submits the same task twice
    def twice(self, round_name: str) -> str | None:
        return self.annotators[2] if round_name == FAULT_TWICE_ROUND else None

    def saw_twice(self, round_name: str, answered: dict, data) -> None:
        import pyarrow.parquet as pq

        if round_name != FAULT_TWICE_ROUND:
            return
        path = data.label_problems(round_name)
        said = [p for p in (pq.read_table(path).to_pylist() if path.is_file() else [])
                if TWICE_PROBLEM in json.dumps(p, default=str)]
        self._event("twice", injected=bool(answered.get("twice")), what=answered.get("twice"),
                    recovered=bool(said), recovered_by=("nothing to run: the pull keeps the latest of the two and "
                                                         "lists it in the round's problems" if said else
                                                         f"NOT seen: no problem saying {TWICE_PROBLEM!r}"))


def recover_batch(faults: "Faults", first: dict | None, steps: "Steps", run_kinds: dict, args, batch: Path,
                  root: Path, annotators: list[str]) -> tuple[dict | None, str | None]:
    """After the worker was killed mid-batch: its flow run Crashed (the sweeper) and the batch
    quarantined that interview; `rescue stack up` starts the worker again and the batch is run
    again with the same parameters (docs/OPERATIONS.md: it resumes from the cache). Returns the
    second run's result (what the checks read) and its error."""
    from ops.demo import start_deployment, wait_flow_run

    ev = faults.events.get("worker") or {}
    if not ev.get("injected"):
        return first, None
    victims = {str(v) for v in ev.get("flow_runs", [])}
    hit = sorted(sid for sid, it in (first or {}).get("items", {}).items()
                 if str(it.get("flow_run", "")).rsplit("/", 1)[-1] in victims)
    ev["interviews"] = {sid: (first or {}).get("quarantined", {}).get(sid, "(not quarantined)") for sid in hit}
    steps.run(f"FAULT recovery: {faults.fault_worker} started again (`rescue stack up --workers {args.workers}`)",
              lambda: faults.recover_worker(lambda *_: None))
    params = batch_params(args, batch, root, annotators)

    def again():
        run_id = start_deployment("ingest-batch/default", params)
        run_kinds[str(run_id)] = "ingest-batch"
        return wait_flow_run(run_id, timeout_s=args.timeout_s).state.result()

    try:
        result = steps.run("FAULT recovery: `prefect deployment run ingest-batch/default` again", again)
    except Exception as exc:  # noqa: BLE001 - reported
        return first, f"the batch run again after the worker was killed: {type(exc).__name__}: {exc}"
    items = result.get("items", {})
    ev["redone"] = {sid: items.get(sid, {}).get("status") for sid in hit}
    ev["cached"] = sum(1 for it in items.values() if it.get("status") == "cached")
    ev["recovered"] = all(items.get(sid, {}).get("status") in ("done", "cached", "quarantined") for sid in hit)
    return result, None


def fault_check(faults: "Faults") -> dict:
    """Each of the four faults was injected and recovered."""
    problems = []
    for key, what in (("worker", "a worker SIGKILLed mid-batch"), ("desk", "a desk's Label Studio killed during a pull"),
                      ("server", "the Prefect server restarted between rounds"),
                      ("twice", "an annotator submitting a task twice")):
        ev = faults.events.get(key)
        if not ev or not ev.get("injected"):
            problems.append(f"{what}: not injected ({(ev or {}).get('problem', 'its moment never came')})")
        elif not ev.get("recovered"):
            problems.append(f"{what}: not recovered ({ev})")
    return {"ok": not problems, "problems": problems, "events": faults.events}
