"""Release build speed and memory on the synthetic corpus at RESCUE scale (1x) and 10x.

Each build runs in a fresh subprocess (imports included, as `rescue release build` pays
them) reading a rows directory written beforehand; the figures are CPU time, wall time and
peak RSS (ru_maxrss) of that subprocess. Targets: 1x CPU <= 3 s, of which the
release scan (V16 over every file) + manifest + dataset card <= 0.5 s CPU; 10x / 1x CPU
<= 11; 10x peak RSS <= 1 GiB. It also prints what the paper-shaped files (``paper/``:
benchmark.jsonl, per-sample files, er/vp.jsonl with all prior rows) add: CPU seconds of those
build steps and their bytes. On a shared machine compare CPU seconds; wall time follows the load.

    .venv/bin/python benchmarks/bench_release.py [--scales 1 10] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from pipeline.benchmark import release
inp = release.load_rows_dir(sys.argv[1])
steps, last = {}, [time.process_time()]
def on_step(msg):
    now = time.process_time()
    steps[msg] = steps.get(msg, 0.0) + now - last[0]
    last[0] = now
res = release.build_or_reuse(inp, "1.0.0", sys.argv[2], on_step=on_step)  # validates, as `rescue release build`
m = res.manifest
ru = resource.getrusage(resource.RUSAGE_SELF)
paper_cpu = sum(v for k, v in steps.items() if k.startswith("paper"))
print(json.dumps({"build_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime,
                  "paper_cpu_s": paper_cpu, "card_cpu_s": steps.get("manifest and card", 0.0),
                  "scan_cpu_s": steps.get("release scan", 0.0),
                  "paper_mib": sum(v["bytes"] for k, v in m["files"].items() if k.startswith("paper/")) / 2**20,
                  "paper_files": sum(1 for k in m["files"] if k.startswith("paper/")),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": m["statistics"]["all"]["total_turns"], "samples": m["statistics"]["all"]["samples"],
                  "instances": sum(c["all"]["instances"] for c in m["counts"].values())}))
"""


def run_build(rows_dir: Path, out_root: Path) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(rows_dir), str(out_root)],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"build failed for {rows_dir}:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--repeat", type=int, default=1, help="builds per scale; the one with the least CPU time is kept")
    args = parser.parse_args()

    from pipeline import rows
    from pipeline.synthetic import corpus as synth_corpus

    import os

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} "
          "(wall time on a busy machine exceeds CPU time)", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_release_") as tmp:
        tmp = Path(tmp)
        for scale in args.scales:
            rows_dir = tmp / f"rows_x{scale:g}"
            t = time.perf_counter()
            rows.write_rows_dir(synth_corpus.generate(scale=scale, seed=0), rows_dir)
            print(f"[x{scale:g}] corpus generated in {time.perf_counter() - t:.1f} s (not timed below)", flush=True)
            runs = [run_build(rows_dir, tmp / f"out_x{scale:g}_{i}") for i in range(args.repeat)]
            best = min(runs, key=lambda r: r["cpu_s"])
            best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
            results[scale] = best
            print(f"[x{scale:g}] {best['samples']} samples, {best['rows']} rows, {best['instances']} task instances: "
                  f"wall {best['wall_s']:.2f} s (in-process {best['build_s']:.2f} s, CPU {best['cpu_s']:.2f} s), "
                  f"peak RSS {best['peak_rss_mib']:.0f} MiB", flush=True)
            print(f"[x{scale:g}] paper/ {best['paper_cpu_s']:.2f} s CPU ({best['paper_files']} files, "
                  f"{best['paper_mib']:.1f} MiB); release scan {best['scan_cpu_s']:.2f} s + manifest and dataset card "
                  f"{best['card_cpu_s']:.2f} s CPU = {best['scan_cpu_s'] + best['card_cpu_s']:.2f} s, "
                  f"{100 * (best['scan_cpu_s'] + best['card_cpu_s']) / best['cpu_s']:.0f}% of the build's CPU time",
                  flush=True)

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    if 1.0 in results:
        one = results[1.0]
        tail = one["scan_cpu_s"] + one["card_cpu_s"]
        print(f"1x target: CPU <= 3 s: {verdict(one['cpu_s'] <= 3)} ({one['cpu_s']:.2f} s; wall {one['wall_s']:.2f} s); "
              f"scan + manifest + card <= 0.5 s CPU: {verdict(tail <= 0.5)} ({tail:.2f} s); "
              f"peak RSS <= 1 GiB: {verdict(one['peak_rss_mib'] <= 1024)} ({one['peak_rss_mib']:.0f} MiB)")
        for scale, r in results.items():
            if scale == 1.0:
                continue
            ratio, limit = r["cpu_s"] / one["cpu_s"], 1.1 * scale
            print(f"{scale:g}x / 1x CPU-time ratio: {ratio:.2f} (target <= {limit:g}: {verdict(ratio <= limit)}); "
                  f"wall-time ratio {r['wall_s'] / one['wall_s']:.2f}; rows ratio {r['rows'] / one['rows']:.2f}")
            print(f"{scale:g}x peak RSS <= 1 GiB: {verdict(r['peak_rss_mib'] <= 1024)} ({r['peak_rss_mib']:.0f} MiB)")


if __name__ == "__main__":
    main()
