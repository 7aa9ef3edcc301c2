"""Logins A makes on A's own desk (POST /api/users/, the invite link and the signup form) and
annotations moved to another task or author: a pull never counts them, reports each naming A's
desk, and the made-up logins get no round, no desk and nothing on B's or J's desks."""
from __future__ import annotations

import json

import httpx
import pytest
from attack_kit import credential_variants, form_login, raw, refused
from attack_kit import A_EMAIL, B_EMAIL, J_EMAIL, ROUND
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow

X1 = "xavier.helper@rescue.test"
X2 = "xena.signup@rescue.test"


def _result(world, task_id, marker):
    from pipeline.annotation import ls_config
    from pipeline.annotation.rounds import load_round
    from attack_kit import answer_values as _values
    rnd = load_round(ROUND)
    task = world.desks.client(A_EMAIL).tasks(world.a_project)
    data = next(t["data"] for t in task if t["id"] == task_id)
    sample = next(s for s in world.samples if s["sample_id"] == data["sample_id"])
    return ls_config.values_to_results(rnd, data, _values(rnd, sample, "request", marker))


def test_logins_made_on_own_desk_never_count(world, unchanged):
    from pipeline.annotation import pull, push
    from pipeline.labelstudio.desks import Desks
    port, url = world.port(A_EMAIL), world.url(A_EMAIL)
    headers = [*world.variants()["token"], ("Content-Type", "application/json")]
    owner_before = world.desks.owner_id(A_EMAIL)

    # X1 through the API; A posts X1's "answer" (completed_by may be set by any login)
    r = raw(port, "POST", "/api/users/", headers, json.dumps({"email": X1, "username": X1}))
    assert r.status in (200, 201), r.describe()
    x1 = json.loads(r.body)["id"]
    t1, t2 = world.a_tasks[0], world.a_tasks[1]
    r = raw(port, "POST", f"/api/tasks/{t1}/annotations/", headers,
            json.dumps({"result": _result(world, t1, "xoneanswer"), "completed_by": x1}))
    assert r.status == 201, r.describe()
    x1_ann = json.loads(r.body)["id"]

    # X2 through the invite link and the signup form, then answering as themself
    invite = json.loads(raw(port, "GET", "/api/invite", world.variants()["token"]).body)
    token = invite["token"]
    with httpx.Client(base_url=url, follow_redirects=False, timeout=60) as c:
        c.get(f"/user/signup/?token={token}")
        csrf = c.cookies.get("csrftoken")
        r = c.post(f"/user/signup/?token={token}", data={"csrfmiddlewaretoken": csrf, "email": X2,
                                                          "password": "xena-pass-12345", "how_find_us": "Other"})
        assert r.status_code == 302, r.text[:300]
    x2 = form_login(url, X2, "xena-pass-12345")
    r = raw(port, "POST", f"/api/tasks/{t2}/annotations/", [("Authorization", f"Token {x2.token}"),
            ("Content-Type", "application/json")], json.dumps({"result": _result(world, t2, "xtwoanswer")}))
    assert r.status == 201, r.describe()
    x2_ann = json.loads(r.body)["id"]

    # e-mails are not A's to swap: X2 cannot become "A" for the pull's owner look-up
    users = {u["email"]: u["id"] for u in json.loads(raw(port, "GET", "/api/users/", headers).body)}
    raw(port, "PATCH", f"/api/users/{users[X2]}/", headers, json.dumps({"email": A_EMAIL, "username": A_EMAIL}))
    raw(port, "PATCH", f"/api/users/{users[A_EMAIL]}/", headers, json.dumps({"email": "gone@rescue.test"}))
    fresh = Desks(DataRoot(world.root))
    try:
        assert fresh.owner_id(A_EMAIL) == owner_before
    finally:
        fresh.close()

    result = pull.pull_round(world.desks, ROUND, DataRoot(world.root))
    lines = result.labels.to_pylist()
    assert not [r for r in lines if "xoneanswer" in str(r.get("value")) or "xtwoanswer" in str(r.get("value"))]
    assert any(r["annotator"] == A_EMAIL for r in lines)
    where = world.desks.where(A_EMAIL)
    problems = [p["problem"] for p in result.problems.to_pylist() if p["annotator"] == A_EMAIL]
    for ann in (x1_ann, x2_ann):
        assert any(f"annotation {ann} " in p and where in p for p in problems), (ann, problems)

    # no round, no desk for them: not among the people, not in a push
    assert world.desks.people() == sorted([A_EMAIL, B_EMAIL, J_EMAIL])
    url_of = lambda s: f"/data/local-files/?d={world.media[s['sample_id']]}"  # noqa: E731
    report = push.push_round(world.desks, ROUND, world.samples, root=DataRoot(world.root), media_url=url_of)
    assert report.annotators == [A_EMAIL, B_EMAIL] and report.created == 0
    assert not [k for k in report.projects if X1 in k or X2 in k]
    with pytest.raises(push.PushError):
        push.push_round(world.desks, ROUND, world.samples, [A_EMAIL, X2], root=DataRoot(world.root), media_url=url_of)

    # and X2's own credentials mean nothing on B's or J's desk
    for victim in (B_EMAIL, J_EMAIL):
        for name, h in credential_variants(x2).items():
            r = raw(world.port(victim), "GET", "/api/projects/", h)
            assert refused(r), f"{name}: {r.describe()}"


