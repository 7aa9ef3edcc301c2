"""The RESCUE rehearsal, machine half (issue #26 part 2): a RESCUE-shaped batch through `ingest-batch`.

    .venv/bin/python benchmarks/bench_rehearsal.py --scale S [--workers N] [--database-url URL]
                     [--seed N] [--max-rows R] [--chunk-size C] [--json PATH] [--keep]

What an operator does, on a stack of its own under a temporary data root:

1. ``rescue synth batch --scale S --seed N --out rehearsal`` (the generator, issue #26 part 1:
   videos, subtitles, manifest.csv, truth.json; a few planted bad files), while
2. ``ops.stack.up`` starts a Prefect server - on a fresh database of the machine's PostgreSQL
   (127.0.0.1:5432, user root; created here and dropped at the end), or on ``--database-url``
   (used as given, never dropped), or on SQLite when PostgreSQL is unreachable (said so) - and
   N workers on ``rescue-cpu`` (the first with two slots: the batch run waits in one; the others
   one slot each: N interviews at a time) and the sweeper; no desks;
3. ``ingest-batch/default`` is run through the deployment (``ops.demo.start_deployment``, what
   ``prefect deployment run`` does) with the subtitles backend and ``push=False``: one
   ``ingest-interview`` child run per interview (ingest -> transcript + diarize -> segment).

It prints, per stage (ingest, transcribe, diarize, segment), the task runs' own records (wall
seconds: sum and mean per interview, span) and CPU seconds (each flow-run process's CPU,
its ffmpeg children included, sampled from /proc every ``--sample-s`` and credited to the stage
whose task ran in that process then; two stages at once share it; the rest is the flow run's own
overhead: process start, imports, Prefect); peak resident memory (VmHWM) per kind of process
(Prefect server, worker, sweeper, batch flow run, interview flow runs, their ffmpeg, the
generator); counts (interviews, draft rows, diarized turns, quarantined). Then the checks of
the machine half: every interview of truth.json has its drafts or is quarantined with a
reason; each planted bad file is quarantined and its reason names the file and the problem;
no good interview is quarantined; each drafted interview's row count equals truth.json's.
``nothing_lost`` is yes when every interview is accounted for (drafts, or the quarantine its
planted fault calls for); the exit status is 1 when any check fails.

The last line: ``rehearsal scale=S interviews=N minutes=M wall_s=W per_interview_s=P
nothing_lost=yes|no`` (wall_s: the batch run, from `deployment run` to its final state;
per_interview_s = wall_s / interviews). The human half (desks, rounds, agreement, release) is
not in it yet. Stops everything it started (also on Ctrl+C or an error) and drops its database.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = {"ingest": "ingest", "transcript": "transcribe", "diarize": "diarize", "segment": "segment"}
BATCH_NAME = "rehearsal"
PG = dict(host=os.environ.get("RESCUE_TEST_PG_HOST", "127.0.0.1"),
          port=int(os.environ.get("RESCUE_TEST_PG_PORT", "5432")),
          user=os.environ.get("RESCUE_TEST_PG_USER", "root"))
CLK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(text: str = "") -> None:
    print(text, flush=True)


# --- PostgreSQL: a database of its own -------------------------------------------------------

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


# --- processes, sampled from /proc ------------------------------------------------------------

@dataclass
class Proc:
    pid: int
    start: str                      # /proc start time: a pid is this process only while it matches
    parent: tuple[int, str] | None
    kind: str = "other"
    cmd: str = ""
    flow_run_id: str | None = None
    seen: int = 0
    first_t: float = 0.0
    last_t: float = 0.0
    cpu_self: float = 0.0           # utime + stime, s
    cpu_children: float = 0.0       # cutime + cstime: its waited-for children (ffmpeg)
    hwm_kb: int = 0                 # VmHWM: the process's own peak resident memory
    samples: list[tuple[float, float]] = field(default_factory=list)  # flow runs: (t, CPU with children)


def _stat(pid: int):
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = text.rsplit(")", 1)[1].split()
    return {"state": f[0], "ppid": int(f[1]), "self": (int(f[11]) + int(f[12])) / CLK,
            "children": (int(f[13]) + int(f[14])) / CLK, "start": f[19], "rss_kb": int(f[21]) * 4}


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


class Sampler(threading.Thread):
    """Every process descended from this one (the stack's and the generator's), every ``every`` s."""

    def __init__(self, every: float):
        super().__init__(daemon=True, name="proc-sampler")
        self.every, self.me = every, os.getpid()
        self.procs: dict[tuple[int, str], Proc] = {}
        self.peak_total_kb, self.halt, self.lock = 0, threading.Event(), threading.Lock()

    def run(self) -> None:
        while not self.halt.wait(self.every):
            with contextlib.suppress(Exception):  # a process gone mid-read: the next sample sees it
                self.sample()

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)
        with contextlib.suppress(Exception):
            self.sample()

    def _classify(self, rec: Proc) -> None:
        cmd = _read(f"/proc/{rec.pid}/cmdline").replace(b"\0", b" ")
        parent = self.procs.get(rec.parent) if rec.parent else None
        rec.flow_run_id = None
        rec.cmd = cmd[:160].decode(errors="replace").strip()
        if b"server start" in cmd:
            rec.kind = "prefect server"
        elif b"worker start" in cmd:
            rec.kind = "prefect worker"
        elif b"sweeper" in cmd:  # `-c ...sweeper_loop()` or `-m ops.sweeper`
            rec.kind = "sweeper"
        elif b"synth batch" in cmd:
            rec.kind = "generator (rescue synth batch)"
        elif any(w in cmd for w in (b"ensure_infrastructure", b"prefect_setup", b" deploy")):
            rec.kind = "register (pools, deployments)"
        elif parent and parent.kind.startswith("flow run"):
            rec.kind = "ffmpeg etc. (children of flow runs)"
        elif (env := _read(f"/proc/{rec.pid}/environ")) and b"PREFECT__FLOW_RUN_ID=" in env:
            rec.flow_run_id = env.split(b"PREFECT__FLOW_RUN_ID=", 1)[1].split(b"\0", 1)[0].decode()
            rec.kind = "flow run"
        elif parent:
            rec.kind = parent.kind

    def sample(self) -> None:
        t = time.time()
        stats = {}
        for d in os.scandir("/proc"):
            if d.name.isdigit() and (s := _stat(int(d.name))) and s["state"] != "Z":
                stats[int(d.name)] = s
        kids = defaultdict(list)
        for pid, s in stats.items():
            kids[s["ppid"]].append(pid)
        ours, todo = set(), [self.me]
        while todo:
            for kid in kids.get(todo.pop(), []):
                ours.add(kid)
                todo.append(kid)
        with self.lock:
            ours |= {pid for pid, start in self.procs if pid in stats and stats[pid]["start"] == start}
            total = 0
            for pid in sorted(ours, key=lambda p: (int(stats[p]["start"]), p)):  # parents first
                s = stats[pid]
                key = (pid, s["start"])
                rec = self.procs.get(key)
                if rec is None:
                    pp = stats.get(s["ppid"])
                    rec = self.procs[key] = Proc(pid, s["start"], (s["ppid"], pp["start"]) if pp else None,
                                                 first_t=t)
                if rec.seen < 3:  # a process just forked may not have exec'd yet: look again
                    self._classify(rec)
                rec.seen += 1
                rec.last_t, rec.cpu_self, rec.cpu_children = t, s["self"], s["children"]
                for line in _read(f"/proc/{pid}/status").splitlines():
                    if line.startswith(b"VmHWM:"):
                        rec.hwm_kb = max(rec.hwm_kb, int(line.split()[1]))
                rec.hwm_kb = max(rec.hwm_kb, s["rss_kb"])
                if rec.kind == "flow run":
                    rec.samples.append((t, s["self"] + s["children"]))
                total += s["rss_kb"]
            self.peak_total_kb = max(self.peak_total_kb, total)

    def alive(self) -> list[Proc]:
        with self.lock:
            return [r for (pid, start), r in self.procs.items()
                    if (s := _stat(pid)) and s["start"] == start and s["state"] != "Z"]


def kill_leftovers(sampler: Sampler) -> list[str]:
    """What this bench started (its descendants, by pid and start time) and is still running
    after the stack is down, e.g. a flow-run process its worker left behind: SIGKILL."""
    killed = []
    for rec in sampler.alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(rec.pid, signal.SIGKILL)
            killed.append(f"{rec.pid} ({rec.kind})")
    return killed


# --- the runs' own records ---------------------------------------------------------------------

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


def _ts(value) -> float | None:
    return value.timestamp() if value is not None else None


def attribute_cpu(proc: Proc, intervals: list[tuple[str, float, float]]) -> dict[str, float]:
    """Split a flow-run process's sampled CPU between the stages whose task ran in it (two at
    once share an interval by their overlap); the rest is the process's own overhead."""
    out: dict[str, float] = defaultdict(float)
    pts = [(proc.first_t, 0.0)] + proc.samples  # what it spent before its first sample: its start
    for (t0, c0), (t1, c1) in zip(pts, pts[1:]):
        delta, span = c1 - c0, max(t1 - t0, 1e-9)
        if delta <= 0:
            continue
        cover = defaultdict(float)
        for stage, a, b in intervals:
            cover[stage] += max(0.0, min(b, t1) - max(a, t0)) / span
        used = sum(cover.values())
        for stage, c in cover.items():
            out[stage] += delta * c / max(used, 1.0)
        out["overhead"] += delta * max(0.0, 1.0 - used)
    return out


