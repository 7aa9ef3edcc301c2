"""Push and pull against the real Label Studio server of the session."""
from __future__ import annotations

import copy
import hashlib
import json

import pyarrow.parquet as pq
import pytest
from ls_samples import make_sample, release_head

from pipeline.annotation import ls_config, pull, push
from pipeline.labelstudio.client import LabelStudioAuthError, LabelStudioClient
from pipeline.annotation.rounds import load_round
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow


def _samples():
    return release_head() + [make_sample("synthetic/family_001", "family", 9),
                             make_sample("synthetic/family_002", "family", 7)]


def _annotate(client, project_id, rnd, samples, user_id, lead_time=12.0, edit=None):
    """Post each task's 'truth' (the input values) as the annotator's annotation."""
    by_id = {s["sample_id"]: s for s in samples}
    posted = {}
    for task in client.tasks(project_id):
        sample = by_id[task["data"]["sample_id"]]
        values = push.input_values(rnd, sample)
        if edit:
            edit(task["data"], values)
        result = ls_config.values_to_results(rnd, task["data"], values)
        posted[sample["sample_id"]] = client.create_annotation(task["id"], result, completed_by=user_id,
                                                              lead_time=lead_time)
    return posted


def test_push_is_idempotent_and_pull_is_validated_and_archived(ls_client, ls_desks, new_annotators, tmp_path):
    samples = _samples()
    annotators = new_annotators(2)
    rnd = load_round("emotion")
    report = push.push_round(ls_desks, "emotion", samples, annotators)
    n_couple = sum(s["scenario"] == "couple" for s in samples)
    assert report.created == 2 * len(samples) and report.updated == report.unchanged == 0
    assert sorted(report.projects) == sorted(push.project_key("emotion", sc, a)
                                             for sc in ("couple", "family") for a in annotators)
    # identical tasks in every annotator's project, with the input values as predictions
    for title, pid in report.projects.items():
        tasks = ls_client.tasks(pid)
        assert len(tasks) == (n_couple if "/couple/" in title else len(samples) - n_couple)
        assert all(t["total_predictions"] == 1 for t in tasks)

    again = push.push_round(ls_desks, "emotion", samples, annotators)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 2 * len(samples))

    users = {u["email"]: u["id"] for u in ls_client.users()}
    a, b = annotators
    couple_a = report.projects[push.project_key("emotion", "couple", a)]
    couple_b = report.projects[push.project_key("emotion", "couple", b)]

    def disagree(data, values):  # annotator b picks another utterance type on the first unit
        first = data["units"][0]["row_index"]
        values[first] = dict(values[first], utterance_type="withdrawal")
    _annotate(ls_client, couple_a, rnd, samples, users[a])
    _annotate(ls_client, couple_b, rnd, samples, users[b], edit=disagree)
    # b skips one family task; a annotates one family task with an out-of-range intensity
    fam_b = ls_client.tasks(report.projects[push.project_key("emotion", "family", b)])[0]
    ls_client.create_annotation(fam_b["id"], [], completed_by=users[b], was_cancelled=True)
    fam_a = ls_client.tasks(report.projects[push.project_key("emotion", "family", a)])[0]
    bad = [{"from_name": "internal_emotion__1__intensity_0", "to_name": "turn_0", "type": "number",
            "value": {"number": 14}}]
    ls_client.create_annotation(fam_a["id"], bad, completed_by=users[a])

    root = tmp_path / "data"
    result = pull.pull_round(ls_desks, "emotion", DataRoot(root), annotators=annotators)
    # raw exports archived under their sha256, byte-identical to what Label Studio returned
    assert len(result.snapshots) == 4 and result.new_snapshots == 4
    for path in result.snapshots:
        assert path.name == hashlib.sha256(path.read_bytes()).hexdigest() + ".json"
        assert json.loads(path.read_bytes())
    labels = result.labels.to_pylist()
    assert {r["annotator"] for r in labels} == set(annotators)
    by_key = {(r["sample_id"], r["row_index"], r["annotator"], r["field"]): json.loads(r["value"]) for r in labels}
    head = [s for s in samples if s["scenario"] == "couple"]
    for s in head:
        first = next(r for r in s["rows"] if rnd.applies(r["primary_speaker"]))
        assert by_key[(s["sample_id"], first["row_index"], a, "utterance_type")] == first["utterance_type"]
        assert by_key[(s["sample_id"], first["row_index"], b, "utterance_type")] == "withdrawal"
        assert by_key[(s["sample_id"], first["row_index"], a, "internal_emotion")] == first["internal_emotion"]
    assert all(r["lead_time_s"] == 12.0 for r in labels if r["annotator"] == a and "family" not in r["sample_id"])
    problems = result.problems.to_pylist()
    assert {"sample_id": fam_b["data"]["sample_id"], "annotator": b, "problem": "skipped (cancelled) by the annotator"} \
        .items() <= next(p for p in problems if p["annotator"] == b).items()
    fam_a_problems = {(p["field"], p["problem"]) for p in problems if p["annotator"] == a}
    assert ("internal_emotion.intensity", "out of range [0, 10]") in fam_a_problems
    assert ("utterance_type", "missing required field") in fam_a_problems
    assert result.progress[(b, "family")] == (1, 2) and result.progress[(a, "couple")] == (n_couple, n_couple)

    # stored tables; an unchanged state adds nothing
    stored = pq.read_table(DataRoot(root).labels("emotion"))
    assert stored.equals(result.labels)
    before = DataRoot(root).labels("emotion").read_bytes()
    again = pull.pull_round(ls_desks, "emotion", DataRoot(root), annotators=annotators)
    archived = list((root / "annotation" / "exports").rglob("*.json"))
    records = [p for p in archived if p.name.endswith(".predictions.json")]  # one beside each export
    assert again.new_snapshots == 0 and len(archived) - len(records) == 4 and len(records) == 4
    assert DataRoot(root).labels("emotion").read_bytes() == before


