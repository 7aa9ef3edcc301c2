"""Push and pull a RESCUE-sized round through real desks (one Label Studio per annotator); prints seconds.

191 synthetic samples (~37 rows each, ``pipeline.synthetic.corpus``) are pushed to two annotators'
projects of the transcript round (every row is a unit) as the pipeline pushes (``rescue annotate
push``): each project on its annotator's own desk (:mod:`pipeline.labelstudio.desks`, under a
temporary data root, ports from a free one), with predictions, the round's push record and lock
(``data_root``), and a WAV per sample (a short silent stand-in, ``media/<sha256>.wav`` as ingest
names them) staged in each desk's file root and served through a local storage. Every task is then
annotated through the API in its annotator's name (not timed: that stands for the annotators'
work) and the round is pulled from both desks: export, raw archive, parse and validation into the
long label table. A push and a pull again with nothing changed are timed too, with the requests
they make (counted on the desks' own HTTP clients).

Targets, after the desks' start: push <= 5 s, push again <= 1 s, pull (+ archive +
validation) <= 5 s, pull again <= 1 s. The push's figure is the median of ``--repeat`` first
pushes (default 3), each to its own new pair of desks, every one printed: the same work costs
this 2-core machine's processes up to 40 % more CPU from one minute to the next.

    .venv/bin/python benchmarks/bench_ls.py [--round transcript] [--scale 1.0] [--repeat 3] [--timeline]

``--scale 0.05`` (10 samples) is a quick check that it runs (~1 min, most of it the desks' start).
``--keep DIR`` copies the data root's ``annotation/`` folder after the first pull (archived
exports with their predictions, push record, label, problem and acceptance tables, ledger, sync
states) to ``DIR``: the pull's inputs and outputs, to compare a pull of the same archive by other code.
``--timeline`` prints the first push's and the first pull's requests (sent, answered, desk): where
their wall goes. ``--push-only`` stops after the pushes (no annotating, no pull: ~1.5 min).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import wave
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.annotation import ls_config, pull, push  # noqa: E402
from pipeline.labelstudio.desks import Desks  # noqa: E402
from pipeline.annotation.rounds import load_round  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.synthetic.corpus import generate  # noqa: E402
from pipeline.paths import DataRoot

TARGETS = {"push": 5.0, "push again": 1.0, "pull": 5.0, "pull again": 1.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _media(root: Path, samples: list[dict]) -> dict[str, str]:
    """A 0.1-s silent WAV per sample under the data root; sample id -> its local-files URL."""
    out = {}
    for s in samples:
        rel = f"media/{hashlib.sha256(s['sample_id'].encode()).hexdigest()}.wav"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        with wave.open(str(root / rel), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(b"\0\0" * 1600)
        out[s["sample_id"]] = push.local_media_url(rel)
    return out


class _Requests:
    """Counts the requests the desks' clients send (httpx event hooks on each real client), and
    when each was sent and its answer's head came back (a Label Studio export answers once it is
    built): :meth:`timeline`."""

    def __init__(self, desks: Desks, people: list[str]):
        self.counts: Counter = Counter()
        self.spans: list[list] = []  # [desk port, method path, sent, answered (None: not yet)]
        self._open: dict[int, list] = {}
        for who in people:
            hooks = desks.client(who)._http.event_hooks
            hooks["request"].append(self._count)
            hooks["response"].append(self._answered)

    def _count(self, request) -> None:
        self.counts[f"{request.method} {request.url.path}"] += 1
        span = [request.url.port, f"{request.method} {request.url.path}", time.perf_counter(), None]
        self.spans.append(span)
        self._open[id(request)] = span

    def _answered(self, response) -> None:
        span = self._open.pop(id(response.request), None)
        if span is not None:
            span[3] = time.perf_counter()

    def take(self) -> Counter:
        out, self.counts, self.spans, self._open = self.counts, Counter(), [], {}
        return out

    def timeline(self, t0: float) -> str:
        """One line per request since the last :meth:`take`: seconds after ``t0`` it was sent
        and answered, on which desk (port)."""
        return "\n".join(f"    {sent - t0:6.2f} -> {'?' if done is None else f'{done - t0:6.2f}'}"
                         f"  ({'?' if done is None else f'{done - sent:5.2f}'} s)  desk :{port}  {what}"
                         for port, what, sent, done in sorted(self.spans, key=lambda s: s[2]))


def _desk_cpu(desks: Desks, people: list[str]) -> float:
    """CPU seconds the desks' Label Studio processes have used so far (Linux ``/proc``; 0 elsewhere)."""
    total = 0.0
    for who in people:
        pid = desks.server(who)._pid()  # the pid file: no request (a status() probe costs ~0.1 s)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def _line(name: str, seconds: float, detail: str) -> str:
    target = TARGETS[name]
    return (f"{name + ':':<12} {seconds:6.2f} s  target <= {target:g} s: {'ok' if seconds <= target else 'MISSED'}"
            f"  ({detail}; load {os.getloadavg()[0]:.1f})")


