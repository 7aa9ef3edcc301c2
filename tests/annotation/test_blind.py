"""Blind by construction: through the annotators' gate (pipeline.annotation.proxy) an annotator
cannot list, open, edit or export another annotator's project, nor read its annotations - with
their own login, against the real server. Straight to Label Studio the same login can (the
Community edition has no roles), which is why annotators get the gate's address only."""
from __future__ import annotations

import json
import re
import secrets

import httpx
import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, push
from pipeline.annotation.proxy import ADJUDICATION_KEY_PREFIX, KEYS_PATH, ProxyServer, prefetch_urls, session_key
from pipeline.annotation.rounds import load_round
from pipeline.quality import adjudication

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


def _ids(listing) -> set[int]:
    return {p["id"] for p in (listing["results"] if isinstance(listing, dict) else listing)}


def test_the_adjudicator_alone_reaches_the_adjudication_projects(ls_server, ls_client, ls_credentials):
    """A login that annotates no round (the adjudicator) sees the adjudication projects and no
    annotator's project; an annotator never sees an adjudication project; with the adjudicators
    named, any other login reaches no project; the admin passes unfiltered."""
    tag = secrets.token_hex(3)
    a, judge, other = (f"{who}-{tag}@rescue.test" for who in ("adj-annotator", "adj-judge", "adj-other"))
    passwords = {}
    for who in (a, judge, other):
        ls_client.create_user(who)
        passwords[who] = "pw" + secrets.token_urlsafe(12)
        ls_server.set_password(who, passwords[who])
    rnd = load_round("emotion")
    sample = make_sample(f"synthetic/adj_{tag}", "couple", 6)
    report = push.push_round(ls_client, "emotion", [sample], [a], k=1)
    own = report.projects[push.project_key("emotion", "couple", a)]
    # an adjudication project as pipeline.quality.adjudication keys it, with this test's own
    # scenario part (the round's real one belongs to other tests on this session's server)
    key = adjudication.project_key("emotion", f"couple-{tag}")
    assert key.startswith(ADJUDICATION_KEY_PREFIX)
    adj = ls_client.ensure_project(key, f"Adjudicate emotion (blind test {tag})", ls_config.render_config(rnd, "couple"),
                                   model_version=adjudication.ADJUDICATOR_VERSION, description="adjudication").id
    data = ls_config.build_task_data(rnd, sample)
    ls_client.import_tasks(adj, [{"data": data}])
    adj_task = ls_client.find_tasks(adj, "sample_id", sample["sample_id"])[0]
    own_task = ls_client.tasks(own)[0]

    gate = ProxyServer(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"]).start()
    try:
        j = _login(gate.url, judge, passwords[judge])
        listed = _ids(j.get("/api/projects/", params={"page_size": 100}).json())
        assert adj in listed and own not in listed
        assert all(p.key.startswith(ADJUDICATION_KEY_PREFIX) for p in ls_client.projects() if p.id in listed)
        assert j.get(f"/api/projects/{adj}/").status_code == 200
        assert j.get(f"/projects/{adj}/data").status_code == 200
        assert j.get(f"/api/tasks/{adj_task['id']}/").status_code == 200
        answer = j.post(f"/api/tasks/{adj_task['id']}/annotations/", json={"result": ls_config.values_to_results(
            rnd, data, push.input_values(rnd, sample)), "lead_time": 3})
        assert answer.status_code == 201, answer.text[:300]
        refused = [j.get(f"/api/projects/{own}/"), j.get(f"/projects/{own}/data"),
                   j.get("/api/tasks/", params={"project": own}), j.get(f"/api/tasks/{own_task['id']}/"),
                   j.post(f"/api/tasks/{own_task['id']}/annotations/", json={"result": []}),
                   j.get(f"/api/projects/{adj}/export", params={"exportType": "JSON"}),
                   j.patch(f"/api/projects/{adj}/", json={"title": "mine"})]
        assert [r.status_code for r in refused] == [403] * len(refused)

        ann = _login(gate.url, a, passwords[a])
        assert adj not in _ids(ann.get("/api/projects/", params={"page_size": 100}).json())
        refused = [ann.get(f"/api/projects/{adj}/"), ann.get(f"/projects/{adj}/data"),
                   ann.get("/api/tasks/", params={"project": adj}), ann.get(f"/api/tasks/{adj_task['id']}/"),
                   ann.get(f"/api/annotations/{answer.json()['id']}/")]
        assert [r.status_code for r in refused] == [403] * len(refused)
        assert ann.get(f"/api/projects/{own}/").status_code == 200

        admin = httpx.Client(base_url=gate.url, timeout=60,
                             headers={"Authorization": f"Token {ls_credentials['LABEL_STUDIO_USER_TOKEN']}"})
        assert {adj, own} <= _ids(admin.get("/api/projects/", params={"page_size": 1000}).json())
        assert admin.get(f"/api/annotations/{answer.json()['id']}/").status_code == 200
    finally:
        gate.stop()

    named = ProxyServer(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"], adjudicators=[judge]).start()
    try:  # adjudicators named: a login that is neither annotator nor adjudicator reaches nothing
        o = _login(named.url, other, passwords[other])
        assert _ids(o.get("/api/projects/", params={"page_size": 100}).json()) == set()
        assert o.get(f"/api/projects/{adj}/").status_code == 403
        assert o.get(f"/api/projects/{own}/").status_code == 403
        j = _login(named.url, judge, passwords[judge])
        assert j.get(f"/api/projects/{adj}/").status_code == 200
    finally:
        named.stop()


def test_the_gate_serves_label_studios_assets_cached_and_compressed_and_adds_the_keys(ls_server, ls_client,
                                                                                      ls_credentials):
    """Assets: gzip when accepted (same bytes unpacked as Label Studio's), cache headers, the
    gate's own 304 on revalidation; a logged-in page carries the annotators' keys script."""
    who = f"gate-assets-{secrets.token_hex(3)}@rescue.test"
    ls_client.create_user(who)
    password = "pw" + secrets.token_urlsafe(12)
    ls_server.set_password(who, password)
    report = push.push_round(ls_client, "relation", [make_sample("synthetic/gate_001", "couple", 6)], [who], k=1)
    pid = report.projects[push.project_key("relation", "couple", who)]
    gate = ProxyServer(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"]).start()
    try:
        anonymous = httpx.Client(base_url=gate.url, timeout=60)
        login_page = anonymous.get("/user/login/")
        assert KEYS_PATH not in login_page.text  # only logged-in pages get the keys
        script = re.search(r'(?:src|href)="(/react-app/main\.(?:js|css)[^"]*)"', login_page.text)[1]
        straight = httpx.get(ls_server.url + script, timeout=60)
        assert "max-age" not in straight.headers.get("cache-control", "")  # Label Studio's own: no caching
        packed = anonymous.get(script, headers={"Accept-Encoding": "gzip"})
        assert packed.status_code == 200 and packed.headers["content-encoding"] == "gzip"
        assert packed.content == straight.content  # (httpx unpacks)
        assert int(packed.headers["content-length"]) < len(straight.content) / 2
        assert "max-age=" in packed.headers["cache-control"]
        again = anonymous.get(script, headers={"If-None-Match": packed.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        hashed = re.search(r'href="(/static/css/main\.[0-9a-f]{12}\.css)"', login_page.text)[1]
        assert "immutable" in anonymous.get(hashed).headers["cache-control"]

        user = _login(gate.url, who, password)
        page = user.get(f"/projects/{pid}/data")
        assert page.status_code == 200 and f'<script src="{KEYS_PATH}"></script>' in page.text
        keys = user.get(KEYS_PATH)
        assert keys.status_code == 200 and "stopImmediatePropagation" in keys.text
    finally:
        gate.stop()



def _flags(page: str) -> tuple[dict, bool]:
    line = re.search(r"^\s*feature_flags: (\{.*\}),\s*\n\s*feature_flags_default_value: (true|false),", page, re.M)
    return json.loads(line[1]), line[2] == "true"


def test_the_gate_answers_a_task_pages_first_api_calls_from_a_prefetch_of_that_session_only(
        ls_server, ls_client, ls_credentials):
    """Opening a task page, the gate asks Label Studio at once, with the page's session, for what
    the data manager asks next (project, columns, views, the task, ...): the session's identical
    GET gets that answer (what Label Studio gives), once; another annotator asking the same URL is
    refused as before and takes nothing; a write of the session drops its prefetched answers
    (saving the data manager's tab keeps the task, drops the views and the task list, which the
    prefetch asks for once the views answer names the first tab).
    The session is the same for the gate while Label Studio re-signs its cookie on each response.
    The page's feature flags come without the ones equal to the default (same meaning, smaller),
    and the data manager's columns show only the heading of the task data by default."""
    tag = secrets.token_hex(3)
    a, b = (f"prefetch-{i}-{tag}@rescue.test" for i in (1, 2))
    passwords = {}
    for who in (a, b):
        ls_client.create_user(who)
        passwords[who] = "pw" + secrets.token_urlsafe(12)
        ls_server.set_password(who, passwords[who])
    report = push.push_round(ls_client, "emotion", [make_sample(f"synthetic/prefetch_{tag}", "couple", 6)], [a, b], k=1)
    pid = {who: report.projects[push.project_key("emotion", "couple", who)] for who in (a, b)}
    tid = ls_client.tasks(pid[a])[0]["id"]
    gate = ProxyServer(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"]).start()
    prefetched = gate.app.state.prefetched
    try:
        alice = _login(gate.url, a, passwords[a])
        page = alice.get(f"/projects/{pid[a]}/data", params={"task": tid})
        assert page.status_code == 200
        session = session_key(f"sessionid={alice.cookies.get('sessionid')}")
        urls = prefetch_urls(f"/projects/{pid[a]}/data", {"task": str(tid)})
        assert f"/api/tasks/{tid}?project={pid[a]}" in urls
        assert {(session, u) for u in urls} <= set(prefetched)

        direct = _login(ls_server.url, a, passwords[a])
        for url in urls:
            got = alice.get(url)
            assert got.status_code == 200, (url, got.text[:200])
            assert (session, url) not in prefetched  # answered from the prefetch, once
            want = direct.get(url).json()  # (counters and times may move between the two)
            assert type(got.json()) is type(want), url
            if isinstance(want, dict):
                assert set(got.json()) == set(want), url
            if url.startswith("/api/tasks/"):
                assert got.json()["data"] == want["data"] and got.json()["id"] == tid
            if url.startswith("/api/dm/columns"):
                columns_prefetched, columns_straight = got.json(), want
        assert alice.get(urls[-1]).status_code == 200  # asked again: from Label Studio

        # the task list shows only the heading of the task data (Label Studio: every key the
        # config uses), prefetched or not; every column is still there to choose
        def shown(answer, mode):
            return {c["id"] for c in answer["columns"] if c.get("parent") == "data" and c["visibility_defaults"][mode]}
        columns_again = alice.get(f"/api/dm/columns?project={pid[a]}").json()
        assert {"heading", "turns", "entities"} <= shown(columns_straight, "labeling")
        for answer in (columns_prefetched, columns_again):
            assert shown(answer, "labeling") == shown(answer, "explore") == {"heading"}
            assert [c["id"] for c in answer["columns"]] == [c["id"] for c in columns_straight["columns"]]

        # another annotator cannot take alice's prefetched task, nor reach it
        alice.get(f"/projects/{pid[a]}/data", params={"task": tid})
        bob = _login(gate.url, b, passwords[b])
        assert bob.get(f"/api/tasks/{tid}?project={pid[a]}").status_code == 403
        assert (session, f"/api/tasks/{tid}?project={pid[a]}") in prefetched
        # the data manager saving its tab (its first visit does) keeps the prefetched task
        saved = alice.post(f"/api/dm/views?tabID=0&project={pid[a]}", json={"project": pid[a], "data": {"title": "Default"}})
        assert saved.status_code == 201, saved.text[:200]
        assert (session, f"/api/tasks/{tid}?project={pid[a]}") in prefetched
        # with a saved tab, the page's prefetch also asks for the first page of the task list
        # the data manager asks for next (its first tab's), once the views answer is there
        alice.get(f"/projects/{pid[a]}/data", params={"task": tid})
        views = alice.get(f"/api/dm/views?project={pid[a]}").json()
        list_url = f"/api/tasks?page=1&page_size=30&view={views[0]['id']}&project={pid[a]}"
        assert (session, list_url) in prefetched
        listed = alice.get(list_url)
        assert listed.status_code == 200 and (session, list_url) not in prefetched
        assert [t["id"] for t in listed.json()["tasks"]] == [t["id"] for t in direct.get(list_url).json()["tasks"]]
        # saving a tab drops a prefetched list (its filters or order may change) and keeps the task
        alice.get(f"/projects/{pid[a]}/data", params={"task": tid})
        alice.get(f"/api/dm/views?project={pid[a]}")
        assert (session, list_url) in prefetched
        tab = alice.put(f"/api/dm/views/{views[0]['id']}?project={pid[a]}",
                        json={"project": pid[a], "data": views[0]["data"]})
        assert tab.status_code == 200, tab.text[:200]
        assert (session, list_url) not in prefetched
        assert (session, f"/api/tasks/{tid}?project={pid[a]}") in prefetched
        # any other write of alice's session drops her prefetched answers
        alice.post(f"/api/projects/{pid[a]}/label-stream-history/", json={})
        assert not [k for k in prefetched if k[0] == session]
        # an annotator's page for another annotator's task prefetches nothing
        assert bob.get(f"/projects/{pid[a]}/data", params={"task": tid}).status_code == 403
        assert not [k for k in prefetched if k[0] != session]

        flags, default = _flags(page.text)
        straight, straight_default = _flags(direct.get(f"/projects/{pid[a]}/data").text)
        assert default == straight_default
        assert flags == {k: v for k, v in straight.items() if isinstance(v, bool) and v != default}
        assert len(flags) < len(straight)
    finally:
        gate.stop()