def test_changed_drafts_update_unannotated_tasks_and_report_annotated_ones(ls_client, ls_desks, new_annotators):
    samples = [make_sample(f"synthetic/couple_{i:03d}", "couple", 8) for i in range(3)]
    annotators = new_annotators(2)
    rnd = load_round("transcript")
    report = push.push_round(ls_desks, "transcript", samples, annotators)
    pid = report.projects[push.project_key("transcript", "couple", annotators[0])]
    users = {u["email"]: u["id"] for u in ls_client.users()}
    annotated = ls_client.find_tasks(pid, "sample_id", samples[0]["sample_id"])
    assert len(annotated) == 1
    data = annotated[0]["data"]
    ls_client.create_annotation(annotated[0]["id"], ls_config.values_to_results(
        rnd, data, push.input_values(rnd, samples[0])), completed_by=users[annotators[0]])

    changed = copy.deepcopy(samples)
    for s in changed[:2]:
        s["rows"][1]["dialogue_cleaned"] = "a corrected draft line"
    again = push.push_round(ls_desks, "transcript", changed, annotators)
    assert again.created == 0
    assert again.changed_after_annotation == [(annotators[0], samples[0]["sample_id"])]
    assert again.updated == 3 and again.unchanged == 2  # sample 0 for annotator b, sample 1 for both
    task = ls_client.find_tasks(pid, "sample_id", samples[1]["sample_id"])[0]
    assert task["data"]["turns"][1]["text"] == "a corrected draft line"
    raw = json.loads(ls_client.export_snapshot(pid))
    pred = next(t for t in raw if t["data"]["sample_id"] == samples[1]["sample_id"])["predictions"]
    assert len(pred) == 1 and {"text": ["a corrected draft line"]} in [r["value"] for r in pred[0]["result"]]
    kept = ls_client.find_tasks(pid, "sample_id", samples[0]["sample_id"])[0]
    assert kept["data"]["turns"][1]["text"] == samples[0]["rows"][1]["dialogue_cleaned"]  # annotated: untouched
    assert kept["total_annotations"] == 1


def test_too_few_annotators_is_a_clear_error(ls_client, ls_desks, new_annotators):
    one = new_annotators(1)
    with pytest.raises(push.PushError, match="needs 2 annotators, 1 available"):
        push.push_round(ls_desks, "relation", [make_sample("synthetic/x", "couple", 4)], one)
    with pytest.raises(push.PushError, match="not annotators with a desk: nobody@rescue.test"):
        push.push_round(ls_desks, "relation", [make_sample("synthetic/x", "couple", 4)],
                        one + ["nobody@rescue.test"])
    # roles are explicit: a login that is not an annotator (here an adjudicator, and a bare
    # login of the server with no role at all) is never given a round, named or not
    judge = ls_desks.add("judge-" + one[0], "adjudicator")
    ls_client.create_user("bare-" + one[0])
    with pytest.raises(push.PushError, match=f"not annotators with a desk: {judge}"):
        push.push_round(ls_desks, "relation", [make_sample("synthetic/x", "couple", 4)], one + [judge])
    with pytest.raises(push.PushError, match="needs 2 annotators, 1 available"):
        push.push_round(ls_desks, "relation", [make_sample("synthetic/x", "couple", 4)])
    assert push.choose_annotators(ls_desks, load_round("relation"), None, 1) == one


