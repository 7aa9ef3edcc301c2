"""Project-wide test fixtures. Each area keeps its own fixtures in tests/<area>/conftest.py;
the Label Studio server is here so that every area shares one per session."""
from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO_ROOT.parent / "shared" / "data" / "rescue"
BENCHMARK_HEAD = SHARED_DATA / "benchmark_head.jsonl"


@pytest.fixture(scope="session")
def benchmark_head_path() -> Path:
    """The first three samples of the published release (read from ../shared, never copied)."""
    if not BENCHMARK_HEAD.exists():
        pytest.skip(f"real-data test: {BENCHMARK_HEAD} is not present on this machine "
                    "(the published release's head is only available beside the project checkout)")
    return BENCHMARK_HEAD


# --- one real Label Studio server for the whole session ----------------------------------
# (first start ~15 s from the template database; tests keep apart by their own annotators,
# since projects are per annotator and round)

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ls_credentials():
    creds = {
        "LABEL_STUDIO_USERNAME": "admin@rescue.test",
        "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(16),
        "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20),
    }
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    yield creds
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def ls_data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ls-data")


@pytest.fixture(scope="session")
def ls_server(ls_credentials, ls_data_root):
    from pipeline.annotation.server import DEFAULT_VENV, LabelStudioServer
    if not (DEFAULT_VENV / "bin" / "label-studio").exists():
        pytest.fail("Label Studio is not installed: run scripts/setup.sh (scripts/setup.d/30-label-studio.sh)")
    server = LabelStudioServer(ls_data_root / "label-studio", port=free_port(), media_root=ls_data_root)
    server.start(timeout=400)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ls_client(ls_server, ls_credentials):
    from pipeline.annotation.client import LabelStudioClient
    client = LabelStudioClient(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"])
    yield client
    client.close()
