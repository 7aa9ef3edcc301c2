"""Desk-front fixtures: a tiny fake upstream (a Starlette app served by uvicorn on 127.0.0.1 in a
thread) and the installed Label Studio's build files. The real Label Studio (``ls_server``,
``ls_client``, ``ls_credentials``) is the session-wide one of tests/conftest.py, as is the
browser (the ``chromium`` fixture)."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # front_helpers
from front_helpers import serve_app  # noqa: E402


@pytest.fixture
def fake_upstream():
    """``start(files, release)`` -> the URL of a fake desk answering ``/api/version`` with
    ``release`` and each ``files`` path with its bytes (another build path: 404); every other request is echoed back as
    JSON (method, path, query, headers, body) so that what the front forwarded can be read."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    stack = contextlib.ExitStack()
    seen: list[dict] = []

    def start(files: dict[str, bytes] | None = None, release: str | None = None) -> str:
        from pipeline.labelstudio.server import LS_VERSION

        files = files or {}

        async def answer(request: Request):
            path = request.url.path
            if path == "/api/version":
                return JSONResponse({"release": release or LS_VERSION})
            if path in files:
                return Response(files[path], media_type="application/javascript")
            if path.startswith(("/static/", "/react-app/")):  # no file of its build, as a desk answers
                return Response(b"Not Found", status_code=404, media_type="text/plain")
            echo = {"method": request.method, "path": path, "query": request.url.query,
                    "headers": [[k, v] for k, v in request.headers.items()],
                    "body": (await request.body()).decode("latin-1")}
            seen.append(echo)
            status = int(request.headers.get("x-answer-status", "200"))
            response = JSONResponse(echo, status_code=status)
            response.raw_headers += [(b"set-cookie", b"a=1; Path=/"), (b"set-cookie", b"b=2; Path=/")]
            return response

        app = Starlette(routes=[Route("/{path:path}", answer,
                                      methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])])
        return stack.enter_context(serve_app(app))

    start.seen = seen
    with stack:
        yield start
