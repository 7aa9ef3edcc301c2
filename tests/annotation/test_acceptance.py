"""Pre-annotation acceptance through the real Label Studio server: a round pushed with
predictions, annotations submitted through the API that keep, change, clear and add values; the
pull counts each per field, annotator and source, and the agreement report shows the counts."""
from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest
from ls_samples import make_sample
from typer.testing import CliRunner

from pipeline import taxonomy
from pipeline.annotation import acceptance, ls_config, ls_tasks, pull, push
from pipeline.annotation.rounds import load_round
from pipeline.cli import app
from pipeline.markdown import escape
from pipeline.paths import DataRoot
from pipeline.quality import agreement

pytestmark = pytest.mark.slow

COUPLE = "synthetic/accept_couple"   # rows 1, 2, 4, 5 are client rows (emotion units)
FAMILY = "synthetic/accept_family"   # 24 client rows: windowed (more than SPLIT_ABOVE units)


def _prelabel(rnd, sample):
    """The drafts as a 'model' would give them: the input values, without row 1's tone."""
    values = push.input_values(rnd, sample)
    if sample["sample_id"] == COUPLE:
        values[1].pop("tone_of_voice")
    return values


def _post(client, task, rnd, values, user_id):
    client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values), completed_by=user_id)


def test_pull_counts_kept_changed_cleared_added_per_field_and_the_report_shows_them(ls_client, ls_desks,
                                                                                      new_annotators, tmp_path):
    rnd = load_round("emotion")
    couple, family = make_sample(COUPLE, "couple", 6), make_sample(FAMILY, "family", 36)
    a, b = new_annotators(2)
    report = push.push_round(ls_desks, "emotion", [couple, family], [a, b], prelabel=_prelabel,
                             prelabel_source="draftmodel")
    source = push.model_version(rnd, "draftmodel")
    assert source == "emotion-v1-draftmodel"
    users = {u["email"]: u["id"] for u in ls_client.users()}

    def tasks(scenario, who):
        return sorted(ls_client.tasks(report.projects[push.project_key("emotion", scenario, who)]),
                      key=lambda t: (t["data"].get("window") or {}).get("index", 0))

    # Annotator a, couple: starts from the input values (the prediction plus row 1's tone) and edits.
    values = push.input_values(rnd, couple)
    other = next(v for v in taxonomy.utterance_types() if v != values[2]["utterance_type"])
    values[2] = {**values[2], "utterance_type": other, "internal_emotion": None}      # changed, cleared
    emo4 = values[4]["internal_emotion"][0]
    values[4] = {**values[4], "tone_of_voice": "very calm and slow",                   # changed
                 "internal_emotion": [{**emo4, "intensity": (emo4["intensity"] + 1) % 11}]}  # changed
    values[5] = {**values[5], "tone_of_voice": None}                                    # cleared
    _post(ls_client, tasks("couple", a)[0], rnd, values, users[a])
    # a submits only two of the family sample's windows: not counted (not done)
    fam_a = tasks("family", a)
    assert len(fam_a) >= 3 and [t["data"]["window"]["count"] for t in fam_a] == [len(fam_a)] * len(fam_a)
    for t in fam_a[:2]:
        _post(ls_client, t, rnd, push.input_values(rnd, family), users[a])

    # Annotator b keeps the couple prediction as it is; in the family sample (windowed) b changes
    # the utterance type of the last window's first row only.
    _post(ls_client, tasks("couple", b)[0], rnd, _prelabel(rnd, couple), users[b])
    fam_values = push.input_values(rnd, family)
    fam_b = tasks("family", b)
    first = fam_b[-1]["data"]["units"][0]["row_index"]
    changed = next(v for v in taxonomy.utterance_types() if v != fam_values[first]["utterance_type"])
    for i, t in enumerate(fam_b):
        vals = dict(fam_values)
        if i == len(fam_b) - 1:
            vals[first] = {**vals[first], "utterance_type": changed}
        _post(ls_client, t, rnd, vals, users[b])

    root = tmp_path / "data"
    pull.pull_round(ls_desks, "emotion", DataRoot(root), annotators=[a, b])
    lines = pq.read_table(DataRoot(root).acceptance("emotion")).to_pylist()
    assert {r["model_version"] for r in lines} == {source}
    got = Counter((r["annotator"], r["field"], r["outcome"]) for r in lines)
    assert {k[1:]: n for k, n in got.items() if k[0] == a} == {
        ("utterance_type", "kept"): 3, ("utterance_type", "changed"): 1,
        ("tone_of_voice", "kept"): 1, ("tone_of_voice", "changed"): 1, ("tone_of_voice", "cleared"): 1,
        ("tone_of_voice", "added"): 1,
        ("internal_emotion", "kept"): 2, ("internal_emotion", "changed"): 1, ("internal_emotion", "cleared"): 1,
        # the records part by part: row 2's record cleared, row 4's intensity changed
        ("internal_emotion.person", "kept"): 3, ("internal_emotion.person", "cleared"): 1,
        ("internal_emotion.emotion_description", "kept"): 3, ("internal_emotion.emotion_description", "cleared"): 1,
        ("internal_emotion.intensity", "kept"): 2, ("internal_emotion.intensity", "changed"): 1,
        ("internal_emotion.intensity", "cleared"): 1}
    assert {k[1:]: n for k, n in got.items() if k[0] == b} == {
        ("utterance_type", "kept"): 27, ("utterance_type", "changed"): 1,
        ("tone_of_voice", "kept"): 27, ("internal_emotion", "kept"): 28, ("internal_emotion.person", "kept"): 28,
        ("internal_emotion.emotion_description", "kept"): 28, ("internal_emotion.intensity", "kept"): 28}
    # each decision is on its row, with both values as the label table stores them
    by = {(r["annotator"], r["sample_id"], r["row_index"], r["field"]): r for r in lines}
    assert by[(a, COUPLE, 2, "utterance_type")]["outcome"] == "changed"
    assert json.loads(by[(a, COUPLE, 2, "utterance_type")]["value"]) == other
    assert by[(a, COUPLE, 5, "tone_of_voice")]["value"] is None
    assert by[(a, COUPLE, 1, "tone_of_voice")]["predicted"] is None
    assert by[(b, FAMILY, first, "utterance_type")]["outcome"] == "changed"
    assert not any(r["annotator"] == a and r["sample_id"] == FAMILY for r in lines)

    summary = {(r["field"]): r for r in acceptance.summarize(lines)}
    assert summary["tone_of_voice"] == {"source": source, "field": "tone_of_voice", "predicted": 30, "kept": 28,
                                        "changed": 1, "cleared": 1, "added": 1, "kept_share": 0.933}

    # The agreement report shows the table, overall and per annotator.
    out = agreement.measure_round(DataRoot(root), "emotion")
    md = out.paths["markdown"].read_text(encoding="utf-8")
    assert "## Pre-annotation acceptance" in md
    assert f"| {source} | utterance_type | 32 | 30 | 2 | 0 | 0 | 94% |" in md
    assert f"| {source} | tone_of_voice | 30 | 28 | 1 | 1 | 1 | 93% |" in md
    assert f"| {source} | internal_emotion | 32 | 30 | 1 | 1 | 0 | 94% |" in md
    # annotators' logins as the report writes what came from a desk: Markdown-escaped
    assert f"| {source} | {escape(a)} | tone_of_voice | 3 | 1 | 1 | 1 | 1 | 33% |" in md
    assert f"| {source} | {escape(a)} | {escape('internal_emotion.intensity')} | 4 | 2 | 1 | 1 | 0 | 50% |" in md
    assert f"| {source} | {escape(b)} | utterance_type | 28 | 27 | 1 | 0 | 0 | 96% |" in md
    page = out.paths["html"].read_text(encoding="utf-8")
    assert "<h2>Pre-annotation acceptance</h2>" in page and f"<td>{a}</td>" in page
    assert json.loads(out.paths["json"].read_text(encoding="utf-8"))["acceptance"] == \
        acceptance.summarize(lines, by_annotator=True)

    # A pull of one annotator keeps the other's lines, as the label table does.
    pull.pull_round(ls_desks, "emotion", DataRoot(root), annotators=[a])
    again = pq.read_table(DataRoot(root).acceptance("emotion")).to_pylist()
    assert sorted(map(json.dumps, again)) == sorted(map(json.dumps, lines))

    # The predictions are archived beside each export, once per export state ...
    archive = DataRoot(root).exports_dir("emotion")
    exports = sorted(p for p in archive.glob("*/*/*.json") if not p.name.endswith(".predictions.json"))
    assert len(exports) == 4  # 2 annotators x 2 scenarios; the second pull found the same states
    for export in exports:
        record = json.loads(DataRoot(root).export_predictions("emotion", export.parent.parent.name,
                                                              export.parent.name, export.stem).read_bytes())
        assert record["round"] == "emotion" and record["annotator"] in (a, b)
        assert {p["model_version"] for p in record["predictions"]} == {source}
        assert {p["task"] for p in record["predictions"]} == {t["id"] for t in json.loads(export.read_bytes())}
        assert set(record["users"].values()) <= {record["annotator"]}  # the ids its annotations name
    # ... so the table is rebuilt from the archive alone (no Label Studio client), line for line.
    table = DataRoot(root).acceptance("emotion")
    table.unlink()
    rebuilt = pull.rebuild_acceptance(DataRoot(root), "emotion")
    assert rebuilt.states == 4 and rebuilt.without_predictions == [] and rebuilt.path == table
    assert pq.read_table(table).to_pylist() == sorted_lines(again)
    # through the CLI too, which prints the counts per source and field
    out = CliRunner().invoke(app, ["annotate", "acceptance", "emotion", "--rebuild", "--data-root", str(root)])
    assert out.exit_code == 0, out.output
    assert f"rebuilt from 4 archived export states: {len(again)} lines" in out.output
    assert "0.933" in out.output  # tone_of_voice's kept share (the table is cut to the terminal's width)
    assert pq.read_table(table).to_pylist() == sorted_lines(again)


