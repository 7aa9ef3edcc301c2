"""Process supervision for the local stack: where its files live, and starting and stopping its
processes by the pids it recorded - never by name.

A started process gets its own session (``down`` stops its children too), an owner-only log
under ``<data root>/stack/logs/`` and a pid file under ``stack/pids/`` holding its pid AND its
start time: a pid is the stack's only while the process with that pid still has that start
time, so a pid reused by the system is never signalled (:mod:`pipeline.processes`, which the
desks and fronts use too). Which processes make up the stack is
:mod:`ops.stack`'s business; this module knows none of them.
"""
from __future__ import annotations

import os
import random
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pipeline import processes
from pipeline.config import REPO_ROOT
from pipeline.paths import DataRoot
from pipeline.processes import start_time  # noqa: F401  (the stack's callers read it here)
from pipeline.store import make_private_dir


class StackError(RuntimeError):
    """A stack component could not be started/stopped; the message says what to do."""


@dataclass(frozen=True)
class StackPaths:
    """The stack's files inside ``DataRoot.stack_dir()`` and ``DataRoot.prefect_results()`` of
    ``root`` (the data root its entry point built)."""

    root: DataRoot

    @property
    def home(self) -> Path:           # PREFECT_HOME of the server and worker
        return self.root.stack_dir() / "prefect-home"

    @property
    def pids(self) -> Path:
        return self.root.stack_dir() / "pids"

    @property
    def logs(self) -> Path:
        return self.root.stack_dir() / "logs"

    @property
    def results(self) -> Path:        # Prefect result storage = the resume cache
        return self.root.prefect_results()

    def pid_file(self, name: str) -> Path:
        return self.pids / f"{name}.json"

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def make_private(paths: StackPaths) -> None:
    """The stack's state is owner-only: ``stack/`` (pids, logs, the Prefect home and its database:
    flow parameters, logs with sample ids) and ``prefect-results/`` (the resume cache holds stage
    results) are 0700 folders; files already there are narrowed to 0600."""
    stack = paths.root.stack_dir()
    for folder in (stack, paths.pids, paths.logs, paths.home, paths.results):
        make_private_dir(folder)
    for folder in (stack, paths.results):
        for p in folder.rglob("*"):
            if p.is_file() and not p.is_symlink():
                os.chmod(p, 0o600)
            elif p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o700)


# --- the stack's processes by name: started, recorded and stopped as pipeline.processes does ---

def read_pid(paths: StackPaths, name: str) -> int | None:
    """The pid of the stack's process ``name`` while it runs, else None."""
    rec = processes.recorded(paths.pid_file(name))
    return None if rec is None else int(rec["pid"])


def write_pid(paths: StackPaths, name: str, pid: int) -> None:
    make_private_dir(paths.pids)
    processes.record(paths.pid_file(name), pid)


def spawn(paths: StackPaths, name: str, argv: list[str], env: dict[str, str]) -> int:
    """Start ``argv`` in the repository as the stack's process ``name`` (its own session, output
    to its log, files it makes owner-only) with ``env`` over this environment; its pid."""
    make_private_dir(paths.logs)
    proc = processes.spawn(argv, log_file=paths.log_file(name), cwd=REPO_ROOT, env={**os.environ, **env})
    write_pid(paths, name, proc.pid)
    return proc.pid


def stop(paths: StackPaths, name: str, timeout: float = 20.0) -> bool:
    """Stop the stack's process ``name`` and its children (SIGTERM, SIGKILL after ``timeout``);
    False when it was not running."""
    pid = read_pid(paths, name)
    paths.pid_file(name).unlink(missing_ok=True)
    if pid is None:
        return False
    processes.stop(pid, timeout)
    return True


def ephemeral_ports() -> tuple[int, int]:
    """The system's range of local ports for outgoing connections (Linux's default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_server_port(count: int = 1, host: str = "127.0.0.1", lowest: int = 10000) -> int:
    """The first of ``count`` consecutive ports on ``host``, free now and below the ephemeral range
    (picked at random, so that two runs at once seldom try the same). A port the OS picks (bind to
    0) lies inside that range: once its server stops, any outgoing connection may take it as its
    local port, and a server killed and started again (a bench's faults, a test's restart) finds
    it taken."""
    top = ephemeral_ports()[0] - count  # the highest first port: its run ends below the range
    rng = random.SystemRandom()
    for _ in range(500 if top >= lowest else 0):
        first = rng.randint(lowest, top)
        if all(_bindable(host, p) for p in range(first, first + count)):
            return first
    raise OSError(f"no {count} consecutive free port(s) on {host} from {lowest} below {top + count}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def healthy(url: str) -> bool:
    """``url``/health answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False
