"""Fixtures of the orchestration tests: a REAL local stack (Prefect server + process worker +
Label Studio on 127.0.0.1, free ports) under a temporary data root with its own
PREFECT_HOME and result storage, started once per session through `ops.stack`."""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

from pipeline.config import REPO_ROOT, Settings

# `import flows` must find the repository's package, not this tests/flows folder (which
# pytest's rootdir handling would otherwise offer as a namespace package).
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env

    def prefect(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """The real `prefect` CLI against this stack's server."""
        return subprocess.run([str(Path(sys.executable).with_name("prefect")), *args], cwd=REPO_ROOT,
                              env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout)

    def rescue(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(Path(sys.executable).with_name("rescue")), *args], cwd=REPO_ROOT,
                              env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout)

    @contextmanager
    def prefect_settings(self):
        """This process's Prefect client settings pointed at the stack's server and result storage."""
        from prefect.settings import PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

        with temporary_settings({PREFECT_API_URL: self.env["PREFECT_API_URL"],
                                 PREFECT_RESULTS_LOCAL_STORAGE_PATH: self.env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"]}):
            yield

    def client(self):
        from pipeline.annotation.client import LabelStudioClient
        from pipeline.config import Settings

        with mock.patch.dict(os.environ, self.env):
            return LabelStudioClient.from_settings(Settings.from_env(self.root))


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Stack:
    from ops import stack as st

    root = tmp_path_factory.mktemp("stack-data")
    env = {
        "RESCUE_DATA_ROOT": str(root),
        "RESCUE_PREFECT_PORT": str(free_port()),
        "RESCUE_LABEL_STUDIO_PORT": str(free_port()),
        "LABEL_STUDIO_USERNAME": "admin@example.com",
        "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(16),
        "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20),
    }
    try:
        with mock.patch.dict(os.environ, env):
            env.update(st.up(root, worker_limit=4))
            env.update(st.worker_env(Settings.from_env(root)))
    except BaseException:
        with mock.patch.dict(os.environ, env):
            st.down(root)
        raise
    yield Stack(root, env)
    with mock.patch.dict(os.environ, env):
        st.down(root)
