"""Speakers named once per voice in the transcript round (pipeline.annotation.voice_naming):
the voice block (first part of a long sample only), rows pre-filled with their voice, the names
applied to every row of the voice on pull, a row's own choice kept; in a real Label Studio and,
for what the annotator sees and hears, in headless Chromium."""
from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
import warnings
from pathlib import Path

import pyarrow as pa
import pytest
from ls_samples import make_sample
from playwright.sync_api import Error as PlaywrightError

from pipeline import schemas
from pipeline.annotation import ls_config, pull, push, voice_naming
from pipeline.annotation.rounds import load_round
from pipeline.annotation.windows import WINDOW_UNITS, stitch_tasks
from pipeline.paths import DataRoot
from pipeline.store import write_parquet
from tests.helpers import (PENDING, SCREENSHOTS, accept_by_mouse, browser_login, open_task, play_until_stopped,
                           tone_wav, wait_saved)

def neutral(sample_id: str, scenario: str, n_rows: int) -> tuple[dict, dict, list[dict]]:
    """(script, draft, voice table): ``make_sample``'s rows as the script, the same rows with each
    client's voice labelled ``Speaker n`` (the therapist by role) as the draft, and its voices."""
    script = make_sample(sample_id, scenario, n_rows)
    draft = json.loads(json.dumps(script))
    clients = list(dict.fromkeys(r["primary_speaker"] for r in script["rows"] if r["primary_speaker"] != "Therapist"))
    VOICE_OF = {c: f"Speaker {n}" for n, c in enumerate(clients, start=1)}  # who never speaks has no voice
    for r in draft["rows"]:
        r["primary_speaker"] = VOICE_OF.get(r["primary_speaker"], r["primary_speaker"])
        r["target"] = [VOICE_OF.get(t, t) for t in r["target"]]
    table, seen = [], []
    for r in draft["rows"]:
        if r["primary_speaker"] not in seen:
            seen.append(r["primary_speaker"])
    for voice in seen:
        own = [r for r in draft["rows"] if r["primary_speaker"] == voice]
        pick = own[1] if len(own) > 1 else own[0]  # a stretch other than its first row: the block plays it
        table.append({"sample_id": sample_id, "voice": voice, "diarization_speaker": f"SPEAKER_0{len(table)}",
                      "named_by": "role" if voice == "Therapist" else None,
                      "first_rows": [r["row_index"] for r in own[:3]],
                      "sample_start": pick["start_time"], "sample_end": pick["end_time"],
                      "n_rows": len(own), "speech_s": 1.0})
    return script, draft, table


def names_for(script: dict, draft: dict) -> dict[str, str]:
    return {d["primary_speaker"]: s["primary_speaker"] for s, d in zip(script["rows"], draft["rows"])}


def answer(rnd, data: dict, draft: dict, names: dict[str, str] | None, overrides: dict[int, str] = {}) -> list[dict]:
    """An annotator who keeps every pre-filled row, names the voices in the block (``names``) and
    picks another speaker on the rows in ``overrides``."""
    values = push.input_values(rnd, draft)
    result = voice_naming.prefill(rnd, data, values, ls_config.values_to_results(rnd, data, values))
    result = [r for r in result if not r["from_name"].startswith("voice_")]
    for i, v in enumerate(data.get("voices") or []):
        if names and v["voice"] in names:
            result.append({"from_name": f"voice_{i}_is", "to_name": f"voice_{i}_label", "type": "choices",
                           "value": {"choices": [names[v["voice"]]]}})
    for i, u in enumerate(data["units"]):
        if u["row_index"] in overrides:
            result = [r for r in result if r["from_name"] != f"primary_speaker_{i}"]
            result.append({"from_name": f"primary_speaker_{i}", "to_name": f"turn_{i}", "type": "choices",
                           "value": {"choices": [overrides[u["row_index"]]]}})
    return result


def pulled(labels) -> dict[tuple[int, str], object]:
    return {(r["row_index"], r["field"]): json.loads(r["value"]) for r in labels}


