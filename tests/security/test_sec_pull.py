"""A hostile annotator poisons their own desk to stop, or to get into, the round's pull. On the
world's desks, a family part of the round is pushed to A and B; A answers it, a first pull
takes A's answers. Then A, through A's own login and the desk's real API, stores what Label
Studio accepts but no control of the editor sends: malformed answers (a text of numbers,
choices null, a from_name that is a number or null; result items that are strings, numbers or
null and a result that is no list, which the desk itself refuses), oversized ones (a text
value over 64 KB, an answer over 1 MB in texts under it), edited task data (participants a
number, sample_id a list, a row_index text or null, a window without its count, names
changed), malformed predictions of A's own, a task of A's own with a sample never pushed
(answered), and one window of a long sample deleted. B answers the whole part meanwhile. The
pull (``rescue annotate pull``) then completes, writes B's labels and keeps A's earlier ones,
counts none of A's poison, and names each poisoned task or answer the desk holds in one problem
line of A's (the task, the desk), on the terminal too."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from attack_kit import A_EMAIL, B_EMAIL, ROUND, answer_values, raw
from typer.testing import CliRunner
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow

LONG = 36  # rows of the windowed samples (5 windows each)


def _json_headers(world):
    return [*world.variants()["token"], ("Content-Type", "application/json")]


def _tasks(login_client, project_id: int) -> dict[str, list[dict]]:
    """sample_id -> the project's tasks of it (windows in order), with their answers."""
    out: dict[str, list[dict]] = {}
    for t in sorted(json.loads(login_client.export_tasks(project_id)), key=lambda t: t["id"]):
        out.setdefault(t["data"]["sample_id"], []).append(t)
    return out


def _answer_all(client, project_id, rnd, by_id, marker: str, utterance: str) -> None:
    from pipeline.annotation import ls_config
    for task in client.tasks(project_id):
        values = answer_values(rnd, by_id[task["data"]["sample_id"]], utterance, marker)
        client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values), lead_time=4.0)


def _lines(root, who: str, samples: set[str]) -> list[tuple]:
    from pipeline.paths import DataRoot
    table = pq.read_table(DataRoot(root).labels(ROUND)).to_pylist()
    return sorted((r["sample_id"], r["row_index"], r["field"], r["value"]) for r in table
                  if r["annotator"] == who and r["sample_id"] in samples)


ANSWER_ATTACKS = ("a text of numbers", "choices null", "a result item that is a string", "a result item that is a number",
                  "a result item that is null", "a from_name that is a number", "a from_name that is null",
                  "a result that is no list", "a text value over 64 KB", "an answer over 1 MB")


DESK_REFUSES = {"a result item that is a string", "a result item that is a number", "a result item that is null",
                "a result that is no list", "a prediction of strings, numbers and null", "a prediction that is no list"}


# Answers: each replaces the result of A's answer of one task (from A's own good result)
def _bad_answers(good: list[dict]) -> dict[str, object]:
    text = next(i for i in good if i["type"] == "textarea")
    choice = next(i for i in good if i["type"] == "choices")
    rest = [i for i in good if i is not text and i is not choice]
    big = [dict(text, from_name=f"{text['from_name']}_{n}", value={"text": ["y" * 60_000]}) for n in range(20)]
    out = {
        "a text of numbers": [*rest, choice, dict(text, value={"text": [1]})],
        "choices null": [*rest, text, dict(choice, value={"choices": None})],
        "a result item that is a string": [*good, "utterance_type_0"],
        "a result item that is a number": [*good, 7],
        "a result item that is null": [*good, None],
        "a from_name that is a number": [*rest, text, dict(choice, from_name=3)],
        "a from_name that is null": [*rest, text, dict(choice, from_name=None)],
        "a result that is no list": {"from_name": choice["from_name"], "value": choice["value"]},
        "a text value over 64 KB": [*rest, choice, dict(text, value={"text": ["x" * (64 * 1024 + 1)]})],
        "an answer over 1 MB": [*good, *big],
    }
    assert tuple(out) == ANSWER_ATTACKS
    return out


def _bad_data(data: dict) -> dict[str, dict]:
    units = [dict(u) for u in data["units"]]
    turns = [dict(t) for t in data["turns"]]
    return {
        "participants a number": dict(data, participants=3),
        "sample_id a list": dict(data, sample_id=[data["sample_id"]]),
        "a row_index that is text": dict(data, units=[dict(units[0], row_index="1"), *units[1:]]),
        "a row_index that is null": dict(data, turns=[dict(turns[0], row_index=None), *turns[1:]]),
        "names changed (data edited)": dict(data, participants=["Cara", "Dan", "Mallory"]),
    }


