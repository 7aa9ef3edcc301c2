"""The attacker's tools for tests/security: raw HTTP requests (the request target goes out byte
for byte: no client normalises dot-segments or encodings), logins through the real form, the
credential variants an annotator holds, and the read-only fingerprint of a desk's state."""
from __future__ import annotations

import base64
import http.client
import json
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, field

import httpx
from urllib.parse import unquote

# The attacker's world (tests/security/conftest.py): imported from here, never from "conftest"
# (another test folder's conftest.py may hold that module name in a whole-suite run).
ROUND = "emotion"
A_EMAIL = "alice.attacker@rescue.test"
B_EMAIL = "bob.victim@rescue.test"
J_EMAIL = "judy.judge@rescue.test"


def answer_values(rnd, sample, utterance: str, tone: str) -> dict:
    """A round's answers for ``sample`` with a marker in the free text (``tone``: whose marker)."""
    from pipeline.annotation import push
    values = push.input_values(rnd, sample)
    for ri, v in values.items():
        if "utterance_type" in v or v.get("tone_of_voice") is not None:
            v["utterance_type"] = utterance
            v["tone_of_voice"] = f"{tone} {sample['sample_id']} row {ri}"
    return values

# The pair of desks of tests/security/conftest.py (desk_pair): one annotator on each
OURS = "olga.ours@rescue.test"    # on a desk with the desk settings
STOCK = "sam.stock@rescue.test"   # on a desk with Label Studio's own (RESCUE_LS_STOCK_SETTINGS=1)


@dataclass
class DeskPair:
    desks: object
    passwords: dict[str, str]  # the current password of each (a test that changes one says so here)

    def port(self, email: str) -> int:
        return self.desks.get(email).port

    def url(self, email: str) -> str:
        return self.desks.url(email)


def login_attempt(port: int, email: str, password: str, source: str = "127.0.0.1",
                  target: str = "/user/login/") -> Resp:
    """One POST of the real login form (its CSRF cookie and token first) from the client address
    ``source`` (any of 127.0.0.0/8: a desk sees it as REMOTE_ADDR). Counted as one request."""
    count(None)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, follow_redirects=False,
                      transport=httpx.HTTPTransport(local_address=source)) as c:
        c.get("/user/login/")
        r = c.post(target, data={"csrfmiddlewaretoken": c.cookies.get("csrftoken", ""), "email": email,
                                 "password": password}, headers={"Referer": f"http://127.0.0.1:{port}/user/login/"})
        return Resp(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content,
                    f"POST :{port}{target} as {email} from {source}")


def logged_in(r: Resp) -> bool:
    """The login form let the person in (a redirect away from the login page)."""
    return r.status == 302 and "/user/login" not in r.location()


# Keys whose values change with reads (not with writes): left out of a desk's fingerprint.
VOLATILE = {"last_activity", "last_login", "date_joined", "active_organization_meta", "created_ago"}


@dataclass
class Resp:
    status: int
    headers: dict[str, str]
    body: bytes
    request: str = ""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def location(self) -> str:
        return self.headers.get("location", "")

    def describe(self) -> str:
        return f"{self.request} -> HTTP {self.status} ({len(self.body)} bytes) {self.text[:160]!r}"


def raw(port: int, method: str, target: str, headers: list[tuple[str, str]] = (), body: bytes | str | None = None,
        timeout: float = 30.0) -> Resp:
    """One request to 127.0.0.1:``port`` with ``target`` sent exactly as given (counted in
    :data:`COUNTS` under the calling test's module)."""
    count(None)
    if isinstance(body, str):
        body = body.encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        for k, v in headers:
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        return Resp(r.status, hdrs, data, f"{method} :{port}{target} {[k for k, _ in headers]}")
    finally:
        conn.close()


# Requests sent, by attack class (the module, or the label a test gives): printed at the end.
COUNTS: Counter = Counter()
WORKERS = 8  # side by side per burst: runserver serves each request in a thread (measured: 1 -> 8 workers
#             on one desk 6.6 -> 19 requests/s, two desks with 4 workers 41/s, at load ~3)


def fire(port: int, requests: list[tuple], workers: int = WORKERS) -> list[Resp]:
    """Many :func:`raw` requests (method, target, headers, body) side by side, answers in order."""
    return fire_at([(port, *r) for r in requests], workers=workers)


def fire_at(requests: list[tuple], workers: int = WORKERS) -> list[Resp]:
    """Requests (port, method, target, headers, body) to several desks in one burst (each desk is
    its own process: two desks answer side by side), answers in order."""
    from concurrent.futures import ThreadPoolExecutor
    if len(requests) <= 1:
        return [raw(*r) for r in requests]
    with ThreadPoolExecutor(min(workers, len(requests))) as pool:
        return list(pool.map(lambda r: raw(*r), requests))


_COUNT_LOCK = threading.Lock()


def count(label: str | None, n: int = 1) -> None:
    if label is None:  # the calling test's module: tests/security/test_sec_paths.py -> "paths"
        test = os.environ.get("PYTEST_CURRENT_TEST", "other::")
        label = test.split("::")[0].rsplit("/", 1)[-1].removeprefix("test_sec_").removesuffix(".py")
    with _COUNT_LOCK:
        COUNTS[label] += n