def an_override(script: dict) -> tuple[int, str]:
    """A row of Ann after the first part whose target stays valid when Ben is said to speak it instead."""
    row = next(r for r in script["rows"] if r["row_index"] > 10 and r["primary_speaker"] == "Ann"
               and "Ben" not in r["target"])
    return row["row_index"], "Ben"


def test_block_in_the_first_part_rows_on_their_voice_and_names_applied_on_pull():
    rnd = load_round("transcript")
    script, draft, table = neutral("synthetic/voices_025", "couple", 25)
    sample = {**draft, "voices": table}
    parts = ls_config.build_tasks_data(rnd, sample, "/data/local-files/?d=media/v.wav")
    assert len(parts) == -(-25 // WINDOW_UNITS) > 1  # 25 rows: a windowed sample
    block = parts[0]["voices"]
    assert [v["voice"] for v in block] == ["Speaker 1", "Speaker 2", "Therapist"]  # each voice once, table order
    assert all(p["voices"] == [] for p in parts[1:])  # named once, in part 1
    assert parts[0]["voices_note"] == "" and all("named once, in part 1" in p["voices_note"] for p in parts[1:])
    for v, t in zip(block, table):
        first = next(r for r in draft["rows"] if r["row_index"] == t["first_rows"][0])
        assert first["dialogue_cleaned"] in v["html"]
        assert f'#t={t["sample_start"]:.2f},{t["sample_end"]:.2f}"' in v["html"]  # plays exactly its stretch
    assert [p["value"] for p in parts[0]["voice_people"]] == ["Ann", "Ben", "Therapist"]

    # pre-filled: every row on its voice (targets too), the therapist's voice named by role
    values = push.input_values(rnd, draft)
    for part in parts:
        pred = {r["from_name"]: r["value"].get("choices") for r in voice_naming.prefill(
            rnd, part, values, ls_config.values_to_results(rnd, part, values))}
        for i, u in enumerate(part["units"]):
            row = draft["rows"][u["row_index"] - 1]
            assert pred[f"primary_speaker_{i}"] == [f"voice:{row['primary_speaker']}"]
            assert pred[f"target_{i}"] == [f"voice:{t}" if t.startswith(("Speaker", "Therapist")) else t
                                           for t in row["target"]]
        assert {k: v for k, v in pred.items() if k.startswith("voice_")} == (
            {"voice_2_is": ["Therapist"]} if part is parts[0] else {})
        # the name pre-filled is a proposal: its voice's hidden mark is set (its "accept" box shows)
        assert {k: v for k, v in pred.items() if "-voice_" in k} == (
            {"proposed-voice_2": ["name"]} if part is parts[0] else {})

    # one annotator names the voices in part 1 and overrides one row in another part
    row, who = an_override(script)
    assert row > 10
    names = names_for(script, draft)
    tasks = [{"id": 10 + k, "data": part, "annotations": [{
        "id": 100 + k, "completed_by": 7, "result": answer(rnd, part, draft, names if k == 0 else None, {row: who}),
        "updated_at": "2026-01-01T00:00:00Z"}]} for k, part in enumerate(parts)]
    # the proposal's mark and its ticked "accept" box ride along in part 1: no answers, no problems
    tasks[0]["annotations"][0]["result"] += [
        {"from_name": "proposed-voice_2", "to_name": "voice_2_label", "type": "choices", "value": {"choices": ["name"]}},
        {"from_name": "accept-voice_2_is", "to_name": "voice_2_label", "type": "choices",
         "value": {"choices": ["proposed: accept it"]}}]
    stitched, notes = stitch_tasks(tasks)
    assert notes == []
    labels, problems, done = pull.parse_export(rnd, stitched, "a@x.test", {7: "a@x.test"})
    assert problems == [] and done == 1
    got = pulled(labels)
    for r in script["rows"]:
        want = who if r["row_index"] == row else r["primary_speaker"]
        assert got[(r["row_index"], "primary_speaker")] == want, r["row_index"]
        assert got[(r["row_index"], "target")] == r["target"], r["row_index"]

    # voices nobody named: each row left on one is a problem naming the row and the field
    tasks[0]["annotations"][0]["result"] = answer(rnd, parts[0], draft, {"Therapist": "Therapist"}, {row: who})
    labels, problems, _ = pull.parse_export(rnd, stitch_tasks(tasks)[0], "a@x.test", {7: "a@x.test"})
    left = {(p["row_index"], p["field"]) for p in problems if "which was not named" in p["problem"]}
    assert left == {(r["row_index"], "primary_speaker") for r in draft["rows"]
                    if r["primary_speaker"].startswith("Speaker") and r["row_index"] != row} \
        | {(r["row_index"], "target") for r in draft["rows"] if any(t.startswith("Speaker") for t in r["target"])}
    assert all("missing required field" in p["problem"] or "not named" in p["problem"] for p in problems)
    assert got[(3, "primary_speaker")] == "Therapist"


def test_voice_named_as_nobody_in_particular_is_a_problem_and_plain_tasks_are_unchanged():
    rnd = load_round("transcript")
    script, draft, table = neutral("synthetic/voices_006", "couple", 6)
    data = ls_config.build_task_data(rnd, {**draft, "voices": table})
    result = answer(rnd, data, draft, {**names_for(script, draft), "Speaker 1": "Couple"})
    _, problems = pull.parse_annotation(rnd, data, {"result": result}, "a")
    assert any(p["field"] == "voice Speaker 1" and "named as Couple" in p["problem"] for p in problems)
    # two voices named as one person: a row left on its voice addressing the other one addresses
    # the therapist instead (turns.apply_voice_names' rule); where the annotator picked the
    # speaker, the lost addressee is a problem saying why
    both_ann = {**names_for(script, draft), "Speaker 1": "Ann", "Speaker 2": "Ann"}
    self_rows = {r["row_index"] for r in draft["rows"] if r["primary_speaker"].startswith("Speaker")
                 and r["target"] and all(t.startswith("Speaker") for t in r["target"])}
    labels, problems = pull.parse_annotation(rnd, data, {"result": answer(rnd, data, draft, both_ann)}, "a")
    assert self_rows and problems == []
    assert {(ri, f): v for (ri, f), v in pulled(labels).items() if ri in self_rows and f == "target"} == {
        (ri, "target"): ["Therapist"] for ri in self_rows}
    picked = {ri: "Ann" for ri in self_rows}
    labels, problems = pull.parse_annotation(rnd, data, {"result": answer(rnd, data, draft, both_ann, picked)}, "a")
    assert {p["row_index"] for p in problems if "named as the row's own speaker Ann" in p["problem"]} == self_rows
    assert not any(line["field"] == "target" and line["row_index"] in self_rows for line in labels)
    # the draft's opening row guessed "to the therapist" for a voice that is the therapist: to the group
    opening = json.loads(json.dumps(draft))
    opening["rows"][0].update(primary_speaker="Speaker 3", target=["Therapist"])
    table3 = table + [dict(table[0], voice="Speaker 3", first_rows=[1])]
    data3 = ls_config.build_task_data(rnd, {**opening, "voices": table3})
    labels, problems = pull.parse_annotation(
        rnd, data3, {"result": answer(rnd, data3, opening, {**names_for(script, draft), "Speaker 3": "Therapist"})}, "a")
    assert problems == [] and pulled(labels)[(1, "target")] == ["Couple"]
    # a sample without a voice table (a release, later rounds): no block, no voice choices
    plain = ls_config.build_task_data(rnd, script)
    assert plain["voices"] == [] and not any(o.get("alias") for u in plain["units"] for o in u["speaker_options"])
    assert voice_naming.prefill(rnd, plain, push.input_values(rnd, script), []) == []
    assert "voices" not in ls_config.build_task_data(load_round("emotion"), script)
    assert '<Repeater on="$voices"' in ls_config.render_config(rnd, "family")
    assert '$voices' not in ls_config.render_config(load_round("emotion"), "family")


def test_an_unreadable_voice_table_is_named(tmp_path):
    root = DataRoot(tmp_path)
    root.draft_voices("c/one").parent.mkdir(parents=True)
    root.draft_voices("c/one").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"one.parquet: not a readable voice table of c/one .*rescue segment c/one"):
        voice_naming.attach_voice_tables(load_round("transcript"), [make_sample("c/one")], DataRoot(tmp_path))
    assert voice_naming.attach_voice_tables(load_round("emotion"), [make_sample("c/one")], DataRoot(tmp_path))[0].get("voices") is None


