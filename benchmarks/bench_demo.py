"""Time the one-command demo (`bash scripts/demo.sh` = scripts/setup.sh + `rescue demo`):
on a fresh machine (set-up included) and on a machine that is already set up.

    python3 benchmarks/bench_demo.py [--fresh-venv] [--interviews N]

Targets: the demo (`demo_s`) <= 60 s on a quiet 2-core machine already set up; set-up plus demo
<= 4 min on a fresh one. Both runs start from nothing but the checkout: a NEW data root (new
Prefect database, new desks - one Label Studio per simulated person -, empty caches, no stack
running), so the demo does all of its work each time: start the stack and the desks,
synthesize, ingest, every annotation round, the release.

- fresh: `scripts/setup.sh` then the demo. With --fresh-venv the set-up first deletes .venv
  and .label-studio and rebuilds them (package downloads come from uv's cache when warm).
  Only use --fresh-venv in a checkout nobody else uses, e.g. a clone:
      git clone . /tmp/fresh-demo && cd /tmp/fresh-demo && python3 benchmarks/bench_demo.py --fresh-venv
- already set up: `scripts/setup.sh` again (an idempotent no-op: seconds) then the demo in
  another new data root, after the first run's stack (and its desks) was stopped.

Ports: the Prefect server on $RESCUE_PREFECT_PORT (default 4299), the desks from
$RESCUE_DESK_BASE_PORT (default 8181) up, so a developer's own stack on 4200/8081 is left alone.

The script needs only the standard library (it runs before .venv exists). It prints the demo's
own per-step table, one JSON line per run and a summary with the 1-minute load average at the
start and end of each run: a busy shared machine makes every figure slower. ``cpu_s`` is what
the demo cost the machine in CPU seconds, steadier than wall time under load: the `rescue demo`
process and what it waited for (synthesis, registration), plus every process the run left
recorded under its data root (Prefect server, worker with its flow runs, sweeper, desks,
fronts), read from /proc before the stack is stopped.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_FRESH_S, TARGET_WARM_S = 240, 60  # fresh: set-up + demo; already set up: the demo alone


def load() -> float:
    return round(os.getloadavg()[0], 2)


def timed_ok(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds the command took and its stdout; on failure print its output tail and exit."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(proc.returncode)  # the caller's `finally` still stops the stacks
    return time.perf_counter() - t0, proc.stdout


def _cpu_of_tree(pid: int, tick: int) -> float:
    """CPU seconds of ``pid`` (with its reaped children) and of its live descendants."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        kids = [int(k) for t in Path(f"/proc/{pid}/task").iterdir()
                for k in (t / "children").read_text().split()]
    except (OSError, IndexError, ValueError):
        return 0.0
    return sum(int(x) for x in fields[11:15]) / tick + sum(_cpu_of_tree(k, tick) for k in kids)


def stack_cpu_s(root: Path) -> float:
    """CPU seconds of the processes recorded under ``root`` (pid files: JSON with "pid", or a bare
    pid), while they still run: the stack's and the desks'."""
    tick, pids = os.sysconf("SC_CLK_TCK"), set()
    for f in [*root.glob("stack/pids/*.json"), *root.glob("desks/**/*.pid")]:
        try:
            text = f.read_text().strip()
            pids.add(int(json.loads(text)["pid"]) if text.startswith("{") else int(text.split()[0]))
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return sum(_cpu_of_tree(pid, tick) for pid in pids)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def step_table(demo_stdout: str) -> str:
    """The demo's own timing lines ('  <step>   12.3 s')."""
    return "\n".join(line for line in demo_stdout.splitlines() if line.startswith("  ") and line.endswith(" s"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fresh-venv", action="store_true", help="also delete .venv and .label-studio first")
    ap.add_argument("--interviews", type=int, default=None, help="synthetic interviews (default: the demo's)")
    args = ap.parse_args()

    env = {**os.environ, "RESCUE_PREFECT_PORT": os.environ.get("RESCUE_PREFECT_PORT", "4299"),
           "RESCUE_DESK_BASE_PORT": os.environ.get("RESCUE_DESK_BASE_PORT", "8181")}
    if args.fresh_venv:
        shutil.rmtree(REPO / ".venv", ignore_errors=True)
        shutil.rmtree(REPO / ".label-studio", ignore_errors=True)
    rescue = str(REPO / ".venv/bin/rescue")
    roots: list[Path] = []
    results = {}
    try:
        for run, target in (("fresh", TARGET_FRESH_S), ("already set up", TARGET_WARM_S)):
            root = Path(tempfile.mkdtemp(prefix="rescue-bench-demo-"))
            roots.append(root)
            demo = [rescue, "demo", "--data-root", str(root)]
            if args.interviews:
                demo += ["--interviews", str(args.interviews)]
            load0 = load()
            setup_s, _ = timed_ok(["bash", "scripts/setup.sh"], env)
            cpu0 = children_cpu_s()
            demo_s, out = timed_ok(demo, env)
            cpu_s = children_cpu_s() - cpu0 + stack_cpu_s(root)
            # Stop this run's stack and desks: the next run starts from a stopped stack, as after
            # `rescue stack down`.
            subprocess.run([rescue, "stack", "down", "--data-root", str(root)], cwd=REPO, env=env, capture_output=True)
            results[run] = {"setup_s": round(setup_s, 1), "demo_s": round(demo_s, 1), "cpu_s": round(cpu_s, 1),
                            "total_s": round(setup_s + demo_s, 1), "target_s": target,
                            "load_start": load0, "load_end": load()}
            print(f"--- {run}: the demo's steps\n{step_table(out)}")
            print(json.dumps({"run": run, **results[run]}), flush=True)
    finally:
        for root in roots:
            if (REPO / ".venv/bin/rescue").exists():
                subprocess.run([rescue, "stack", "down", "--data-root", str(root)], cwd=REPO, env=env,
                               capture_output=True)
            shutil.rmtree(root, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores; load = 1-minute load average at start/end of each run")
    for name, r in results.items():
        timed = r["total_s"] if name == "fresh" else r["demo_s"]
        verdict = "within" if timed <= r["target_s"] else "OVER"
        print(f"{name:>14}: {r['total_s']:7.1f} s (set-up {r['setup_s']:.1f} s + demo {r['demo_s']:.1f} s, "
              f"demo CPU {r['cpu_s']:.1f} s) - "
              f"{verdict} the {r['target_s']} s target of the {'set-up + demo' if name == 'fresh' else 'demo'} "
              f"({timed / r['target_s']:.2f} of it); "
              f"load {r['load_start']} -> {r['load_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