def test_moved_annotations_are_reported_not_counted(world, unchanged):
    from pipeline.annotation import pull
    port = world.port(A_EMAIL)
    headers = [*world.variants()["token"], ("Content-Type", "application/json")]
    svc = world.desks.client(A_EMAIL)
    anns = {t["id"]: [a for a in svc._json("GET", f"/api/tasks/{t['id']}/annotations/", "anns")
                      if a["completed_by"] == world.desks.owner_id(A_EMAIL)] for t in svc.tasks(world.a_project)}
    t1, t2, t3 = world.a_tasks
    sample_of = {t["id"]: t["data"]["sample_id"] for t in svc.tasks(world.a_project)}
    moved, authored, sneaky = anns[t1][0]["id"], anns[t2][0]["id"], anns[t3][0]["id"]
    service_id = next(u["id"] for u in svc.users() if u["email"] == "pipeline@rescue.invalid")
    r1 = raw(port, "PATCH", f"/api/annotations/{moved}/", headers, json.dumps({"task": t3}))
    r2 = raw(port, "PATCH", f"/api/annotations/{authored}/", headers, json.dumps({"completed_by": service_id}))
    # moved AND re-dated at once (the ledger keys an annotation on its id and creation time)
    r3 = raw(port, "PATCH", f"/api/annotations/{sneaky}/", headers,
             json.dumps({"task": t2, "created_at": "2020-01-02T03:04:05Z"}))
    now = {a["id"]: a for t in anns for a in svc._json("GET", f"/api/tasks/{t}/annotations/", "anns")}

    result = pull.pull_round(world.desks, ROUND, DataRoot(world.root))
    problems = [p["problem"] for p in result.problems.to_pylist() if p["annotator"] == A_EMAIL]
    lines = [r for r in result.labels.to_pylist() if r["annotator"] == A_EMAIL]
    a_mark = world.a_marker
    # no line of A's counts an answer written for one sample under another
    wrong = [r for r in lines if a_mark in str(r.get("value")) and r["sample_id"] not in str(r.get("value"))]
    assert not wrong, (wrong[:3], r1.describe(), r3.describe())
    if r1.status < 400 and now.get(moved, {}).get("task") == t3:
        assert any(f"annotation {moved} " in p and "moved" in p for p in problems), problems
    if r2.status < 400 and now.get(authored, {}).get("completed_by") == service_id:
        assert any(f"annotation {authored} " in p for p in problems), problems
        assert not [r for r in lines if r["sample_id"] == sample_of[t2] and sample_of[t2] in str(r.get("value"))
                    and now.get(sneaky, {}).get("task") != t2]
    if r3.status < 400 and now.get(sneaky, {}).get("task") == t2:
        assert any(f"annotation {sneaky} " in p for p in problems), (
            f"annotation {sneaky} moved from task {t3} to {t2} with created_at re-dated was not reported", problems)
