"""The pull reads each export once: one stitching serves the acceptance measure and
the label table, and each submitted annotation is parsed once (:class:`.parse.ParseOnce`). Its
answer must be exactly what the two separate passes give - the acceptance measured on the
export as archived (:func:`.acceptance.measure_archived` with :func:`.parse.parse_annotation`),
the windows stitched again and parsed (:func:`.windows.stitch_tasks`, :func:`.parse.parse_export`)
- and the tables written from it byte for byte the same. Exports are built by the push's own
task builder (windows, predictions, voice block) with answers, skips, repeats and strangers'
work in them; no server is needed."""
from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest
from ls_samples import make_sample

from pipeline import schemas, store
from pipeline.annotation import acceptance, ls_config, parse, push
from pipeline.annotation.rounds import load_round
from pipeline.annotation.windows import stitch_tasks

OWNER, STRANGER = 7, 9
USERS = {OWNER: "a@x.test", STRANGER: "b@x.test"}


def _edited(rnd, sample):
    """What the annotator submits: the input values with some rows changed or emptied."""
    values = push.input_values(rnd, sample)
    for i, (ri, row) in enumerate(sorted(values.items())):
        if i % 4 == 1:
            values[ri] = {k: ([] if isinstance(v, list) else "") for k, v in row.items()}  # cleared
        elif i % 4 == 2 and "primary_speaker" in row:
            values[ri] = {**row, "primary_speaker": "Therapist"}  # changed
    return values


def _export(rnd):
    """``(tasks, predictions record)`` of one annotator project, as Label Studio exports it."""
    samples = {
        "whole": make_sample("synthetic/once_family_70", "family", 70),    # windowed, every window answered
        "partial": make_sample("synthetic/once_family_66", "family", 66),  # windowed, one window not yet
        "skipped": make_sample("synthetic/once_family_63", "family", 63),  # windowed, every window skipped
        "twice": make_sample("synthetic/once_couple_1", "couple", 7),      # answered twice: the latest counts
        "stranger": make_sample("synthetic/once_couple_2", "couple", 8),   # also answered by a stranger
        "open": make_sample("synthetic/once_couple_3", "couple", 6),       # not answered
        "dup": make_sample("synthetic/once_couple_4", "couple", 5),        # pushed twice (duplicate task)
    }
    tasks, predictions, n = [], [], 0
    for kind, sample in samples.items():
        values = _edited(rnd, sample)
        for copies in range(2 if kind == "dup" else 1):
            parts = push._prepare(rnd, sample, push.input_values, None)
            for i, prepared in enumerate(parts):
                n += 1
                data = copy.deepcopy(prepared.data)
                result = ls_config.values_to_results(rnd, data, values)
                answer = {"id": 1000 + n, "completed_by": OWNER, "result": result, "lead_time": 2.5 + i,
                          "was_cancelled": False, "created_at": f"2026-01-01T10:{n:02d}:00Z",
                          "updated_at": f"2026-01-01T11:{n:02d}:00Z", "parent_prediction": 5000 + n}
                annotations = [answer]
                if kind == "partial" and i == 1 or kind == "open":
                    annotations = []
                elif kind == "skipped":
                    annotations = [{**answer, "result": [], "was_cancelled": True}]
                elif kind == "twice":
                    annotations.append({**answer, "id": 2000 + n, "result": copy.deepcopy(prepared.prediction),
                                        "updated_at": f"2026-01-02T11:{n:02d}:00Z"})
                elif kind == "stranger":
                    annotations.append({**answer, "id": 3000 + n, "completed_by": STRANGER})
                tasks.append({"id": n, "data": data, "annotations": annotations, "drafts": [], "predictions": []})
                predictions.append({"id": 5000 + n, "task": n, "result": prepared.prediction,
                                    "model_version": f"{rnd.name}-v1-input"})
    assert {t["data"]["sample_id"] for t in tasks if "window" in t["data"]} == {
        samples[k]["sample_id"] for k in ("whole", "partial", "skipped")}
    record = {"round": rnd.name, "scenario": "family", "annotator": USERS[OWNER], "project_id": 1,
              "pulled_at": "2026-01-03T00:00:00+00:00", "users": {str(k): v for k, v in USERS.items()},
              "predictions": predictions}
    return tasks, record