@dataclass
class Login:
    """A person's login on one desk, made through the desk's real login form."""

    url: str
    email: str
    password: str
    session: str = ""
    csrf: str = ""
    token: str = ""
    access: str = ""  # a JWT access token from a personal access token, when the desk gives one
    http: httpx.Client | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def form_login(url: str, email: str, password: str) -> Login:
    c = httpx.Client(base_url=url, follow_redirects=False, timeout=60)
    r = c.get("/user/login/")
    assert r.status_code == 200, f"login page of {url}: HTTP {r.status_code}"
    csrf = c.cookies.get("csrftoken")
    assert csrf, "the login page set no csrftoken cookie"
    r = c.post("/user/login/", data={"csrfmiddlewaretoken": csrf, "email": email, "password": password},
               headers={"Referer": f"{url}/user/login/"})
    assert r.status_code == 302 and "/user/login" not in r.headers.get("location", ""), \
        f"login of {email} at {url} failed: HTTP {r.status_code} {r.text[:200]!r}"
    session = c.cookies.get("sessionid")
    assert session, "no session cookie after login"
    login = Login(url, email, password, session, c.cookies.get("csrftoken") or csrf, http=c)
    r = c.get("/api/current-user/token")
    if r.status_code == 200 and r.json().get("token"):
        login.token = r.json()["token"]
    else:  # other versions: the reset route gives one
        r = c.post("/api/current-user/reset-token/", headers={"X-CSRFToken": login.csrf, "Referer": url})
        assert r.status_code in (200, 201), f"no API token for {email}: HTTP {r.status_code} {r.text[:200]}"
        login.token = r.json()["token"]
    # a personal access token (JWT, refreshed to a 5-minute access token), when the desk allows it
    r = c.post("/api/token/", headers={"X-CSRFToken": login.csrf, "Referer": url})
    if r.status_code in (200, 201) and r.json().get("token"):
        rr = httpx.post(f"{url}/api/token/refresh/", json={"refresh": r.json()["token"]}, timeout=30)
        if rr.status_code == 200:
            login.access = rr.json().get("access", "")
    return login


def credential_variants(login: Login) -> dict[str, list[tuple[str, str]]]:
    """Every way of presenting ``login``'s own credentials (header lists for :func:`raw`)."""
    s, c, t = login.session, login.csrf, login.token
    basic = base64.b64encode(f"{login.email}:{login.password}".encode()).decode()
    out = {
        "token": [("Authorization", f"Token {t}")],
        "x-api-key": [("X-Api-Key", t)],
        "session": [("Cookie", f"sessionid={s}; csrftoken={c}"), ("X-CSRFToken", c)],
        "dup-cookie-first": [("Cookie", f"sessionid={s}; sessionid=x{s[1:]}; csrftoken={c}"), ("X-CSRFToken", c)],
        "dup-cookie-last": [("Cookie", f"sessionid=x{s[1:]}; sessionid={s}; csrftoken={c}"), ("X-CSRFToken", c)],
        "two-cookie-headers": [("Cookie", f"sessionid={s}"), ("Cookie", f"sessionid=x{s[1:]}; csrftoken={c}"),
                               ("X-CSRFToken", c)],
        "session+x-api-key": [("Cookie", f"sessionid={s}; csrftoken={c}"), ("X-CSRFToken", c), ("X-Api-Key", t)],
        "token-lowercase-scheme": [("Authorization", f"token {t}")],
        "basic": [("Authorization", f"Basic {basic}")],
    }
    if login.access:
        out["bearer-jwt"] = [("Authorization", f"Bearer {login.access}")]
    return out


def refused(r: Resp) -> bool:
    """The desk turned the request away: 401/403, or a redirect to its login page."""
    if r.status in (401, 403):
        return True
    return r.status in (301, 302, 303, 307, 308) and "/user/login" in r.location()


# --- a desk's state, read through its service account ---------------------------------------

def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def desk_state(client) -> dict:
    """Everything of a desk a person could want of another's, read by its service account:
    projects, tasks with annotations (the project export), drafts, predictions, storages,
    webhooks, users. A few requests per project (the servers are slow on a busy machine)."""
    get = lambda path, **params: client._json("GET", path, f"read {path}", params=params or None)  # noqa: E731
    body = get("/api/projects/", page_size=1000, include="id,title,description,label_config")
    projects = body["results"] if isinstance(body, dict) else body
    state: dict = {"projects": {}, "users": get("/api/users/"), "webhooks": get("/api/webhooks/")}
    count("state reads (B, J)", 3 + 4 * len(projects))
    for p in sorted(projects, key=lambda p: p["id"]):
        pid = p["id"]
        tasks = json.loads(client.export_tasks(pid))
        state["projects"][pid] = {
            "title": p.get("title"), "description": p.get("description"), "label_config": p.get("label_config"),
            "tasks": sorted(tasks, key=lambda t: t["id"]),  # annotations and drafts in full
            "predictions": get("/api/predictions/", project=pid),
            "storages": get("/api/storages/localfiles/", project=pid),
            "export_storages": get("/api/storages/export/localfiles", project=pid),
        }
    return json.loads(json.dumps(_strip(state), sort_keys=True, default=str))


def diff(a, b, path="") -> list[str]:
    """Where two fingerprints differ (paths and values, first few)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:200]} -> {str(b)[:200]}"]


def leaks(text: str, secrets: dict[str, str], asked: str = "") -> list[str]:
    """The names of ``secrets`` (name -> string) found in ``text`` (case-insensitive), leaving
    out those the request itself named (``asked``: its target and body, percent-decoded): error
    messages echo the path or URL given, which tells the attacker nothing they did not send."""
    low = text.lower()
    asked = unquote(unquote(asked)).lower()
    return sorted(name for name, value in secrets.items()
                  if value and value.lower() in low and value.lower() not in asked)


def ids_in(text: str) -> set[int]:
    return {int(m) for m in re.findall(r'"id":\s*(\d+)', text)}
