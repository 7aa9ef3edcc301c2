"""Honest pre-fills: a push pre-fills only what someone or something proposed.

* Every round pushed as the docs do it - by CLI (``rescue annotate push ROUND``, default
  ``--prelabel input``) and by flow (the ``push-transcript-round`` and ``push-next-round`` task
  functions, i.e. ``intake.open_round`` with its default ``push.input_values``), from the work
  store after the transcript round's gold (which holds "" and [] for every later field): each
  task's prediction is checked field by field. Transcript: the segmenter's draft; emotion: only
  the README's default "who feels it" = the speaker; viewpoints, relation, strategy: nothing.
* ``--prelabel model``: the model's answers, its explicit "none" included ("no clear pattern").
* A form pre-filled in full carries the hidden mark; Label Studio (the real editor, in headless
  Chromium) refuses to submit it until its "pre-fill checked" box is ticked; through the desk's
  front, Enter on the form or a change in it ticks it.

The desks here are the session's one Label Studio (``ls_desks``, a test arrangement standing in
for one desk per person); the model is a stand-in HTTP endpoint (no model runs here), named so.
"""
from __future__ import annotations

import json
import secrets
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest
from ls_samples import make_sample
from typer.testing import CliRunner

from pipeline import corpus, schemas, store, taxonomy
from pipeline.annotation import intake, ls_config, pull, push, pushed
from pipeline.annotation.rounds import load_round, round_names
from pipeline.cli import app
from pipeline.catalog import record_catalog
from pipeline.paths import DataRoot
from pipeline.quality import gold
from tests.helpers import SCREENSHOTS, browser_login, open_task

MARK, CHECK = ls_config.PREFILLED_MARK, ls_config.PREFILL_CHECK


# --- a segmented interview, as `rescue segment` leaves it ----------------------------------

def _segmented(root, sid: str, n_rows: int = 7) -> dict:
    """Catalog line and draft rows of one couple interview (the draft fields only)."""
    sample = make_sample(sid, "couple", n_rows)
    line = {name: None for name in schemas.CATALOG.names}
    line.update(sample_id=sid, scenario="couple", source_name=f"{sid.replace('/', '_')}.mp4", sha256="0" * 64,
                participants=sample["participants"], status="done", duration_s=sample["rows"][-1]["end_time"] + 1)
    record_catalog(root, line)
    drafts = [{"sample_id": sid, **{k: r[k] for k in schemas.DRAFT_ROWS.names if k != "sample_id"}}
              for r in sample["rows"]]
    store.write_parquet(pa.Table.from_pylist(drafts, schema=schemas.DRAFT_ROWS), DataRoot(root).drafts(sid))
    return {r["row_index"]: r for r in drafts}


def _predictions(client, pid: int) -> dict[tuple, list[dict]]:
    """task key (sample, window) -> its tasks' data and prediction results (one prediction each at most)."""
    preds = client._json("GET", "/api/predictions/", "list predictions", params={"project": pid}) or []
    by_task: dict[int, list] = {}
    for p in preds:
        by_task.setdefault(p["task"], []).append(p)
    out = {}
    for t in client.tasks(pid):
        ps = by_task.get(t["id"], [])
        assert len(ps) <= 1, ps
        out[push.task_key(t["data"])] = (t["data"], ps[0]["result"] if ps else [])
    return out


def _by_unit(data: dict, result: list[dict]) -> dict[int, dict[str, object]]:
    """row_index -> {from_name without the unit: value} of a prediction."""
    out: dict[int, dict] = {u["row_index"]: {} for u in data["units"]}
    for r in result:
        name, unit = r["from_name"].rsplit("_", 1)
        out[data["units"][int(unit)]["row_index"]][name] = ls_config.result_value(r)
    return out


def _expected(name: str, draft: dict, speaker: str) -> dict[str, object]:
    """What the documented push may pre-fill on a row after the transcript round's gold: what
    someone proposed, nothing else."""
    if name == "transcript":  # the segmenter's draft, the form filled in full: marked
        return {"dialogue_cleaned": draft["dialogue_cleaned"], "primary_speaker": [draft["primary_speaker"]],
                "target": list(draft["target"]), MARK: [ls_config.PREFILLED_MARK_VALUE]}
    if name == "emotion":  # the README's default; function and tone are left to the person: no mark
        return {"internal_emotion__1__person": [speaker]}
    return {}  # viewpoints, relation, strategy: no gold, no model - nothing


def _check_round(client, pid: int, name: str, drafts: dict) -> int:
    checked = 0
    for data, result in _predictions(client, pid).values():
        for ri, got in _by_unit(data, result).items():
            speaker = next(u["speaker"] for u in data["units"] if u["row_index"] == ri)
            assert got == _expected(name, drafts[ri], speaker), (name, ri, got)
            checked += 1
    return checked


