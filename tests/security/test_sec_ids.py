"""Ids in paths, queries, JSON, form and GET bodies on A's own desk, from A's own token and
session: every id 1..N of every kind (B's and J's ids as they are on their desks included)
answers only with A's own things. A's desk holds nothing of B's, whatever id A names."""
from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from attack_kit import fire, leaks
from attack_kit import A_EMAIL

pytestmark = pytest.mark.slow


# route -> the kind of id it takes; each is enumerated over 1..(largest id of that kind on any
# of the three desks + 2), so B's and J's ids as they are on their desks are all named
ROUTES = {"/api/projects/{i}/": "project", "/api/tasks/?project={i}&fields=all": "project",
          "/api/projects/{i}/export?exportType=JSON&download_all_tasks=true": "project",
          "/api/dm/views/{i}/": "project", "/api/storages/localfiles/{i}": "project", "/api/webhooks/{i}/": "project",
          "/api/tasks/{i}/": "task", "/api/tasks/{i}/annotations/": "task", "/api/tasks/{i}/drafts": "task",
          "/api/predictions/?task={i}": "task", "/api/annotations/{i}/": "annotation", "/api/drafts/{i}/": "draft",
          "/api/predictions/{i}/": "prediction", "/api/users/{i}/": "user"}


def _top(world, kind) -> int:
    return max([1, *(i for d in (world.b_ids, world.j_ids, world.a_ids) for i in d.get(kind, []) if i)]) + 2


def test_every_id_on_own_desk_gives_only_own_things(world, unchanged):
    """Every id of every kind with A's token; B's and J's exact ids also with A's session."""
    token, session = world.variants()["token"], world.variants()["session"]
    reqs = [("GET", r.format(i=i), token, None) for r, kind in ROUTES.items() for i in range(1, _top(world, kind) + 1)]
    victims = {kind: sorted({*world.b_ids.get(kind, []), *world.j_ids.get(kind, [])}) for kind in set(ROUTES.values())}
    reqs += [("GET", r.format(i=i), session, None) for r, kind in ROUTES.items() if "{i}/" in r for i in victims[kind]]
    bad = [r.describe() for r in fire(world.port(A_EMAIL), reqs) if leaks(r.text, world.forbidden())]
    assert not bad, f"{len(reqs)} requests; leaked:\n" + "\n".join(bad)


def test_ids_in_bodies_on_own_desk(world, unchanged):
    """B's ids as they are on B's desk (and J's), handed to list and export routes in the query,
    a JSON body, a form body and a GET body (each distinct id once: the fields name every kind)."""
    headers = world.variants()["token"]
    reqs = []
    distinct = sorted({i for ids in (world.b_ids, world.j_ids) for values in ids.values() for i in values if i})
    for i in distinct:
        fields = {"project": i, "task": i, "id": i, "pk": i, "ids": [i], "annotation": i, "user": i,
                  "completed_by": i, "selectedItems": {"all": False, "included": [i]}}
        for method, route in (("GET", "/api/tasks/"), ("GET", "/api/predictions/"), ("GET", "/api/projects/"),
                              ("GET", "/api/dm/views/"), ("GET", f"/api/projects/{world.a_project}/export"),
                              ("POST", f"/api/dm/actions?id=retrieve_tasks_predictions&project={world.a_project}"),
                              ("GET", "/api/tasks/{}/annotations/".format(world.a_tasks[0]))):
            query = urlencode({k: v for k, v in fields.items() if not isinstance(v, (list, dict))})
            reqs.append((method, f"{route}{'&' if '?' in route else '?'}{query}", headers, None))
            for m in {method, "GET"}:  # a JSON body (and a GET body)
                reqs.append((m, route, [*headers, ("Content-Type", "application/json")], json.dumps(fields)))
            form = urlencode({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in fields.items()})
            reqs.append((method, route, [*headers, ("Content-Type", "application/x-www-form-urlencoded")], form))
    bad = [r.describe() for r in fire(world.port(A_EMAIL), reqs) if leaks(r.text, world.forbidden())]
    assert not bad, f"{len(reqs)} requests; leaked:\n" + "\n".join(bad)
