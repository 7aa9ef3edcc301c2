"""A local client without the stack's auth string, against the Prefect server of a real stack
(``rescue stack up --no-label-studio``: server, worker, sweeper, the registered pools and
deployments), with the server in one process and with its API in two (``--api-processes 2``). Loopback is no access control on a shared host: a deployment posted by any local
account would run as the operator. Every HTTP request of the API - reads and writes of
deployments, flow runs, flows, blocks, variables, work pools, automations, logs, events, the
server's settings - with no, a wrong or a mangled ``Authorization`` header, on any spelling of
the path, is answered 401; every websocket of the API closes before its first message. The
registered state is unchanged afterwards, and the same requests with the string go through
(the targets are real)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from attack_kit import count, fire

from tests.helpers import free_port

pytestmark = pytest.mark.slow

RESCUE = Path(sys.executable).with_name("rescue")
DEPLOYMENT = "build-release/default"
POOL = "rescue-cpu"


REDIS_DB = 9  # of the machine's Redis, for the server in several processes; only this module uses it


@pytest.fixture(scope="module", params=["one process", "two API processes"])
def stack(request, tmp_path_factory):
    """The stack of a fresh data root, started as the operator starts it (no Prefect variable of
    the caller's): its server in one process, or its API in two (`--api-processes 2`, on a fresh
    PostgreSQL database and Redis: skipped, saying why, without them); its port and auth string;
    stopped at the end."""
    root = tmp_path_factory.mktemp("sec-prefect") / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RESCUE_PREFECT_API"))}
    env.update(RESCUE_PREFECT_PORT=str(free_port()))
    options, cleanup = [], []
    if request.param == "two API processes":
        import redis

        from benchmarks.rehearsal.database import create_database, drop_database

        store = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB, socket_connect_timeout=3)
        try:
            store.flushdb()
        except (redis.RedisError, OSError) as exc:
            pytest.skip(f"the API in two processes needs Redis at 127.0.0.1:6379 ({exc})")
        cleanup.append(store.flushdb)
        url, name, where = create_database()
        if url is None:
            pytest.skip(f"the API in two processes needs PostgreSQL: {where}")
        cleanup.append(lambda: drop_database(name))
        env.update(PREFECT_API_DATABASE_CONNECTION_URL=url,
                   PREFECT_REDIS_MESSAGING_URL=f"redis://127.0.0.1:6379/{REDIS_DB}")
        options = ["--api-processes", "2"]
    cmd = lambda *a: subprocess.run([str(RESCUE), "stack", *a, "--no-label-studio", "--data-root", str(root)],  # noqa: E731
                                    env=env, capture_output=True, text=True, timeout=900)
    try:
        up = cmd("up", *options)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert ("2 API processes" in up.stdout) is bool(options), up.stdout
        secret = (root / "stack" / "prefect-api-auth").read_text().strip()
        yield int(env["RESCUE_PREFECT_PORT"]), secret
    finally:
        down = cmd("down")
        for step in cleanup:
            step()
        assert down.returncode == 0, down.stdout + down.stderr


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def _wrong(secret: str) -> dict[str, list[tuple[str, str]]]:
    """Every way of not quite presenting the auth string (header lists for attack_kit.raw)."""
    return {
        "none": [],
        "wrong string": [("Authorization", _basic("intruder"))],
        "empty string": [("Authorization", _basic(""))],
        "string + 1 char": [("Authorization", _basic(secret + "x"))],
        "string less 1 char": [("Authorization", _basic(secret[:-1]))],
        "string unencoded": [("Authorization", f"Basic {secret}")],
        "bearer": [("Authorization", f"Bearer {secret}")],
        "lowercase scheme": [("Authorization", "basic " + base64.b64encode(secret.encode()).decode())],
        "user:string": [("Authorization", _basic(f"prefect:{secret}"))],
        "x-api-key": [("X-Api-Key", secret)],
        "cookie": [("Cookie", f"prefect-auth={secret}")],
    }


def _json(body) -> tuple[list[tuple[str, str]], str | None]:
    return [("Content-Type", "application/json")], (None if body is None else json.dumps(body))


def _requests(ids: dict) -> list[tuple[str, str, object]]:
    """(method, path under /api, JSON body): reads and writes of every kind of thing."""
    dep, flow, run = ids["deployment"], ids["flow"], str(uuid.uuid4())
    reads = [("POST", f"/{kind}/filter", {}) for kind in (
        "deployments", "flow_runs", "flows", "task_runs", "block_documents", "block_types", "block_schemas",
        "variables", "work_pools", "work_queues", "automations", "logs", "artifacts", "events",
        "concurrency_limits", "v2/concurrency_limits", "saved_searches")]
    reads += [("GET", f"/deployments/{dep}", None), ("GET", f"/deployments/name/{DEPLOYMENT}", None),
              ("GET", f"/flows/{flow}", None), ("GET", f"/flow_runs/{run}", None), ("GET", f"/work_pools/{POOL}", None),
              ("GET", "/variables/name/anything", None), ("GET", "/admin/settings", None), ("GET", "/admin/version", None),
              ("GET", "/version", None), ("GET", "/csrf-token?client=intruder", None),
              ("POST", "/ui/flow_runs/history", {"history_start": "2020-01-01T00:00:00Z",
                                                  "history_end": "2030-01-01T00:00:00Z", "history_interval_seconds": 86400}),
              ("POST", f"/work_pools/{POOL}/get_scheduled_flow_runs", {}), ("GET", "/collections/views/aggregate-worker-metadata", None)]
    writes = [("POST", "/flows/", {"name": "intruder"}),
              ("POST", f"/deployments/{dep}/create_flow_run", {"parameters": {"version": "6.6.6"}}),
              ("POST", "/flow_runs/", {"flow_id": flow, "name": "intruder-run"}),
              ("POST", "/deployments/", {"name": "intruder", "flow_id": flow, "work_pool_name": POOL,
                                         "entrypoint": "intruder.py:flow", "path": "/tmp"}),
              ("PATCH", f"/deployments/{dep}", {"description": "intruder"}),
              ("DELETE", f"/deployments/{dep}", None),
              ("POST", f"/deployments/{dep}/pause_deployment", None),
              ("POST", "/block_documents/", {"name": "intruder", "data": {}, "block_schema_id": str(uuid.uuid4()),
                                             "block_type_id": str(uuid.uuid4())}),
              ("POST", "/variables/", {"name": "intruder", "value": "x"}),
              ("PATCH", "/variables/name/intruder", {"value": "y"}),
              ("POST", "/work_pools/", {"name": "intruder", "type": "process"}),
              ("PATCH", f"/work_pools/{POOL}", {"base_job_template": {"job_configuration": {"command": "id"}}}),
              ("POST", f"/work_pools/{POOL}/workers/heartbeat", {"name": "intruder"}),
              ("POST", "/automations/", {"name": "intruder", "trigger": {"type": "event"}, "actions": []}),
              ("POST", "/logs/", [{"name": "intruder", "level": 20, "message": "x", "timestamp": "2026-01-01T00:00:00Z"}]),
              ("POST", "/events", [])]
    return reads + writes


def _authed(port: int, secret: str, method: str, path: str, body=None):
    headers, data = _json(body)
    (r,) = fire(port, [(method, f"/api{path}", [*headers, ("Authorization", _basic(secret))], data)])
    return r


def _refused(r) -> bool:
    """401 from the API's guard, or no route at all (``//api/...`` is no path of the API: the
    server's own 404, which no route inside the API, being behind the guard, can give)."""
    body = json.loads(r.body or b"null")
    return (r.status, body) in ((401, {"exception_message": "Unauthorized"}), (404, {"detail": "Not Found"}))


