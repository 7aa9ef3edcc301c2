"""Helpers of the desk-front tests: serve an ASGI app in a thread, the installed Label Studio's
build files."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import pytest


@contextlib.contextmanager
def serve_app(app):
    """Serve an ASGI app on a free 127.0.0.1 port in a thread; yields its base URL."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the fake upstream did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def build_dir() -> Path:
    """The installed Label Studio's react-app build (what it serves at /react-app/)."""
    from pipeline.labelstudio.server import DEFAULT_VENV

    found = next(DEFAULT_VENV.glob("lib/python3*/site-packages/web/dist/apps/labelstudio"), None)
    if found is None:
        pytest.fail("Label Studio's build is not installed: run scripts/setup.sh")
    return found