@pytest.mark.slow
def test_a_real_round_names_voices_once_and_keeps_a_row_override(ls_client, ls_desks, new_annotators, tmp_path):
    rnd = load_round("transcript")
    script, draft, table = neutral("synthetic/voices_ls_025", "family", 25)
    root = DataRoot(tmp_path)
    write_parquet(pa.Table.from_pylist(table, schema=schemas.DRAFT_VOICES), root.draft_voices(draft["sample_id"]))
    (annotator,) = new_annotators(1)
    report = push.push_round(ls_desks, "transcript", [draft], [annotator], k=1, root=DataRoot(tmp_path))
    pid = report.projects[push.project_key("transcript", "family", annotator)]
    tasks = sorted(ls_client.tasks(pid), key=lambda t: t["data"]["window"]["index"])
    assert len(tasks) == -(-25 // WINDOW_UNITS) > 1
    assert [len(t["data"]["voices"]) for t in tasks] == [3] + [0] * (len(tasks) - 1)
    uid = {u["email"]: u["id"] for u in ls_client.users()}[annotator]
    row = next(r["row_index"] for r in script["rows"] if r["row_index"] > 12 and r["primary_speaker"] == "Dan"
               and "Cara" not in r["target"])
    names = names_for(script, draft)
    for k, task in enumerate(tasks):  # submitted through the API, part by part
        ls_client.create_annotation(task["id"], answer(rnd, task["data"], draft, names if k == 0 else None,
                                                       {row: "Cara"}), completed_by=uid, lead_time=5.0)
    result = pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[annotator], write=False)
    assert result.problems.to_pylist() == []
    got = pulled(result.labels.to_pylist())
    for r in script["rows"]:  # the voice's name on every row of it, the override on its row
        assert got[(r["row_index"], "primary_speaker")] == ("Cara" if r["row_index"] == row else r["primary_speaker"])
        assert got[(r["row_index"], "target")] == r["target"]


