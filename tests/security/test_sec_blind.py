"""The adjudicator hunts for who answered. J logs in to J's own desk through its real login form
and reads everything the desk's API and pages give J - projects, their summaries and exports,
tasks with every field, predictions, drafts, annotations, data manager views and columns, users,
organizations and memberships, storages, webhooks, ML backends, the app's pages - searching each
answer for the annotators' e-mails, logins (the e-mails' local parts) and desk names. None is
there: the adjudication shows "Annotator A/B", with both annotators' answers (the controls)."""
from __future__ import annotations

import json

import pytest
from attack_kit import A_EMAIL, B_EMAIL, J_EMAIL, fire, form_login, leaks

pytestmark = pytest.mark.slow


def _identities(world) -> dict[str, str]:
    out = {}
    for who, email in (("A", A_EMAIL), ("B", B_EMAIL)):
        out[f"{who}'s e-mail"] = email
        out[f"{who}'s login"] = email.split("@")[0]
        out[f"{who}'s desk name"] = world.desks.get(email).slug
    return out


def _sweep(world, j) -> list[tuple[str, str, list, None]]:
    headers = [("Authorization", f"Token {j.token}")]
    session = [("Cookie", f"sessionid={j.session}; csrftoken={j.csrf}")]
    projects, tasks = world.j_ids["project"], world.j_ids["task"]
    reqs = [("GET", path, headers, None) for path in (
        "/api/projects/", "/api/users/", "/api/current-user/whoami", "/api/organizations/", "/api/webhooks/",
        "/api/predictions/", "/api/ml/", "/api/storages/", "/api/projects/counts/", "/api/annotations/",
        "/api/dm/views/", "/api/version")]
    orgs = json.loads(fire(world.port(J_EMAIL), [("GET", "/api/organizations/", headers, None)])[0].body)
    for org in orgs if isinstance(orgs, list) else []:
        reqs.append(("GET", f"/api/organizations/{org['id']}/memberships?page_size=1000", headers, None))
        reqs.append(("GET", f"/api/organizations/{org['id']}", headers, None))
    for p in projects:
        reqs += [("GET", path, headers, None) for path in (
            f"/api/projects/{p}/", f"/api/projects/{p}/summary/", f"/api/projects/{p}/file-uploads",
            f"/api/projects/{p}/export?exportType=JSON&download_all_tasks=true",
            f"/api/projects/{p}/export?exportType=JSON_MIN&download_all_tasks=true", f"/api/projects/{p}/exports/",
            f"/api/tasks/?project={p}&fields=all&page_size=1000", f"/api/predictions/?project={p}",
            f"/api/dm/views/?project={p}", f"/api/dm/columns/?project={p}", f"/api/dm/project/?project={p}",
            f"/api/storages/localfiles/?project={p}", f"/api/storages/export/localfiles?project={p}",
            f"/api/ml/?project={p}", f"/api/projects/{p}/members/")]
        reqs += [("GET", path, session, None) for path in (f"/projects/{p}/data", f"/projects/{p}/settings")]
    for t in tasks:
        reqs += [("GET", path, headers, None) for path in (
            f"/api/tasks/{t}/", f"/api/tasks/{t}/?fields=all", f"/api/tasks/{t}/annotations/", f"/api/tasks/{t}/drafts",
            f"/api/predictions/?task={t}")]
    reqs += [("GET", path, session, None) for path in ("/projects/", "/user/account", "/organization/", "/")]
    return reqs


def test_the_adjudicators_desk_names_no_annotator(world, unchanged):
    j = form_login(world.url(J_EMAIL), J_EMAIL, world.passwords[J_EMAIL])
    reqs = _sweep(world, j)
    answers = fire(world.port(J_EMAIL), reqs)
    assert sum(r.status == 200 for r in answers) >= len(answers) * 3 // 4, \
        [r.describe() for r in answers if r.status != 200][:10]  # the sweep read the desk, not error pages
    found = {r.request: leaks(r.text, _identities(world)) for r in answers}
    assert not {k: v for k, v in found.items() if v}, {k: v for k, v in found.items() if v}
    # controls: the adjudication is there, blind, with both annotators' answers
    text = "".join(r.text for r in answers)
    assert "Annotator A" in text and "Annotator B" in text
    assert world.marks["B's answer marker"] in text and world.a_marker in text
    assert J_EMAIL in text  # J's own e-mail is shown to J: the search finds e-mails where they are
