"""Predictions and adjudication: nothing on A's desk holds B's answers (adjudication predictions
live only on J's desk); with no adjudicator, adjudication refuses and nobody gets its projects."""
from __future__ import annotations

import json

import pytest
from attack_kit import fire, leaks
from attack_kit import A_EMAIL, B_EMAIL, J_EMAIL, ROUND

pytestmark = pytest.mark.slow


def test_own_desk_holds_no_answers_of_others(world, unchanged):
    headers = world.variants()["token"]
    p = world.a_project
    reqs = [("GET", "/api/predictions/", headers, None), ("GET", f"/api/predictions/?project={p}", headers, None),
            ("GET", f"/api/tasks/?project={p}&fields=all", headers, None),
            ("GET", f"/api/projects/{p}/export?exportType=JSON&download_all_tasks=true", headers, None),
            ("GET", "/api/projects/?include=id,title,description,model_version", headers, None)]
    reqs += [("GET", f"/api/predictions/?task={t}", headers, None) for t in world.a_tasks]
    reqs += [("GET", f"/api/tasks/{t}/?fields=all", headers, None) for t in world.a_tasks]
    answers = fire(world.port(A_EMAIL), reqs)
    assert all(r.status == 200 for r in answers), [r.describe() for r in answers if r.status != 200]
    bad = [f"{r.describe()} {leaks(r.text, world.forbidden())}" for r in answers if leaks(r.text, world.forbidden())]
    assert not bad, "\n".join(bad)
    # A's own project does have predictions (the pre-annotation): the routes were not empty
    assert json.loads(answers[1].body)
    # and the service view of A's desk agrees: no adjudication project, no B anywhere
    svc = world.desks.client(A_EMAIL)
    assert not [pr for pr in svc.projects() if "adjudication" in pr.key]
    dump = json.dumps([json.loads(svc.export_tasks(pr.id)) for pr in svc.projects()])
    assert world.marks["B's answer marker"] not in dump and B_EMAIL not in dump


class _NoJudges:
    """The same desks, with nobody registered as adjudicator."""

    def __init__(self, desks):
        self._d = desks

    def people(self, role=None):
        return [] if role == "adjudicator" else [p for p in self._d.people(role) if p != J_EMAIL]

    def __getattr__(self, name):
        return getattr(self._d, name)


def _disagreeing_labels(world, rnd):
    """A labels table with a disagreement by construction, whatever the tests before did to the
    round's labels on disk: A's lines of the set-up pull for one shared sample, and the same lines
    from a second annotator whose utterance type differs on every row."""
    import pyarrow as pa

    from pipeline import schemas
    sid = world.samples[0]["sample_id"]
    mine = [r for r in world.first_pull.labels.to_pylist() if r["annotator"] == A_EMAIL and r["sample_id"] == sid]
    assert any(r["field"] == "utterance_type" for r in mine), "the set-up pull has no utterance type of A's"
    other = []
    for r in mine:
        r = dict(r, annotator=B_EMAIL, annotation_id=(r["annotation_id"] or 0) + 1000)
        if r["field"] == "utterance_type":
            r["value"] = json.dumps("accusation" if json.loads(r["value"]) != "accusation" else "disclosure")
        other.append(r)
    return pa.Table.from_pylist(mine + other, schema=schemas.LABELS)


class _CountingDesks(_NoJudges):
    """:class:`_NoJudges` that records every desk a client was asked for."""

    def __init__(self, desks):
        super().__init__(desks)
        self.asked = []

    def client(self, email):
        self.asked.append(email)
        return self._d.client(email)


def test_without_adjudicator_adjudication_refuses(world, unchanged):
    from pipeline.annotation.rounds import load_round
    from pipeline.quality import adjudication
    rnd = load_round(ROUND)
    labels = _disagreeing_labels(world, rnd)
    samples = [*world.samples, world.b_only]
    assert adjudication.adjudication_tasks(rnd, labels, samples), "control: the labels hold no disagreement"
    desks = _CountingDesks(world.desks)
    with pytest.raises(adjudication.NoAdjudicator):
        adjudication.push(desks, rnd, labels, samples)
    assert desks.asked == [], f"adjudication reached desks before refusing: {desks.asked}"
    for who in (A_EMAIL, B_EMAIL):
        assert not [p for p in world.desks.client(who).projects() if p.key.startswith("rescue-adjudication:")]
