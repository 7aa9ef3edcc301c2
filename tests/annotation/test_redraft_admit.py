"""Admission of re-drafted interviews to the work store, without desks (the answers a pull
stored): an unanswered one takes its new drafts, an answered one keeps its old drafts and is
named in one line until ``redraft`` names it; a task showing a replaced content hash is never
counted (the end-to-end run on real desks: test_redraft.py)."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pipeline import corpus, schemas, store
from pipeline.annotation import intake, pull_trust, push, redraft
from pipeline.annotation.rounds import load_round
from pipeline.catalog import record_catalog
from pipeline.paths import DataRoot

ANSWERED, FRESH = "g/answered", "g/fresh"


def _catalog_line(sid: str) -> dict:
    line = {name: None for name in schemas.CATALOG.names}
    line.update(sample_id=sid, scenario="couple", source_name=f"{sid.replace('/', '_')}.mp4", sha256="0" * 64,
                participants=["Ann", "Bo"], status="done", duration_s=12.0)
    return line


def _draft(root: DataRoot, sid: str, text: str) -> None:
    rows = []
    for i in (1, 2):
        row = {name: None for name in schemas.DRAFT_ROWS.names}
        row.update(sample_id=sid, row_index=i, start_time=float(i), end_time=i + 0.8, primary_speaker="Ann",
                   target=["Bo"], dialogue_cleaned=text, background_dialogue=[])
        rows.append(row)
    store.write_parquet(pa.Table.from_pylist(rows, schema=schemas.DRAFT_ROWS), root.drafts(sid))


def _texts(root: DataRoot) -> dict[str, str]:
    return {s["sample_id"]: s["rows"][0]["dialogue_cleaned"] for s in corpus.load_work(DataRoot(root))}


def test_an_answered_redraft_keeps_its_old_drafts_until_named(tmp_path):
    root = DataRoot(tmp_path)
    for sid in (ANSWERED, FRESH):
        record_catalog(root, _catalog_line(sid))
        _draft(root, sid, "Hello there.")
    assert intake.admit_drafts(root).added == [ANSWERED, FRESH]
    line = {name: None for name in schemas.LABELS.names}
    line.update(round="transcript", sample_id=ANSWERED, row_index=1, annotator="a@rescue.test",
                field="dialogue_cleaned", value='"Hello there."')
    store.write_parquet(pa.Table.from_pylist([line], schema=schemas.LABELS), root.labels("transcript"))
    same = intake.admit_drafts(root)  # nothing segmented again: nothing said
    assert same.kept == [ANSWERED, FRESH] and not same.held and not same.redrafted

    for sid in (ANSWERED, FRESH):  # the segmenter changes
        _draft(root, sid, "HELLO THERE.")
    held = intake.admit_drafts(root)
    assert held.redrafted == [FRESH] and held.held == {ANSWERED: "round transcript: a@rescue.test"}
    assert held.held_lines() == [f"{ANSWERED}: re-drafted, but it has answers (round transcript: a@rescue.test): its "
                                 f"old drafts and tasks are kept; `--redraft {ANSWERED}` replaces them (the old "
                                 "answers are then archived, not counted)"]
    assert _texts(root) == {ANSWERED: "Hello there.", FRESH: "HELLO THERE."}
    assert intake.admit_drafts(root).held_lines() == held.held_lines()  # said again on the next run

    with pytest.raises(push.PushError, match="--redraft g/never: not an interview in annotation"):
        intake.admit_drafts(root, redraft=["g/never"])
    named = intake.admit_drafts(root, redraft=[ANSWERED])
    assert named.redrafted == [ANSWERED] and not named.held and named.redraft_unchanged == []
    assert _texts(root) == {ANSWERED: "HELLO THERE.", FRESH: "HELLO THERE."}
    record = redraft.read_admitted(root)
    assert record[ANSWERED]["redraft"] is True and record[FRESH]["redraft"] is False  # until a push replaces it
    again = intake.admit_drafts(root, redraft=[ANSWERED])
    assert again.redraft_unchanged == [ANSWERED] and not again.redrafted


def test_a_task_with_a_replaced_content_hash_is_not_counted(tmp_path):
    rnd = load_round("transcript")
    sample = {"sample_id": ANSWERED, "scenario": "couple", "group_id": "g", "participants": ["Ann", "Bo"],
              "source_file": None, "duration_s": 12.0,
              "rows": [{"row_index": 1, "start_time": 1.0, "end_time": 1.8, "primary_speaker": "Ann",
                        "target": ["Bo"], "dialogue_cleaned": "Hello there.", "background_dialogue": []}]}
    (prepared,) = push._prepare(rnd, sample, None, None)  # one task, no pre-annotation
    data = json.loads(prepared.data_json)
    assert pull_trust.pushed_as(data, [])
    task = {"id": 7, "data": data, "annotations": [], "predictions": []}
    kept = pull_trust.screen_export([task], {ANSWERED}, {}, "desk", "transcript")
    assert [t["id"] for t in kept.tasks] == [7]
    retired = pull_trust.screen_export([task], {ANSWERED}, {}, "desk", "transcript",
                                       {ANSWERED: {data["content_sha"]}})
    assert retired.tasks == [] and not retired.notes


def test_a_replaced_hash_given_again_counts_again(tmp_path):
    """Drafts re-drafted back to what they were: the push gives the old content hash again, and
    the pull counts the answers to it (only hashes no push gives any more stay retired)."""
    root = DataRoot(tmp_path)
    export = root.export("transcript", "couple", "a@rescue.test", "1" * 64)
    redraft.record_replaced(root, "transcript", ANSWERED, "a@rescue.test", ["old1", "old2"], 2, export)
    redraft.record_replaced(root, "transcript", ANSWERED, "a@rescue.test", ["old1"], 1, export)  # nothing new
    (entry,) = redraft.read_replaced(root, "transcript")[ANSWERED].values()
    assert entry == {"shas": ["old1", "old2"], "answers": 2,
                     "exports": ["annotation/exports/transcript/couple/a_rescue.test/" + "1" * 64 + ".json"]}
    redraft.keep_current(root, "transcript", {ANSWERED: ["old2", "new"], FRESH: ["old1"]})
    assert redraft.retired_shas(root, "transcript") == {ANSWERED: {"old1"}}
    assert len(redraft.replaced_lines(root, "transcript")) == 1  # its archived answers are still reported