def _registered(port: int, secret: str) -> dict:
    """What the stack registered and ran, by name (read with the string)."""
    out = {}
    for kind in ("deployments", "flows", "work_pools", "variables", "block_documents", "automations", "flow_runs"):
        r = _authed(port, secret, "POST", f"/{kind}/filter", {})
        assert r.status == 200, r.describe()
        out[kind] = sorted(x.get("name") or x["id"] for x in json.loads(r.body))
    r = _authed(port, secret, "GET", f"/work_pools/{POOL}")
    out["pool template"] = json.loads(r.body)["base_job_template"]
    return out


def test_every_api_request_without_the_string_is_refused(stack):
    port, secret = stack
    assert _authed(port, secret, "GET", "/health").status == 200
    r = _authed(port, secret, "GET", f"/deployments/name/{DEPLOYMENT}")
    assert r.status == 200, r.describe()
    dep = json.loads(r.body)
    ids = {"deployment": dep["id"], "flow": dep["flow_id"]}
    before = _registered(port, secret)
    assert DEPLOYMENT.split("/")[1] in before["deployments"] and POOL in before["work_pools"], before

    reqs = []
    for method, path, body in _requests(ids):
        headers, data = _json(body)
        for variant in _wrong(secret).values():
            reqs.append((method, f"/api{path}", [*headers, *variant], data))
    # other spellings of one path, without the string
    headers, data = _json({})
    for target in ("//api/flows/filter", "/api//flows/filter", "/api/flows/filter/", "/api/./flows/filter",
                   "/api/%66lows/filter", "/api/health/../flows/filter", "/api/ready/../flows/filter",
                   "/api/flows/filter?health", "/api/variables/name/health"):
        reqs.append(("POST", target, headers, data))
    reqs.append(("POST", "/api/health", headers, data))  # the open probe answers GET only
    answers = fire(port, reqs)
    let_in = [r.describe() for r in answers if not _refused(r)]
    assert not let_in, f"{len(let_in)} of {len(answers)} requests without the string were not refused:\n" + \
        "\n".join(let_in[:20])

    assert _registered(port, secret) == before, "the stack's registered state changed during the attacks"
    # controls: the same reads with the string answer (the targets are real)
    for method, path, body in _requests(ids)[:5]:
        r = _authed(port, secret, method, path, body)
        assert r.status == 200, r.describe()


