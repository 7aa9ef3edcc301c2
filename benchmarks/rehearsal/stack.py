"""The stack's side of the rehearsal: its ports, the workers after the first, and the machine
half's figures per stage from the task runs' own records (Prefect's) with the sampled CPU."""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path

from .sampler import Sampler, attribute_cpu

STAGES = {"ingest": "ingest", "transcript": "transcribe", "diarize": "diarize", "segment": "segment",
          "push-transcript-round": "push"}  # the last in the batch run itself: the first round to the desks
FIRST_WORKER_SLOTS = 2  # `prefect-worker` (ops.stack.up): the batch run and an interview; the others 1


def free_port() -> int:
    """A free port with the 7 after it (the desks' base) below the ephemeral range: a server the
    faults kill starts again on its port (one the OS picks may meanwhile be an outgoing
    connection's: in a loaded suite run the killed desk's port was taken so)."""
    from ops.processes import free_server_port

    return free_server_port(8)


def start_more_workers(root: Path, run_id, workers: int) -> float:
    """prefect-worker-2..N (one slot each), once the batch's own run is Running: it then always
    runs on the first worker (two slots: the batch and one interview), and the worker --faults
    kills runs interviews only (had it the batch, no slot would be left for the interviews, or
    the batch would die with it). Returns the seconds this took."""
    from prefect.client.orchestration import get_client

    from ops import stack as st

    t0 = time.monotonic()
    with get_client(sync_client=True) as client:
        while time.monotonic() - t0 < 300:
            state = client.read_flow_run(run_id).state
            if state and (state.is_running() or state.is_final()):
                break
            time.sleep(0.2)
    for i in range(2, workers + 1):  # one slot each: N interviews at a time beside the batch run
        st.add_worker(root, f"prefect-worker-{i}", 1, log=lambda *_: None)
    return time.monotonic() - t0


def read_task_runs(client, flow_run_ids: list) -> list:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    out = []
    for i in range(0, len(flow_run_ids), 100):
        offset = 0
        while True:
            page = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=flow_run_ids[i:i + 100])),
                                         limit=200, offset=offset)
            out += page
            offset += len(page)
            if len(page) < 200:
                break
    return out


def read_flow_runs(client, ids: list) -> dict:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    out = {}
    for i in range(0, len(ids), 200):
        for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids[i:i + 200])),
                                         limit=200):
            out[str(run.id)] = run
    return out


def _pickup_s(states) -> float | None:
    """Seconds from a flow run's first Pending state (a worker took it) to its first Running."""
    first = {}
    for state in sorted(states, key=lambda st: st.timestamp):
        first.setdefault(state.type.value, state.timestamp)
    if "PENDING" in first and "RUNNING" in first:
        return (first["RUNNING"] - first["PENDING"]).total_seconds()
    return None


def _ts(value) -> float | None:
    return value.timestamp() if value is not None else None


def measure(batch_id, result: dict | None, sampler: Sampler, truth: dict) -> dict:
    """Per stage (task runs' records + sampled CPU), per kind of process, per child run. A stage
    an earlier one quarantined is passed on without running (flows.ingest_interview): counted as
    ``not_run``, not as a run."""
    from prefect.client.orchestration import get_client

    from flows import QUARANTINED

    items = (result or {}).get("items", {})
    child_ids = sorted({it["flow_run"].rsplit("/", 1)[-1] for it in items.values() if it.get("flow_run")})
    with get_client(sync_client=True) as client:
        runs = read_flow_runs(client, child_ids + [str(batch_id)])
        tasks = read_task_runs(client, child_ids + [str(batch_id)])
        # a worker's pick-up (Pending) to Running: the time before a child runs, its queue not counted
        pickups = {rid: _pickup_s(client.read_flow_run_states(rid)) for rid in child_ids}
    with sampler.lock:
        procs = list(sampler.procs.values())
    by_run = {p.flow_run_id: p for p in procs if p.kind == "flow run" and p.flow_run_id}

    stages = {name: {"runs": 0, "cached": 0, "not_run": 0, "wall_sum_s": 0.0, "wall_max_s": 0.0, "first": None,
                     "last": None, "cpu_s": 0.0} for name in STAGES.values()}
    intervals: dict[str, list] = defaultdict(list)
    for tr in tasks:
        name = tr.name.split("[", 1)[0]
        stage = STAGES.get(name) or STAGES.get(name.rsplit("-", 1)[0])  # push-transcript-round-a1b
        start, end = _ts(tr.start_time), _ts(tr.end_time)
        if stage is None or start is None or end is None:
            continue
        st_ = stages[stage]
        if tr.state and tr.state.name == "Cached":
            st_["cached"] += 1
            continue
        if tr.state and tr.state.name == QUARANTINED and (tr.state.message or "").startswith("not run"):
            st_["not_run"] += 1  # an earlier stage quarantined the interview: passed on, not run
            continue
        st_["runs"] += 1
        st_["wall_sum_s"] += end - start
        st_["wall_max_s"] = max(st_["wall_max_s"], end - start)
        st_["first"] = start if st_["first"] is None else min(st_["first"], start)
        st_["last"] = end if st_["last"] is None else max(st_["last"], end)
        intervals[str(tr.flow_run_id)].append((stage, start, end))
    overhead_cpu, overhead_wall, starts, waits = 0.0, [], [], []
    if (proc := by_run.get(str(batch_id))) is not None:  # the batch run's own stage (the push): the rest waits
        for stage, cpu in attribute_cpu(proc, intervals.get(str(batch_id), [])).items():
            if stage != "overhead":
                stages[stage]["cpu_s"] += cpu
    for rid in child_ids:
        proc = by_run.get(rid)
        if proc is None:
            continue
        for stage, cpu in attribute_cpu(proc, intervals.get(rid, [])).items():
            if stage == "overhead":
                overhead_cpu += cpu
            else:
                stages[stage]["cpu_s"] += cpu
        run = runs.get(rid)
        if run and run.start_time:  # the process's start to the flow's Running state: imports, pull step
            starts.append(_ts(run.start_time) - proc.first_t)
            if pickups.get(rid) is not None:
                waits.append(pickups[rid])
        ivs = intervals.get(rid, [])
        if ivs:
            overhead_wall.append((proc.last_t - proc.first_t) - (max(b for _, _, b in ivs) - min(a for _, a, _ in ivs)))
    for st_ in stages.values():
        st_["span_s"] = (st_["last"] - st_["first"]) if st_["first"] is not None else 0.0
        for k in ("wall_sum_s", "wall_max_s", "cpu_s", "span_s"):
            st_[k] = round(st_[k], 2)
        del st_["first"], st_["last"]

    # which worker ran each interview's child run (the run's own record: worker name @ host pid)
    workers = Counter(it["worker"].split("@", 1)[0] for it in items.values() if it.get("worker"))
    children = [runs[r] for r in child_ids if r in runs]
    run_walls = [(_ts(r.end_time) - _ts(r.start_time)) for r in children if r.start_time and r.end_time]
    mean = lambda xs: round(sum(xs) / len(xs), 2) if xs else None  # noqa: E731
    return {"stages": stages, "child_runs": {"count": len(child_ids), "workers": dict(sorted(workers.items())),
                                             "mean_running_s": mean(run_walls),
                           "mean_process_start_s": mean(starts), "mean_pickup_to_running_s": mean(waits),
                           "mean_outside_stages_s": mean(overhead_wall),
                           "overhead_cpu_s": round(overhead_cpu, 1)}}