def _accepting(result: list[dict]) -> list[dict]:
    """An annotation that keeps a prediction as the person submits it: each marked form's box ticked."""
    ticks = [{"from_name": r["from_name"].replace(MARK, CHECK), "to_name": r["to_name"], "type": "choices",
              "value": {"choices": [ls_config.PREFILL_CHECK_VALUE]}} for r in result if r["from_name"].startswith(MARK)]
    return result + ticks


def test_every_round_pushed_as_documented_prefills_only_what_was_proposed(ls_desks, ls_client, new_annotators,
                                                                           tmp_path, monkeypatch):
    import flows
    from flows import annotation_round, ingest_batch

    root = tmp_path / "data"
    sid = "prefill_couple/p01"
    drafts = _segmented(root, sid)
    cli_people, flow_people = new_annotators(2), new_annotators(2)
    # the test arrangement: every desk is the session's one server; Prefect's push limit needs
    # a Prefect server, and RESCUE_PUSH_LIMIT= (empty) is its documented off switch
    monkeypatch.setattr("pipeline.cli.annotate._desks", lambda settings: ls_desks)
    monkeypatch.setattr("pipeline.annotation.desks.Desks", lambda *a, **k: ls_desks)
    monkeypatch.setattr(annotation_round, "_desks", lambda data_root: ls_desks)
    monkeypatch.setattr(flows, "PUSH_LIMIT", "")
    runner = CliRunner(env={"COLUMNS": "200"})
    who = [x for a in cli_people for x in ("-a", a)]

    def cli(*args):
        res = runner.invoke(app, [*args, "--data-root", str(root), *who])
        assert res.exit_code == 0, res.output
        return " ".join(res.output.split())

    # round 1: `rescue annotate push transcript` (segment -> push), and the ingest-batch flow's push task
    out = cli("annotate", "push", "transcript")
    assert "1 segmented interviews admitted" in out
    assert "pre-filled: dialogue_cleaned, primary_speaker, target" in out
    ingest_batch.push_drafts.fn([types.SimpleNamespace(sample_id=sid)], str(root), flow_people)
    for person in (*cli_people, *flow_people):
        pid = ls_client.find_project(push.project_key("transcript", "couple", person)).id
        assert _check_round(ls_client, pid, "transcript", drafts) == len(drafts)

    # the transcript round answered as pre-filled (each form's box ticked, as Label Studio requires),
    # pulled (the marks and boxes are no answers: no problem, no label line) and made gold
    users = {u["email"]: u["id"] for u in ls_client.users()}
    for person in cli_people:
        pid = ls_client.find_project(push.project_key("transcript", "couple", person)).id
        for task in ls_client.tasks(pid):
            [(_, result)] = [v for k, v in _predictions(ls_client, pid).items() if k == push.task_key(task["data"])]
            ls_client.create_annotation(task["id"], _accepting(result), completed_by=users[person])
    pulled = pull.pull_round(ls_desks, "transcript", root, annotators=cli_people)
    assert pulled.problems.to_pylist() == []
    assert {r["field"] for r in pulled.labels.to_pylist()} == {"dialogue_cleaned", "primary_speaker", "target"}
    gold.build_and_store(root)
    [work] = corpus.load_work(root)
    therapist = [r for r in work["rows"] if taxonomy.is_therapist(r["primary_speaker"])]
    clients = [r for r in work["rows"] if not taxonomy.is_therapist(r["primary_speaker"])]
    # the work store's placeholders that the push must not show as answers
    assert therapist and all(r["relation_cycle_state"] == "" and r["support_strategy"] == [] for r in therapist)
    assert clients and all(r["internal_emotion"] == [] and not r["utterance_type"] for r in clients), clients[0]

    # rounds 2-5: `rescue annotate push ROUND` and the annotation-round flow's push task
    for name in round_names()[1:]:
        out = cli("annotate", "push", name)
        assert ("pre-filled: internal_emotion" if name == "emotion" else "nothing pre-filled") in out, out
        annotation_round.push_next.fn(name, str(root), flow_people)
        units = len(clients) if load_round(name).applies_to == "client" else len(therapist)
        for person in (*cli_people, *flow_people):
            pid = ls_client.find_project(push.project_key(name, "couple", person)).id
            assert _check_round(ls_client, pid, name, drafts) == units, (name, person)

    # the push record (the card's "pre-filled" column): what was really pre-filled
    assert {n: pushed.prefilled_fields(root, n) for n in round_names()} == {
        "transcript": ["dialogue_cleaned", "primary_speaker", "target"], "emotion": ["internal_emotion"],
        "viewpoints": [], "relation": [], "strategy": []}