def _ws_try(port: int, path: str, subprotocol: bool, first: dict | None) -> str:
    """One websocket attempt; what the server did: "closed" before any answer, or its first message."""
    from websockets.exceptions import ConnectionClosed, InvalidHandshake
    from websockets.sync.client import connect

    count(None)
    try:
        with connect(f"ws://127.0.0.1:{port}/api{path}", subprotocols=["prefect"] if subprotocol else None,
                     open_timeout=30, close_timeout=5) as ws:
            if first is not None:
                ws.send(json.dumps(first))
            return ws.recv(timeout=10)
    except (ConnectionClosed, InvalidHandshake, TimeoutError):
        return "closed"


def test_every_websocket_without_the_string_closes(stack):
    port, secret = stack
    paths = ["/events/in", "/events/out", "/logs/out", "/task_runs/subscriptions/scheduled",
             f"/work_pools/{POOL}/workers/connect"]
    firsts = {"no subprotocol": (False, None), "no subprotocol, a filter": (False, {"type": "filter", "filter": {}}),
              "no auth message": (True, {"type": "filter", "filter": {}}),
              "auth, no token": (True, {"type": "auth"}), "auth, empty token": (True, {"type": "auth", "token": ""}),
              "auth, wrong token": (True, {"type": "auth", "token": "intruder"}),
              "auth, token + 1 char": (True, {"type": "auth", "token": secret + "x"})}
    answered = [f"{path} ({how}): {got[:120]}" for path in paths for how, (sub, first) in firsts.items()
                if (got := _ws_try(port, path, sub, first)) != "closed"]
    assert not answered, "\n".join(answered)
    # control: with the string the handshake succeeds on each
    for path in paths:
        got = _ws_try(port, path, True, {"type": "auth", "token": secret})
        assert json.loads(got) == {"type": "auth_success"}, (path, got)
