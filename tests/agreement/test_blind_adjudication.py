"""Adjudication is blind to identity, through a real Label Studio: what the adjudicator's desk
holds (tasks, predictions, the project) names annotators as "Annotator A/B/...", never by e-mail;
the letters stay with their people across pushes of the round (a newcomer gets the next one);
which letter is whom is only in the data root's private table (0600), and it maps every
prediction back to the person whose labels it shows. The adjudicator's answers are credited
to the adjudicator, the annotators' labels stay theirs."""
from __future__ import annotations

import json
import secrets
import stat

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import schemas, store
from pipeline.annotation.rounds import load_round
from pipeline.paths import DataRoot
from pipeline.quality import adjudication
from pipeline.quality.disagreements import disagreements
from pipeline.synthetic.annotators import SimulatedAnnotator

pytestmark = pytest.mark.slow
ROUND = "emotion"


def _labels(rnd, samples, people: list[str]) -> pa.Table:
    lines = []
    for i, email in enumerate(people):
        sim = SimulatedAnnotator(f"blind{i}", {"*": 0.35}, seed=i)
        lines += [dict(line, annotator=email) for line in sim.label_rows(rnd, samples)]
    return pa.Table.from_pylist(lines, schema=schemas.LABELS)


def _desk_view(ls_client, pushed, mine: set[str]) -> tuple[list[dict], dict[int, list[dict]], list]:
    """The adjudicator's desk as the server holds it: this test's tasks, their predictions, the projects."""
    tasks, preds, projects = [], {}, []
    for pid in pushed.projects.values():
        projects.append(ls_client._json("GET", f"/api/projects/{pid}/", "read a project"))
        for t in ls_client.tasks(pid):
            if t["data"]["sample_id"] in mine:
                tasks.append(t)
                preds[t["id"]] = ls_client._json("GET", "/api/predictions/", "list predictions", params={"task": t["id"]})
    return tasks, preds, projects


def _check_blind_and_mapped(rnd, labels: pa.Table, tasks, preds, projects, table: dict[str, str], people):
    seen = json.dumps([tasks, preds, projects])
    assert not [p for p in people if p in seen], "an annotator's e-mail reached the adjudicator's desk"
    assert "@blind.test" not in seen
    assert set(table.values()) == set(people) and all(a.startswith("Annotator ") for a in table)
    by = {}
    for r in labels.to_pylist():
        by[(r["sample_id"], r["row_index"], r["field"], r["annotator"])] = json.loads(r["value"])
    compared = 0
    for t in tasks:
        versions = [p["model_version"] for p in preds[t["id"]]]
        assert versions and set(versions) <= set(table), versions
        for p in preds[t["id"]]:
            person = table[p["model_version"]]  # the private table says whose answer this is
            shown = adjudication.results_to_values(rnd, t["data"], p["result"])
            for ri, fields in t["data"]["adjudicate"].items():
                for name in fields:
                    if rnd.field(name).type != "choice" or (t["data"]["sample_id"], int(ri), name, person) not in by:
                        continue
                    assert shown[int(ri)][name] == by[(t["data"]["sample_id"], int(ri), name, person)], (p, person)
                    compared += 1
    assert compared > 10


