"""Every process the rehearsal started, sampled from /proc: what each is (``Proc.kind``), its CPU
and peak resident memory; a flow-run process's CPU split between the stages whose tasks ran in
it (``attribute_cpu``); per kind of process (``process_table``); the human half's steps, each
timed with the CPU of every group of processes (``Steps``)."""
from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

CLK = os.sysconf("SC_CLK_TCK")


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


STARTER_KIND = "flow-run starter"
# what the worker starts for a run when the stack has a starter: it hands the run over and waits
COMMAND_KIND = "flow-run command (waits on its run in the starter)"


def _env_run_id(pid: int) -> str | None:
    env = _read(f"/proc/{pid}/environ")
    if b"PREFECT__FLOW_RUN_ID=" not in env:
        return None
    return env.split(b"PREFECT__FLOW_RUN_ID=", 1)[1].split(b"\0", 1)[0].decode() or None
_FORKED = re.compile(rb"flow run (\S+) as pid (\d+)$", re.M)  # ops.warm_start's line per fork


def _forked_run(starter: int, pid: int) -> str | None:
    """The flow run the starter ``starter`` forked as ``pid``, from its log (its stdout)."""
    try:
        log = os.readlink(f"/proc/{starter}/fd/1")
    except OSError:
        return None
    for run_id, forked in _FORKED.findall(_read(log)):
        if int(forked) == pid:
            return run_id.decode()
    return None


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
            self.own_cpu_s = time.thread_time()  # this thread's CPU: not the simulated people's

    own_cpu_s = 0.0

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
        if b"label-studio" in cmd and b" start" in cmd:  # a desk: its data dir names whose
            desk = re.search(rb"/desks/([^/ ]+)/", cmd)
            rec.kind = f"desk {desk.group(1).decode(errors='replace') if desk else '?'} (Label Studio)"
        elif b"server start" in cmd or b"server services start" in cmd:  # its API and its services
            rec.kind = "prefect server"
        elif b"worker start" in cmd:
            rec.kind = "prefect worker"
        elif b"sweeper" in cmd:  # `-c ...sweeper_loop()` or `-m ops.sweeper`
            rec.kind = "sweeper"
        elif b"synth batch" in cmd:
            rec.kind = "generator (rescue synth batch)"
        elif any(w in cmd for w in (b"ensure_infrastructure", b"prefect_setup", b" deploy")):
            rec.kind = "register (pools, deployments)"
        elif b"ops.warm_start serve" in cmd:
            # the stack's flow-run starter, and the flow runs it forked (same command line, same
            # /proc environ): a fork's run id is in the starter's log, its standard output
            if parent and parent.kind == STARTER_KIND:
                rec.flow_run_id = _forked_run(parent.pid, rec.pid)
                rec.kind = "flow run" if rec.flow_run_id else STARTER_KIND
            else:
                rec.kind = STARTER_KIND
        elif b"ops.warm_start prefect.engine" in cmd:  # the worker's process for a run forked elsewhere
            rec.kind = COMMAND_KIND
            rec.flow_run_id = _env_run_id(rec.pid)
        elif parent and parent.kind.startswith("flow run"):
            rec.kind = "ffmpeg etc. (children of flow runs)"
        elif run_id := _env_run_id(rec.pid):
            rec.flow_run_id = run_id
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

    def adopt(self, pid: int) -> None:
        """Follow a process this bench did not start itself (a desk started again by the CLI,
        whose parent has exited)."""
        s = _stat(pid)
        if s:
            with self.lock:
                self.procs.setdefault((pid, s["start"]), Proc(pid, s["start"], None, first_t=time.time()))

    def under(self, proc: Proc, ancestor: tuple[int, str]) -> bool:
        """Whether ``ancestor`` (pid, start) started ``proc``, or started what started it."""
        with self.lock:
            seen, key = set(), proc.parent
            while key and key not in seen:
                if key == ancestor:
                    return True
                seen.add(key)
                key = self.procs[key].parent if key in self.procs else None
        return False

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


def process_table(sampler: Sampler, run_kinds: dict[str, str]) -> dict:
    """Per kind of process: how many, the largest VmHWM, CPU s; ``run_kinds``: flow run id -> its
    deployment's flow (a flow-run process is named by the run it ran)."""
    with sampler.lock:
        procs = list(sampler.procs.values())
        peak_total_kb = sampler.peak_total_kb
    kinds: dict[str, dict] = {}
    for p in procs:
        kind = p.kind
        if kind == "flow run":
            kind = f"flow run: {run_kinds.get(p.flow_run_id, 'ingest-interview')}"
        k = kinds.setdefault(kind, {"processes": 0, "peak_rss_mb": 0.0, "cpu_s": 0.0})
        k["processes"] += 1
        k["peak_rss_mb"] = max(k["peak_rss_mb"], round(p.hwm_kb / 1024, 1))
        if kind.startswith("flow run"):
            k["cpu_s"] += p.cpu_self + p.cpu_children  # with its ffmpeg children
        elif not kind.startswith(("ffmpeg", "generator")):  # those are counted by their parents
            k["cpu_s"] += p.cpu_self
    ru = resource.getrusage(resource.RUSAGE_SELF)
    kinds["this bench (the simulated people, the sampler)"] = {
        "processes": 1, "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "cpu_s": ru.ru_utime + ru.ru_stime}
    for k in kinds.values():
        k["cpu_s"] = round(k["cpu_s"], 1)
    listed = [{"pid": p.pid, "kind": p.kind, "cmd": p.cmd, "peak_rss_mb": round(p.hwm_kb / 1024, 1),
               "cpu_s": round(p.cpu_self, 1), "seen_s": round(p.last_t - p.first_t, 1)}
              for p in sorted(procs, key=lambda p: p.first_t)]
    return {"processes": kinds, "process_list": listed, "peak_total_rss_mb": round(peak_total_kb / 1024, 1)}


def cpu_by_group(sampler: Sampler) -> dict[str, float]:
    """CPU seconds so far of what this bench started, by group of processes, and of the bench's
    own threads without the sampler (the simulated people): deltas of two give a stage's CPU."""
    with contextlib.suppress(Exception):
        sampler.sample()
    out: dict[str, float] = defaultdict(float)
    with sampler.lock:
        for p in sampler.procs.values():
            if p.kind.startswith(("ffmpeg", "generator")):
                continue  # counted by their parents
            group = ("flow runs" if p.kind == "flow run" else "desks" if p.kind.startswith("desk ")
                     else "prefect server" if p.kind == "prefect server" else "workers, sweeper, other")
            out[group] += p.cpu_self + (p.cpu_children if p.kind == "flow run" else 0.0)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out["simulated people (this bench)"] = ru.ru_utime + ru.ru_stime - sampler.own_cpu_s
    return out


class Steps:
    """The human half's steps, each timed: wall, CPU per group of processes (cpu_by_group), counts."""

    def __init__(self, sampler: Sampler):
        self.sampler, self.rows = sampler, []

    def run(self, name: str, fn, **counts):
        c0, t0 = cpu_by_group(self.sampler), time.monotonic()
        row = {"step": name, **counts}
        self.rows.append(row)
        try:
            out = fn()
        finally:
            row["wall_s"] = round(time.monotonic() - t0, 2)
            c1 = cpu_by_group(self.sampler)
            row["cpu_s"] = {k: round(c1[k] - c0.get(k, 0.0), 1) for k in c1 if c1[k] - c0.get(k, 0.0) >= 0.05}
        return out

    def count(self, **counts) -> None:
        self.rows[-1].update(counts)
