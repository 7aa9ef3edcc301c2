"""Push and pull a RESCUE-sized round through real desks (one Label Studio per annotator); prints seconds.

191 synthetic samples (~37 rows each, ``pipeline.synthetic.corpus``) are pushed to two annotators'
projects of the transcript round (every row is a unit) with predictions, each project on its
annotator's own desk (:mod:`pipeline.annotation.desks`, under a temporary data root, ports from
a free one); every task is then annotated through the API in its annotator's name (not timed:
that stands for the annotators' work) and the round is pulled from both desks: snapshot export,
raw archive, parse and validation into the long label table.
Targets after the desks' start: push <= 10 s, pull + validation <= 10 s.

    .venv/bin/python benchmarks/bench_ls.py [--round transcript] [--scale 1.0]

``--scale 0.05`` (10 samples) is a quick check that it runs (~1 min, most of it the desks' start).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.annotation import ls_config, pull, push  # noqa: E402
from pipeline.annotation.desks import Desks  # noqa: E402
from pipeline.annotation.rounds import load_round  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.synthetic.corpus import generate  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round", default="transcript")
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    samples = generate(scale=args.scale)
    rnd = load_round(args.round)
    rows = sum(len(s["rows"]) for s in samples)
    print(f"{len(samples)} samples, {rows} rows ({rows / len(samples):.1f} per sample), round {rnd.name}")

    with tempfile.TemporaryDirectory(prefix="bench-ls-") as tmp:
        root = Path(tmp)
        desks = Desks(root, dataclasses.replace(Settings.from_env(root), desk_base_port=_free_port()))
        annotators = [f"bench-{i}@rescue.test" for i in (1, 2)]
        try:
            t0 = time.perf_counter()
            for who in annotators:  # what `rescue annotators add` does, but the password (never used here)
                desks.register(who, "annotator")
            desks.up(timeout=600, log=lambda *_: None)  # side by side
            for who in annotators:
                desks.client(who).create_user(who)
            print(f"{len(annotators)} desks start (template database): {time.perf_counter() - t0:6.2f} s")

            t0, c0 = time.perf_counter(), time.process_time()
            report = push.push_round(desks, rnd.name, samples, annotators)
            push_s = time.perf_counter() - t0
            print(f"push with predictions:            {push_s:6.2f} s  (pipeline CPU {time.process_time() - c0:.2f} s; "
                  f"{report.summary()})")

            t0 = time.perf_counter()
            again = push.push_round(desks, rnd.name, samples, annotators)
            print(f"re-push (nothing changed):        {time.perf_counter() - t0:6.2f} s  "
                  f"({again.created} created, {again.unchanged} unchanged)")

            by_id = {s["sample_id"]: s for s in samples}
            jobs = []
            for key, pid in report.projects.items():
                who = push.parse_project_key(key)[2]
                client, owner = desks.client(who), desks.owner_id(who)
                for task in client.tasks(pid):
                    values = push.input_values(rnd, by_id[task["data"]["sample_id"]])
                    jobs.append((client, task["id"], ls_config.values_to_results(rnd, task["data"], values), owner))
            t0 = time.perf_counter()
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda j: j[0].create_annotation(j[1], j[2], completed_by=j[3], lead_time=30.0), jobs))
            print(f"(setup) {len(jobs)} annotations posted: {time.perf_counter() - t0:6.2f} s")

            t0, c0 = time.perf_counter(), time.process_time()
            result = pull.pull_round(desks, rnd.name, root)
            pull_s = time.perf_counter() - t0
            print(f"pull + archive + validation:      {pull_s:6.2f} s  (pipeline CPU {time.process_time() - c0:.2f} s; "
                  f"{result.summary()})")
            t0 = time.perf_counter()
            again_pull = pull.pull_round(desks, rnd.name, root)
            print(f"re-pull (nothing changed):        {time.perf_counter() - t0:6.2f} s  "
                  f"({again_pull.new_snapshots} new exports)")
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the {len(annotators)} desks share them)")
            print(f"targets: push {push_s:.2f} s <= 10 s: {'ok' if push_s <= 10 else 'MISSED'}; "
                  f"pull {pull_s:.2f} s <= 10 s: {'ok' if pull_s <= 10 else 'MISSED'}")
        finally:
            desks.down()
            desks.close()

if __name__ == "__main__":
    main()
