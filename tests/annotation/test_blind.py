"""Blind by construction: through the annotators' gate (pipeline.annotation.proxy) an annotator
cannot list, open, edit or export another annotator's project, nor read its annotations - with
their own login, against the real server. Straight to Label Studio the same login can (the
Community edition has no roles), which is why annotators get the gate's address only."""
from __future__ import annotations

import secrets

import httpx
import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, push
from pipeline.annotation.proxy import ProxyServer
from pipeline.annotation.rounds import load_round

pytestmark = pytest.mark.slow


def _login(base: str, email: str, password: str) -> httpx.Client:
    """A session of ``email`` through the real login form at ``base``."""
    c = httpx.Client(base_url=base, timeout=60, follow_redirects=True)
    page = c.get("/user/login/")
    assert "csrftoken" in c.cookies and "/user/login" in str(page.url), page.url  # a fresh, anonymous session
    r = c.post("/user/login/", data={"email": email, "password": password, "persist_session": "on",
                                     "csrfmiddlewaretoken": c.cookies["csrftoken"]},
               headers={"Referer": f"{base}/user/login/", "Origin": base})
    assert r.status_code == 200 and "/user/login" not in str(r.url), base
    c.headers["X-CSRFToken"] = c.cookies["csrftoken"]
    c.headers["Origin"] = base
    return c


def test_an_annotator_cannot_reach_another_annotators_work_through_the_gate(ls_server, ls_client, ls_credentials):
    a, b = (f"blind-{i}-{secrets.token_hex(3)}@rescue.test" for i in (1, 2))
    passwords = {}
    for who in (a, b):
        ls_client.create_user(who)
        passwords[who] = "pw" + secrets.token_urlsafe(12)  # never starting with "-" (a CLI option)
        ls_server.set_password(who, passwords[who])
    rnd = load_round("emotion")
    sample = make_sample("synthetic/blind_001", "couple", 6)
    report = push.push_round(ls_client, "emotion", [sample], [a, b])
    pid = {who: report.projects[push.project_key("emotion", "couple", who)] for who in (a, b)}
    users = {u["email"]: u["id"] for u in ls_client.users()}
    task = {who: ls_client.tasks(pid[who])[0] for who in (a, b)}
    b_ann = ls_client.create_annotation(task[b]["id"], ls_config.values_to_results(
        rnd, task[b]["data"], push.input_values(rnd, sample)), completed_by=users[b])

    gate = ProxyServer(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"]).start()
    try:
        direct = _login(ls_server.url, a, passwords[a])
        assert direct.get(f"/api/annotations/{b_ann['id']}/").status_code == 200  # the hole, straight to LS

        alice = _login(gate.url, a, passwords[a])
        listed = alice.get("/api/projects/", params={"page_size": 100}).json()
        ids = {p["id"] for p in (listed["results"] if isinstance(listed, dict) else listed)}
        assert pid[a] in ids and pid[b] not in ids
        assert alice.get(f"/api/projects/{pid[a]}/").status_code == 200
        assert alice.get(f"/projects/{pid[a]}/data").status_code == 200
        # another annotator's project: list, open, edit, export, read annotations - all refused
        refused = [
            alice.get(f"/api/projects/{pid[b]}/"),
            alice.get(f"/projects/{pid[b]}/data"),
            alice.get("/api/tasks/", params={"project": pid[b]}),
            alice.get(f"/api/tasks/{task[b]['id']}/"),
            alice.get(f"/api/annotations/{b_ann['id']}/"),
            alice.patch(f"/api/annotations/{b_ann['id']}/", json={"result": []}),
            alice.post(f"/api/tasks/{task[b]['id']}/annotations/", json={"result": []}),
            alice.get(f"/api/projects/{pid[b]}/export", params={"exportType": "JSON"}),
            alice.post(f"/api/projects/{pid[b]}/exports/", json={"title": "x"}),
            alice.patch(f"/api/projects/{pid[a]}/", json={"title": "mine now"}),
            alice.get(f"/api/projects/{pid[a]}/export", params={"exportType": "JSON"}),
        ]
        assert [r.status_code for r in refused] == [403] * len(refused)
        # her own work goes through
        own = alice.post(f"/api/tasks/{task[a]['id']}/annotations/", json={"result": ls_config.values_to_results(
            rnd, task[a]["data"], push.input_values(rnd, sample)), "lead_time": 5})
        assert own.status_code == 201, own.text[:300]
        assert alice.get(f"/api/annotations/{own.json()['id']}/").status_code == 200
        # and the other annotator, with her own login, cannot read it either
        bob = _login(gate.url, b, passwords[b])  # the gate keeps no one's session for the next caller
        assert bob.get("/api/current-user/whoami").json()["email"] == b
        assert alice.get("/api/current-user/whoami").json()["email"] == a
        assert bob.get(f"/api/annotations/{own.json()['id']}/").status_code == 403
        bob_list = bob.get("/api/projects/").json()
        assert {p["id"] for p in (bob_list["results"] if isinstance(bob_list, dict) else bob_list)} >= {pid[b]}
        assert pid[a] not in {p["id"] for p in (bob_list["results"] if isinstance(bob_list, dict) else bob_list)}
        assert ls_client.find_tasks(pid[a], "sample_id", sample["sample_id"])[0]["total_annotations"] == 1
        project = next(p for p in ls_client.projects() if p.id == pid[a])
        assert project.title != "mine now"
    finally:
        gate.stop()