VOICE_REFUSED = ("The proposed name of a voice under 'Who is each voice?' is not accepted yet (the first such voice "
                 "from the top): listen, then accept it (key a) or pick who it is.")
VOICE_CHOICE = r"(voice:)?Speaker \d( \(voice\))?"  # a row's choice of a voice (its name, or its label)


def _row1_checks(page) -> list[str]:
    """The names of the checked choices of row 1's form, once one is shown (or after 15 s)."""
    page.locator("#unit_0").scroll_into_view_if_needed()
    with contextlib.suppress(PlaywrightError):
        page.wait_for_function("() => document.querySelector('#unit_0 input:checked')", timeout=15_000)
    return page.evaluate("() => [...document.querySelectorAll('#unit_0 input:checked')].map(e => e.name)")


def _push_couple(desks, client, data_root: Path, draft: dict, table: list[dict], email: str, wav: str):
    """The couple draft and its voice table pushed to ``email``'s transcript round, its audio
    ``media/<wav>``: ``(project id, its one task)``."""
    write_parquet(pa.Table.from_pylist(table, schema=schemas.DRAFT_VOICES),
                  DataRoot(data_root).draft_voices(draft["sample_id"]))
    report = push.push_round(desks, "transcript", [draft], [email], k=1, root=DataRoot(data_root),
                             media_url=lambda s: f"/data/local-files/?d=media/{wav}")
    pid = report.projects[push.project_key("transcript", "couple", email)]
    return pid, client.find_tasks(pid, "sample_id", draft["sample_id"])[0]


