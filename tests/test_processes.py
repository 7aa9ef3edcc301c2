"""The one way the pipeline starts, records and stops its long-lived processes (desks, fronts,
the stack's server and workers): real processes, real signals."""
from __future__ import annotations

import json
import os
import stat
import sys
import time

from pipeline import processes

# A parent that starts a child in its own process group (so stopping the group must reach it),
# prints the child's pid, and ignores nothing.
PARENT = ("import subprocess, sys, time; "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
          "print(c.pid, flush=True); time.sleep(60)")


def _wait_for_line(path, timeout=20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.strip():
            return text.strip()
        time.sleep(0.05)
    raise AssertionError(f"nothing in {path}")


def test_spawn_record_and_stop_reach_the_whole_group(tmp_path):
    log, pid_file = tmp_path / "p.log", tmp_path / "p.json"
    proc = processes.spawn([sys.executable, "-c", PARENT], log_file=log, cwd=tmp_path)
    processes.record(pid_file, proc.pid, upstream="u")
    child = int(_wait_for_line(log))
    assert os.getsid(proc.pid) == proc.pid  # its own session: `stop` reaches its children too
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(pid_file.stat().st_mode) == 0o600
    rec = processes.recorded(pid_file)
    assert rec["pid"] == proc.pid and rec["upstream"] == "u" and rec["start_time"] == processes.start_time(proc.pid)
    processes.stop(proc.pid, timeout=10)
    assert processes.start_time(proc.pid) is None and processes.recorded(pid_file) is None
    deadline = time.monotonic() + 10
    while processes.start_time(child) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes.start_time(child) is None  # the child went with its group


def test_a_pid_file_whose_process_is_another_is_not_ours(tmp_path):
    """A pid file from before a reboot (same pid, another start time) names a stranger: never ours."""
    proc = processes.spawn([sys.executable, "-c", "import time; time.sleep(60)"], log_file=tmp_path / "l",
                           cwd=tmp_path)
    try:
        pid_file = tmp_path / "p.json"
        processes.record(pid_file, proc.pid)
        assert processes.recorded(pid_file) is not None
        rec = json.loads(pid_file.read_text())
        pid_file.write_text(json.dumps({**rec, "start_time": str(int(rec["start_time"]) - 1)}))
        assert processes.recorded(pid_file) is None
        pid_file.write_text("not json")
        assert processes.recorded(pid_file) is None
        assert processes.recorded(tmp_path / "none.json") is None
    finally:
        processes.kill(proc.pid)
    assert processes.start_time(proc.pid) is None


def test_stop_waits_for_sigterm_then_kills_what_ignores_it(tmp_path):
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                "time.sleep(60)")
    log = tmp_path / "s.log"
    proc = processes.spawn([sys.executable, "-c", stubborn], log_file=log, cwd=tmp_path)
    _wait_for_line(log)
    began = time.monotonic()
    processes.stop(proc.pid, timeout=1.0, kill_after=5.0)
    took = time.monotonic() - began
    assert processes.start_time(proc.pid) is None
    assert took >= 1.0  # it was given its time after SIGTERM before SIGKILL
