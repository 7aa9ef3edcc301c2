"""One real Label Studio server for the whole test session (first start ~35 s on an idle
machine), on a free loopback port with its own data dir; tests share it and keep apart by
using their own annotators (projects are per annotator)."""
from __future__ import annotations

import itertools
import re
import os
import secrets
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pipeline.annotation.client import LabelStudioClient  # noqa: E402
from pipeline.annotation.server import DEFAULT_VENV, LabelStudioServer  # noqa: E402

_counter = itertools.count()


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
    if not (DEFAULT_VENV / "bin" / "label-studio").exists():
        pytest.fail("Label Studio is not installed: run scripts/setup.sh (scripts/setup.d/30-label-studio.sh)")
    server = LabelStudioServer(ls_data_root / "label-studio", port=free_port(), media_root=ls_data_root)
    server.start(timeout=400)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ls_client(ls_server, ls_credentials) -> LabelStudioClient:
    client = LabelStudioClient(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"])
    yield client
    client.close()


@pytest.fixture
def new_annotators(ls_client, request):
    """``make(n)`` -> n fresh annotator e-mails registered in Label Studio (unique per test)."""
    def make(n: int = 2) -> list[str]:
        stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:30].strip("-")
        out = []
        for _ in range(n):
            email = f"{stem}-{next(_counter)}@rescue.test"
            ls_client.create_user(email)
            out.append(email)
        return out
    return make
