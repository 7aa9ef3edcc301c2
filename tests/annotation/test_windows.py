"""Windowed tasks: a long sample (more than SPLIT_ABOVE units) is split into tasks of at most
WINDOW_UNITS units and a pull of
the windows gives exactly what a pull of the whole sample gives (no server needed)."""
from __future__ import annotations

import copy
import json

import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, push, windows
from pipeline.annotation.pull import parse_export
from pipeline.annotation.rounds import load_round, round_names

ROUNDS = ["transcript", "emotion", "viewpoints", "relation", "strategy"]


def _truth(rnd, sample):
    values = push.input_values(rnd, sample)
    for ri, row in values.items():
        row.setdefault("relation_cycle_reason", f"reason {ri}")
    return values


def test_window_ranges_cover_every_row_once_and_are_even():
    rows = list(range(1, 112))
    units = {r for r in rows if r % 3}  # 74 units
    ranges = windows.window_ranges(rows, units, 20)
    covered = [r for lo, hi in ranges for r in range(lo, hi + 1)]
    assert covered == rows
    per = [sum(lo <= u <= hi for u in units) for lo, hi in ranges]
    assert per == [19, 19, 18, 18] and sum(per) == len(units)
    assert windows.window_ranges([1, 2, 3], {2}, 20) == [(1, 3)]
    with pytest.raises(ValueError):
        windows.window_ranges(rows, units, 0)