class _StandInModel(BaseHTTPRequestHandler):
    """A stand-in for an OpenAI-compatible endpoint (no model runs here): every therapist row gets
    "" for the pattern (its explicit "none") and a reason."""

    rows: list[int] = []

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        answer = {"rows": [{"row_index": ri, "relation_cycle_state": "", "relation_cycle_reason": "nobody leads"}
                           for ri in self.rows]}
        body = json.dumps({"choices": [{"message": {"content": json.dumps(answer)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_prelabel_model_prefills_the_models_answers_its_explicit_none_too(ls_desks, ls_client, new_annotators,
                                                                           tmp_path, monkeypatch):
    root = tmp_path / "data"
    sample = make_sample("prefill_model/m01", "couple", 6)
    for r in sample["rows"]:  # the work store after the transcript round: later fields empty
        r.update(relation_cycle_state="" if r["primary_speaker"] == "Therapist" else None,
                 relation_cycle_reason=None, relation_cycle_evidence_rows=None)
    corpus.merge_into_work(root, [sample])
    therapist = [r["row_index"] for r in sample["rows"] if r["primary_speaker"] == "Therapist"]
    _StandInModel.rows = therapist
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandInModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr("pipeline.cli.annotate._desks", lambda settings: ls_desks)
    [person, other] = new_annotators(2)
    try:
        res = CliRunner().invoke(app, ["annotate", "push", "relation", "--data-root", str(root), "-a", person, "-k", "1",
                                       "--prelabel", "model", "--prelabel-url", f"http://127.0.0.1:{server.server_port}",
                                       "--prelabel-model", "stand-in"])
    finally:
        server.shutdown()
    assert res.exit_code == 0, res.output
    pid = ls_client.find_project(push.project_key("relation", "couple", person)).id
    [(data, result)] = _predictions(ls_client, pid).values()
    got = _by_unit(data, result)
    assert got == {ri: {"relation_cycle_state": ["no clear pattern"], "relation_cycle_reason": "nobody leads",
                        MARK: [ls_config.PREFILLED_MARK_VALUE]} for ri in therapist}
    # the same empty pattern from the rows (the store's placeholder) is no proposal
    [prepared] = push._prepare(load_round("relation"), sample, push.input_values, None)
    assert prepared.prediction == []
    intake.open_round(ls_desks, root, "relation", [other], k=1)  # the flow's call, its default pre-annotation
    assert not _predictions(ls_client, ls_client.find_project(push.project_key("relation", "couple", other)).id)[
        push.task_key(data)][1]


def test_only_a_form_filled_in_full_is_marked():
    """The mark goes where Label Studio would take the form untouched: every required control of
    the form holds a value (a round without any: any value)."""
    rnd = load_round("strategy")
    sample = make_sample("prefill_mark/s01", "couple", 6)  # therapist rows 3 (no strategy) and 6 (a strategy)
    full = push._prepare(rnd, sample, lambda r, s: {3: {"support_strategy": []}, 6: s["rows"][5]}, None)[0]
    assert [r["from_name"] for r in full.prediction if r["from_name"].startswith(MARK)] == [f"{MARK}_0", f"{MARK}_1"]
    emotion = load_round("emotion")  # "who feels it" alone: function and tone still wanted, no mark
    [part] = push._prepare(emotion, sample, None, None)
    assert part.prediction and not any(r["from_name"].startswith(MARK) for r in part.prediction)
    viewpoints = load_round("viewpoints")  # nothing required: a stance pre-filled is a form filled in full
    [vp] = push._prepare(viewpoints, sample, push.input_values, None)
    marked = {r["from_name"] for r in vp.prediction if r["from_name"].startswith(MARK)}
    assert marked == {f"{MARK}_{i}" for i in range(len(vp.data["units"]))}
    # the pull takes neither the mark nor the box for an answer (no label line, no problem)
    lines, problems = pull.parse_annotation(rnd, full.data, {"result": _accepting(full.prediction)}, "a@x.test")
    assert problems == [] and {ln["field"] for ln in lines} == {"support_strategy"}


# --- in the browser -----------------------------------------------------------------------

_BOXES = "() => [...document.querySelectorAll('[id^=\"prefill-checked_\"]')].map(v => [v.id, v.offsetParent !== null, v.querySelector('input').checked])"


def _refused(page, form: int) -> None:
    """Submit is refused for an unchecked pre-filled form, and ``form`` is the first such from the
    top (the one the message means: forms carry no numbers on the page)."""
    page.get_by_role("button", name="Submit").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("A form came pre-filled and has not been checked (the first such from the top)").wait_for(
        timeout=20_000)
    unchecked = page.evaluate("() => [...document.querySelectorAll('[id^=\"prefill-checked_\"]')]"
                              ".filter(v => v.getClientRects().length && !v.querySelector('input').checked)"
                              ".map(v => Number(v.id.split('_')[1]))")
    assert unchecked and unchecked[0] == form, unchecked
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")


def _saved(client, pid: int, sid: str, page) -> None:
    deadline = time.monotonic() + 60
    while not client.find_tasks(pid, "sample_id", sid)[0]["total_annotations"]:
        if page.get_by_role("dialog").count():
            raise AssertionError(f"Submit refused: {page.get_by_role('dialog').first.inner_text()!r}")
        assert time.monotonic() < deadline, "the annotation was not saved"
        time.sleep(0.5)


@pytest.mark.slow
def test_an_untouched_prefilled_form_is_refused_until_checked_or_edited(ls_server, ls_client, ls_desks,
                                                                         new_annotators, tmp_path, chromium):
    from desk_front import FrontServer

    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    drafted = make_sample("prefill_browser/b01", "couple", 3)
    report = push.push_round(ls_desks, "transcript", [drafted], [email], k=1)  # the drafts pre-filled
    pid = report.projects[push.project_key("transcript", "couple", email)]
    task = ls_client.tasks(pid)[0]
    # a model's proposals for both therapist rows (3, 6): every required field, so both forms marked
    modelled = make_sample("prefill_browser/b02", "couple", 6)
    proposal = {"relation_cycle_state": "pursue_withdraw", "relation_cycle_reason": "she asks, he steps back"}
    report = push.push_round(ls_desks, "relation", [modelled], [email], k=1,
                             prelabel=lambda r, s: {3: dict(proposal), 6: dict(proposal)}, prelabel_source="model-x")
    rel_pid = report.projects[push.project_key("relation", "couple", email)]
    rel_task = ls_client.tasks(rel_pid)[0]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    front = FrontServer(ls_server.url).start()
    with chromium() as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            browser_login(page, ls_server.url, email, password, timeout_ms=60_000)
            # straight to Label Studio: its own validation refuses every unchecked pre-filled form
            open_task(page, f"{ls_server.url}/projects/{pid}/data?task={task['id']}", prefilled=True)
            assert page.evaluate(_BOXES) == [[f"{CHECK}_{i}", True, False] for i in range(3)]
            page.screenshot(path=str(SCREENSHOTS / "prefill_unchecked.png"), full_page=True)
            _refused(page, 0)
            for i in (0, 1):
                page.locator(f"#{CHECK}_{i} input").click()
            _refused(page, 2)
            page.locator(f"#{CHECK}_2 input").click()
            page.get_by_role("button", name="Submit").click()
            _saved(ls_client, pid, drafted["sample_id"], page)

            # through the desk's front: Enter keeps a form (checks it), a change in a form checks it
            # (the session cookie is the host's, whatever the port: no second login)
            open_task(page, f"{front.url}/projects/{rel_pid}/data?task={rel_task['id']}", prefilled=True)
            assert [c for _, _, c in page.evaluate(_BOXES)] == [False, False]
            page.evaluate("() => document.activeElement && document.activeElement.blur()")
            page.keyboard.press("Enter")  # to form 0
            page.keyboard.press("Enter")  # form 0 kept: checked; to form 1
            assert [c for _, _, c in page.evaluate(_BOXES)] == [True, False]
            _refused(page, 1)
            shown = ls_config.choice_text(load_round("relation"), "relation_cycle_state", "attack_attack")  # its words
            page.locator("#unit_1 .lsf-choices").first.locator(f"input[name='{shown}']").click()  # an edit
            assert [c for _, _, c in page.evaluate(_BOXES)] == [True, True]
            page.get_by_role("button", name="Submit").click()
            _saved(ls_client, rel_pid, modelled["sample_id"], page)
        finally:
            front.stop()

    result = pull.pull_round(ls_desks, "transcript", tmp_path, annotators=[email], write=False)
    assert result.problems.to_pylist() == []
    got = {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()}
    assert got == {(r["row_index"], f): r[f] for r in drafted["rows"]  # kept as drafted
                   for f in ("dialogue_cleaned", "primary_speaker", "target")}
    result = pull.pull_round(ls_desks, "relation", tmp_path, annotators=[email], write=False)
    assert result.problems.to_pylist() == []
    got = {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()}
    assert (got[(3, "relation_cycle_state")], got[(6, "relation_cycle_state")]) == ("pursue_withdraw", "attack_attack")
