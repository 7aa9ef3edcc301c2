"""Cross-site writes with a person's session cookie: a page of another site (or of the same site:
another desk's port, another desk's host name of the TLS recipe) makes the person's browser
post to their desk with their cookie and no CSRF token. The desk settings refuse every such
write (HTTP 403) and the desk is unchanged; its own pages, and the pipeline's token, still write.
Label Studio's stock settings take them (its API runs without Django's CSRF check): shown on a
stock desk beside ours."""
from __future__ import annotations

import json
import subprocess
from urllib.parse import urlencode

import pytest
from attack_kit import OURS, STOCK, fire, form_login, raw

pytestmark = pytest.mark.slow


def _writes(pid: int, tag: str) -> list[tuple[str, str, str, str]]:
    """(method, target, content type, body): the writes a cross-site page can make without a
    preflight (form encodings) and those a page can try with fetch (JSON)."""
    form = "application/x-www-form-urlencoded"
    return [
        ("POST", "/api/projects/", form, urlencode({"title": f"pwned-form-{tag}"})),
        ("POST", "/api/projects/", "text/plain", json.dumps({"title": f"pwned-plain-{tag}"})),
        ("POST", "/api/projects/", "application/json", json.dumps({"title": f"pwned-json-{tag}"})),
        ("PATCH", f"/api/projects/{pid}/", form, urlencode({"title": f"pwned-patch-{tag}"})),
        ("POST", f"/api/projects/{pid}/import", "application/json", json.dumps([{"text": f"pwned-{tag}"}])),
        ("POST", "/api/current-user/reset-token/", form, ""),
        ("DELETE", f"/api/projects/{pid}/", form, ""),
    ]


def _state(desks, email) -> list[tuple]:
    client = desks.client(email)
    return sorted((p.id, p.title, len(client.tasks(p.id))) for p in client.projects())


def test_cross_site_writes_with_the_session_cookie_are_refused(desk_pair):
    desks = desk_pair.desks
    other_desk = f"http://127.0.0.1:{desk_pair.port(STOCK)}"  # same site: another port of 127.0.0.1
    origins = [("Origin", "https://evil.example"), ("Origin", other_desk), ("Origin", "null"),
               ("Referer", "https://evil.example/page.html")]  # no Origin: the Referer says where from
    answers, logins = {}, {}
    for email in (OURS, STOCK):
        client = desks.client(email)
        pid = client.ensure_project(f"csrf-target-{email.split('@')[0]}", "a project to write to",
                                    '<View><Text name="t" value="$text"/></View>').id
        logins[email] = form_login(desks.url(email), email, desk_pair.passwords[email])
        cookie = ("Cookie", f"sessionid={logins[email].session}")  # the cookie a browser sends, and nothing else
        before = _state(desks, email)
        reqs = [(m, t, [cookie, where, ("Content-Type", ctype)], body)
                for where in origins for m, t, ctype, body in _writes(pid, email[:3])
                if not (email == STOCK and where[1] == other_desk)]
        if email == OURS:
            answers[email] = fire(desk_pair.port(email), reqs, workers=4)
            assert _state(desks, email) == before  # nothing was written
        else:  # stock: one of each kind (each DELETE would end the next one's target)
            answers[email] = [raw(desk_pair.port(email), *reqs[0]), raw(desk_pair.port(email), *reqs[3])]

    got_through = [r.describe() for r in answers[OURS] if r.status != 403]
    assert not got_through, "\n".join(got_through)
    assert all("cross-site write refused" in r.text for r in answers[OURS])
    # Label Studio's own settings: a plain HTML form of another site creates a project, a PATCH renames one
    assert [r.status for r in answers[STOCK]] == [201, 200], [r.describe() for r in answers[STOCK]]
    for login in logins.values():
        login.http.close()


def test_the_desks_own_pages_and_the_pipelines_token_still_write(desk_pair):
    """Controls: the same cookie from the desk's own origin writes, and so does the service
    token from anywhere (no cookie: the pipeline is not a browser)."""
    url, port = desk_pair.url(OURS), desk_pair.port(OURS)
    login = form_login(url, OURS, desk_pair.passwords[OURS])
    cookie = ("Cookie", f"sessionid={login.session}")
    own = raw(port, "POST", "/api/projects/", [cookie, ("Origin", url), ("Content-Type", "application/json")],
              json.dumps({"title": "own-page"}))
    assert own.status == 201, own.describe()
    referer = raw(port, "PATCH", f"/api/projects/{json.loads(own.body)['id']}/",
                  [cookie, ("Referer", f"{url}/projects/"), ("Content-Type", "application/json")],
                  json.dumps({"title": "own-page-renamed"}))
    assert referer.status == 200, referer.describe()
    token = desk_pair.desks.service(OURS)["LABEL_STUDIO_USER_TOKEN"]
    piped = raw(port, "POST", "/api/projects/",
                [("Authorization", f"Token {token}"), ("Origin", "https://evil.example"),
                 ("Content-Type", "application/json")], json.dumps({"title": "by-token"}))
    assert piped.status == 201, piped.describe()
    login.http.close()


def test_the_guards_refuse_a_label_studio_without_what_they_rely_on(tmp_path):
    """All or nothing, as the other desk settings: without Label Studio's CSRF switch-off (what
    the cross-site check makes up for) the desk settings do not load."""
    from pipeline.labelstudio.server import DEFAULT_VENV, LabelStudioServer

    creds = {"LABEL_STUDIO_USERNAME": "svc@rescue.invalid", "LABEL_STUDIO_PASSWORD": "pw-x",
             "LABEL_STUDIO_USER_TOKEN": "cd" * 20}
    env = LabelStudioServer(tmp_path / "ls", credentials=creds)._env()
    assert env.get("DJANGO_SETTINGS_MODULE") == "rescue_desk_settings"
    package = next(DEFAULT_VENV.glob("lib/python3*/site-packages/label_studio"))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import core.settings.base as b; "
             "b.MIDDLEWARE.remove('core.middleware.DisableCSRF') if sys.argv[2] == 'gone' else None; "
             "import django; django.setup(); from django.conf import settings; "
             "print('GUARDS', [m for m in settings.MIDDLEWARE if m.startswith('rescue_desk_guard')])")
    (tmp_path / "ls").mkdir()
    runs = {how: subprocess.run([str(DEFAULT_VENV / "bin" / "python"), "-c", probe, str(package), how], env=env,
                                cwd=tmp_path / "ls", capture_output=True, text=True, timeout=300)
            for how in ("there", "gone")}
    assert runs["there"].returncode == 0, runs["there"].stderr[-2000:]
    assert ("GUARDS ['rescue_desk_guard.CrossSiteWrites', 'rescue_desk_guard.EndedSessions', "
            "'rescue_desk_guard.LoginThrottle']") in runs["there"].stdout
    assert runs["gone"].returncode != 0
    assert "not those rescue_desk_guard was written for" in runs["gone"].stderr