def _asked(counts: Counter) -> str:
    return f"{sum(counts.values())} requests: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def _desks(root: Path) -> Desks:
    return Desks(DataRoot(root), dataclasses.replace(Settings.from_env(root), desk_base_port=_free_port()))


def _start(desks: Desks, annotators: list[str]) -> None:
    """A desk per annotator, started side by side from the template database."""
    for who in annotators:  # what `rescue annotators add` does, but the password (never used here)
        desks.register(who, "annotator", simulated=True)
    desks.up(timeout=600, log=lambda *_: None)  # side by side
    for who in annotators:
        desks.client(who).create_user(who)


def _first_push(desks: Desks, root: Path, rnd, samples: list[dict], annotators: list[str]):
    """One first push of the round to the desks (fresh projects): seconds, what it cost, its
    report, the media URL of each sample, and when it started."""
    media = _media(root, samples)
    d0 = _desk_cpu(desks, annotators)  # before the clock starts
    t0, c0 = time.perf_counter(), time.process_time()
    report = push.push_round(desks, rnd.name, samples, annotators, root=DataRoot(root),
                             media_url=lambda s: media[s["sample_id"]])  # what push.catalog_media_urls gives
    seconds = time.perf_counter() - t0
    return seconds, (f"pipeline CPU {time.process_time() - c0:.2f} s, desks' CPU "
                     f"{_desk_cpu(desks, annotators) - d0:.2f} s"), report, media, t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round", default="transcript")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3,
                    help="first pushes, each to its own new pair of desks; the push's figure is their median")
    ap.add_argument("--keep", type=Path, help="copy annotation/ here after the first pull")
    ap.add_argument("--timeline", action="store_true",
                    help="print each request of the first push and pull: when sent and answered, on which desk")
    ap.add_argument("--push-only", action="store_true", help="stop after the pushes")
    args = ap.parse_args()
    samples = generate(scale=args.scale)
    rnd = load_round(args.round)
    rows = sum(len(s["rows"]) for s in samples)
    print(f"{len(samples)} samples, {rows} rows ({rows / len(samples):.1f} per sample), round {rnd.name}")
    annotators = [f"bench-{i}@rescue.test" for i in (1, 2)]

    with tempfile.TemporaryDirectory(prefix="bench-ls-") as tmp:
        root = Path(tmp) / "main"
        t0 = time.perf_counter()
        desks = _desks(root)
        try:
            _start(desks, annotators)
            print(f"{len(annotators)} desks start (template database): {time.perf_counter() - t0:6.2f} s")
            requests = _Requests(desks, annotators)
            requests.take()
            push_s, cost, report, media, t0 = _first_push(desks, root, rnd, samples, annotators)
            timeline = requests.timeline(t0) if args.timeline else ""
            first = f"{push_s:.2f} s: {cost}; {sum(requests.take().values())} requests; {report.summary()}"
            runs = [push_s]
            for i in range(1, args.repeat):  # the same first push again, each on new desks: the machine's pace varies
                other = _desks(Path(tmp) / f"repeat-{i}")
                try:
                    _start(other, annotators)
                    seconds, cost, *_ = _first_push(other, Path(tmp) / f"repeat-{i}", rnd, samples, annotators)
                finally:
                    other.down()
                    other.close()
                runs.append(seconds)
                print(f"(push {i + 1} of {args.repeat}, new desks: {seconds:.2f} s; {cost})")
            median = statistics.median(runs)
            each = f"median of {len(runs)}: {', '.join(f'{r:.2f}' for r in runs)} s; " if len(runs) > 1 else ""
            print(_line("push", median, f"{each}the first {first}"))
            if timeline:
                print(timeline)

            t0, c0 = time.perf_counter(), time.process_time()
            again = push.push_round(desks, rnd.name, samples, annotators, root=DataRoot(root),
                                    media_url=lambda s: media[s["sample_id"]])
            print(_line("push again", time.perf_counter() - t0,
                        f"pipeline CPU {time.process_time() - c0:.2f} s; {again.created} created, {again.updated} "
                        f"updated, {again.unchanged} unchanged; {_asked(requests.take())}"))
            if args.push_only:
                return

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
            requests.take()

            t0, c0 = time.perf_counter(), time.process_time()
            result = pull.pull_round(desks, rnd.name, DataRoot(root))
            pull_s = time.perf_counter() - t0
            timeline = requests.timeline(t0) if args.timeline else ""
            print(_line("pull", pull_s, f"+ archive + validation; pipeline CPU {time.process_time() - c0:.2f} s; "
                                        f"{sum(requests.take().values())} requests; {result.summary()}"))
            if timeline:
                print(timeline)
            if args.keep:
                shutil.copytree(root / "annotation", args.keep, dirs_exist_ok=True)
            t0, c0 = time.perf_counter(), time.process_time()
            again_pull = pull.pull_round(desks, rnd.name, DataRoot(root))
            print(_line("pull again", time.perf_counter() - t0,
                        f"pipeline CPU {time.process_time() - c0:.2f} s; {again_pull.new_snapshots} new exports; "
                        f"{_asked(requests.take())}"))
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the {len(annotators)} desks share them)")
        finally:
            desks.down()
            desks.close()


if __name__ == "__main__":
    main()
