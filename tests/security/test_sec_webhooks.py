"""Server-side requests A can make A's desk send: webhooks, ML backends and imports from a URL,
aimed at B's desk, J's desk, loopback in many spellings and the Prefect port. Refused (or, if a
desk accepted one, harmless: nothing reaches the canary, B's desk is unchanged)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from attack_kit import fire, raw
from attack_kit import A_EMAIL, B_EMAIL, J_EMAIL

pytestmark = pytest.mark.slow


@pytest.fixture
def canary():
    hits = []

    class H(BaseHTTPRequestHandler):
        def _any(self):
            hits.append((self.command, self.path))
            self.send_response(200)
            self.end_headers()
        do_GET = do_POST = do_PUT = _any

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], hits
    srv.shutdown()


LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "0.0.0.0", "127.1", "2130706433", "0x7f000001", "0177.0.0.1",
            "[::ffff:127.0.0.1]", "localhost.")


def _urls(world, canary_port) -> list[str]:
    """Every spelling of loopback at the canary (the desks judge a host, whatever its port); B's
    desk, J's desk and Prefect (4200) each in two spellings."""
    out = [f"http://{host}:{canary_port}/api/projects/" for host in LOOPBACK]
    for port in (world.port(B_EMAIL), world.port(J_EMAIL), 4200):
        out += [f"http://127.0.0.1:{port}/api/projects/", f"http://[::ffff:127.0.0.1]:{port}/"]
    return out


def test_server_side_requests_are_refused_or_harmless(world, unchanged, canary):
    canary_port, hits = canary
    port = world.port(A_EMAIL)
    token = world.variants()["token"]
    headers = [*token, ("Content-Type", "application/json")]
    r = raw(port, "POST", "/api/projects/", headers, json.dumps({"title": "A's webhook scratch"}))
    scratch = json.loads(r.body)["id"]
    urls = _urls(world, canary_port)
    reqs = []
    for n, url in enumerate(urls):
        reqs.append(("POST", "/api/webhooks/", headers, json.dumps(
            {"project": (scratch, world.a_project)[n % 2], "url": url, "send_payload": True,
             "send_for_all_actions": True, "is_active": True, "headers": {"Authorization": f"Token {world.a.token}"}})))
        reqs.append(("POST", "/api/ml/", headers, json.dumps({"project": scratch, "url": url, "title": "m"})))
        # an import from a URL is a form field: the desk would fetch it
        reqs.append(("POST", f"/api/projects/{scratch}/import", [*token, ("Content-Type", "application/x-www-form-urlencoded")],
                     f"url={url}"))
    answers = fire(port, reqs)
    accepted = [a.describe() for a in answers if a.status < 400]

    # control: {"url": ...} as a JSON body is no import from a URL but one task holding that
    # string (Label Studio takes a JSON body as the tasks themselves): it is stored, never fetched
    inert = [f"http://127.0.0.1:{canary_port}/inert", f"http://127.0.0.1:{world.port(B_EMAIL)}/api/projects/"]
    for url in inert:
        r = raw(port, "POST", f"/api/projects/{scratch}/import", headers, json.dumps({"url": url}))
        assert r.status == 201 and json.loads(r.body)["file_upload_ids"] == [], r.describe()

    # events that would fire any accepted webhook: a task and an annotation
    raw(port, "POST", f"/api/projects/{scratch}/import", headers, json.dumps([{"data": {"text": "x"}}]))
    tasks = json.loads(raw(port, "GET", f"/api/tasks/?project={scratch}&fields=all", headers).body)["tasks"]
    raw(port, "POST", f"/api/tasks/{tasks[0]['id']}/annotations/", headers, json.dumps({"result": []}))
    assert sorted(t["data"].get("url", "") for t in tasks if "url" in t["data"]) == sorted(inert)
    time.sleep(2.0)
    assert not hits, f"A's desk reached the canary: {hits}; accepted: {accepted}"
    assert not accepted, f"{len(reqs)} requests; accepted:\n" + "\n".join(accepted)