def sorted_lines(lines):
    """Lines in the stored table's order (:func:`acceptance.write`)."""
    return sorted(lines, key=lambda r: (r["sample_id"], -1 if r["row_index"] is None else r["row_index"],
                                        r["annotator"], r["field"], r["slot"] or 0, r["predicted"] or "",
                                        r["value"] or ""))


# --- the comparison itself, on hand-made exports (no server) -----------------------------------

def _task(rnd, sample, values, tid=1):
    """A task as pushed (its data with the content address of data and prediction) and its prediction."""
    data = ls_config.build_tasks_data(rnd, sample)[0]
    prediction = ls_config.values_to_results(rnd, data, values)
    ls_tasks.address(data, prediction)
    return {"id": tid, "data": data, "annotations": []}, prediction


def test_order_of_choices_is_no_change_and_a_refused_value_is_a_change():
    rnd = load_round("transcript")
    sample = make_sample("synthetic/accept_unit", "family", 4)
    values = push.input_values(rnd, sample)
    values[1]["target"] = ["Cara", "Eli"]  # row 1 is Dan's
    task, pred = _task(rnd, sample, values)
    submitted = [dict(r, value={"choices": list(reversed(r["value"]["choices"]))})
                 if r["from_name"] == "target_0" else r for r in pred]
    submitted = [dict(r, value={"choices": ["Nobody"]}) if r["from_name"] == "primary_speaker_1" else r
                 for r in submitted]
    task["annotations"] = [{"id": 7, "completed_by": 1, "result": submitted, "updated_at": "2026-01-01"}]
    lines = acceptance.measure_tasks(rnd, "family", "a@x", [task], {1: [{"id": 3, "result": pred, "model_version": "m"}]},
                                     {1: "a@x"}, parse=pull.parse_annotation)
    by = {(r["row_index"], r["field"]): r for r in lines}
    assert by[(1, "target")]["outcome"] == "kept"
    assert by[(2, "primary_speaker")]["outcome"] == "changed"  # "Nobody" is refused by the pull: compared as given
    assert json.loads(by[(2, "primary_speaker")]["value"]) == {"raw": [["primary_speaker_0", ["Nobody"]]]}
    assert Counter(r["outcome"] for r in lines) == Counter(kept=len(lines) - 1, changed=1)