@pytest.mark.slow
def test_the_annotator_hears_each_voice_once_names_it_and_every_row_follows(ls_server, ls_client, ls_desks,
                                                                           ls_data_root, tmp_path, chromium):
    email, password = f"voices-{secrets.token_hex(3)}@rescue.test", secrets.token_urlsafe(12)
    ls_desks.add(email)
    ls_server.set_password(email, password)
    tone_wav(ls_data_root / "media" / "voices.wav", seconds=30)
    script, draft, table = neutral("synthetic/voices_browser", "couple", 7)
    pid, task = _push_couple(ls_desks, ls_client, tmp_path, draft, table, email, "voices.wav")
    names = names_for(script, draft)
    with chromium(player=True) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.set_default_timeout(120_000)
        browser_login(page, ls_server.url, email, password)
        page.goto(f"{ls_server.url}/projects/{pid}/data?task={task['id']}")
        page.locator("#unit_0").wait_for(state="attached")
        page.locator("#voice_0").wait_for(state="attached")
        page.wait_for_load_state("networkidle")
        # each voice once, with its first lines
        blocks = page.locator("#voices [id^=voice_]")
        assert blocks.count() == len(table)
        texts = [blocks.nth(i).inner_text() for i in range(len(table))]
        for v, text in zip(table, texts):
            assert sum(t.count(f"{v['voice']} (") for t in texts) == 1, texts  # "Speaker 1 (n rows ...)"
            for ri in v["first_rows"]:
                assert draft["rows"][ri - 1]["dialogue_cleaned"] in text, (v, text)
        # its play control plays that voice's stretch and stops at its end
        span = (table[1]["sample_start"], table[1]["sample_end"])
        seen = play_until_stopped(page, "#voice_1 audio", span)
        playing = [t for t, paused in seen if not paused and t > 0]
        assert playing and span[0] - 0.05 <= playing[0] <= span[0] + 1.0, (span, seen)
        end, paused = seen[-1]
        assert paused and span[1] - 0.05 <= end <= span[1] + 0.35, (span, seen)
        assert max(t for t, _ in seen) <= span[1] + 0.35
        # every row is pre-filled with its voice; the therapist's voice already has its name.
        # One CI run read row 1's checks while none was shown (not seen again in 12 runs here):
        # the editor's state and a screenshot are kept, and the page is opened once more (a
        # pre-fill that is not delivered at all still fails)
        checked = _row1_checks(page)
        if not any(re.fullmatch(VOICE_CHOICE, n) for n in checked):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "voices-unfilled.png"), full_page=True)
            editor = page.evaluate("""() => { const s = window.Htx && window.Htx.annotationStore;
                return s && {annotations: s.annotations.length, predictions: s.predictions.length,
                             selected: s.selected && s.selected.serializeAnnotation().slice(0, 4)} }""")
            warnings.warn(f"row 1 showed no pre-filled voice (checked {checked}; the editor: {editor}); "
                          "the page is opened again")
            page.reload()
            page.locator("#voice_0").wait_for(state="attached")
            checked = _row1_checks(page)
        assert any(re.fullmatch(VOICE_CHOICE, n) for n in checked), checked
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "voices.png"))
        for i, v in enumerate(table):  # name the two clients' voices by mouse; one row is someone else
            if v["voice"] != "Therapist":
                page.locator(f"#voice_{i} input[name={json.dumps(names[v['voice']])}]").click()
        page.locator("#unit_4").scroll_into_view_if_needed()
        page.locator("#unit_4 input[name=Therapist]").first.click()  # row 5: its speaker list (the first)
        # the therapist's name came proposed: Label Studio refuses the window, in one sentence, until
        # its "accept" box is ticked (the block comes first from the top)
        assert page.evaluate(PENDING)[0] == ["voice_2", "voice_2_is"]
        page.get_by_role("button", name="Submit").click()
        page.get_by_role("dialog").get_by_text(VOICE_REFUSED, exact=True).wait_for(timeout=20_000)
        page.keyboard.press("Escape")
        page.get_by_role("dialog").wait_for(state="hidden")
        # every row's fields came proposed: each accepted by its own box (row 5's speaker too: an
        # edit by mouse on the desk itself accepts nothing), and the therapist's name by its box
        assert accept_by_mouse(page) == 3 * len(task["data"]["units"]) + 1
        page.get_by_role("button", name="Submit").click()
        wait_saved(ls_client, pid, draft["sample_id"], page)
    result = pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[email], write=False)
    assert result.problems.to_pylist() == []
    got = pulled(result.labels.to_pylist())
    for r in script["rows"]:
        assert got[(r["row_index"], "primary_speaker")] == ("Therapist" if r["row_index"] == 5 else r["primary_speaker"])
        assert got[(r["row_index"], "target")] == r["target"]


