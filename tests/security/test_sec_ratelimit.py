"""Guessing a password on a desk's login form. With the desk settings at most 10 failed logins per
15 minutes count per account and per client address; the next attempt, the right password
included, is turned away with HTTP 429 and a message that says why and for how long, whatever
the spelling of the login route. Label Studio's stock settings take any number of guesses and
then the right one: shown on a stock desk beside ours. Each attack comes from its own loopback
address (127.0.0.x) and guesses a login made for it, so no other test's login is held up."""
from __future__ import annotations

import importlib.util
import secrets
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from attack_kit import OURS, STOCK, logged_in, login_attempt

pytestmark = pytest.mark.slow

LIMIT = 10


def _new_login(desk_pair, email: str, who: str) -> tuple[str, str]:
    """A second login on ``email``'s desk (its service account makes it, the pipeline's reset sets its password)."""
    target, password = f"{who}-{secrets.token_hex(3)}@rescue.test", secrets.token_urlsafe(12)
    client = desk_pair.desks.client(email)
    client._json("POST", "/api/users/", "make a login", json={"email": target, "username": target})
    desk_pair.desks.server(email).set_password(target, password)
    return target, password


def test_guessing_one_account_is_stopped_after_ten(desk_pair):
    def attack(email):
        port = desk_pair.port(email)
        target, password = _new_login(desk_pair, email, "guessed")
        guesses = [login_attempt(port, target, f"wrong-guess-{i:04d}", source="127.0.0.2") for i in range(LIMIT)]
        right = login_attempt(port, target, password, source="127.0.0.2")
        elsewhere = login_attempt(port, target, password, source="127.0.0.3")  # the account, from another address
        variants = [login_attempt(port, target, password, source="127.0.0.3", target=t)
                    for t in ("/user/login", "/user/login/?next=/projects/", "//user/login/")]
        return guesses, right, elsewhere, variants

    with ThreadPoolExecutor(2) as pool:
        ours, stock = pool.map(attack, (OURS, STOCK))
    guesses, right, elsewhere, variants = ours
    assert [r.status for r in guesses] == [200] * LIMIT, [r.describe() for r in guesses]  # the form again
    for r in (right, elsewhere):
        assert r.status == 429, r.describe()
        assert "Too many failed logins" in r.text and "Try again in 15 minutes" in r.text, r.describe()
        assert 0 < int(r.headers["retry-after"]) <= 15 * 60
    got_in = [r.describe() for r in variants if logged_in(r)]
    assert not got_in, got_in
    # Label Studio's own settings: ten wrong guesses, then the right password logs in
    guesses, right, elsewhere, _ = stock
    assert not [r for r in guesses if logged_in(r)] and logged_in(right), right.describe()


def test_guessing_from_one_address_is_stopped_after_ten(desk_pair):
    """Ten different accounts guessed from one address: that address is stopped, for a real
    account too; another address still logs in."""
    def attack(email):
        port = desk_pair.port(email)
        target, password = _new_login(desk_pair, email, "sprayed")
        sprayed = [login_attempt(port, f"nobody-{i}@rescue.test", "wrong-guess-0000", source="127.0.0.4")
                   for i in range(LIMIT)]
        return (sprayed, login_attempt(port, target, password, source="127.0.0.4"),
                login_attempt(port, target, password, source="127.0.0.5"))

    with ThreadPoolExecutor(2) as pool:
        (sprayed, blocked, other), (_, stock_same, _) = pool.map(attack, (OURS, STOCK))
    assert [r.status for r in sprayed] == [200] * LIMIT, [r.describe() for r in sprayed]
    assert blocked.status == 429, blocked.describe()
    assert logged_in(other), other.describe()  # only that address is stopped
    assert logged_in(stock_same), stock_same.describe()  # Label Studio's own settings: no limit at all


def test_the_window_lets_an_account_in_again_after_fifteen_minutes():
    """The counting itself, with a clock the test moves (no desk waits 15 minutes)."""
    from pipeline.labelstudio.server import DESK_SETTINGS

    spec = importlib.util.spec_from_file_location("guard_probe", DESK_SETTINGS.parent / "rescue_desk_guard.py")
    guard = importlib.util.module_from_spec(spec)
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the desk settings
    try:
        spec.loader.exec_module(guard)
    finally:
        sys.dont_write_bytecode = writes
    now = [1000.0]
    window = guard._Window(limit=guard.FAILURES, window_s=guard.WINDOW_S, clock=lambda: now[0])
    assert (guard.FAILURES, guard.WINDOW_S) == (LIMIT, 15 * 60)
    keys = (("account", "a@x"), ("address", "10.0.0.1"))
    for i in range(LIMIT - 1):
        window.fail(keys)
        now[0] += 60
    assert window.wait_s(keys) == 0  # nine: not yet
    window.fail(keys)
    assert window.wait_s(keys) == pytest.approx(15 * 60 - 9 * 60)  # until the first failure is 15 minutes old
    assert window.wait_s([("account", "b@x")]) == 0  # another account is not held up
    now[0] = 1000.0 + 15 * 60
    assert window.wait_s(keys) == 0  # the first failure left the window: one more try
    window.fail(keys)
    assert window.wait_s(keys) > 0
    now[0] += 15 * 60
    assert window.wait_s(keys) == 0 and not window._times  # old failures are dropped, not kept
