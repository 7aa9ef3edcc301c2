"""A's own credentials (token, X-Api-Key, session cookie, duplicate cookies, a JWT, Basic, the
login form) against B's desk and the adjudicator J's desk: every request is turned away (401,
403 or the login page), no answer carries B's or J's data, and both desks are unchanged."""
from __future__ import annotations

import json
import re
from urllib.parse import urlencode

import pytest
from attack_kit import count, fire, fire_at, leaks, refused
from attack_kit import A_EMAIL, B_EMAIL, J_EMAIL

pytestmark = pytest.mark.slow

def requests_for(world, ids: dict[str, list[int]]) -> list[tuple[str, str, object]]:
    """(method, target, json body or None) for every id-taking route, with the victim's ids."""
    one = lambda kind: (ids.get(kind) or world.b_ids.get(kind) or [1])[0]  # noqa: E731
    p, t, a, d = one("project"), one("task"), one("annotation"), one("draft")
    pr, u = one("prediction"), one("user")
    b_wav, shared = world.media[world.b_only["sample_id"]], world.media[world.samples[0]["sample_id"]]
    gets = [
        "/api/projects/", f"/api/projects/{p}/", f"/api/projects/{p}/export?exportType=JSON&download_all_tasks=true",
        f"/api/projects/{p}/exports/", f"/api/tasks/?project={p}", f"/api/tasks/?project={p}&fields=all",
        f"/api/tasks/{t}/", f"/api/tasks/{t}/annotations/", f"/api/tasks/{t}/drafts", f"/api/annotations/{a}/",
        f"/api/drafts/{d}/", f"/api/predictions/?task={t}", f"/api/predictions/{pr}/", "/api/users/",
        f"/api/users/{u}/", "/api/current-user/whoami", "/api/current-user/token", "/api/invite",
        f"/api/storages/localfiles/?project={p}", f"/api/storages/export/localfiles?project={p}",
        "/api/webhooks/", f"/api/dm/views/?project={p}", f"/api/dm/actions/?project={p}",
        f"/data/local-files/?d={b_wav}", f"/data/local-files/?d={shared}", f"/projects/{p}/data",
        f"/projects/{p}/", f"/api/projects/{p}/summary/", f"/api/ml/?project={p}", "/api/organizations/",
        f"/tasks/{t}/resolve/?fileuri=Lw==", "/api/token/",
    ]
    writes = [
        ("PATCH", f"/api/annotations/{a}/", {"result": [], "completed_by": u}),
        ("DELETE", f"/api/annotations/{a}/", None),
        ("POST", f"/api/tasks/{t}/annotations/", {"result": [], "completed_by": u}),
        ("DELETE", f"/api/tasks/{t}/", None),
        ("PATCH", f"/api/tasks/{t}/", {"data": {"sample_id": "pwned"}}),
        ("DELETE", f"/api/drafts/{d}/", None),
        ("PATCH", f"/api/drafts/{d}/", {"result": []}),
        ("DELETE", f"/api/predictions/{pr}/", None),
        ("POST", "/api/predictions/", {"task": t, "result": [], "model_version": "x"}),
        ("POST", f"/api/projects/{p}/import", [{"data": {"sample_id": "pwned"}}]),
        ("PATCH", f"/api/projects/{p}/", {"title": "pwned"}),
        ("DELETE", f"/api/projects/{p}/", None),
        ("POST", "/api/projects/", {"title": "pwned"}),
        ("POST", f"/api/projects/{p}/exports/", {"title": "x"}),
        ("POST", "/api/users/", {"email": "x@rescue.test", "username": "x@rescue.test"}),
        ("PATCH", f"/api/users/{u}/", {"first_name": "pwned"}),
        ("POST", "/api/current-user/reset-token/", None),
        ("POST", "/api/invite/reset-token", None),
        ("POST", "/api/storages/localfiles/", {"project": p, "path": "/", "title": "x"}),
        ("POST", "/api/webhooks/", {"project": p, "url": "http://example.com/"}),
        ("POST", f"/api/dm/actions?id=delete_tasks&project={p}", {"selectedItems": {"all": True, "excluded": []}}),
        ("POST", "/api/token/", None),
    ]
    out = [("GET", g, None) for g in gets] + writes
    # the same writes with the ids in a form body instead of JSON
    out += [(m, path, ("form", body)) for m, path, body in writes if isinstance(body, dict)]
    return out