@pytest.mark.parametrize("name", ROUNDS)
@pytest.mark.parametrize("n_rows", [12, 111, 250])
def test_windows_stitch_back_to_the_whole_task_data(name, n_rows):
    rnd = load_round(name)
    sample = make_sample(f"synthetic/family_{n_rows}", "family", n_rows)
    whole = ls_config.build_task_data(rnd, sample, "/data/local-files/?d=media/x.wav")
    parts = ls_config.build_tasks_data(rnd, sample, "/data/local-files/?d=media/x.wav")
    if len(whole["units"]) <= windows.SPLIT_ABOVE:
        assert parts == [whole] and "window" not in whole
        return
    assert len(parts) == -(-len(whole["units"]) // windows.WINDOW_UNITS)
    for i, part in enumerate(parts):
        w = part["window"]
        assert w["index"] == i and w["count"] == len(parts) and 1 <= len(part["units"]) <= windows.WINDOW_UNITS
        own = [t for t in part["turns"] if w["rows"][0] <= t["row_index"] <= w["rows"][1]]
        assert len(part["turns"]) - len(own) <= windows.CONTEXT_BEFORE + windows.CONTEXT_AFTER
        assert f"part {i + 1} of {len(parts)}" in part["heading"]
    assert windows.stitch_data(list(reversed(parts))) == whole


def _windowed_export(rnd, sample, values, user=7, lead=3.0):
    tasks = []
    for i, data in enumerate(ls_config.build_tasks_data(rnd, sample)):
        result = ls_config.values_to_results(rnd, data, values)
        tasks.append({"id": 100 + i, "data": data, "annotations": [{
            "id": 500 + i, "completed_by": user, "result": result, "lead_time": lead, "was_cancelled": False,
            "created_at": f"2026-01-01T10:{i:02d}:00Z", "updated_at": f"2026-01-01T11:{i:02d}:00Z"}]})
    return tasks


@pytest.mark.parametrize("name", ROUNDS)
def test_a_windowed_pull_equals_the_whole_sample_pull(name):
    rnd = load_round(name)
    sample = make_sample("synthetic/family_111", "family", 111)
    values = _truth(rnd, sample)
    tasks = _windowed_export(rnd, sample, values)
    assert len(tasks) > 1
    whole = ls_config.build_task_data(rnd, sample)
    n = len(tasks)
    whole_task = {"id": 100, "data": whole, "annotations": [{
        "id": 500, "completed_by": 7, "result": ls_config.values_to_results(rnd, whole, values),
        "lead_time": 3.0 * n, "was_cancelled": False, "created_at": "2026-01-01T10:00:00Z",
        "updated_at": f"2026-01-01T11:{n - 1:02d}:00Z"}]}
    users = {7: "a@x.test"}
    want = parse_export(rnd, [whole_task], "a@x.test", users)
    stitched, notes = windows.stitch_tasks(copy.deepcopy(tasks))
    assert notes == [] and len(stitched) == 1
    got = parse_export(rnd, stitched, "a@x.test", users)
    assert got == want
    labels, problems, done = got
    assert problems == [] and done == 1 and labels
    assert {lab["row_index"] for lab in labels} == {u["row_index"] for u in whole["units"]}
    by_row = {(lab["row_index"], lab["field"]): json.loads(lab["value"]) for lab in labels}
    last = whole["units"][-1]["row_index"]  # a unit of the last window: renumbered correctly
    first_field = rnd.fields[0]
    if first_field.type != "records" and values[last].get(first_field.name) not in (None, ""):
        assert by_row[(last, first_field.name)] == values[last][first_field.name]


def test_unfinished_windows_are_reported_and_skipped_windows_make_a_skip():
    rnd = load_round("emotion")
    sample = make_sample("synthetic/family_111", "family", 111)
    tasks = _windowed_export(rnd, sample, _truth(rnd, sample))
    partial = copy.deepcopy(tasks)
    partial[2]["annotations"] = []
    stitched, notes = windows.stitch_tasks(partial)
    assert stitched[0]["annotations"] == []
    assert notes == [(sample["sample_id"], f"{len(tasks) - 1} of {len(tasks)} parts submitted (parts not "
                                           "submitted: 3) by 7; the sample's labels come when every part is submitted")]
    labels, problems, done = parse_export(rnd, stitched, "a@x.test", {7: "a@x.test"})
    assert (labels, problems, done) == ([], [], 0)

    skipped = copy.deepcopy(tasks)
    for t in skipped:
        t["annotations"][0].update(result=[], was_cancelled=True)
    stitched, notes = windows.stitch_tasks(skipped)
    labels, problems, done = parse_export(rnd, stitched, "a@x.test", {7: "a@x.test"})
    assert notes == [] and labels == [] and done == 1
    assert [p["problem"] for p in problems] == ["skipped (cancelled) by the annotator"]

    gone = copy.deepcopy(tasks[1:])  # a window missing: the sample cannot be stitched
    stitched, notes = windows.stitch_tasks(gone)
    assert stitched == [] and "do not make up the sample" in notes[0][1]


def test_a_window_submitted_twice_is_said_and_its_latest_answer_used():
    """A double click on one window of a long sample: the unwindowed parse says "2 annotations;
    the latest is used", and so must the stitch (the 0.25 rehearsal's faulted run found it silent)."""
    rnd = load_round("viewpoints")
    sample = make_sample("synthetic/family_111", "family", 111)
    values = _truth(rnd, sample)
    tasks = _windowed_export(rnd, sample, values)
    users = {7: "a@x.test"}
    want = parse_export(rnd, windows.stitch_tasks(copy.deepcopy(tasks))[0], "a@x.test", users)
    twice = copy.deepcopy(tasks)
    first = twice[1]["annotations"][0]
    older = {**copy.deepcopy(first), "id": 900, "result": [], "updated_at": "2026-01-01T09:00:00Z"}
    twice[1]["annotations"].append(older)  # the earlier of the two: an empty answer
    stitched, notes = windows.stitch_tasks(twice)
    assert notes == [(sample["sample_id"], "part 2 by 7: 2 annotations; the latest is used")]
    assert parse_export(rnd, stitched, "a@x.test", users) == want


def test_unwindowed_exports_pass_through_unchanged():
    rnd = load_round("emotion")
    sample = make_sample("synthetic/couple_005", "couple", 9)
    tasks = _windowed_export(rnd, sample, _truth(rnd, sample))
    assert len(tasks) == 1 and "window" not in tasks[0]["data"]
    assert windows.stitch_tasks(copy.deepcopy(tasks)) == (tasks, [])


def test_every_round_renders_words_marks_ranges_and_nearby_evidence():
    for name in round_names():
        for scenario in ("couple", "family"):
            xml = ls_config.config_path(name, scenario).read_text()
            assert " *\"" in xml and 'audioUrl="$media_url"' in xml
            fields = "\n".join(ln for ln in xml.splitlines()  # the "accept" boxes are no field's
                               if f'name="{ls_config.ACCEPT}-' not in ln)
            assert ("requiredMessage=" in fields) == (name != "viewpoints")  # viewpoints: all optional
            assert "internal_emotion 1" not in xml and "utterance_type_0" not in xml
    assert "Intensity 0-10 *" in ls_config.config_path("emotion", "family").read_text()
    rnd = load_round("relation")
    data = ls_config.build_task_data(rnd, make_sample("synthetic/family_040", "family", 40))
    unit = data["units"][-1]
    options = unit[ls_config.UNIT_ROW_OPTIONS]
    assert options[-1]["alias"] == str(min(40, unit["row_index"] + ls_config.EVIDENCE_AFTER))
    assert len(options) <= ls_config.EVIDENCE_BEFORE + ls_config.EVIDENCE_AFTER + 1
    assert options[0]["value"].startswith(f"{options[0]['alias']} · ")  # shown; the alias is stored
    assert {t["speaker"] for t in data["turns"]} == {"Dan", "Eli", "Therapist"}  # one author per person
    html = ls_config.instructions_html(load_round("strategy"), "couple")
    assert "counterbalance" in html and "Aimed at *" in html
