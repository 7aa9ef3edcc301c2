"""Time the one-command demo: on a fresh machine (set-up included) and when already set up.

    .venv/bin/python benchmarks/bench_demo.py [--fresh-venv]

Targets: <= 10 min on a fresh machine, <= 3 min when set up. "Fresh" here means a new data
root (new Prefect database, new Label Studio database, no caches) plus `scripts/setup.sh`;
with --fresh-venv the set-up also rebuilds .venv and Label Studio's venv from the package
registries (slow; only on a machine you can afford to re-install). The second run reuses the
data root, the running stack and the caches. Prints one JSON line per run and a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_FRESH_S, TARGET_WARM_S = 600, 180


def timed_ok(argv: list[str], env: dict[str, str]) -> float:
    """Seconds the command took; on failure print its output tail and exit with its status."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(proc.returncode)  # the caller's `finally` still stops the stack
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fresh-venv", action="store_true", help="also delete .venv and .label-studio first")
    ap.add_argument("--interviews", type=int, default=4)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="rescue-bench-demo-"))
    env = {**os.environ, "RESCUE_DATA_ROOT": str(root), "RESCUE_PREFECT_PORT": os.environ.get("RESCUE_PREFECT_PORT", "4299"),
           "RESCUE_LABEL_STUDIO_PORT": os.environ.get("RESCUE_LABEL_STUDIO_PORT", "8099")}
    if args.fresh_venv:
        shutil.rmtree(REPO / ".venv", ignore_errors=True)
        shutil.rmtree(REPO / ".label-studio", ignore_errors=True)
    results = {}
    try:
        setup = ["bash", "scripts/setup.sh"]
        demo = [str(REPO / ".venv/bin/rescue"), "demo", "--data-root", str(root), "--interviews", str(args.interviews)]
        setup_s, fresh_s = timed_ok(setup, env), timed_ok(demo, env)
        results["fresh"] = {"setup_s": round(setup_s, 1), "demo_s": round(fresh_s, 1),
                            "total_s": round(setup_s + fresh_s, 1), "target_s": TARGET_FRESH_S}
        print(json.dumps({"run": "fresh", **results["fresh"]}))
        setup2_s, warm_s = timed_ok(setup, env), timed_ok(demo, env)
        results["warm"] = {"setup_s": round(setup2_s, 1), "demo_s": round(warm_s, 1),
                           "total_s": round(setup2_s + warm_s, 1), "target_s": TARGET_WARM_S}
        print(json.dumps({"run": "already set up", **results["warm"]}))
    finally:
        subprocess.run([str(REPO / ".venv/bin/rescue"), "stack", "down", "--data-root", str(root)], cwd=REPO, env=env,
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    for name, r in results.items():
        verdict = "within" if r["total_s"] <= r["target_s"] else "OVER"
        print(f"{name:>6}: {r['total_s']:7.1f} s (set-up {r['setup_s']:.1f} s + demo {r['demo_s']:.1f} s) - "
              f"{verdict} the {r['target_s'] // 60} min target ({r['total_s'] / r['target_s']:.2f} of it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
