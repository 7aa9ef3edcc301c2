"""The desks' fronts as processes: one ``python -m pipeline.labelstudio.front`` per desk, on its own port.

A front is the comfort layer in front of one person's desk (``pipeline/labelstudio/front/``: cached build,
keys, slim page). It holds no security role: it knows no user and no token, and every request
reaches the desk as it came, so the desk alone authenticates. ``rescue stack up`` and ``rescue
label-studio up`` start a front per desk (:meth:`pipeline.labelstudio.desks.Desks.fronts_up`) so
that the address a person is given is the front's; a front that cannot start is said in one
line and that person's address falls back to the desk.

The library never imports ``pipeline.labelstudio.front`` (the layers in pyproject.toml): it starts it as a
process by module name, in its own session, with its pid file (pid and start time, so that a
pid the system reused is never signalled) and an owner-only log in ``run_dir``.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx

from pipeline import processes
from pipeline.config import REPO_ROOT
from pipeline.store import make_private_dir

START_TIMEOUT_S = float(os.environ.get("RESCUE_FRONT_START_TIMEOUT_S", "90"))  # imports on a busy 2-core host


class FrontError(RuntimeError):
    """A front did not start; the message says why in one line."""


class FrontProcess:
    """The front of one desk: ``upstream`` (the desk's address) served on ``host:port``."""

    def __init__(self, run_dir: Path, upstream: str, port: int, host: str = "127.0.0.1"):
        self.run_dir = Path(run_dir)
        self.upstream, self.port, self.host = upstream.rstrip("/"), port, host
        self.pid_file = self.run_dir / "front.json"
        self.log_file = self.run_dir / "front.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def pid(self) -> int | None:
        """The front's pid while the process it recorded still runs, else None."""
        rec = processes.recorded(self.pid_file)
        return None if rec is None else int(rec["pid"])

    def recorded_upstream(self) -> str | None:
        try:
            return json.loads(self.pid_file.read_text()).get("upstream")
        except (OSError, ValueError, AttributeError):
            return None

    def healthy(self, timeout: float = 2.0) -> bool:
        """The front answers, and through it the desk's ``/health`` (a probe: never raises)."""
        try:
            return httpx.get(f"{self.url}/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start the front unless it runs (for this upstream); its address once it answers.
        :class:`FrontError` with the reason in one line otherwise (the process is stopped)."""
        if self.pid() is not None:
            if self.recorded_upstream() == self.upstream:
                return self.url
            self.stop()  # the desk moved (another RESCUE_DESK_URL): serve the new one
        make_private_dir(self.run_dir)
        proc = processes.spawn([sys.executable, "-m", "pipeline.labelstudio.front", self.upstream, "--host", self.host,
                                "--port", str(self.port)], log_file=self.log_file, cwd=REPO_ROOT, env=None)
        processes.record(self.pid_file, proc.pid, upstream=self.upstream)
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise FrontError(f"it exited at start ({self._last_line() or 'no output'}); see {self.log_file}")
            if time.monotonic() > deadline:
                self.stop()
                raise FrontError(f"it did not answer on {self.url} within {timeout:.0f} s; see {self.log_file}")
            time.sleep(0.3)
        return self.url

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the front (SIGTERM, then SIGKILL); False when it was not running."""
        pid = self.pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return False
        processes.stop(pid, timeout)
        return True

    def _last_line(self) -> str:
        try:
            lines = [ln for ln in self.log_file.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1].strip()[:200] if lines else ""