def test_gold_names_the_backchannels_of_a_named_voice():
    """Background dialogue is never annotated: gold gives its voices the names their rows got."""
    from pipeline.quality import gold

    rnd = load_round("transcript")
    script, draft, _ = neutral("synthetic/voices_bg", "couple", 6)
    # row 2 (Speaker 2 = Ann) holds a backchannel of Speaker 1 (Ben) addressed to the row's speaker
    draft["rows"][1]["background_dialogue"] = [{"speaker": "Speaker 1", "target": ["Speaker 2"], "content": "Mm-hmm."}]
    lines = []
    for who in ("a@x.test", "b@x.test"):
        for r in script["rows"]:
            for f in ("primary_speaker", "target", "dialogue_cleaned"):
                lines.append({"round": "transcript", "sample_id": draft["sample_id"], "scenario": "couple",
                              "row_index": r["row_index"], "annotator": who, "field": f,
                              "value": json.dumps(r[f]), "annotation_id": 1, "lead_time_s": 1.0,
                              "created_at": None, "updated_at": None})
    res = gold.build_gold([draft], pa.Table.from_pylist(lines, schema=schemas.LABELS), [rnd], strict=False)
    rows = res.samples[0]["rows"]
    assert [r["primary_speaker"] for r in rows] == [r["primary_speaker"] for r in script["rows"]]
    assert rows[1]["background_dialogue"] == [{"speaker": "Ben", "target": ["Ann"], "content": "Mm-hmm."}]
    # a row whose speaker was corrected on that row: its backchannel is addressed to the corrected speaker
    base = [dict(r) for r in draft["rows"]]
    fixed = [dict(r, background_dialogue=b["background_dialogue"]) for r, b in zip(rows, base)]
    fixed[1]["primary_speaker"] = "Therapist"
    got = voice_naming.name_background(base, fixed)
    assert got[1]["background_dialogue"][0] == {"speaker": "Ben", "target": ["Therapist"], "content": "Mm-hmm."}
    assert got[0] is fixed[0]  # rows without background stay as they are


def test_the_segmenters_voice_table_feeds_the_block():
    """The voice table ``rescue segment`` writes (no speaking order) gives the block its voices."""
    from pipeline.media import turns
    from pipeline.media.rttm import Turn
    from pipeline.media.transcribe import Transcript, Unit

    spoken = [("SPEAKER_03", "What brings you all here?"), ("SPEAKER_01", "We fight at dinner, every night."),
              ("SPEAKER_03", "Who starts it?"), ("SPEAKER_00", "Usually my brother does."),
              ("SPEAKER_03", "How is that for you?"), ("SPEAKER_02", "I just leave the room.")]
    cues = [Unit(i * 3.0, i * 3.0 + 2.5, text) for i, (_, text) in enumerate(spoken)]
    dia = [Turn(i * 3.0, i * 3.0 + 2.5, who) for i, (who, _) in enumerate(spoken)]
    rows, table = turns.segment_with_voices("g/f", Transcript("cue", cues), dia, "family", ["Dana", "Mark", "Lily"])
    sample = {"sample_id": "g/f", "scenario": "family", "participants": ["Dana", "Mark", "Lily"],
              "rows": rows.to_pylist(), "voices": table.to_pylist()}
    rnd = load_round("transcript")
    data = ls_config.build_task_data(rnd, sample, "/data/local-files/?d=media/f.wav")
    assert [v["voice"] for v in data["voices"]] == ["Therapist", "Speaker 1", "Speaker 2", "Speaker 3"]
    assert "We fight at dinner, every night." in data["voices"][1]["html"]
    assert (data["voices"][1]["start"], data["voices"][1]["end"]) == (3.0, 5.5)  # where it speaks alone
    pred = voice_naming.prefill(rnd, data, push.input_values(rnd, sample), [])
    assert {r["from_name"]: r["value"]["choices"] for r in pred if r["from_name"].startswith("voice_")} == {
        "voice_0_is": ["Therapist"]}  # named by role: pre-filled, to confirm
    assert [r["value"]["choices"] for r in pred if r["from_name"].startswith("primary_speaker_")] == [
        ["voice:Therapist"], ["voice:Speaker 1"], ["voice:Therapist"], ["voice:Speaker 2"], ["voice:Therapist"],
        ["voice:Speaker 3"]]