def test_the_prediction_shown_is_the_annotations_parent_and_skips_and_others_do_not_count():
    rnd = load_round("emotion")
    sample = make_sample("synthetic/accept_unit", "couple", 3)  # client rows 1 and 2
    values = push.input_values(rnd, sample)
    task, pred = _task(rnd, sample, values)
    other = {**values, 1: {**values[1], "utterance_type": "withdrawal" if values[1]["utterance_type"] != "withdrawal"
                            else "defense"}}
    _, pred_other = _task(rnd, sample, other)
    preds = {1: [{"id": 3, "result": pred, "model_version": "old"}, {"id": 4, "result": pred_other, "model_version": "new"}]}
    task["annotations"] = [{"id": 7, "completed_by": 1, "result": pred, "updated_at": "2026-01-02", "parent_prediction": 3},
                           {"id": 8, "completed_by": 2, "result": [], "updated_at": "2026-01-03"}]  # someone else's
    lines = acceptance.measure_tasks(rnd, "couple", "a@x", [task], preds, {1: "a@x", 2: "b@x"},
                                     parse=pull.parse_annotation)
    assert {r["model_version"] for r in lines} == {"old"} and {r["outcome"] for r in lines} == {"kept"}
    task["annotations"][0]["parent_prediction"] = None  # no parent: the latest prediction was shown
    lines = acceptance.measure_tasks(rnd, "couple", "a@x", [task], preds, {1: "a@x", 2: "b@x"},
                                     parse=pull.parse_annotation)
    assert {r["model_version"] for r in lines} == {"new"}
    assert [(r["row_index"], r["field"]) for r in lines if r["outcome"] == "changed"] == [(1, "utterance_type")]
    task["annotations"][0]["was_cancelled"] = True  # skipped: nothing to count
    assert acceptance.measure_tasks(rnd, "couple", "a@x", [task], preds, {1: "a@x", 2: "b@x"},
                                    parse=pull.parse_annotation) == []