def _prep(method, target, body, headers):
    hdrs = list(headers)
    data = None
    if isinstance(body, tuple):
        hdrs.append(("Content-Type", "application/x-www-form-urlencoded"))
        data = urlencode({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in body[1].items()})
    elif body is not None:
        hdrs.append(("Content-Type", "application/json"))
        data = json.dumps(body)
    return (method, target, hdrs, data)


# The core routes every credential variant is tried on: one read per kind of thing (list,
# project, tasks, task, annotation, draft, prediction, media, users, token) and the id-taking
# deletes (the full route set, with form bodies, goes with the plain token and the session).
CORE = ("/api/projects/", "/api/tasks/?project=", "/api/annotations/", "/api/tasks/", "/api/drafts/",
        "/api/predictions/?task=", "/data/local-files/", "/api/users/", "/api/current-user/")
CORE_SKIP = re.compile(r"/export|/summary/|/\d+/annotations/|/\d+/drafts|&fields=all")  # same views as a core route


def _core(method, target, body) -> bool:
    if method == "GET":
        return target.startswith(CORE) and not CORE_SKIP.search(target)
    return method in ("PATCH", "DELETE") and body is None


def attack_requests(world, victims, headers, full=True, forms=True) -> list[tuple]:
    """(port, method, target, headers, body): every route (or the core ones) with each victim's
    own ids on the victim's desk."""
    out = []
    for victim in victims:
        ids = world.b_ids if victim == B_EMAIL else world.j_ids
        for m, t, b in requests_for(world, ids):
            if (full and (forms or not isinstance(b, tuple))) or (not full and _core(m, t, b)):
                out.append((world.port(victim), *_prep(m, t, b, headers)))
    return out


def got_through(world, answers) -> list[str]:
    return [f"{r.describe()} leaks={leaks(r.text, world.forbidden())}" for r in answers
            if not refused(r) or leaks(r.text, world.forbidden())]


# every route with the plain token and the session (form bodies with the token); the other
# variants on the core routes
FULL = {"token": True, "session": False}
VARIANTS = ["token", "x-api-key", "session", "dup-cookie-first", "dup-cookie-last", "two-cookie-headers",
            "session+x-api-key", "token-lowercase-scheme", "basic", "bearer-jwt"]


def test_own_credentials_mean_nothing_on_other_desks(world, unchanged):
    """All of A's credential variants at once against B's and J's desks (one burst: the two
    desks answer side by side), each variant checked on A's own desk first (control)."""
    variants = world.variants()
    missing = [v for v in VARIANTS if v not in variants]
    assert missing in ([], ["bearer-jwt"]), missing  # a JWT only where the desk gives one
    own = fire(world.port(A_EMAIL), [("GET", "/api/current-user/whoami", variants[v], None) for v in variants])
    for v, r in zip(variants, own):
        if v not in ("basic", "dup-cookie-first", "two-cookie-headers"):  # Django keeps the last duplicate
            assert r.status == 200 and A_EMAIL in r.text, f"{v}: {r.describe()}"
    reqs = []
    for v, headers in variants.items():
        reqs += attack_requests(world, (B_EMAIL, J_EMAIL), headers, full=v in FULL, forms=FULL.get(v, False))
    bad = got_through(world, fire_at(reqs))
    assert not bad, f"{len(reqs)} requests; these got through:\n" + "\n".join(bad)


def test_login_form_of_other_desks_refuses_a(world, unchanged):
    """A's e-mail and password on B's and J's login forms: no session; nor the victim's e-mail with A's password."""
    import httpx
    from concurrent.futures import ThreadPoolExecutor

    def attempt(victim_email):
        victim, email = victim_email
        url = world.url(victim)
        with httpx.Client(base_url=url, follow_redirects=False, timeout=60) as c:
            c.get("/user/login/")
            csrf = c.cookies.get("csrftoken")
            r = c.post("/user/login/", data={"csrfmiddlewaretoken": csrf, "email": email,
                                             "password": world.a.password})
            assert r.status_code != 302 or "/user/login" in r.headers.get("location", ""), r.text[:200]
            who = c.get("/api/current-user/whoami")
            assert who.status_code in (401, 403) and not leaks(who.text, world.forbidden()), who.text[:200]
    count(None, 4 * 3)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(attempt, [(v, e) for v in (B_EMAIL, J_EMAIL) for e in (A_EMAIL, v)]))


def test_anonymous_baseline_is_refused(world, unchanged):
    """Control for the tests above: the core requests without credentials are refused as well
    (the full route set is refused to A's token above: an anonymous pass would show there too)."""
    reqs = attack_requests(world, (B_EMAIL, J_EMAIL), [], full=False)
    bad = got_through(world, fire_at(reqs))
    assert not bad, "\n".join(bad)
