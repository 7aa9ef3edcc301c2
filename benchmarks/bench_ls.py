"""Push and pull a RESCUE-sized round through a real Label Studio server; prints seconds.

191 synthetic samples (~37 rows each, ``pipeline.synthetic.corpus``) are pushed to two annotators'
projects of the transcript round (every row is a unit) with predictions; every task is then
annotated through the API (not timed: that stands for the annotators' work) and the round is
pulled: snapshot export, raw archive, parse and validation into the long label table.
Targets after server start: push <= 10 s, pull + validation <= 10 s.

    .venv/bin/python benchmarks/bench_ls.py [--round transcript] [--scale 1.0]
"""
from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.annotation import ls_config, pull, push  # noqa: E402
from pipeline.annotation.client import LabelStudioClient  # noqa: E402
from pipeline.annotation.rounds import load_round  # noqa: E402
from pipeline.annotation.server import LabelStudioServer  # noqa: E402
from pipeline.paths import DataRoot  # noqa: E402
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
    os.environ.update({"LABEL_STUDIO_USERNAME": "bench-admin@rescue.test",
                       "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(16),
                       "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20)})
    samples = generate(scale=args.scale)
    rnd = load_round(args.round)
    rows = sum(len(s["rows"]) for s in samples)
    print(f"{len(samples)} samples, {rows} rows ({rows / len(samples):.1f} per sample), round {rnd.name}")

    with tempfile.TemporaryDirectory(prefix="bench-ls-") as tmp:
        root = Path(tmp)
        server = LabelStudioServer(DataRoot(root).label_studio_dir(), port=_free_port(), media_root=root)
        t0 = time.perf_counter()
        server.start(timeout=600)
        print(f"server start (template database): {time.perf_counter() - t0:6.2f} s")
        client = LabelStudioClient(server.url, os.environ["LABEL_STUDIO_USER_TOKEN"])
        try:
            annotators = [client.create_user(f"bench-{i}@rescue.test")["email"] for i in (1, 2)]

            t0, c0 = time.perf_counter(), time.process_time()
            report = push.push_round(client, rnd.name, samples, annotators)
            push_s = time.perf_counter() - t0
            print(f"push with predictions:            {push_s:6.2f} s  (pipeline CPU {time.process_time() - c0:.2f} s; "
                  f"{report.summary()})")

            t0 = time.perf_counter()
            again = push.push_round(client, rnd.name, samples, annotators)
            print(f"re-push (nothing changed):        {time.perf_counter() - t0:6.2f} s  "
                  f"({again.created} created, {again.unchanged} unchanged)")

            by_id = {s["sample_id"]: s for s in samples}
            users = {u["email"]: u["id"] for u in client.users()}
            jobs = []
            for key, pid in report.projects.items():
                who = push.parse_project_key(key)[2]
                for task in client.tasks(pid):
                    values = push.input_values(rnd, by_id[task["data"]["sample_id"]])
                    jobs.append((task["id"], ls_config.values_to_results(rnd, task["data"], values), users[who]))
            t0 = time.perf_counter()
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda j: client.create_annotation(j[0], j[1], completed_by=j[2], lead_time=30.0), jobs))
            print(f"(setup) {len(jobs)} annotations posted: {time.perf_counter() - t0:6.2f} s")

            t0, c0 = time.perf_counter(), time.process_time()
            result = pull.pull_round(client, rnd.name, root)
            pull_s = time.perf_counter() - t0
            print(f"pull + archive + validation:      {pull_s:6.2f} s  (pipeline CPU {time.process_time() - c0:.2f} s; "
                  f"{result.summary()})")
            t0 = time.perf_counter()
            again_pull = pull.pull_round(client, rnd.name, root)
            print(f"re-pull (nothing changed):        {time.perf_counter() - t0:6.2f} s  "
                  f"({again_pull.new_snapshots} new exports)")
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the server shares them)")
            print(f"targets: push {push_s:.2f} s <= 10 s: {'ok' if push_s <= 10 else 'MISSED'}; "
                  f"pull {pull_s:.2f} s <= 10 s: {'ok' if pull_s <= 10 else 'MISSED'}")
        finally:
            client.close()
            server.stop()


if __name__ == "__main__":
    main()