@pytest.fixture(scope="module")
def poisoned(world):
    from pipeline.annotation import push
    from pipeline.labelstudio.client import LabelStudioClient
    from pipeline.annotation.rounds import load_round
    from pipeline.cli import app
    from tests.annotation.ls_samples import make_sample

    rnd = load_round(ROUND)
    bad_answers = ANSWER_ATTACKS
    n_answers, n_data = len(bad_answers), 5
    samples = [make_sample(f"synthetic/poison_{i:02d}", "family", 5, seed=i) for i in range(n_answers + n_data + 2)]
    samples += [make_sample(f"synthetic/poison_long_{i}", "family", LONG, seed=i) for i in (1, 2)]
    by_id = {s["sample_id"]: s for s in samples}
    media = world.media[world.samples[0]["sample_id"]]  # A's own media already: no new file on any desk
    push.push_round(world.desks, ROUND, samples, [A_EMAIL, B_EMAIL], root=DataRoot(world.root),
                    media_url=lambda s: f"/data/local-files/?d={media}")

    a = LabelStudioClient(world.url(A_EMAIL), world.a.token)
    (project,) = [p for p in a.projects() if push.parse_project_key(p.key or "") == (ROUND, "family", A_EMAIL)]
    _answer_all(a, project.id, rnd, by_id, world.a_marker, "disclosure")
    runner, dr, env = CliRunner(), ["--data-root", str(world.root)], {"COLUMNS": "400"}
    first = runner.invoke(app, ["annotate", "pull", ROUND, *dr], env=env)
    assert first.exit_code == 0, first.output
    ids = set(by_id)
    a_before = _lines(world.root, A_EMAIL, ids)
    assert {x[0] for x in a_before} == ids, "control: the first pull took A's answers of every sample"

    # A's attacks, through A's login: each names the task it hit and the text its problem line must hold
    tasks = _tasks(a, project.id)
    port, headers, where = world.port(A_EMAIL), _json_headers(world), world.desks.where(A_EMAIL)
    attacks = []  # (what, response, text of its problem line)
    short = [s["sample_id"] for s in samples if "long" not in s["sample_id"]]
    answered = {}  # what -> (task id, A's good result)
    for what, sid in zip(bad_answers, short):
        (task,) = tasks[sid]
        ann = task["annotations"][0]
        body = json.dumps({"result": _bad_answers(ann["result"])[what]})
        r = raw(port, "PATCH", f"/api/annotations/{ann['id']}/", headers, body)
        if r.status >= 400:  # the desk's edit route refused it: a second answer of A's on the task instead
            r = raw(port, "POST", f"/api/tasks/{task['id']}/annotations/", headers, body)
        answered[what] = (task["id"], ann["result"], r)
    for what, sid in zip(_bad_data(tasks[short[0]][0]["data"]), short[n_answers:]):
        (task,) = tasks[sid]
        r = raw(port, "PATCH", f"/api/tasks/{task['id']}/", headers, json.dumps({"data": _bad_data(task["data"])[what]}))
        attacks.append((what, r, [f"task {task['id']} on {where}: "] if r.status < 400 else []))
    # predictions of A's own beside the push's (the pull reads them, with the export): malformed ones
    for (what, pred), sid in zip((("a prediction of strings, numbers and null", ["x", 7, None]),
                                  ("a prediction that is no list", {"from_name": 3, "value": None})),
                                 short[n_answers + n_data:]):
        (task,) = tasks[sid]
        r = raw(port, "POST", "/api/predictions/", headers,
                json.dumps({"task": task["id"], "result": pred, "model_version": "intruder", "score": 1.0}))
        attacks.append((what, r, []))  # nothing to name: the pull goes on, A's answer still counts
    long1, long2 = tasks["synthetic/poison_long_1"], tasks["synthetic/poison_long_2"]
    assert len(long1) == len(long2) == 5, "control: the long samples are windowed"
    window = dict(long1[0]["data"]["window"])
    window.pop("count")
    r = raw(port, "PATCH", f"/api/tasks/{long1[0]['id']}/", headers,
            json.dumps({"data": dict(long1[0]["data"], window=window)}))
    attacks.append(("a window without its count", r, [f"task {long1[0]['id']} on {where}: "] if r.status < 400 else []))
    r = raw(port, "DELETE", f"/api/tasks/{long2[1]['id']}/", headers)
    attacks.append(("a window deleted", r, [f"part 2 of 5 of synthetic/poison_long_2 deleted on the desk after the "
                                            f"push ({where})"] if r.status < 400 else []))
    phantom_data = {k: v for k, v in tasks[short[0]][0]["data"].items() if k != "content_sha"}
    r = raw(port, "POST", f"/api/projects/{project.id}/import", headers,
            json.dumps([{"data": dict(phantom_data, sample_id="synthetic/poison_never_given"),
                         "annotations": [{"result": tasks[short[0]][0]["annotations"][0]["result"]}]}]))
    phantom = [t for t in a.tasks(project.id) if t["data"]["sample_id"] == "synthetic/poison_never_given"]
    attacks.append(("a task of A's own, answered", r, [f"task {t['id']} on {where}: synthetic/poison_never_given was "
                                                       "never pushed" for t in phantom]))
    # what the desk holds of A's answer attacks (a route may answer 500 and have stored it, or not)
    held = {t["id"]: t for t in json.loads(a.export_tasks(project.id))}
    for what, (tid, good, r) in answered.items():
        stored = [x["id"] for x in held[tid]["annotations"] if x["result"] != good]
        attacks.append((what, r, [f"annotation {aid} of task {tid} on {where}: " for aid in stored]))
    a.close()

    # B answers the whole part meanwhile (through B's own login)
    b = LabelStudioClient(world.url(B_EMAIL), world.b.token)
    (b_project,) = [p for p in b.projects() if push.parse_project_key(p.key or "") == (ROUND, "family", B_EMAIL)]
    _answer_all(b, b_project.id, rnd, by_id, world.marks["B's answer marker"], "accusation")
    b.close()

    pulled = runner.invoke(app, ["annotate", "pull", ROUND, *dr], env=env)
    world.pushed()  # B's desk has the family part now
    yield {"attacks": attacks, "pulled": pulled, "ids": ids, "a_before": a_before, "samples": samples,
           "where": where}


