"""Sessions and tokens that should be over: a copy of a session cookie after its person logged out,
and every session, API token and personal access token after their password was reset (re-added
with ``rescue annotators add``). With the desk settings each is refused; a second session of the
same person, which did not log out, goes on. Label Studio's stock settings keep a logged-out
cookie working (sessions live in signed cookies): shown on a stock desk beside ours. The reset
is the pipeline's own step, the same on both."""
from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from attack_kit import OURS, STOCK, count, form_login, logged_in, login_attempt, raw, refused

pytestmark = pytest.mark.slow


def _whoami(port: int, headers: list[tuple[str, str]]):
    return raw(port, "GET", "/api/current-user/whoami", headers)


def test_a_logged_out_session_is_over(desk_pair):
    answers = {}
    for email in (OURS, STOCK):
        url, port = desk_pair.url(email), desk_pair.port(email)
        kept = form_login(url, email, desk_pair.passwords[email])  # another browser of theirs: stays in
        login = form_login(url, email, desk_pair.passwords[email])
        copy = [("Cookie", f"sessionid={login.session}")]  # what someone copied before the logout
        assert _whoami(port, copy).status == 200
        count(None)
        out = login.http.get("/logout")  # the person's own browser logs out
        assert out.status_code == 302, out.text[:200]
        answers[email] = (_whoami(port, copy), raw(port, "GET", "/api/projects/", copy),
                          _whoami(port, [("Cookie", f"sessionid={kept.session}")]))
        login.http.close()
        kept.http.close()
    copy_whoami, copy_projects, kept = answers[OURS]
    assert refused(copy_whoami) and refused(copy_projects), (copy_whoami.describe(), copy_projects.describe())
    assert kept.status == 200 and OURS in kept.text, kept.describe()  # only that one session ended
    # Label Studio's own settings: the copied cookie still works after the logout
    assert answers[STOCK][0].status == 200 and STOCK in answers[STOCK][0].text, answers[STOCK][0].describe()


def test_a_password_reset_ends_sessions_and_replaces_tokens(desk_pair):
    desks = desk_pair.desks

    def before_and_after(email):
        url, port = desk_pair.url(email), desk_pair.port(email)
        login = form_login(url, email, desk_pair.passwords[email])
        count(None)
        pat = login.http.post("/api/token/", headers={"X-CSRFToken": login.csrf, "Referer": url})
        refresh = pat.json().get("token", "") if pat.status_code in (200, 201) else ""
        held = {"session": [("Cookie", f"sessionid={login.session}")],
                "token": [("Authorization", f"Token {login.token}")]}
        assert all(_whoami(port, h).status == 200 for h in held.values())
        new = secrets.token_urlsafe(15)
        desks.add(email, "annotator", new, timeout=400)  # re-added: a new password (the desk runs already)
        old_password, desk_pair.passwords[email] = desk_pair.passwords[email], new
        after = {name: _whoami(port, h) for name, h in held.items()}
        count(None)
        refreshed = httpx.post(f"{url}/api/token/refresh/", json={"refresh": refresh}, timeout=30) if refresh else None
        old_login = login_attempt(port, email, old_password)
        new_login = form_login(url, email, new)
        login.http.close()
        new_login.http.close()
        return after, refreshed, old_login, new_login, login.token

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip((OURS, STOCK), pool.map(before_and_after, (OURS, STOCK))))
    for email, (after, refreshed, old_login, new_login, old_token) in results.items():
        bad = [f"{email} {name}: {r.describe()}" for name, r in after.items() if not refused(r)]
        assert not bad, "\n".join(bad)
        if refreshed is not None:  # the personal access token can make no more access tokens
            assert refreshed.status_code == 401, (email, refreshed.status_code, refreshed.text[:200])
        assert not logged_in(old_login), old_login.describe()
        assert new_login.token and new_login.token != old_token  # a new API token, shown to the person