# --- the bench ---------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, required=True, help="RESCUE at this scale (1 = 191 interviews, 1,064.8 min)")
    ap.add_argument("--workers", type=int, default=2, help="local workers on rescue-cpu (default 2: two interviews at a time)")
    ap.add_argument("--database-url", default=None,
                    help="the Prefect server's database (default: a fresh database of PostgreSQL at 127.0.0.1:5432, "
                         "dropped at the end; SQLite when that is unreachable)")
    ap.add_argument("--seed", type=int, default=0, help="the generator's seed")
    ap.add_argument("--max-rows", type=int, default=None, help="cut every interview to this many rows (smoke runs)")
    ap.add_argument("--chunk-size", type=int, default=1, help="interviews per ingest-interview run (the flow's chunk_size)")
    ap.add_argument("--sample-s", type=float, default=0.5, help="how often /proc is sampled")
    ap.add_argument("--timeout-s", type=float, default=4 * 3600, help="give up on the batch run after this long")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and checks to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data root (the stack is stopped all the same)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    return args


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)  # the finally below stops the stack and drops the database
    tmp = Path(tempfile.mkdtemp(prefix="bench-rehearsal-"))
    root = tmp / "data"
    root.mkdir(mode=0o700)
    report: dict = {"scale": args.scale, "seed": args.seed, "max_rows": args.max_rows, "workers": args.workers,
                    "chunk_size": args.chunk_size, "cores": os.cpu_count(), "load_start": os.getloadavg()}
    sampler = Sampler(args.sample_s)
    db_name, code = None, 1
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        if args.database_url:
            url, db_said = args.database_url, "as given by --database-url (kept)"
        else:
            url, db_name, db_said = create_database()
        say(f"rehearsal: data root {root}; Prefect server database: {db_said}")
        report["database"] = "postgresql" if url and url.startswith("postgresql") else "sqlite"
        env = {"RESCUE_DATA_ROOT": str(root), "RESCUE_PREFECT_PORT": str(free_port()),
               "RESCUE_DESK_BASE_PORT": str(free_port()), "RESCUE_SWEEP_EVERY_S": "5",
               "OMP_NUM_THREADS": "1"}  # one torch thread per flow run: N workers, N cores
        if url:
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = url
        for k in ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_RESULTS_LOCAL_STORAGE_PATH",
                  "PREFECT_API_DATABASE_CONNECTION_URL"):
            os.environ.pop(k, None)  # this stack's own, never the caller's
        os.environ.update(env)
        sampler.start()
        code = rehearse(args, root, env, report, sampler)
    except KeyboardInterrupt as exc:
        say(f"rehearsal: interrupted ({str(exc) or 'Ctrl+C'}); stopping what it started")
        code = 130
    except Exception:  # noqa: BLE001 - the traceback, then the same clean-up
        traceback.print_exc()
        say("rehearsal: failed; stopping what it started")
        code = 1
    finally:
        from ops import stack as st

        with contextlib.suppress(BaseException):
            st.down(root, label_studio=False, log=lambda *_: None)
        sampler.stop()
        if left := kill_leftovers(sampler):
            say(f"rehearsal: stopped leftover processes it had started: {', '.join(left)}")
        if db_name:
            drop_database(db_name)
        if args.keep:
            say(f"rehearsal: data root kept: {root}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_all = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    if "final" in report:
        say(f"CPU of everything it started (rusage of its reaped children): {cpu_all:.0f} s; "
            f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        report["cpu_all_s"] = round(cpu_all, 1)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
        say(report["note"])
        say(report["final"])
    return code


def rehearse(args, root: Path, env: dict, report: dict, sampler: Sampler) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from prefect.settings import PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    from ops import stack as st
    from ops.demo import start_deployment, wait_flow_run
    from pipeline.paths import DataRoot

    data = DataRoot(root)
    batch = data.batches_dir() / BATCH_NAME
    gen_cmd = [str(Path(sys.executable).with_name("rescue")), "synth", "batch", "--scale", f"{args.scale:g}",
               "--seed", str(args.seed), "--out", BATCH_NAME, "--data-root", str(root)]
    if args.max_rows:
        gen_cmd += ["--max-rows", str(args.max_rows)]

    def generate():
        t0 = time.monotonic()
        proc = subprocess.Popen(gen_cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, "COLUMNS": "200"})
        out = proc.stdout.read().decode(errors="replace")
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"rescue synth batch failed ({proc.returncode}):\n{out}")
        return time.monotonic() - t0, ru.ru_utime + ru.ru_stime, out

    say(f"rehearsal: scale {args.scale:g}, seed {args.seed}" + (f", rows cut to {args.max_rows}" if args.max_rows else "")
        + f"; {args.workers} worker(s); {os.cpu_count()} cores, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with ThreadPoolExecutor(1) as pool:  # the batch is generated while the stack starts
        made = pool.submit(generate)
        t0 = time.monotonic()
        env.update(st.up(root, label_studio=False, worker_limit=2, workers=1, log=lambda *_: None))
        for i in range(2, args.workers + 1):  # one slot each: N interviews at a time beside the batch run
            st.add_worker(root, f"prefect-worker-{i}", 1, log=lambda *_: None)
        t_stack = time.monotonic() - t0
        gen_wall, gen_cpu, gen_out = made.result()
    say(f"stack up ({args.workers} workers) in {t_stack:.1f} s; batch generated in {gen_wall:.1f} s wall, "
        f"{gen_cpu:.1f} s CPU:")
    say("  " + "\n  ".join(line for line in gen_out.strip().splitlines() if line.strip()))
    truth = json.loads((batch / "truth.json").read_text())
    report.update(stack_up_s=round(t_stack, 1), generate={"wall_s": round(gen_wall, 1), "cpu_s": round(gen_cpu, 1)},
                  truth_totals=truth["totals"])

    settings = temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"],
                                   PREFECT_RESULTS_LOCAL_STORAGE_PATH: env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"]})
    result, error, state = None, None, "?"
    with settings:
        t0 = time.monotonic()
        run_id = start_deployment("ingest-batch/default", {
            "batch_dir": str(batch), "data_root": str(root), "backend": "subtitles", "push": False,
            "chunk_size": args.chunk_size})
        say(f"ingest-batch/default: flow run {run_id} submitted (backend subtitles, push=False) ...")
        try:
            run = wait_flow_run(run_id, timeout_s=args.timeout_s)
            state, result = run.state.name, run.state.result()
        except Exception as exc:  # noqa: BLE001 - reported, and the checks say what it left
            error = f"{type(exc).__name__}: {exc}"
        wall = time.monotonic() - t0
        say(f"ingest-batch: {'ended: ' + error if error else state} after {wall:.1f} s "
            f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
        time.sleep(2 * args.sample_s)  # the last samples of the last flow-run processes
        figures = measure(run_id, result, sampler, truth)
    report.update(batch_wall_s=round(wall, 1), batch_error=error, **figures)
    checks = check(truth, result, data)
    report["checks"] = checks
    report["quarantined"] = (result or {}).get("quarantined", {})
    print_report(report, truth)

    n = truth["totals"]["interviews"]
    ok = all(c["ok"] for c in checks.values())
    lost = not (checks["accounted"]["ok"] and checks["bad_files"]["ok"] and checks["good_not_quarantined"]["ok"])
    report["nothing_lost"] = not lost
    report["note"] = ("(machine half only: ingest-batch with push=False; the human half - desks, annotation rounds, "
                      "agreement, adjudication, gold, release - is not in this rehearsal yet)")
    report["final"] = (f"rehearsal scale={args.scale:g} interviews={n} minutes={truth['totals']['minutes']:g} "
                       f"wall_s={wall:.1f} per_interview_s={wall / max(n, 1):.1f} "
                       f"nothing_lost={'no' if lost else 'yes'}")
    return 0 if ok and not error else 1


def measure(batch_id, result: dict | None, sampler: Sampler, truth: dict) -> dict:
    """Per stage (task runs' records + sampled CPU), per kind of process, per child run."""
    from prefect.client.orchestration import get_client

    items = (result or {}).get("items", {})
    child_ids = sorted({it["flow_run"].rsplit("/", 1)[-1] for it in items.values() if it.get("flow_run")})
    with get_client(sync_client=True) as client:
        runs = read_flow_runs(client, child_ids + [str(batch_id)])
        tasks = read_task_runs(client, child_ids or [str(batch_id)])
    with sampler.lock:
        procs = list(sampler.procs.values())
        peak_total_kb = sampler.peak_total_kb
    by_run = {p.flow_run_id: p for p in procs if p.kind == "flow run" and p.flow_run_id}

    stages = {name: {"runs": 0, "cached": 0, "wall_sum_s": 0.0, "wall_max_s": 0.0, "first": None, "last": None,
                     "cpu_s": 0.0} for name in STAGES.values()}
    intervals: dict[str, list] = defaultdict(list)
    for tr in tasks:
        stage = STAGES.get(tr.name.split("[", 1)[0])
        start, end = _ts(tr.start_time), _ts(tr.end_time)
        if stage is None or start is None or end is None:
            continue
        st_ = stages[stage]
        if tr.state and tr.state.name == "Cached":
            st_["cached"] += 1
            continue
        st_["runs"] += 1
        st_["wall_sum_s"] += end - start
        st_["wall_max_s"] = max(st_["wall_max_s"], end - start)
        st_["first"] = start if st_["first"] is None else min(st_["first"], start)
        st_["last"] = end if st_["last"] is None else max(st_["last"], end)
        intervals[str(tr.flow_run_id)].append((stage, start, end))
    overhead_cpu, overhead_wall, starts = 0.0, [], []
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
        ivs = intervals.get(rid, [])
        if ivs:
            overhead_wall.append((proc.last_t - proc.first_t) - (max(b for _, _, b in ivs) - min(a for _, a, _ in ivs)))
    for st_ in stages.values():
        st_["span_s"] = (st_["last"] - st_["first"]) if st_["first"] is not None else 0.0
        for k in ("wall_sum_s", "wall_max_s", "cpu_s", "span_s"):
            st_[k] = round(st_[k], 2)
        del st_["first"], st_["last"]

    kinds: dict[str, dict] = {}
    for p in procs:
        kind = p.kind
        if kind == "flow run":
            kind = "flow run: ingest-batch" if p.flow_run_id == str(batch_id) else "flow run: ingest-interview"
        k = kinds.setdefault(kind, {"processes": 0, "peak_rss_mb": 0.0, "cpu_s": 0.0})
        k["processes"] += 1
        k["peak_rss_mb"] = max(k["peak_rss_mb"], round(p.hwm_kb / 1024, 1))
        if kind.startswith("flow run"):
            k["cpu_s"] += p.cpu_self + p.cpu_children  # with its ffmpeg children
        elif not kind.startswith(("ffmpeg", "generator")):  # those are counted by their parents
            k["cpu_s"] += p.cpu_self
    for k in kinds.values():
        k["cpu_s"] = round(k["cpu_s"], 1)

    children = [runs[r] for r in child_ids if r in runs]
    run_walls = [(_ts(r.end_time) - _ts(r.start_time)) for r in children if r.start_time and r.end_time]
    mean = lambda xs: round(sum(xs) / len(xs), 2) if xs else None  # noqa: E731
    listed = [{"pid": p.pid, "kind": p.kind, "cmd": p.cmd, "peak_rss_mb": round(p.hwm_kb / 1024, 1),
               "cpu_s": round(p.cpu_self, 1), "seen_s": round(p.last_t - p.first_t, 1)}
              for p in sorted(procs, key=lambda p: p.first_t)]
    return {"stages": stages, "processes": kinds, "process_list": listed, "peak_total_rss_mb": round(peak_total_kb / 1024, 1),
            "child_runs": {"count": len(child_ids), "mean_running_s": mean(run_walls),
                           "mean_process_start_s": mean(starts), "mean_outside_stages_s": mean(overhead_wall),
                           "overhead_cpu_s": round(overhead_cpu, 1)}}


def check(truth: dict, result: dict | None, data) -> dict:
    """The machine half's checks against truth.json."""
    import pyarrow.parquet as pq

    items = (result or {}).get("items", {})
    quarantined = (result or {}).get("quarantined", {})
    accounted, bad_files, good_q, rows_bad = [], [], [], []
    counts = {"interviews": len(truth["interviews"]), "drafted": 0, "quarantined": len(quarantined),
              "planted": 0, "rows_drafted": 0, "rows_truth_of_drafted": 0, "rows_truth": truth["totals"]["rows"],
              "turns": 0}
    for e in truth["interviews"]:
        sid, item = e["sample_id"], items.get(e["sample_id"])
        drafts = data.drafts(sid)
        if item and item["status"] in ("done", "cached") and drafts.is_file():
            counts["drafted"] += 1
            n = pq.read_metadata(drafts).num_rows
            counts["rows_drafted"] += n
            counts["rows_truth_of_drafted"] += len(e["rows"])
            if n != len(e["rows"]):
                rows_bad.append(f"{sid}: {n} draft rows, truth {len(e['rows'])}")
            with contextlib.suppress(OSError):
                counts["turns"] += sum(1 for ln in data.rttm(sid).read_text().splitlines() if ln.startswith("SPEAKER"))
        elif item and item["status"] == "quarantined" and quarantined.get(sid, "").strip():
            pass
        else:
            accounted.append(f"{sid}: neither drafts nor a quarantine with its reason "
                             f"({item['status'] if item else 'not in the batch result'})")
        fault = e.get("fault")
        reason = quarantined.get(sid, "")
        if fault:
            counts["planted"] += 1
            bad = e["video"] if fault["kind"] == "corrupt_video" else e["subtitles"]
            if sid not in quarantined:
                bad_files.append(f"{sid}: planted {fault['kind']} ({bad}) was not quarantined")
            elif bad not in reason or fault["reason_contains"] not in reason:
                bad_files.append(f"{sid}: planted {fault['kind']}: the reason does not name {bad!r} and "
                                 f"{fault['reason_contains']!r}: {reason}")
        elif sid in quarantined:
            good_q.append(f"{sid}: quarantined without a planted fault: {reason}")
    extra = sorted(set(items) - {e["sample_id"] for e in truth["interviews"]})
    if extra:
        accounted.append(f"not in truth.json: {', '.join(extra)}")
    return {
        "accounted": {"ok": not accounted and result is not None, "problems": accounted or
                      ([] if result is not None else ["no batch result"])},
        "bad_files": {"ok": not bad_files and result is not None, "problems": bad_files},
        "good_not_quarantined": {"ok": not good_q and result is not None, "problems": good_q},
        "rows_equal_truth": {"ok": not rows_bad and result is not None and counts["drafted"] > 0, "problems": rows_bad},
        "counts": {"ok": True, **counts},
    }


def print_report(report: dict, truth: dict) -> None:
    minutes = truth["totals"]["minutes"]
    say("\nper stage (task runs' own records; CPU sampled from /proc, ffmpeg included):")
    say(f"  {'stage':11s} {'runs':>5s} {'wall s':>8s} {'per interview':>13s} {'max':>7s} {'span s':>8s} "
        f"{'CPU s':>8s} {'CPU s/audio min':>15s}")
    for name, s in report["stages"].items():
        per = s["wall_sum_s"] / s["runs"] if s["runs"] else 0.0
        say(f"  {name:11s} {s['runs']:5d} {s['wall_sum_s']:8.1f} {per:13.2f} {s['wall_max_s']:7.1f} "
            f"{s['span_s']:8.1f} {s['cpu_s']:8.1f} {s['cpu_s'] / max(minutes, 1e-9):15.2f}"
            + (f"  ({s['cached']} cached)" if s["cached"] else ""))
    c = report["child_runs"]
    say(f"  child runs: {c['count']}; per run, mean: {c['mean_process_start_s']} s from process start to Running "
        f"(imports, pull step), {c['mean_running_s']} s Running, {c['mean_outside_stages_s']} s of the process "
        f"outside its stages; {c['overhead_cpu_s']} CPU s outside the stages in all")
    say("\nper kind of process (peak resident memory: VmHWM of the largest one; CPU s: self, flow runs with "
        "their ffmpeg):")
    for kind, k in sorted(report["processes"].items()):
        cpu = "" if kind.startswith(("ffmpeg", "generator")) else f"{k['cpu_s']:8.1f}"
        say(f"  {kind:38s} {k['processes']:4d} process(es) {k['peak_rss_mb']:8.1f} MB {cpu}")
    say(f"  all at once (sum of resident memory, largest sample): {report['peak_total_rss_mb']:.1f} MB")
    cnt = report["checks"]["counts"]
    say(f"\ncounts: interviews {cnt['interviews']} ({cnt['drafted']} drafted, {cnt['quarantined']} quarantined, "
        f"{cnt['planted']} bad files planted); draft rows {cnt['rows_drafted']} (truth for those: "
        f"{cnt['rows_truth_of_drafted']}; truth for the whole batch {cnt['rows_truth']}); "
        f"diarized turns {cnt['turns']}; minutes {minutes}")
    for sid, reason in sorted(report.get("quarantined", {}).items()):
        say(f"  quarantined {sid}: {reason}")
    say("\nchecks:")
    labels = {"accounted": "every interview has its drafts or is quarantined with its reason",
              "bad_files": "each planted bad file is quarantined, its reason naming the file and the problem",
              "good_not_quarantined": "no interview without a planted fault is quarantined",
              "rows_equal_truth": "each drafted interview's row count equals truth.json"}
    for key, label in labels.items():
        ch = report["checks"][key]
        say(f"  [{'ok' if ch['ok'] else 'FAIL'}] {label}")
        for p in ch["problems"][:20]:
            say(f"         {p}")
    if report.get("batch_error"):
        say(f"  [FAIL] the batch run: {report['batch_error']}")


if __name__ == "__main__":
    sys.exit(main())
