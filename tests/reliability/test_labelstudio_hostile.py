"""Label Studio faults against the session's real server: a pull of some annotators keeps the
others' labels, tasks and projects deleted after the push are reported (never dropped in
silence), two pushes at once (two processes) make no duplicate project or task."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.annotation import ls_config, pull, push
from pipeline.annotation.pushed import read_pushed
from tests.annotation.ls_samples import make_sample
from pipeline.annotation.rounds import load_round  # noqa: E402
from pipeline.paths import DataRoot  # noqa: E402

pytestmark = pytest.mark.slow
ROUND = "emotion"


@pytest.fixture
def two(ls_desks, request):
    """Two fresh annotators of this test (unique e-mails; projects are per annotator), each with a
    "desk" in ``ls_desks`` (the session server)."""
    stem = request.node.name.lower().replace("_", "-")[:40]
    out = [f"{stem}-{i}@reliability.test" for i in (0, 1)]
    for email in out:
        ls_desks.add(email)
    return out


def _samples(tag: str) -> list[dict]:
    return [make_sample(f"rel_{tag}/s1", "couple", 4), make_sample(f"rel_{tag}/s2", "couple", 3)]


def _annotate(client, project_id, samples, user_id, intensity=None):
    rnd = load_round(ROUND)
    by_id = {s["sample_id"]: s for s in samples}
    for task in client.tasks(project_id):
        values = push.input_values(rnd, by_id[task["data"]["sample_id"]])
        if intensity is not None:
            for v in values.values():
                for em in v.get("internal_emotion") or []:
                    em["intensity"] = intensity
        client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                 completed_by=user_id)


def _pushed_and_annotated(ls_client, ls_desks, two, root, tag):
    samples = _samples(tag)
    report = push.push_round(ls_desks, ROUND, samples, two, root=DataRoot(root))
    users = {u["email"]: u["id"] for u in ls_client.users()}
    for n, who in enumerate(two):
        _annotate(ls_client, report.projects[push.project_key(ROUND, "couple", who)], samples, users[who],
                  intensity=3 + 4 * n)  # the two disagree on every intensity
    return samples, report


def _lines(root, who=None):
    rows = pq.read_table(DataRoot(root).labels(ROUND)).to_pylist()
    return sorted((r["sample_id"], r["row_index"], r["annotator"], r["field"], r["value"])
                  for r in rows if who is None or r["annotator"] == who)


def test_the_push_records_who_was_given_which_samples(ls_desks, two, tmp_path):
    samples = _samples("rec")
    push.push_round(ls_desks, ROUND, samples, two, root=DataRoot(tmp_path))
    assert read_pushed(DataRoot(tmp_path), ROUND) == {f"couple/{a}": sorted(s["sample_id"] for s in samples) for a in two}


def test_pulling_one_annotator_keeps_the_other_annotators_labels(ls_client, ls_desks, two, tmp_path):
    a, b = two
    _pushed_and_annotated(ls_client, ls_desks, two, tmp_path, "merge")
    full = pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=two)
    assert {r for r in full.labels.column("annotator").to_pylist()} == {a, b}
    before_b = _lines(tmp_path, b)
    assert before_b
    again = pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=[a])
    assert _lines(tmp_path, b) == before_b  # b's answers are still there, unchanged
    assert set(again.labels.column("annotator").to_pylist()) == {a, b}
    assert b in again.kept and b in again.summary()


def test_pulling_an_annotator_without_a_project_keeps_everything_and_says_so(ls_client, ls_desks, two, tmp_path):
    _pushed_and_annotated(ls_client, ls_desks, two, tmp_path, "nobody")
    pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=two)
    before = _lines(tmp_path)
    res = pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=["nobody@reliability.test"])
    assert _lines(tmp_path) == before
    assert any("nobody@reliability.test has no annotator's desk" in p["problem"] for p in res.problems.to_pylist())
    # an annotator with a desk but no project in the round
    idle = ls_desks.add("idle-" + two[0])
    res = pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=[idle])
    assert _lines(tmp_path) == before
    assert any(f"{idle} has no project in round {ROUND}" in p["problem"] for p in res.problems.to_pylist())


def test_a_task_deleted_after_the_push_is_reported_and_its_labels_kept(ls_client, ls_desks, two, tmp_path):
    """(`rescue annotate status` naming such a task, on real desks: tests/annotation/test_crash_and_cli.py)"""
    a, b = two
    samples, report = _pushed_and_annotated(ls_client, ls_desks, two, tmp_path, "deltask")
    pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=two)
    before = _lines(tmp_path)
    pid = report.projects[push.project_key(ROUND, "couple", a)]
    victim = next(t for t in ls_client.tasks(pid) if t["data"]["sample_id"] == samples[0]["sample_id"])
    ls_client.request("DELETE", f"/api/tasks/{victim['id']}/", "delete a task (test)")
    res = pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=two)
    assert res.missing == [(samples[0]["sample_id"], a)]
    probs = [p for p in res.problems.to_pylist() if "gone from Label Studio" in p["problem"]]
    assert [(p["sample_id"], p["annotator"]) for p in probs] == [(samples[0]["sample_id"], a)]
    assert "deleted on the desk after the push" in probs[0]["problem"] and samples[0]["sample_id"] in res.summary()
    assert _lines(tmp_path) == before  # what was pulled for it before is kept
    # the live check (for `rescue annotate status`) names it too
    assert pull.missing_tasks(ls_desks, DataRoot(tmp_path), [ROUND]) == [(ROUND, "couple", a, samples[0]["sample_id"])]


def test_a_project_deleted_after_the_push_is_reported_per_sample(ls_client, ls_desks, two, tmp_path):
    a, b = two
    samples, report = _pushed_and_annotated(ls_client, ls_desks, two, tmp_path, "delproj")
    pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path), annotators=two)
    ls_client.request("DELETE", f"/api/projects/{report.projects[push.project_key(ROUND, 'couple', b)]}/",
                      "delete a project (test)")
    res = pull.pull_round(ls_desks, ROUND, DataRoot(tmp_path))
    mine = [m for m in res.missing if m[1] in two]
    assert sorted(mine) == sorted((s["sample_id"], b) for s in samples)
    assert _lines(tmp_path, b)  # b's earlier answers are kept


_PUSHER = textwrap.dedent("""
    import sys, time, json
    from pathlib import Path
    from tests.annotation.ls_samples import make_sample
    from pipeline.labelstudio.client import LabelStudioClient
    from pipeline.annotation import push
    from pipeline.paths import DataRoot
    url, token, root, go, *annotators = sys.argv[1:]
    client = LabelStudioClient(url, token)

    class SharedDesks:  # every annotator's "desk" is the session server (as tests/conftest.py's OneServerDesks)
        def people(self, role=None):
            return sorted(annotators) if role in (None, "annotator") else []

        def client(self, email):
            return client

        def stage_media(self, email, urls):
            return []

    samples = [make_sample(f"rel_race/s{i}", "couple", 3) for i in range(30)]
    while not Path(go).exists():
        time.sleep(0.01)
    rep = push.push_round(SharedDesks(), "emotion", samples, annotators, root=DataRoot(root))
    print(json.dumps({"created": rep.created}))