def test_wrong_token_gives_an_authentication_error_without_the_token(ls_server, ls_desks, new_annotators,
                                                                     monkeypatch):
    wrong = "0123456789abcdef0123456789abcdef01234567"
    client = LabelStudioClient(ls_server.url, wrong)
    new_annotators(2)
    monkeypatch.setattr(ls_desks, "client", lambda email: client)  # every desk answers with the wrong token
    with pytest.raises(LabelStudioAuthError) as err:
        push.push_round(ls_desks, "emotion", [make_sample("synthetic/y", "couple", 4)])
    message = str(err.value)
    assert "rejected the API token" in message and "service.json" in message  # where a desk's token lives
    assert wrong not in message and wrong not in repr(client)


class _StandInModel:
    """A STAND-IN for an LLM behind an OpenAI-compatible /chat/completions endpoint (no model can
    run here): it answers each row with a fixed utterance type, once with an invalid label."""

    def __init__(self):
        import http.server
        import threading

        prompts = self.prompts = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][0]["content"]
                prompts.append(prompt)
                rows = json.loads(prompt.split("Dialogue:\n", 1)[1])
                answer = {"rows": [{"row_index": r["row_index"], "utterance_type": "request" if r["row_index"] != 2
                                    else "sarcasm", "tone_of_voice": "even"} for r in rows]}
                out = json.dumps({"choices": [{"message": {"content": json.dumps(answer)}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_model_pre_annotation_from_an_openai_compatible_endpoint(ls_client, ls_desks, new_annotators):
    from pipeline.annotation.prelabel import ModelPrelabeler

    model = _StandInModel()
    try:
        labeler = ModelPrelabeler(model.url, "stand-in")
        samples = [make_sample("synthetic/model_001", "couple", 6)]
        annotators = new_annotators(2)
        report = push.push_round(ls_desks, "emotion", samples, annotators, prelabel=labeler,
                                 prelabel_source=labeler.source)
        broken = ModelPrelabeler("http://127.0.0.1:9/v1", "unreachable", timeout=2)
        assert broken(load_round("emotion"), samples[0]) == {} and broken.failures  # the push would go on
    finally:
        model.server.shutdown()
    assert len(model.prompts) == 1 and "utterance_type: one of" in model.prompts[0] and "accusation" in model.prompts[0]
    pid = report.projects[push.project_key("emotion", "couple", annotators[0])]
    project = next(p for p in ls_client.projects() if p.id == pid)
    assert project.model_version == "emotion-v1-model-stand-in"
    task = json.loads(ls_client.export_snapshot(pid))[0]
    pred = task["predictions"][0]
    assert pred["model_version"] == project.model_version  # Label Studio pre-fills only this version
    values = {(r["from_name"], tuple(r["value"].get("choices") or r["value"].get("text"))) for r in pred["result"]}
    units = {u["row_index"]: i for i, u in enumerate(task["data"]["units"])}
    assert ("utterance_type_%d" % units[1], ("request",)) in values
    assert not any(name == "utterance_type_%d" % units[2] for name, _ in values)  # the invalid label is dropped
    assert ("tone_of_voice_%d" % units[2], ("even",)) in values


def test_a_long_sample_is_pushed_in_windows_and_pulled_as_the_whole(ls_client, ls_desks, new_annotators, tmp_path):
    """45 transcript units at 20 per task -> 3 windows per annotator; a re-push changes nothing;
    annotating every window through the API pulls exactly the labels of the whole sample."""
    from pipeline.annotation.pull import parse_annotation

    sample = make_sample("synthetic/family_045", "family", 45)
    annotators = new_annotators(2)
    rnd = load_round("transcript")
    report = push.push_round(ls_desks, "transcript", [sample], annotators, window=20)
    assert report.created == 2 * 3
    again = push.push_round(ls_desks, "transcript", [sample], annotators, window=20)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 6)
    users = {u["email"]: u["id"] for u in ls_client.users()}
    a = annotators[0]
    pid = report.projects[push.project_key("transcript", "family", a)]
    tasks = ls_client.tasks(pid)
    assert sorted(t["data"]["window"]["index"] for t in tasks) == [0, 1, 2]
    assert all(len(t["data"]["units"]) <= 20 for t in tasks)
    values = push.input_values(rnd, sample)
    for ri in values:
        values[ri]["dialogue_cleaned"] = f"corrected line {ri}"
    for task in tasks[:2]:
        ls_client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                    completed_by=users[a])
    partial = pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[a], write=False)
    assert partial.labels.num_rows == 0 and partial.progress[(a, "family")] == (0, 1)
    assert "2 of 3 parts submitted" in partial.problems.to_pylist()[0]["problem"]
    ls_client.create_annotation(tasks[2]["id"], ls_config.values_to_results(rnd, tasks[2]["data"], values),
                                completed_by=users[a])
    result = pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[a], write=False)
    assert result.problems.num_rows == 0 and result.progress[(a, "family")] == (1, 1)
    whole = ls_config.build_task_data(rnd, sample)
    want, problems = parse_annotation(rnd, whole, {"result": ls_config.values_to_results(rnd, whole, values)}, a)
    assert problems == []
    meta = ("annotation_id", "lead_time_s", "created_at", "updated_at")
    strip = lambda rows: sorted((r["row_index"], r["field"], r["value"]) for r in rows)  # noqa: E731
    got = [{k: v for k, v in r.items() if k not in meta} for r in result.labels.to_pylist()]
    assert strip(got) == strip(want) and len(got) == 3 * 45
    project = ls_client._json("GET", f"/api/projects/{pid}/", "read the project")
    assert project["show_instruction"] and "Spoken to *" in project["expert_instruction"]  # the panel

    # cut differently (windows of 10): a's annotated sample is left as it is; b's tasks are replaced
    recut = push.push_round(ls_desks, "transcript", [sample], annotators, window=10)
    assert recut.changed_after_annotation == [(a, sample["sample_id"])]
    assert recut.created == 5 and recut.updated == 3
    b_tasks = ls_client.tasks(report.projects[push.project_key("transcript", "family", annotators[1])])
    assert sorted(t["data"]["window"]["index"] for t in b_tasks) == [0, 1, 2, 3, 4]
    assert {t["data"]["window"]["count"] for t in b_tasks} == {5}
    assert len(ls_client.tasks(pid)) == 3
    assert pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[a], write=False).labels.equals(result.labels)