def _two_passes(rnd, tasks, record):
    """What the pull computed before: measure the export, then stitch it again and parse."""
    accepted = acceptance.measure_archived(rnd, copy.deepcopy(tasks), record, parse=parse.parse_annotation)
    stitched, notes = stitch_tasks(copy.deepcopy(tasks))
    labels, problems, done = parse.parse_export(rnd, stitched, USERS[OWNER], USERS, OWNER, "a's desk")
    return accepted, notes, labels, problems, done, len(stitched)


def _one_pass(rnd, tasks, record):
    """What the pull computes now: one stitching, each annotation parsed once."""
    once = parse.ParseOnce()
    accepted, stitched, notes = acceptance.measure_and_stitch(rnd, copy.deepcopy(tasks), record, parse=once)
    labels, problems, done = parse.parse_export(rnd, stitched, USERS[OWNER], USERS, OWNER, "a's desk", parse=once)
    return accepted, notes, labels, problems, done, len(stitched)


def _table_bytes(tmp_path, name, records, schema) -> bytes:
    path = tmp_path / f"{name}.parquet"
    store.write_parquet(pa.Table.from_pylist(records, schema=schema), path)
    return path.read_bytes()


@pytest.mark.parametrize("name", ["transcript", "emotion", "strategy"])
def test_one_pass_gives_what_two_passes_gave_to_the_byte(name, tmp_path):
    rnd = load_round(name)
    tasks, record = _export(rnd)
    want = _two_passes(rnd, tasks, record)
    got = _one_pass(rnd, tasks, record)
    assert got == want
    accepted, notes, labels, problems, done, n_tasks = got
    # the export holds every case the pull meets: the comparison is not of empty answers
    assert accepted and labels and done == 5 and n_tasks == 8  # whole, skipped, twice, stranger, dup (once)
    assert [sid for sid, _ in notes] == ["synthetic/once_family_66"] and "parts not submitted: 2)" in notes[0][1]
    said = [p["problem"] for p in problems if p["row_index"] is None and p["field"] is None]
    assert {"skipped (cancelled) by the annotator", "2 annotations; the latest is used",
            "duplicate task for this sample; only the first is used"} <= set(said)
    assert any("by b@x.test on a's desk: not the desk's owner" in m for m in said)
    outcomes = {r["outcome"] for r in accepted}
    assert "kept" in outcomes and len(outcomes) > 1
    for table, schema, old, new in [("labels", schemas.LABELS, want[2], labels),
                                    ("problems", schemas.LABEL_PROBLEMS, want[3], problems),
                                    ("acceptance", acceptance.SCHEMA, want[0], accepted)]:
        assert _table_bytes(tmp_path, f"old-{table}", old, schema) == _table_bytes(tmp_path, f"new-{table}", new, schema)


def test_a_submitted_annotation_is_parsed_once(monkeypatch):
    rnd = load_round("emotion")
    tasks, record = _export(rnd)
    measured = {r["sample_id"] for r in acceptance.measure_archived(rnd, tasks, record, parse=parse.parse_annotation)}
    reads = []
    real = parse._read_results
    monkeypatch.setattr(parse, "_read_results", lambda *a: reads.append(1) or real(*a))
    _two_passes(rnd, tasks, record)
    before, reads[:] = len(reads), []
    _one_pass(rnd, tasks, record)
    # each measured sample reads its prediction and its answer; in two passes the label table
    # reads those answers again, in one it does not
    assert before - len(reads) == len(measured)


def test_parse_once_answers_as_parse_annotation_for_any_annotator():
    rnd = load_round("transcript")
    tasks, _ = _export(rnd)
    once = parse.ParseOnce()
    for task in tasks:
        for a in task["annotations"]:
            for who in ("a@x.test", ""):
                assert once(rnd, task["data"], a, who) == parse.parse_annotation(rnd, task["data"], a, who)
    assert json.dumps(once(rnd, tasks[0]["data"], tasks[0]["annotations"][0], "z")[0][0]["annotator"]) == '"z"'