def test_the_pull_completes_and_names_each_attack_in_one_line(world, poisoned):
    from pipeline.paths import DataRoot
    pulled, attacks = poisoned["pulled"], poisoned["attacks"]
    assert pulled.exit_code == 0, pulled.output[-3000:]
    taken = [(what, text) for what, _, texts in attacks for text in texts]
    stopped = {what for what, _, texts in attacks if not texts}
    # what the desk itself refuses (400, or 500 with nothing stored; a prediction's result of
    # strings is 400, one that is no list is stored as null): anything else it stores must be named
    assert stopped <= DESK_REFUSES, [f"{w}: {r.describe()[:200]}" for w, r, _ in attacks if w in stopped - DESK_REFUSES]
    problems = [p for p in pq.read_table(DataRoot(world.root).label_problems(ROUND)).to_pylist()
                if p["annotator"] == A_EMAIL]
    unnamed = [what for what, text in taken if len([p for p in problems if text in p["problem"]]) != 1]
    assert not unnamed, f"not named in exactly one problem line: {unnamed}\n" + \
        "\n".join(p["problem"] for p in problems)
    assert all("\n" not in p["problem"] for p in problems)
    out = pulled.output.splitlines()
    for what, text in taken:  # on the terminal too: one line each, naming A
        assert len([ln for ln in out if text in ln and A_EMAIL in ln]) == 1, (what, pulled.output[-4000:])
    assert not [p for p in pq.read_table(DataRoot(world.root).label_problems(ROUND)).to_pylist()
                if p["annotator"] == B_EMAIL and p["sample_id"] in poisoned["ids"]]


def test_every_other_label_is_written_and_no_poison_counts(world, poisoned):
    from pipeline.paths import DataRoot
    ids = poisoned["ids"]
    b_lines = _lines(world.root, B_EMAIL, ids)
    assert {x[0] for x in b_lines} == ids, "B's labels of the part A poisoned are missing"
    marker = world.marks["B's answer marker"]
    assert {x[0] for x in b_lines if marker in (x[3] or "")} == ids, "B's lines are not B's answers"
    rows = pq.read_table(DataRoot(world.root).labels(ROUND)).to_pylist()
    assert {r["sample_id"] for r in rows if r["annotator"] == B_EMAIL} >= {s["sample_id"] for s in world.samples}
    # A's earlier lines stand, nothing of the poison (no phantom sample, no 64 KB text) counts
    assert _lines(world.root, A_EMAIL, ids) == poisoned["a_before"]
    assert not [r for r in rows if "poison_never_given" in r["sample_id"] or len(r["value"] or "") > 10_000]