def test_hostile_results_are_problems_not_crashes():
    """What an annotator can post to their own desk's API: control names that are not strings,
    values that are not objects, choices that are not a list, results that are not objects. Each
    is a problem naming what is wrong; the well-formed rows of the same annotation still arrive."""
    rnd = load_round("transcript")
    script, draft, table = neutral("synthetic/voices_hostile", "couple", 6)
    data = ls_config.build_task_data(rnd, {**draft, "voices": table})
    good = answer(rnd, data, draft, names_for(script, draft))
    expected, none = pull.parse_annotation(rnd, data, {"result": good}, "a")
    assert none == [] and expected
    hostile = [{"from_name": 7, "value": {"choices": ["x"]}}, {"from_name": None, "value": []},
               {"from_name": "voice_0_is", "value": "Ann"}, {"from_name": "voice_1_is", "value": {"choices": "Ann"}},
               {"from_name": "primary_speaker_0", "value": [["Ann"]]}, 5, "text", None, ["a"]]
    labels, problems = pull.parse_annotation(rnd, data, {"result": hostile + good}, "a")
    assert problems and all(p["problem"] for p in problems)
    assert sum(p["problem"].startswith("not a result") for p in problems) == 4  # 5, "text", None, ["a"]
    assert {(r["row_index"], r["field"]) for r in labels} >= {(r["row_index"], r["field"]) for r in expected} - {
        (data["units"][0]["row_index"], "primary_speaker")}
    _, problems = pull.parse_annotation(rnd, data, {"result": {"from_name": "x"}}, "a")
    assert problems[0]["problem"] == "the annotation's result is not a list of results"  # then each row's missing field


# the voices whose pre-filled name nobody accepted yet, and the look of each voice's list (the word
# before it, its outline)
_VOICES_PENDING = """() => [...document.querySelectorAll('[id^="proposal-voice_"]')].filter(v => v.getClientRects().length
  && !v.querySelector('input').checked).map(v => v.closest('[id^=voice_]').id)"""
_VOICE_LOOK = """() => [...document.querySelectorAll('[id^=voice_] [data-rescue-proposed]')].map(f =>
  [f.closest('[id^=voice_]').id, getComputedStyle(f, '::before').content, getComputedStyle(f).outlineStyle])"""
_FOCUSED_VOICE = """() => { const a = document.activeElement; const f = a && a.closest ? a.closest('[id^=voice_]') : null;
  return f ? f.id : null; }"""


def _voices_pending(page, want: list[str]) -> None:
    page.wait_for_function(f"() => JSON.stringify(({_VOICES_PENDING})()) === {json.dumps(json.dumps(want, separators=(',', ':')))}",
                           timeout=10_000)