""")


def test_two_pushes_at_once_make_no_duplicate_project_or_task(ls_server, ls_client, ls_credentials, two, tmp_path):
    script = tmp_path / "pusher.py"
    script.write_text(_PUSHER)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = [sys.executable, str(script), ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"],
            str(tmp_path / "root"), str(go), *two]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    import time
    time.sleep(3)  # both imported and waiting
    go.touch()
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    created = sorted(json.loads(o.strip().splitlines()[-1])["created"] for o, _ in outs)
    assert created == [0, 60], created  # one push made every task, the other found them (without the lock: [60, 60])
    for who in two:
        key = push.project_key(ROUND, "couple", who)
        projects = [p for p in ls_client.projects() if p.key == key]
        assert len(projects) == 1, f"{len(projects)} projects for {key}"
        ids = [t["data"]["sample_id"] for t in ls_client.tasks(projects[0].id)]
        assert sorted(ids) == sorted(set(ids)) and len(ids) == 30


# --- adjudicators never adjudicate what they annotated ---------------------------------------

def test_an_annotator_cannot_adjudicate_the_round_they_annotated(ls_client, ls_desks, two, tmp_path):
    """Real desks refuse a second role to anyone (tests/annotation/test_desks.py); should an
    annotator of the round still become an adjudicator (here: the test arrangement, which keeps
    no such rule), the adjudication pull refuses their answers and writes nothing."""
    from pipeline.quality import adjudication

    a, b = two
    rnd = load_round("relation")
    samples = _samples("judge")
    report = push.push_round(ls_desks, "relation", samples, two, prelabel=None, root=DataRoot(tmp_path))
    users = {u["email"]: u["id"] for u in ls_client.users()}
    flip = {"": "pursue_withdraw", "pursue_withdraw": "mixed_transition", "mixed_transition": ""}
    by_id = {s["sample_id"]: s for s in samples}
    for who in two:
        pid = report.projects[push.project_key("relation", "couple", who)]
        for task in ls_client.tasks(pid):
            values = push.input_values(rnd, by_id[task["data"]["sample_id"]])
            if who == b:  # b disagrees on every relation label
                for v in values.values():
                    v["relation_cycle_state"] = flip[v.get("relation_cycle_state") or ""]
            ls_client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                        completed_by=users[who])
    pull.pull_round(ls_desks, "relation", DataRoot(tmp_path), annotators=two)
    ls_desks.add(a, "adjudicator")  # annotator a is made an adjudicator of the round they annotated
    summary = adjudication.push_round(ls_desks, DataRoot(tmp_path), "relation", samples=samples)
    assert summary.disagreements > 0
    pid = summary.projects[f"couple/{a}"]
    mine = [t for t in ls_client.tasks(pid) if t["data"]["sample_id"] in by_id]
    try:
        for task in mine:  # annotator a "adjudicates" their own round
            values = push.input_values(rnd, by_id[task["data"]["sample_id"]])
            ls_client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                        completed_by=users[a])
        with pytest.raises(adjudication.AdjudicatorIsAnnotator) as err:
            adjudication.pull_round(ls_desks, DataRoot(tmp_path), "relation")
        assert a in str(err.value) and "cannot adjudicate" in str(err.value) and "relation" in str(err.value)
        assert not DataRoot(tmp_path).adjudications("relation").exists()  # nothing written
        # another data root sharing the server takes none of these answers (and is not refused)
        import pyarrow as pa

        from pipeline import schemas, store

        other = tmp_path / "other-root"
        store.write_parquet(pa.Table.from_pylist([{"round": "relation", "sample_id": "elsewhere/x", "scenario": "couple",
                                                   "row_index": 1, "annotator": "x@else.test", "field": "f",
                                                   "value": "1"}], schema=schemas.LABELS),
                            DataRoot(other).labels("relation"))
        theirs = adjudication.pull_round(ls_desks, DataRoot(other), "relation").table
        assert not set(theirs.column("sample_id").to_pylist()) & set(by_id)
    finally:  # the adjudication project is shared by the session's tests
        for task in mine:
            ls_client.request("DELETE", f"/api/tasks/{task['id']}/", "delete a test task")


def test_every_annotator_means_every_registered_annotator_and_never_an_adjudicator(ls_client, ls_desks, two,
                                                                                     tmp_path):
    """With ``annotators`` omitted a round goes to every person registered as an annotator:
    never to an adjudicator, never to a login that has no annotator's role."""
    from pipeline import corpus
    from pipeline.annotation import intake

    judge = ls_desks.add("judge-" + two[0], "adjudicator")
    stranger = "stranger-" + two[0]
    ls_client.create_user(stranger)  # a login of the server, registered as nobody
    corpus.merge_into_work(DataRoot(tmp_path), [make_sample("rel_default/s1", "couple", 3)])
    opened = intake.open_round(ls_desks, DataRoot(tmp_path), ROUND, None)
    assert opened.report.annotators == sorted(two)
    assert sorted(opened.report.projects) == sorted(push.project_key(ROUND, "couple", a) for a in two)
    owners = {parsed[2] for p in ls_client.projects() if (parsed := push.parse_project_key(p.key))}
    assert judge not in owners and stranger not in owners
    assert read_pushed(DataRoot(tmp_path), ROUND) == {f"couple/{a}": ["rel_default/s1"] for a in two}
