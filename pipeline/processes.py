"""The long-lived processes the pipeline starts and stops - desks, their fronts, the stack's
Prefect server and workers - started, recorded and stopped one way.

A process is started in its own session (so stopping it stops its children too), with stdin
closed, its output appended to an owner-only log and umask 077 for what it writes. Its pid file
records the pid with the process's start time: a pid is taken as ours only while a process with
that pid AND that start time runs, so a pid file left from before a reboot never stops a
stranger that got the same pid. Stopping sends SIGTERM to the group, waits, then SIGKILL.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot); None when it is gone - or a zombie
    (killed, not yet reaped by the process that started it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]
    except (OSError, IndexError):
        return None


def reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is this process's child, so it leaves no zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def record(pid_file: Path, pid: int, **extra) -> None:
    """Write ``pid_file`` (owner-only, replaced in one step): the pid, its start time, ``extra``."""
    tmp = pid_file.with_name(f".{pid_file.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"pid": pid, "start_time": start_time(pid), **extra}, fh)
    os.replace(tmp, pid_file)


def recorded(pid_file: Path) -> dict | None:
    """``pid_file``'s record while the process it names still runs (same pid, same start time),
    else None (no file, an unreadable one, or the process is gone)."""
    try:
        rec = json.loads(pid_file.read_text())
        pid = int(rec["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    reap(pid)
    return rec if rec.get("start_time") is not None and start_time(pid) == rec["start_time"] else None


def spawn(argv: Sequence[str], *, log_file: Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``argv`` in its own session, output appended to ``log_file`` (0600), umask 077;
    ``env``: its whole environment (None: this one's)."""
    log = open(os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    try:
        return subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, umask=0o077)
    finally:
        log.close()


def stop(pid: int, timeout: float = 20.0, kill_after: float = 5.0) -> None:
    """Stop ``pid``'s process group: SIGTERM, up to ``timeout`` s for all of it to end (a child
    that outlives its leader may still hold the leader's port), then SIGKILL and up to
    ``kill_after`` s more."""
    _signal_and_wait(pid, ((signal.SIGTERM, timeout), (signal.SIGKILL, kill_after)))


def kill(pid: int, wait: float = 5.0) -> None:
    """SIGKILL ``pid``'s process group at once, as a crash would, and wait up to ``wait`` s."""
    _signal_and_wait(pid, ((signal.SIGKILL, wait),))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_and_wait(pid: int, steps) -> None:
    for sig, wait in steps:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            reap(pid)
            if start_time(pid) is None and not _group_alive(pid):
                return
            time.sleep(0.1)
