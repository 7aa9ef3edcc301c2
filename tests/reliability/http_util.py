"""Real sockets for the transient-fault tests: a port on 127.0.0.1 that refuses every connection,
and a tiny HTTP server that answers with the statuses it is given, in order."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port bound on 127.0.0.1 that never listens: a connection to it is refused (held for the
    block, so no other process can take it meanwhile)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@dataclass
class Answering:
    url: str
    statuses: list[int]
    delay_s: float = 0.0
    paths: list[str] = field(default_factory=list)  # every request's method and path, in order


@contextlib.contextmanager
def answering(*statuses: int, then: int = 200, body=None, delay_s: float = 0.0) -> Iterator[Answering]:
    """An HTTP server on 127.0.0.1 whose n-th answer has ``statuses[n]`` (``then`` once they run
    out), with ``body`` as JSON (default ``[]``) after waiting ``delay_s``."""
    state = Answering("", list(statuses), delay_s)
    payload = json.dumps([] if body is None else body).encode()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            state.paths.append(f"{self.command} {self.path}")
            n = len(state.paths) - 1
            status = state.statuses[n] if n < len(state.statuses) else then
            time.sleep(state.delay_s)
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

        def log_message(self, *args) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