def test_voice_names_of_the_transcript_round_count_once_per_voice(tmp_path):
    rnd = load_round("transcript")
    sample = make_sample("synthetic/accept_voices", "couple", 6)  # Ben speaks rows 1, 5; Ann rows 2, 4
    label = {"Ben": "Speaker 1", "Ann": "Speaker 2"}
    for r in sample["rows"]:
        r["primary_speaker"] = label.get(r["primary_speaker"], r["primary_speaker"])
        r["target"] = [label.get(t, t) for t in r["target"]]
    sample["voices"] = [{"voice": v, "first_rows": [], "sample_start": None, "sample_end": None,
                         "named_by": "role" if v == "Therapist" else None} for v in ("Speaker 1", "Speaker 2", "Therapist")]
    [prepared] = push._prepare(rnd, sample, push.input_values, None)
    pred = prepared.prediction
    voices = [v["voice"] for v in prepared.data["voices"]]
    assert [r["value"]["choices"] for r in pred if r["from_name"].startswith("voice_")] == [["Therapist"]]
    named = [{"from_name": f"voice_{i}_is", "to_name": f"voice_{i}_label", "type": "choices",
              "value": {"choices": [{"Speaker 1": "Ben", "Speaker 2": "Ann"}[v]]}}
             for i, v in enumerate(voices) if v != "Therapist"]
    task = {"id": 1, "data": prepared.data,
            "annotations": [{"id": 2, "completed_by": 1, "result": pred + named, "updated_at": "2026-01-01"}]}
    lines = acceptance.measure_tasks(rnd, "couple", "a@x", [task], {1: [{"id": 3, "result": pred, "model_version": "m"}]},
                                     {1: "a@x"}, parse=pull.parse_annotation)
    voice_lines = sorted((json.loads(r["value"])["voice"], r["outcome"], json.loads(r["value"])["name"])
                         for r in lines if r["field"] == acceptance.VOICE_FIELD)
    assert voice_lines == [("Speaker 1", "added", "Ben"), ("Speaker 2", "added", "Ann"), ("Therapist", "kept", "Therapist")]
    assert all(r["row_index"] is None for r in lines if r["field"] == acceptance.VOICE_FIELD)
    # every row kept its pre-filled voice: kept, although only the annotation's voices have names
    assert {r["outcome"] for r in lines if r["field"] != acceptance.VOICE_FIELD} == {"kept"}
    acceptance.write(DataRoot(tmp_path), "transcript", lines, {"a@x"})  # lines on no row sort first
    stored = acceptance.read(DataRoot(tmp_path), "transcript")
    assert sorted(map(json.dumps, stored)) == sorted(map(json.dumps, lines)) and stored[0]["row_index"] is None