def test_a_client_of_label_studio_on_the_loopback_keeps_no_connection_open(ls_server, ls_credentials):
    """Label Studio's own server makes a kept-alive connection wait for the client's delayed ACK
    (40 ms a request, see ``client.connection_limits``): on 127.0.0.1 every request gets a new
    connection, and none is left in the pool after it; a remote Label Studio keeps them."""
    client = LabelStudioClient(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"])
    try:
        for _ in range(3):
            assert client.request("GET", "/api/version", "version").status_code == 200
        assert client._http._transport._pool.connections == []  # (httpx's pool of idle connections)
    finally:
        client.close()
    remote = LabelStudioClient("https://labelstudio.example.org", "x" * 40)
    assert remote._http._transport._pool._max_keepalive_connections > 0
    remote.close()


def test_only_the_desk_owners_annotations_count_in_an_export():
    """(no server) An export of A's project holding an answer by another login of A's desk: that
    answer is reported naming the desk, and counts for nobody; A's own answer counts."""
    rnd = load_round("emotion")
    s1, s2 = make_sample("synthetic/owner_1", "couple", 3), make_sample("synthetic/owner_2", "couple", 3)
    tasks = []
    for tid, (sample, author) in enumerate(((s1, 7), (s2, 9)), start=1):
        data = ls_config.build_tasks_data(rnd, sample)[0]
        result = ls_config.values_to_results(rnd, data, push.input_values(rnd, sample))
        tasks.append({"id": tid, "data": data, "annotations": [{"id": 40 + tid, "completed_by": author,
                                                                 "result": result, "updated_at": "2026-01-01"}]})
    where = "a@x.test's desk (http://127.0.0.1:9001)"
    labels, problems, done = pull.parse_export(rnd, tasks, "a@x.test", {7: "a@x.test", 9: "x@x.test"},
                                               owner_id=7, where=where)
    assert {r["sample_id"] for r in labels} == {s1["sample_id"]} and done == 1
    assert {r["annotator"] for r in labels} == {"a@x.test"}
    assert [p["problem"] for p in problems] == [f"annotation 42 by x@x.test on {where}: not the desk's owner; "
                                                "not counted"]
