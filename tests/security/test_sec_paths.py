"""Dot-segments, encodings and integer spellings, from A's own token, on A's desk and on B's:
A's desk answers only with A's own things (B's are not there to find) and never with a file
outside A's file root; B's desk turns everything away (401/403/its login page, or a 400/404
where no route matched, carrying nothing of B's)."""
from __future__ import annotations

import pytest
from attack_kit import fire, fire_at, leaks, refused
from attack_kit import A_EMAIL, B_EMAIL

pytestmark = pytest.mark.slow

FILE_SIGNS = {"sqlite database": "SQLite format 3", "a .env": "SECRET_KEY", "service account": "LABEL_STUDIO_USER_TOKEN",
              "desk registry": '"desks"', "/etc/passwd": "root:x:0:0", "environ": "LABEL_STUDIO_BASE_DATA_DIR"}


def path_targets(world) -> list[str]:
    a = world.b_ids["annotation"][0]
    b_port = world.port(B_EMAIL)
    b_slug = world.desks.get(B_EMAIL).slug
    a_slug = world.desks.get(A_EMAIL).slug
    api = [
        f"/api/projects/%2E%2E/annotations/{a}/", f"/api/x/%2e%2e/annotations/{a}/", f"/api/tasks/../annotations/{a}/",
        f"/api/tasks/1/../../annotations/{a}/", f"/api/x/%2e%2e%2fannotations/{a}/", f"/api/annotations/{a}/%2e%2e/",
        f"/api/annotations/%2F{a}/", f"/api/annotations//{a}/", f"/api/./annotations/{a}/", f"/api/annotations/{a}/.",
        f"//127.0.0.1:{b_port}/api/annotations/{a}/", f"//127.0.0.1:{b_port}/api/projects/",
        f"http://127.0.0.1:{b_port}/api/annotations/{a}/", f"http://127.0.0.1:{b_port}/api/projects/",
        f"/api/annotations/{a}/;/", f"/api/annotations/{a}%3F/", f"/api%2Fannotations%2F{a}%2F",
        "/static/../../.env", "/static/%2e%2e/%2e%2e/.env", "/static/..%2f..%2f.env", "/dm/../../label_studio.sqlite3",
        "/react-app/%2e%2e/%2e%2e/%2e%2e/", "/label-studio-frontend/..%2f..%2f..%2f", "/static/%2e%2e%2f%2e%2e%2fservice.json",
    ]
    files = [
        "../service.json", "../../desks.json", "../label-studio/label_studio.sqlite3", "../label-studio/.env",
        "%2e%2e/service.json", "%2e%2e%2f%2e%2e%2fdesks.json", "..%2f..%2fdesks.json", "....//....//desks.json",
        "media/../../service.json", "media/%2e%2e/%2e%2e/service.json", "media/..%2f..%2fservice.json",
        "..%5c..%5cservice.json", "/etc/passwd", "//etc/passwd", "%2Fetc%2Fpasswd", "/proc/self/environ",
        f"../../{b_slug}/files/media/sec-b-only.wav", f"../../{b_slug}/service.json", "../../../media/sec-b-only.wav",
        f"../../{b_slug}/label-studio/label_studio.sqlite3", f"../../{a_slug}/label-studio/.env",
        "media/sec-b-only.wav", "../../../desks/desks.json", "file:///etc/passwd", "media/sec-shared-1.wav%00.txt",
        f"{world.root}/desks/desks.json", f"{world.root}/media/sec-b-only.wav", "media/../../../../../../etc/passwd",
    ]
    return api + [f"/data/local-files/?d={f}" for f in files]


SPELLINGS = ("+{p}", "%2B{p}", "%20{p}", "0{p}", "0_{p}", "{p}.0", "{p}%00", "{p}%0A", "-0{p}", "0x{p}", "{p}e0",
             "%D9%A2", "{p},{q}", "{p}&project={q}")  # sign, space, zeros, _, float, NUL, LF, hex, exponent,
#                                                      an Arabic-Indic digit, a list, a repeated parameter
INT_ROUTES = ("/api/tasks/?project={s}", "/api/tasks/?project={s}&fields=all", "/api/storages/localfiles/?project={s}",
              "/api/dm/views/?project={s}", "/api/predictions/?project={s}", "/api/predictions/?task={s}",
              "/api/webhooks/?project={s}", "/api/projects/?ids={s}")


def integer_targets(world) -> list[str]:
    """Every spelling of every project id on two routes each, rotating, so that every route gets
    several spellings (and every spelling two routes) per id: 28 a project id, not 8 x 14."""
    out = []
    for pid in sorted({*world.b_ids["project"], *world.j_ids["project"], *world.a_ids["project"], 2}):
        for n, spelling in enumerate(SPELLINGS):
            s = spelling.format(p=pid, q=pid + 1)
            out += [INT_ROUTES[n % len(INT_ROUTES)].format(s=s), INT_ROUTES[(n + 3) % len(INT_ROUTES)].format(s=s)]
    return out


def _check(world, port, targets, headers, must_refuse) -> tuple[list[str], int]:
    return _judge(world, fire(port, [("GET", t, headers, None) for t in targets]), must_refuse), len(targets)


def _judge(world, answers, must_refuse) -> list[str]:
    """What got through: B's or J's data or a file's contents in an answer (a forbidden string
    counts only where the request did not name it itself: Django's "The joined path (...) is
    located outside of the base path" error echoes the path asked for), or, on a desk that must
    refuse, an answer that is not a refusal and not an empty-handed 400/404 (no route matched)."""
    bad = []
    b_wav = (world.root / world.media[world.b_only["sample_id"]]).read_bytes()
    forbidden = world.forbidden()
    for r in answers:
        found = leaks(r.text, forbidden, asked=r.request)
        found += [n for n, sign in FILE_SIGNS.items() if sign in r.text]
        if r.body and r.body == b_wav:
            found.append("B-only WAV")
        if found or (must_refuse and not (refused(r) or r.status in (400, 404))):
            bad.append(f"{r.describe()} found={found}")
    return bad


def test_paths_and_integer_spellings(world, unchanged):
    """One burst to both desks: on A's desk, every path and integer spelling with A's token (the
    file targets with A's session too) finds nothing of B's and no file outside A's file root; on
    B's desk the same targets with A's token are all turned away (see :func:`_judge`)."""
    a_port, b_port = world.port(A_EMAIL), world.port(B_EMAIL)
    token, session = world.variants()["token"], world.variants()["session"]
    targets = path_targets(world) + integer_targets(world)
    on_a = [(a_port, "GET", t, token, None) for t in targets]
    on_a += [(a_port, "GET", t, session, None) for t in targets if t.startswith("/data/")]
    on_b = [(b_port, "GET", t, token, None) for t in targets]
    answers = fire_at(on_a + on_b)
    bad = _judge(world, answers[:len(on_a)], False) + _judge(world, answers[len(on_a):], True)
    assert not bad, f"{len(answers)} requests, these got through:\n" + "\n".join(bad)


def test_own_media_is_served_as_control(world):
    """The route the traversal attacks aim at works for A's own media (so their refusal means something)."""
    rel = world.media[world.samples[0]["sample_id"]]
    [r] = fire(world.port(A_EMAIL), [("GET", f"/data/local-files/?d={rel}", world.variants()["token"], None)])
    assert r.status == 200 and r.body == (world.root / rel).read_bytes()