def test_adjudicator_sees_letters_and_the_private_table_maps_them_back(ls_client, ls_desks, truth_samples, tmp_path):
    rnd = load_round(ROUND)
    tag = secrets.token_hex(3)
    samples = [dict(s, sample_id=f"{s['sample_id']}-blind{tag}") for s in truth_samples[:4]]
    mine = {s["sample_id"] for s in samples}
    people = [f"person{i}-{tag}@blind.test" for i in range(3)]
    root = DataRoot(tmp_path / "data")
    first = _labels(rnd, samples, people[:2])
    store.write_parquet(first, root.labels(ROUND))
    judge = ls_desks.add(f"judge-{tag}@adjudicator.test", "adjudicator")

    pushed = adjudication.push_round(ls_desks, DataRoot(root.root), ROUND, samples)
    assert pushed.tasks_created == len({d["sample_id"] for d in disagreements(first, rnd)}) > 0
    path = adjudication.aliases_path(root, ROUND)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    table = json.loads(path.read_text())
    assert sorted(table) == ["Annotator A", "Annotator B"]
    tasks, preds, projects = _desk_view(ls_client, pushed, mine)
    _check_blind_and_mapped(rnd, first, tasks, preds, projects, table, people[:2])

    # a third person's labels arrive: the first two keep their letters, the newcomer gets C,
    # and the refreshed tasks are as blind as before
    second = _labels(rnd, samples, people)
    store.write_parquet(second, root.labels(ROUND))
    again = adjudication.push_round(ls_desks, DataRoot(root.root), ROUND, samples)
    assert again.tasks_updated + again.tasks_created > 0
    table2 = json.loads(path.read_text())
    assert {a: p for a, p in table2.items() if a in table} == table and set(table2) - set(table) == {"Annotator C"}
    tasks, preds, projects = _desk_view(ls_client, again, mine)
    _check_blind_and_mapped(rnd, second, tasks, preds, projects, table2, people)
    assert {p["model_version"] for ps in preds.values() for p in ps} == set(table2)
    unchanged = adjudication.push_round(ls_desks, DataRoot(root.root), ROUND, samples)  # stable: nothing to refresh
    assert unchanged.tasks_updated == 0 and unchanged.tasks_created == 0 and json.loads(path.read_text()) == table2

    # the adjudicator answers: their lines are theirs, the annotators' labels stay the annotators'
    truth = {s["sample_id"]: s for s in samples}
    for pid in again.projects.values():
        SimulatedAnnotator("judge").annotate_tasks(ls_client, pid, rnd, truth, completed_by=ls_desks.owner_id(judge))
    pulled = adjudication.pull_round(ls_desks, DataRoot(root.root), ROUND)
    assert set(pulled.table.column("annotator").to_pylist()) == {judge}
    assert pulled.rows == len({(d["sample_id"], d["row_index"]) for d in disagreements(second, rnd)})
    assert set(pq.read_table(root.labels(ROUND)).column("annotator").to_pylist()) == set(people)


def test_letters_are_the_rounds_and_never_move():
    people = [f"p{i}@x.test" for i in range(30)]
    first = adjudication.assign_aliases("emotion", people[:3])
    assert sorted(first.values()) == ["Annotator A", "Annotator B", "Annotator C"]
    assert adjudication.assign_aliases("emotion", list(reversed(people[:3]))) == first  # not by order given
    known = {a: p for p, a in first.items()}
    more = adjudication.assign_aliases("emotion", people, known)
    assert {p: more[p] for p in first} == first
    assert sorted(more.values(), key=lambda a: (len(a), a))[-5:] == [f"Annotator {x}" for x in ("Z", "AA", "AB", "AC", "AD")]
    assert len(set(more.values())) == 30


def test_the_simulated_adjudicator_answers_rows_the_truth_lacks_with_the_first_annotators_answer(
        ls_desks, truth_samples, tmp_path):
    """The benches' adjudicator (``ops.demo.adjudicate_round``) answers from the truth; where the
    drafts have a row the truth lacks (a diarization mistake), it gives Annotator A's answer, so the
    round ends and the bench's row checks report the difference instead of the round waiting."""
    from ops import demo

    rnd = load_round(ROUND)
    tag = secrets.token_hex(3)
    samples = [dict(s, sample_id=f"{s['sample_id']}-lacking{tag}") for s in truth_samples[:4]]
    people = [f"person{i}-{tag}@lacking.test" for i in range(2)]
    root = DataRoot(tmp_path / "data")
    labels = _labels(rnd, samples, people)
    store.write_parquet(labels, root.labels(ROUND))
    judge = ls_desks.add(f"judge-{tag}@adjudicator.test", "adjudicator")
    adjudication.push_round(ls_desks, root, ROUND, samples)
    found = disagreements(labels, rnd)
    open_rows = {(d["sample_id"], d["row_index"]) for d in found}
    first = json.loads(adjudication.aliases_path(root, ROUND).read_text())["Annotator A"]
    # a disagreeing row the truth will not have, and a field of it where Annotator A's answer is not the other's
    d = min(found, key=lambda d: (d["sample_id"], d["row_index"]))
    sid, lacking, field = d["sample_id"], d["row_index"], d["fields"][0]
    mine = d["answers"][field][first]
    assert any(v != mine for a, v in d["answers"][field].items() if a != first)
    truth = {s["sample_id"]: s for s in samples}
    truth[sid] = dict(truth[sid], rows=[r for r in truth[sid]["rows"] if r["row_index"] != lacking])

    assert demo.adjudicate_round(ls_desks, ROUND, truth, judge) == len({s for s, _ in open_rows})
    pulled = adjudication.pull_round(ls_desks, root, ROUND).table.to_pylist()
    assert {(r["sample_id"], r["row_index"]) for r in pulled} == open_rows  # every open row answered
    given = {r["field"]: json.loads(r["value"]) for r in pulled if (r["sample_id"], r["row_index"]) == (sid, lacking)}
    assert given.get(field) == mine, (given, d["answers"])
