"""(no server) Whatever an annotator stores in their project - any JSON in place of any part of
an answer or of a task's data, a task of any shape - the pull's chain (parse, windows, acceptance,
what the pull trusts) gives label lines and problem lines, never an exception: one annotator
cannot stop the pull for everyone."""
from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ls_samples import make_sample

from pipeline import schemas
from pipeline.annotation import acceptance, ls_config, pull_trust, push, push_tasks, screen
from pipeline.annotation.parse import ParseOnce, parse_export
from pipeline.annotation.rounds import load_round
from pipeline.annotation.windows import stitch_tasks

OWNER, EMAIL = 7, "a@x.test"
KEYS = ["data", "annotations", "result", "value", "choices", "text", "number", "from_name", "to_name",
        "sample_id", "scenario", "participants", "units", "turns", "row_index", "speaker", "window", "index",
        "count", "first_unit", "rows", "id", "completed_by", "lead_time", "updated_at", "was_cancelled",
        "voices", "voice_people", "content_sha"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6) | st.sampled_from(["couple", "family", "Ann", "voice:SPEAKER_00", "1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4),
                                                                inner, max_size=3),
    max_leaves=8)


def _export(round_name: str, window: int) -> tuple[list[dict], dict]:
    """A project's export as the push and the owner's answers make it, and its predictions record."""
    rnd = load_round(round_name)
    tasks, preds = [], []
    for n, sample in enumerate([make_sample("synthetic/fuzz_1", "couple", 7),
                                make_sample("synthetic/fuzz_2", "family", 9)]):
        values = push.input_values(rnd, sample)
        for task in push_tasks.build_tasks(rnd, sample, values, "", window or None):  # as a push builds them
            tid = 100 * n + len(tasks) + 1
            data = json.loads(task.data_json)
            result = ls_config.values_to_results(rnd, data, values)
            tasks.append({"id": tid, "data": data, "annotations": [
                {"id": 1000 + tid, "completed_by": OWNER, "result": result, "lead_time": 4.0,
                 "created_at": "2026-01-01T00:00:00", "updated_at": "2026-01-02T00:00:00", "was_cancelled": False}]})
            preds.append({"id": 5000 + tid, "task": tid, "model_version": f"{round_name}-v1-input",
                          "result": json.loads(task.prediction_json)})
    record = {"round": round_name, "scenario": "couple", "annotator": EMAIL, "project_id": 1,
              "users": {str(OWNER): EMAIL}, "predictions": preds}
    return tasks, record


BASES = {(r, w): _export(r, w) for r in ("emotion", "transcript") for w in (0, 2)}


def _paths(value, at=()):
    """Every path into ``value`` (keys and list positions), the root excluded."""
    out = []
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return out
    for k, v in items:
        out.append((*at, k))
        out += _paths(v, (*at, k))
    return out


def _mutate(tasks: list, edits: list[tuple[int, int, object]]) -> list:
    """``tasks`` with each edit ``(path number, how, value)``: the value at that path replaced,
    deleted, or a key added beside it."""
    tasks = copy.deepcopy(tasks)
    for n, how, value in edits:
        paths = _paths(tasks)
        if not paths:  # every task deleted: nothing left to edit
            break
        *parent_path, key = paths[n % len(paths)]
        parent = tasks
        for k in parent_path:
            parent = parent[k]
        if how == 0:
            parent[key] = value
        elif how == 1:
            del parent[key]
        elif isinstance(parent, dict):
            parent[KEYS[n % len(KEYS)]] = value
        else:
            parent.append(value)
    return tasks


def _tables(labels: list[dict], problems: list[dict]) -> None:
    """The lines are what the pull stores: they make its tables (and sort as it sorts them)."""
    from pipeline.annotation.pull import _sorted_table
    _sorted_table(labels, schemas.LABELS, ["sample_id", "row_index", "annotator", "field"])
    _sorted_table(problems, schemas.LABEL_PROBLEMS, ["sample_id", "row_index", "annotator", "field", "problem"])


def _chain(round_name: str, tasks, record: dict) -> tuple[list[dict], list[dict]]:
    """The pull's chain over one export: what it trusts, acceptance and stitching, the parse;
    each also on its own, as other callers use them."""
    rnd = load_round(round_name)
    trusted = pull_trust.screen_export(tasks, {"synthetic/fuzz_1", "synthetic/fuzz_2"},
                                       {p["task"]: [p["result"]] for p in record["predictions"]},
                                       "a's desk", round_name)
    assert all(isinstance(s, str) and isinstance(m, str) for s, m in trusted.notes)
    once = ParseOnce()
    lines, stitched, notes = acceptance.measure_and_stitch(rnd, tasks, record, parse=once)
    pa.Table.from_pylist(lines, schema=acceptance.SCHEMA)
    assert all(isinstance(s, str) and isinstance(m, str) for s, m in notes)
    labels, problems, done = parse_export(rnd, stitched, EMAIL, {OWNER: EMAIL}, OWNER, parse=once)
    problems += [{"round": round_name, "sample_id": sid, "row_index": None, "annotator": EMAIL, "field": None,
                  "problem": note, "value": None} for sid, note in notes]  # as the pull reports them
    alone, _ = stitch_tasks(tasks)
    labels2, problems2, _ = parse_export(rnd, tasks, EMAIL, {OWNER: EMAIL}, OWNER)  # unstitched, as given
    labels3, problems3, _ = parse_export(rnd, alone, EMAIL, {OWNER: EMAIL}, OWNER)
    for ls, ps in ((labels, problems), (labels2, problems2), (labels3, problems3)):
        _tables(ls, ps)
    return labels, problems