def test_a_record_prefilled_in_part_is_kept_in_that_part_and_completed_in_the_others():
    rnd = load_round("emotion")
    sample = make_sample("synthetic/accept_unit", "couple", 2)  # client rows 1 (Ben) and 2 (Ann)
    values = push.input_values(rnd, sample)
    partial = {ri: {"internal_emotion": [{"person": v["internal_emotion"][0]["person"]}]} for ri, v in values.items()}
    task, pred = _task(rnd, sample, partial)
    _, full = _task(rnd, sample, values)
    task["annotations"] = [{"id": 7, "completed_by": 1, "result": full, "updated_at": "2026-01-01"}]
    lines = acceptance.measure_tasks(rnd, "couple", "a@x", [task], {1: [{"id": 3, "result": pred, "model_version": "m"}]},
                                     {1: "a@x"}, parse=pull.parse_annotation)
    got = Counter((r["field"], r["slot"], r["outcome"]) for r in lines)
    assert got == Counter({("internal_emotion", None, "changed"): 2, ("internal_emotion.person", 1, "kept"): 2,
                           ("internal_emotion.emotion_description", 1, "added"): 2,
                           ("internal_emotion.intensity", 1, "added"): 2,
                           ("utterance_type", None, "added"): 2, ("tone_of_voice", None, "added"): 2})


def test_each_proposal_counts_on_its_own_field_and_the_accept_boxes_are_no_fields():
    """Proposals are accepted field by field (``ls_config.mark_prefilled``): an annotation as Label
    Studio takes it holds the mark and one ticked "accept" box per proposed field. The measure
    counts each field: the one field changed on a row is changed, the row's other proposals kept
    (accepted as they were), and neither the mark nor a box is a field."""
    rnd = load_round("transcript")
    sample = make_sample("synthetic/accept_fields", "couple", 3)
    [prepared] = push._prepare(rnd, sample, push.input_values, None)
    pred = prepared.prediction
    marks = [r for r in pred if r["from_name"].startswith(f"{ls_config.PROPOSED_MARK}_")]
    assert [r["value"]["choices"] for r in marks] == [["dialogue_cleaned", "primary_speaker", "target"]] * 3
    boxes = [{"from_name": ls_config.accept_name(key, r["from_name"].rsplit("_", 1)[1]), "to_name": r["to_name"],
              "type": "choices", "value": {"choices": [ls_config.ACCEPT_VALUE]}} for r in marks for key in r["value"]["choices"]]
    other = next(p for p in sample["participants"] if p != sample["rows"][1]["primary_speaker"])
    submitted = [dict(r, value={"choices": [other]}) if r["from_name"] == "primary_speaker_1" else r for r in pred] + boxes
    task = {"id": 1, "data": prepared.data,
            "annotations": [{"id": 2, "completed_by": 1, "result": submitted, "updated_at": "2026-01-01"}]}
    lines = acceptance.measure_tasks(rnd, "couple", "a@x", [task], {1: [{"id": 3, "result": pred, "model_version": "m"}]},
                                     {1: "a@x"}, parse=pull.parse_annotation)
    assert {(r["row_index"], r["field"]): r["outcome"] for r in lines} == {
        (ri, f): "changed" if (ri, f) == (2, "primary_speaker") else "kept"
        for ri in (1, 2, 3) for f in ("dialogue_cleaned", "primary_speaker", "target")}
    by_field = {r["field"]: (r["predicted"], r["kept"], r["changed"]) for r in acceptance.summarize(lines)}
    assert by_field == {"dialogue_cleaned": (3, 3, 0), "primary_speaker": (3, 2, 1), "target": (3, 3, 0)}


