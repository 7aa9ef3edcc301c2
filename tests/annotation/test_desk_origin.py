"""A desk behind a TLS proxy: its person's login comes from the public address
(``RESCUE_DESK_PUBLIC_URL``), which the desk must trust for Django's CSRF check, and no other."""
from __future__ import annotations

import dataclasses
import secrets

import httpx
import pytest

from pipeline.labelstudio.desks import Desks
from pipeline.config import Settings
from tests.helpers import free_port
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow


def _login(url: str, email: str, password: str, origin: str) -> int:
    with httpx.Client(base_url=url, timeout=120) as http:
        http.get("/user/login/")
        r = http.post("/user/login/", data={"csrfmiddlewaretoken": http.cookies.get("csrftoken", ""),
                                            "email": email, "password": password},
                      headers={"Origin": origin, "Referer": f"{origin}/user/login/"})
        return r.status_code


def test_a_desk_trusts_its_public_address_for_logins_and_no_other(tmp_path):
    root = tmp_path / "data"
    settings = dataclasses.replace(Settings.from_env(root), desk_base_port=free_port(),
                                   desk_public_url="https://desk-{port}.annotate.example.org")
    desks = Desks(DataRoot(root), settings)
    password = secrets.token_urlsafe(12)
    try:
        desk = desks.add("ann@example.org", "annotator", password, timeout=400)
        public = desks.public_url(desk)
        assert public == f"https://desk-{desk.port}.annotate.example.org"
        assert _login(desks.url(desk), desk.email, password, public) == 302  # logged in
        assert _login(desks.url(desk), desk.email, password, "https://evil.example.org") == 403
        assert _login(desks.url(desk), desk.email, "wrong-" + password, public) == 200  # the form again
    finally:
        desks.down()
        desks.close()