@pytest.mark.slow
def test_a_pre_filled_voice_name_is_a_proposal_accepted_by_a_or_by_picking_that_voice(
        ls_server, ls_client, ls_desks, ls_data_root, tmp_path, chromium):
    """Through the desk's front: the speaking-order hint named the clients' voices the wrong way
    round and the therapist by role; each name looks proposed, the submit is refused naming the
    first voice, picking a person for a voice accepts that voice only, Enter accepts nothing, a
    accepts the voice in focus, and the pull applies the names picked."""
    from pipeline.labelstudio.front import FrontServer

    email, password = f"voices-p-{secrets.token_hex(3)}@rescue.test", secrets.token_urlsafe(12)
    ls_desks.add(email)
    ls_server.set_password(email, password)
    tone_wav(ls_data_root / "media" / "voices_p.wav", seconds=30)
    script, draft, table = neutral("synthetic/voices_proposed", "couple", 7)
    real = names_for(script, draft)  # Speaker 1 is Ben, Speaker 2 Ann: the hint got them the wrong way round
    assert (real["Speaker 1"], real["Speaker 2"]) == ("Ben", "Ann")
    swapped = {"Speaker 1": "Ann", "Speaker 2": "Ben"}
    for r in draft["rows"]:
        r["primary_speaker"] = swapped.get(r["primary_speaker"], r["primary_speaker"])
        r["target"] = [swapped.get(t, t) for t in r["target"]]
    table = [{**v, "voice": swapped.get(v["voice"], v["voice"]), "named_by": v["named_by"] or "order"} for v in table]
    assert [v["voice"] for v in table] == ["Ann", "Ben", "Therapist"]
    pid, task = _push_couple(ls_desks, ls_client, tmp_path, draft, table, email, "voices_p.wav")
    front = FrontServer(ls_server.url).start()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.set_default_timeout(120_000)
        try:
            browser_login(page, ls_server.url, email, password, timeout_ms=60_000)
            open_task(page, f"{front.url}/projects/{pid}/data?task={task['id']}", prefilled=True)
            # every named voice is a proposal: its own look and the word "proposed"
            _voices_pending(page, ["voice_0", "voice_1", "voice_2"])
            page.wait_for_function("() => document.querySelectorAll('[id^=voice_] [data-rescue-proposed]').length === 3")
            assert page.evaluate(_VOICE_LOOK) == [[f"voice_{i}", '"proposed"', "dashed"] for i in range(3)]
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "voices_proposed_front.png"))
            # submitting is refused with one sentence naming the first voice not accepted, beside it
            page.evaluate("() => document.activeElement && document.activeElement.blur()")
            page.keyboard.press("Control+Enter")
            why = page.locator(".rescue-why")
            why.wait_for(timeout=20_000)
            assert why.inner_text() == ("The proposed name of voice 'Ann' is not accepted yet: listen, then accept it "
                                        "(key a) or pick who it is.")
            assert why.evaluate("w => w.closest('[id^=voice_]').id") == "voice_0"
            page.wait_for_function(f"() => ({_FOCUSED_VOICE})() === 'voice_0'")
            # picking another person (key 2: Ben) for that voice accepts that voice only
            page.keyboard.press("2")
            _voices_pending(page, ["voice_1", "voice_2"])
            assert page.locator("#voice_0 .lsf-choices").first.locator("input:checked").evaluate_all("xs => xs.map(x => x.name)") == ["Ben"]
            page.wait_for_function("() => !document.querySelector('.rescue-why')")
            page.keyboard.press("Enter")  # to the next voice: nothing accepted
            page.wait_for_function(f"() => ({_FOCUSED_VOICE})() === 'voice_1'")
            time.sleep(0.3)
            _voices_pending(page, ["voice_1", "voice_2"])
            page.keyboard.press("1")  # Ann
            _voices_pending(page, ["voice_2"])
            page.keyboard.press("Enter")
            page.wait_for_function(f"() => ({_FOCUSED_VOICE})() === 'voice_2'")
            page.keyboard.press("a")  # the therapist's name accepted as it is
            _voices_pending(page, [])
            page.wait_for_function("() => !document.querySelector('[id^=voice_] [data-rescue-proposed]')")
            assert page.locator("#voice_2 .lsf-choices").first.locator("input:checked").evaluate_all("xs => xs.map(x => x.name)") == ["Therapist"]
            assert accept_by_mouse(page) == 3 * len(task["data"]["units"])  # the rows' own proposals
            page.keyboard.press("Control+Enter")
            wait_saved(ls_client, pid, draft["sample_id"], page)
        except Exception:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "voices_proposed_failed.png"), full_page=True)
            raise
        finally:
            front.stop()
    result = pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[email], write=False)
    assert result.problems.to_pylist() == []
    got = pulled(result.labels.to_pylist())
    for r in script["rows"]:  # the names picked, on every row of each voice
        assert got[(r["row_index"], "primary_speaker")] == r["primary_speaker"], r["row_index"]
        assert got[(r["row_index"], "target")] == r["target"], r["row_index"]
