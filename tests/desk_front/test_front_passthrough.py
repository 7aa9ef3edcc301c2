"""The front knows no users: whatever a request carries (cookies, a token in Authorization or
X-Api-Key, a path the old gate refused) goes to its one desk unchanged, the desk's answer comes
back as it gave it (its status, every Set-Cookie line), and nothing in the front answers 403 by
itself or asks who is calling. Against a fake desk that echoes what it got, and the real one."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import httpx

import pipeline.labelstudio.front
from pipeline.labelstudio.front import FrontServer, make_app
from pipeline.labelstudio.front.comfort import KEYS_FILES, KEYS_PATH, KEYS_PATHS, slim_columns

FRONT_SOURCES = sorted(p for p in Path(pipeline.labelstudio.front.__file__).parent.rglob("*") if p.suffix in (".py", ".js"))


def test_requests_reach_the_one_desk_unchanged(fake_upstream):
    front = FrontServer(fake_upstream()).start()
    seen = fake_upstream.seen
    try:
        cookie = "sessionid=someone-elses:1:sig; csrftoken=abc"
        cases = [
            ("GET", "/api/projects/7/export?exportType=JSON", {"x-api-key": "0" * 40}, b""),
            ("POST", "/api/projects", {"authorization": "Token " + "1" * 40, "cookie": cookie},
             json.dumps({"title": "anything"}).encode()),
            ("DELETE", "/api/projects/3/", {"cookie": cookie}, b""),
            ("PATCH", "/api/annotations/99/", {"x-api-key": "key", "cookie": cookie}, b'{"result": []}'),
            ("GET", "/api/current-user/whoami", {}, b""),
            ("GET", "/../etc/passwd", {"x-api-key": "k"}, b""),
        ]
        with httpx.Client(base_url=front.url, timeout=30) as client:
            for method, path, headers, body in cases:
                seen.clear()
                r = client.request(method, path, headers={**headers, "x-answer-status": "418"}, content=body)
                assert r.status_code == 418, (method, path, r.status_code, r.text)  # the desk's status, as it came
                assert r.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
                [got] = seen
                sent = dict(got["headers"])
                assert got["method"] == method and got["body"] == body.decode()
                # the path and query as the client sent them
                assert (got["path"] + (f"?{got['query']}" if got["query"] else "")).encode() == r.request.url.raw_path
                for k, v in headers.items():
                    assert sent[k] == v, (k, sent)  # cookies and tokens forwarded as they came
                assert sent["host"] == httpx.URL(front.url).netloc.decode()  # the caller's Host (CSRF)
            # what the old gate rewrote per user is passed as it is (the project list)
            seen.clear()
            assert client.get("/api/projects/", headers={"cookie": cookie}).json()["path"] == "/api/projects/"
            # nobody's request reaches the desk with another's cookie: the front keeps none
            client.get("/api/projects/", headers={"cookie": "sessionid=first"})
            httpx.get(f"{front.url}/api/projects/", timeout=30)  # a new client: no cookie of its own
            assert "cookie" not in dict(seen[-1]["headers"])
    finally:
        front.stop()


def test_the_front_has_no_notion_of_users():
    cache = ["cache_entries", "cache_bytes"]  # the asset cache's bounds
    assert list(inspect.signature(make_app).parameters) == ["upstream", "patches", *cache]  # no token, no people
    assert list(inspect.signature(FrontServer).parameters) == ["upstream", "host", "port", "patches", *cache]
    for path in FRONT_SOURCES:
        code = path.read_text().lower()
        for word in ("403", "whoami", "denied", "adjudicat", "owner", "admin_token", "prefetch", "role("):
            assert word not in code, f"{path.name} mentions {word!r}"


def test_the_front_passes_the_real_desk_through(ls_server, ls_credentials):
    """Label Studio itself answers: a token works through the front as it does directly, a
    wrong one is refused by Label Studio (401), and a page comes with the keys script."""
    token = ls_credentials["LABEL_STUDIO_USER_TOKEN"]
    front = FrontServer(ls_server.url).start()
    try:
        direct = httpx.get(f"{ls_server.url}/api/projects/", headers={"X-Api-Key": token}, timeout=60)
        through = httpx.get(f"{front.url}/api/projects/", headers={"X-Api-Key": token}, timeout=60)
        assert direct.status_code == through.status_code == 200
        # the same answer; a page link (once the shared server holds more than a page of
        # projects) names the address the caller used, so it is followed through the front too
        got, want = through.json(), direct.json()
        for link in ("next", "previous"):
            if isinstance(got, dict) and got.get(link):
                assert got[link].startswith(front.url) and want[link].startswith(ls_server.url)
                got[link], want[link] = got[link].removeprefix(front.url), want[link].removeprefix(ls_server.url)
        assert got == want
        wrong = httpx.get(f"{front.url}/api/projects/", headers={"Authorization": "Token " + "f" * 40}, timeout=60)
        assert wrong.status_code == httpx.get(f"{ls_server.url}/api/projects/",
                                              headers={"Authorization": "Token " + "f" * 40}).status_code == 401
        login = httpx.get(f"{front.url}/user/login/", timeout=60)
        # every keys script, in the order they depend on each other, each served as it is in the package
        tags = "".join(f'<script src="{path}"></script>' for path in KEYS_PATHS).encode()
        assert login.status_code == 200 and tags in login.content and KEYS_PATHS[0] == KEYS_PATH
        for path, file in zip(KEYS_PATHS, KEYS_FILES):
            served = httpx.get(f"{front.url}{path}")
            assert served.status_code == 200 and served.content == file.read_bytes(), path
            assert served.text.startswith("// RESCUE annotators' keys"), path
    finally:
        front.stop()


def test_columns_are_slimmed_for_everyone():
    payload = json.dumps({"columns": [{"id": "heading", "parent": "data"}, {"id": "turns", "parent": "data"},
                                      {"id": "id", "target": "tasks"}]}).encode()
    columns = {c["id"]: c for c in json.loads(slim_columns(payload))["columns"]}
    assert "visibility_defaults" not in columns["heading"] and "visibility_defaults" not in columns["id"]
    assert columns["turns"]["visibility_defaults"] == {"explore": False, "labeling": False}