@pytest.mark.parametrize("base", sorted(BASES), ids=lambda b: f"{b[0]}-{'windows' if b[1] else 'whole'}")
def test_the_exports_as_pushed_give_labels(base):
    """The oracle's other half: unchanged, the chain gives every label and no problem, and every task passes."""
    tasks, record = BASES[base]
    labels, problems = _chain(base[0], tasks, record)
    assert labels and not problems, problems[:3]
    trusted = pull_trust.screen_export(tasks, {"synthetic/fuzz_1", "synthetic/fuzz_2"},
                                       {p["task"]: [p["result"]] for p in record["predictions"]}, "a's desk", base[0])
    assert trusted.tasks == tasks and not trusted.notes


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(BASES)),
       edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 2), json_values), min_size=1, max_size=4))
def test_any_edit_of_an_export_gives_lines_never_an_exception(base, edits):
    tasks, record = BASES[base]
    _chain(base[0], _mutate(tasks, edits), record)


@settings(max_examples=100, deadline=None)
@given(tasks=json_values, predictions=st.lists(json_values, max_size=3))
def test_an_export_of_any_shape_gives_lines_never_an_exception(tasks, predictions):
    record = {"round": "emotion", "scenario": "couple", "annotator": EMAIL, "users": {}, "predictions": predictions}
    rnd = load_round("emotion")
    lines, stitched, notes = acceptance.measure_and_stitch(rnd, tasks, record, parse=ParseOnce())
    _tables(*parse_export(rnd, stitched, EMAIL, {}, None)[:2])
    _tables(*parse_export(rnd, tasks, EMAIL, {}, None)[:2])
    stitch_tasks(tasks)
    pull_trust.screen_export(tasks, set(), {}, "a's desk", "emotion")


def _first_result(tasks):
    return tasks[0]["annotations"][0]["result"]


# The shapes found by hand and by fuzzing the chain: each is one problem line, and the other samples count.
CASES = {
    "text a list of numbers": lambda t: _first_result(t)[0].update(value={"text": [1]}),
    "choices null": lambda t: _first_result(t)[0].update(value={"choices": None}),
    "sample_id a list": lambda t: t[0]["data"].update(sample_id=["x"]),
    "result item a string": lambda t: _first_result(t).append("x"),
    "result item an int": lambda t: _first_result(t).append(3),
    "result item null": lambda t: _first_result(t).append(None),
    "from_name an int": lambda t: _first_result(t)[0].update(from_name=4),
    "from_name null": lambda t: _first_result(t)[0].update(from_name=None),
    "row_index a string": lambda t: t[0]["data"]["units"][0].update(row_index="1"),
    "row_index null": lambda t: t[0]["data"]["units"][0].update(row_index=None),
    "participants an int": lambda t: t[0]["data"].update(participants=3),
    "a window without count": lambda t: t[0]["data"]["window"].pop("count"),
    "a number that is infinite": lambda t: _first_result(t)[0].update(value={"number": float("inf")}),
    "a text over the limit": lambda t: _first_result(t)[0].update(value={"text": ["x" * (screen.MAX_TEXT_BYTES + 1)]}),
    "an answer over the limit": lambda t: _first_result(t).extend(
        [{"from_name": "n", "to_name": "t", "value": {"text": ["y" * 60_000]}}] * 20),
    "lead_time text": lambda t: t[0]["annotations"][0].update(lead_time="slow"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_known_poison_is_one_problem_and_the_rest_counts(case):
    base = ("emotion", 2)
    tasks, record = copy.deepcopy(BASES[base])
    clean_labels, _ = _chain(base[0], tasks, record)
    CASES[case](tasks)
    labels, problems = _chain(base[0], tasks, record)
    assert problems, "the poison is reported"
    assert all(p["sample_id"] in ("synthetic/fuzz_1", "?") for p in problems), problems
    other = [r for r in clean_labels if r["sample_id"] == "synthetic/fuzz_2"]
    assert other and [r for r in labels if r["sample_id"] == "synthetic/fuzz_2"] == other
    if case in ("a text over the limit", "an answer over the limit"):
        assert len(json.dumps(problems)) < 2000, "the report does not carry the oversized answer"
