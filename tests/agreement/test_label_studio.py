"""End to end through a real Label Studio: push a round, SIMULATED annotators answer through the
API at a known error rate, pull, measure, gate, adjudicate in Label Studio, build gold."""
from __future__ import annotations

import random

import numpy as np
import pytest

from pipeline.quality import adjudication
from pipeline.quality import agreement, gates
from pipeline.quality import gold
from pipeline.quality.disagreements import disagreements
from pipeline.synthetic import annotators as simulate
from pipeline.annotation import pull, push
from pipeline.annotation.rounds import load_round
from pipeline.synthetic.annotators import SimulatedAnnotator
from pipeline.paths import DataRoot

ERROR = 0.3
# Monte Carlo SD of alpha at ~500 units, 3 annotators, k=7: about 0.02; 0.08 is 4 SD.
TOLERANCE = 0.08


@pytest.mark.slow
def test_round_through_label_studio(ls_client, ls_desks, truth_samples, tmp_path):
    rnd = load_round("relation")
    f = rnd.field("relation_cycle_state")
    labels = list(f.labels("couple")) + [""]
    k = len(labels)
    rng = random.Random(11)
    truth = []
    for copy in range(2):  # ~530 therapist rows: enough units for the tolerance above
        for s in truth_samples:
            if s["scenario"] != "couple":
                continue
            rows = [dict(r, relation_cycle_state=rng.choice(labels)) if r["primary_speaker"] == "Therapist" else r
                    for r in s["rows"]]
            truth.append({**s, "sample_id": f"{s['sample_id']}-{copy}", "rows": rows})
    by_id = {s["sample_id"]: s for s in truth}

    # annotator i errs to the label i+1 places on: two annotators never agree on a wrong label
    shift = lambda i: {"relation_cycle_state": {t: {labels[(labels.index(t) + i) % k]: 1.0} for t in labels}}  # noqa: E731
    sims = [SimulatedAnnotator(f"a{i}", {"relation_cycle_state": ERROR}, shift(i + 1), seed=i,
                               coverage=0.85 if i == 2 else 1.0)  # a2 skips (cancels) some tasks
            for i in range(3)]
    emails = [f"{a.name}@agreement.test" for a in sims]
    for e in emails:
        ls_desks.add(e)
    users = {e: ls_desks.owner_id(e) for e in emails}  # each annotator's id on their desk
    report = push.push_round(ls_desks, "relation", truth, emails, k=3, prelabel=None)
    for a, e in zip(sims, emails):
        pid = report.projects[push.project_key("relation", "couple", e)]
        done = a.annotate_tasks(ls_client, pid, rnd, by_id, completed_by=users[e])
        assert done == sum(a.does(s["sample_id"]) for s in truth)
    skipped = [t for t in ls_client.tasks(report.projects[push.project_key("relation", "couple", emails[2])])
               if not sims[2].does(t["data"]["sample_id"])]
    assert skipped
    for t in skipped:  # what the Skip button sends
        ls_client.create_annotation(t["id"], [], completed_by=users[emails[2]], was_cancelled=True)
    root = tmp_path / "data"
    labels_table = pull.pull_round(ls_desks, "relation", DataRoot(root), annotators=emails).labels
    assert labels_table.num_rows > 0
    assert set(labels_table.column("scenario").to_pylist()) == {"couple"}  # the project's scenario, kept

    out = agreement.measure_round(DataRoot(root), "relation")
    fa = next(x for x in out.report.fields if x.field == "relation_cycle_state")
    confusions = []
    for i in range(3):
        c = (1 - ERROR) * np.eye(k)
        for t in range(k):
            c[t, (t + i + 1) % k] += ERROR
        confusions.append(c)
    expected = simulate.expected_alpha(np.full(k, 1 / k), confusions, 1 - np.eye(k))
    assert fa.n_pairable >= 400
    assert abs(fa.alpha - expected) < TOLERANCE, (fa.alpha, expected)
    # the gate trips at the round's configured threshold (0.667 in relation.yaml)
    assert fa.threshold == f.threshold == 0.667 and expected < fa.threshold
    assert fa.passed is False and out.gate["passed"] is False
    assert gates.gate_records(DataRoot(root))[0]["blocks_release"] is True
    assert (root / "annotation" / "labels" / "relation.agreement" / "report.html").is_file()
    # the half-done annotator is named, with what is missing; alpha uses what exists
    missing = [i for i in out.report.issues if i["kind"] == "missing"]
    assert [i["annotator"] for i in missing] == [emails[2]]
    assert f"in {len(skipped)} samples" in missing[0]["message"]
    cov = {a["annotator"]: a["coverage"] for a in fa.annotators}
    assert cov[emails[0]] == 1.0 and cov[emails[2]] < 1.0

    # adjudication in Label Studio: every disagreement becomes a task with one prediction per annotator
    todo = disagreements(labels_table, rnd)
    assert todo
    with pytest.raises(adjudication.NoAdjudicator, match="nobody is an adjudicator"):  # roles are explicit
        adjudication.push(ls_desks, rnd, labels_table, truth)
    judge_email = ls_desks.add("sim-adjudicator@agreement.test", "adjudicator")
    pushed = adjudication.push(ls_desks, rnd, labels_table, truth)
    assert pushed.disagreements == len(todo) and pushed.tasks_created == len({d["sample_id"] for d in todo})
    assert list(pushed.projects) == [f"couple/{judge_email}"]  # on the adjudicator's desk only
    pid = pushed.projects[f"couple/{judge_email}"]
    # the adjudication project is per round and scenario, shared on the server: take this test's task
    mine = {d["sample_id"] for d in todo}
    task = next(t for t in ls_client.tasks(pid) if t["data"]["sample_id"] in mine)
    preds = ls_client._json("GET", "/api/predictions/", "list predictions", params={"task": task["id"]})
    # blind: each annotator's answer under the round's letter, never the e-mail
    assert sorted(p["model_version"] for p in preds) == sorted(adjudication.assign_aliases("relation", emails).values())
    again = adjudication.push(ls_desks, rnd, labels_table, truth)
    assert again.tasks_created == 0 and again.tasks_unchanged == pushed.tasks_created

    adj_user = ls_desks.owner_id(judge_email)
    judge = SimulatedAnnotator("adjudicator")  # answers the truth
    assert judge.annotate_tasks(ls_client, pid, rnd, by_id, completed_by=adj_user) == pushed.tasks_created
    adjudicated = adjudication.pull_round(ls_desks, DataRoot(root), "relation").table
    adj_rows = set(zip(adjudicated.column("sample_id").to_pylist(), adjudicated.column("row_index").to_pylist()))
    assert adj_rows == {(d["sample_id"], d["row_index"]) for d in todo}  # every disagreement resolved
    assert set(adjudicated.column("annotator").to_pylist()) == {"sim-adjudicator@agreement.test"}
    assert set(adjudicated.column("scenario").to_pylist()) == {"couple"}

    res = gold.build_gold(truth, labels_table, [rnd], adjudicated, strict=True)
    assert res.unresolved == []
    prov = {(p["sample_id"], p["row_index"], p["field"]): p for p in res.provenance.to_pylist()}
    for s in res.samples:
        for r in s["rows"]:
            if r["primary_speaker"] != "Therapist":
                continue
            t = next(x for x in by_id[s["sample_id"]]["rows"] if x["row_index"] == r["row_index"])
            p = prov[(s["sample_id"], r["row_index"], "relation_cycle_state")]
            assert r["relation_cycle_state"] == t["relation_cycle_state"], p  # truth wherever agreed or adjudicated
            assert p["adjudicated"] == ((s["sample_id"], r["row_index"]) in adj_rows)
