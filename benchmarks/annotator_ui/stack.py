"""The bench's stack: the desks under a throw-away data root (``pipeline.labelstudio.desks``),
the interview pushed to them, the desk's front (``pipeline.labelstudio.front.FrontServer``) in a process of its
own, the media, and the desks' figures (the ``DESKS`` lines)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from pipeline.annotation import push
from pipeline.config import Settings
from pipeline.labelstudio.desks import Desks
from pipeline.paths import DataRoot

from . import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_avg() -> str:
    return "load=" + "/".join(f"{x:.2f}" for x in os.getloadavg())


def make_media(sample: dict, folder: Path) -> str:
    """A WAV as long as the sample (noise), under the media root: what the players and the
    dialogue's line buttons load. Returns its path relative to the media root."""
    path = folder / f"{sample['sample_id'].replace('/', '_')}.wav"
    seconds = max(r["end_time"] for r in sample["rows"]) + 1
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"anoisesrc=d={seconds:.2f}:a=0.05",
                    "-ar", "16000", "-ac", "1", str(path)], check=True)
    return f"{folder.name}/{path.name}"


class FrontProcess:
    """The desk's front (``pipeline.labelstudio.front.FrontServer``) in front of one desk, in its own process as
    ``rescue annotate front`` runs it (in this process it would share the interpreter with
    Playwright's client and slow both). The ``RESCUE_NO_*`` switches of the environment reach it."""

    def __init__(self, upstream: str, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        code = ("import json, sys, threading; from pipeline.labelstudio.front import FrontServer; "
                f"f = FrontServer({upstream!r}, port={self.port}).start(); r = f.report; "
                "print(json.dumps({'release': r.release, 'version_ok': r.version_ok, 'applied': r.applied(), "
                "'not_applied': [o.group + ': ' + o.reason for o in r.outcomes if not o.applied]}), flush=True); "
                "sys.stdin.read(); f.stop()")  # until the benchmark closes its stdin (or ends)
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # the start report, once the front serves
        if not line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"the desk's front did not start (exit {self.proc.returncode})")
        self.report = json.loads(line)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def desk_rss_mb(desks: Desks, email: str) -> float:
    """The resident memory (MiB) of a desk's Label Studio: the RSS of every process of its process
    group (the server runs in its own session; its pid is the group's), with psutil when it is
    installed, else from /proc/<pid>/status (VmRSS). Pages shared between the processes count
    once per process. NaN when the desk is not running."""
    pgid = desks.server(email)._pid()
    if pgid is None:
        return float("nan")
    try:
        import psutil
    except ImportError:
        psutil = None
    total = 0
    if psutil is not None:
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == pgid:
                    total += proc.memory_info().rss
        return total / 2**20
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        found = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")), None)
        total += int(found) * 1024 if found else 0  # kB
    return total / 2**20


def _rss_list(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values)


def desk_figures(desks: Desks, people: list[str], passwords: dict[str, str]) -> dict:
    """``Desks.add`` of ``people`` (new, one after the other), then ``Desks.up`` of them from cold
    (all stopped first), then each desk's idle resident memory. Prints the ``DESKS`` lines."""
    add_s = []
    t_all = time.perf_counter()
    for email in people:
        t = time.perf_counter()
        desks.add(email, "annotator", passwords[email], timeout=600)
        add_s.append(time.perf_counter() - t)
    add_total = time.perf_counter() - t_all
    print(f"DESKS add n={len(people)} add_s={add_total:.1f} per_desk_s={'/'.join(f'{x:.1f}' for x in add_s)} "
          f"{load_avg()}", flush=True)
    desks.down(people)
    t = time.perf_counter()
    desks.up(people, timeout=600, log=lambda _m: None)
    up_total = time.perf_counter() - t
    time.sleep(5)  # idle: the start's work done
    idle = [desk_rss_mb(desks, e) for e in people]
    print(f"DESKS up n={len(people)} up_s={up_total:.1f} rss_idle_mb={_rss_list(idle)} "
          f"rss_idle_total_mb={sum(idle):.0f} {load_avg()}", flush=True)
    return {"n": len(people), "add_s": add_total, "add_per_desk_s": add_s, "up_s": up_total, "rss_idle_mb": idle}



def bench_desks(root: Path, base_port: int | None = None) -> Desks:
    """The desks of the data root ``root`` (a throw-away one; the map of it, ``DataRoot``, made
    here once and kept as the desks' ``root``), on 127.0.0.1 from ``base_port`` (default: a free
    port), with the data root's media folder made: each push places its files in the desk's file
    root."""
    settings = dataclasses.replace(Settings.from_env(root), desk_base_port=base_port or free_port(),
                                   desk_url="http://127.0.0.1:{port}", desk_public_url="")
    desks = Desks(DataRoot(root), settings)
    (root / "media").mkdir(parents=True)
    return desks


def push_sample(desks: Desks, name: str, sample: dict, email: str, audio: str | None,
                window: int | None) -> int:
    """Push ``sample`` for round ``name`` to ``email``'s desk as a batch's sample is pushed, under
    the desks' data root (the transcript round with the draft as pre-annotation, the later ones
    without gold from earlier rounds; ``audio``: the media file the players load, none when None;
    ``window``: units per task, default the pipeline's). Returns the round's project id there."""
    report = push.push_round(desks, name, [sample], [email], k=1, root=desks.root,
                             prelabel=push.input_values if name == "transcript" else None,
                             prelabel_source="input" if name == "transcript" else "none",
                             media_url=(lambda s, a=audio: push.local_media_url(a)) if audio else None,
                             **({"window": window} if window else {}))
    return report.projects[push.project_key(name, "family", email)]


def stop(front: FrontProcess | None, desks: Desks) -> None:
    """Stop the front (when it was started) and every desk the bench started."""
    if front:
        front.stop()
    desks.down()
    desks.close()