def test_a_rebuild_takes_each_projects_latest_state_and_keeps_a_deleted_tasks_lines(tmp_path):
    """Two archived states of one project: the second changed a row and lost a task (deleted in
    Label Studio after the push). The rebuild gives the second state's lines plus the lost task's
    lines from the first, as pulls keep them; an export archived without predictions is listed."""
    from pipeline.annotation.pushed import record_pushed

    rnd = load_round("emotion")
    s1, s2 = make_sample("synthetic/rebuild_1", "couple", 3), make_sample("synthetic/rebuild_2", "couple", 3)
    task1, pred1 = _task(rnd, s1, push.input_values(rnd, s1), tid=1)
    task2, pred2 = _task(rnd, s2, push.input_values(rnd, s2), tid=2)
    preds = {1: [{"id": 3, "task": 1, "result": pred1, "model_version": "m", "created_ago": "1 minute"}],
             2: [{"id": 4, "task": 2, "result": pred2, "model_version": "m", "created_ago": "1 minute"}]}

    def annotated(task, result):
        return {**task, "annotations": [{"id": 10 + task["id"], "completed_by": 1, "result": result,
                                         "updated_at": "2026-01-01"}]}

    def archive(tasks):
        path, _ = pull.archive_export(DataRoot(tmp_path), "emotion", "couple", "a@x", json.dumps(tasks).encode())
        record, new = acceptance.archive_predictions(DataRoot(tmp_path), path, acceptance.predictions_record(
            "emotion", "couple", "a@x", 5, tasks, preds, {1: "a@x", 2: "b@x"}))
        assert new and record["users"] == {"1": "a@x"} and "created_ago" not in record["predictions"][0]
        return acceptance.measure_archived(rnd, tasks, record, parse=pull.parse_annotation)

    first = archive([annotated(task1, pred1), annotated(task2, pred2)])
    other = "withdrawal" if pred1[0]["value"]["choices"] != ["withdrawal"] else "defense"
    changed = [dict(r, value={"choices": [other]}) if r["from_name"] == "utterance_type_0" else r for r in pred1]
    second = archive([annotated(task1, changed)])
    record_pushed(DataRoot(tmp_path), "emotion", [("couple", "a@x", s1["sample_id"]), ("couple", "a@x", s2["sample_id"])])
    pull.archive_export(DataRoot(tmp_path), "emotion", "family", "b@x", b"[]")  # archived before predictions were

    rebuilt = pull.rebuild_acceptance(DataRoot(tmp_path), "emotion")
    assert rebuilt.states == 2 and [p.parent.name for p in rebuilt.without_predictions] == ["b_x"]
    want = second + [r for r in first if r["sample_id"] == s2["sample_id"]]
    assert sorted_lines(rebuilt.lines) == sorted_lines(want)
    assert [r["outcome"] for r in want if r["field"] == "utterance_type" and r["sample_id"] == s1["sample_id"]][0] \
        == "changed"
    assert acceptance.read(DataRoot(tmp_path), "emotion") == sorted_lines(want)
