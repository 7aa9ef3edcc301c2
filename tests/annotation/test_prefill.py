"""Honest pre-fills: a push pre-fills only what someone or something proposed.

* Every round pushed as the docs do it - by CLI (``rescue annotate push ROUND``, default
  ``--prelabel input``) and by flow (the ``push-transcript-round`` and ``push-next-round`` task
  functions, i.e. ``intake.open_round`` with its default ``push.input_values``), from the work
  store after the transcript round's gold (which holds "" and [] for every later field): each
  task's prediction is checked field by field. Transcript: the segmenter's draft; emotion: only
  the README's default "who feels it" = the speaker; viewpoints, relation, strategy: nothing.
* ``--prelabel model``: the model's answers, its explicit "none" included ("no clear pattern").
* Every pre-filled value is a proposal, field by field: the form's hidden mark names each proposed
  field, whose "accept" box Label Studio (the real editor, in headless Chromium) requires before it
  takes the window, refusing it with one sentence naming the field; through the desk's front the key
  ``a`` on a field accepts that field, an edit of a field accepts that field only, and Enter accepts
  nothing. The pull's acceptance measure counts each field's proposal kept or changed.

The desks here are the session's one Label Studio (``ls_desks``, a test arrangement standing in
for one desk per person); the model is a stand-in HTTP endpoint (no model runs here), named so.
"""
from __future__ import annotations

import json
import secrets
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest
from ls_samples import make_sample
from typer.testing import CliRunner

from pipeline import corpus, schemas, store, taxonomy
from pipeline.annotation import acceptance, intake, ls_config, pull, push, pushed
from pipeline.annotation.rounds import load_round, round_names
from pipeline.cli import app
from pipeline.catalog import record_catalog
from pipeline.paths import DataRoot
from pipeline.quality import gold
from tests.helpers import ACCEPT_BOXES, PENDING, SCREENSHOTS, browser_login, open_task, wait_saved

MARK = ls_config.PROPOSED_MARK


# --- a segmented interview, as `rescue segment` leaves it ----------------------------------

def _segmented(root, sid: str, n_rows: int = 7) -> dict:
    """Catalog line and draft rows of one couple interview (the draft fields only)."""
    sample = make_sample(sid, "couple", n_rows)
    line = {name: None for name in schemas.CATALOG.names}
    line.update(sample_id=sid, scenario="couple", source_name=f"{sid.replace('/', '_')}.mp4", sha256="0" * 64,
                participants=sample["participants"], status="done", duration_s=sample["rows"][-1]["end_time"] + 1)
    record_catalog(DataRoot(root), line)
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
    if name == "transcript":  # the segmenter's draft, every field marked as proposed
        return {"dialogue_cleaned": draft["dialogue_cleaned"], "primary_speaker": [draft["primary_speaker"]],
                "target": list(draft["target"]), MARK: ["dialogue_cleaned", "primary_speaker", "target"]}
    if name == "emotion":  # the README's default, a proposal too; function and tone are left to the person
        return {"internal_emotion__1__person": [speaker], MARK: ["internal_emotion__1__person"]}
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
    """An annotation that keeps a prediction as the person submits it: each proposed field's box ticked."""
    ticks = [{"from_name": ls_config.accept_name(key, r["from_name"].rsplit("_", 1)[1]), "to_name": r["to_name"],
              "type": "choices", "value": {"choices": [ls_config.ACCEPT_VALUE]}}
             for r in result if r["from_name"].startswith(f"{MARK}_") for key in ls_config.result_value(r)]
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
    monkeypatch.setattr("pipeline.cli.annotate._desks", lambda settings, root=None: ls_desks)
    monkeypatch.setattr("pipeline.labelstudio.desks.Desks", lambda *a, **k: ls_desks)
    monkeypatch.setattr(annotation_round, "_desks", lambda root: ls_desks)
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
    ingest_batch.push_drafts.fn([types.SimpleNamespace(sample_id=sid)], DataRoot(root), flow_people)
    for person in (*cli_people, *flow_people):
        pid = ls_client.find_project(push.project_key("transcript", "couple", person)).id
        assert _check_round(ls_client, pid, "transcript", drafts) == len(drafts)

    # the transcript round answered as pre-filled (each field's box ticked, as Label Studio requires),
    # pulled (the marks and boxes are no answers: no problem, no label line) and made gold
    users = {u["email"]: u["id"] for u in ls_client.users()}
    for person in cli_people:
        pid = ls_client.find_project(push.project_key("transcript", "couple", person)).id
        for task in ls_client.tasks(pid):
            [(_, result)] = [v for k, v in _predictions(ls_client, pid).items() if k == push.task_key(task["data"])]
            ls_client.create_annotation(task["id"], _accepting(result), completed_by=users[person])
    pulled = pull.pull_round(ls_desks, "transcript", DataRoot(root), annotators=cli_people)
    assert pulled.problems.to_pylist() == []
    assert {r["field"] for r in pulled.labels.to_pylist()} == {"dialogue_cleaned", "primary_speaker", "target"}
    gold.build_and_store(DataRoot(root))
    [work] = corpus.load_work(DataRoot(root))
    therapist = [r for r in work["rows"] if taxonomy.is_therapist(r["primary_speaker"])]
    clients = [r for r in work["rows"] if not taxonomy.is_therapist(r["primary_speaker"])]
    # the work store's placeholders that the push must not show as answers
    assert therapist and all(r["relation_cycle_state"] == "" and r["support_strategy"] == [] for r in therapist)
    assert clients and all(r["internal_emotion"] == [] and not r["utterance_type"] for r in clients), clients[0]

    # rounds 2-5: `rescue annotate push ROUND` and the annotation-round flow's push task
    for name in round_names()[1:]:
        out = cli("annotate", "push", name)
        assert ("pre-filled: internal_emotion" if name == "emotion" else "nothing pre-filled") in out, out
        annotation_round.push_next.fn(name, DataRoot(root), flow_people)
        units = len(clients) if load_round(name).applies_to == "client" else len(therapist)
        for person in (*cli_people, *flow_people):
            pid = ls_client.find_project(push.project_key(name, "couple", person)).id
            assert _check_round(ls_client, pid, name, drafts) == units, (name, person)

    # the push record (the card's "pre-filled" column): what was really pre-filled
    assert {n: pushed.prefilled_fields(DataRoot(root), n) for n in round_names()} == {
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
    corpus.merge_into_work(DataRoot(root), [sample])
    therapist = [r["row_index"] for r in sample["rows"] if r["primary_speaker"] == "Therapist"]
    _StandInModel.rows = therapist
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandInModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr("pipeline.cli.annotate._desks", lambda settings, root=None: ls_desks)
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
                        MARK: ["relation_cycle_reason", "relation_cycle_state"]} for ri in therapist}
    # the same empty pattern from the rows (the store's placeholder) is no proposal
    [prepared] = push._prepare(load_round("relation"), sample, push.input_values, None)
    assert prepared.prediction == []
    intake.open_round(ls_desks, DataRoot(root), "relation", [other], k=1)  # the flow's call, its default pre-annotation
    assert not _predictions(ls_client, ls_client.find_project(push.project_key("relation", "couple", other)).id)[
        push.task_key(data)][1]


def test_every_proposed_field_is_marked_and_only_those():
    """The mark names each field the prediction fills with a value, in every form it touches,
    whether or not the form is filled in full (a record's part alone: emotion's "who feels it")."""
    rnd = load_round("strategy")
    sample = make_sample("prefill_mark/s01", "couple", 6)  # therapist rows 3 (no strategy) and 6 (a strategy)
    row6 = {**sample["rows"][5], "support_strategy": [{**sample["rows"][5]["support_strategy"][0], "target": []}]}
    part = push._prepare(rnd, sample, lambda r, s: {3: {"support_strategy": []}, 6: row6}, None)[0]
    marks = {r["from_name"]: r["value"]["choices"] for r in part.prediction if r["from_name"].startswith(MARK)}
    assert marks == {f"{MARK}_0": ["support_strategy__1__strategy_type"],  # "no strategy": a choice
                     f"{MARK}_1": ["support_strategy__1__strategy_content", "support_strategy__1__strategy_type"]}
    emotion = load_round("emotion")  # "who feels it" alone: marked, function and tone not
    [part] = push._prepare(emotion, sample, None, None)
    assert {r["from_name"]: r["value"]["choices"] for r in part.prediction if r["from_name"].startswith(MARK)} == {
        f"{MARK}_{i}": ["internal_emotion__1__person"] for i in range(len(part.data["units"]))}
    # the pull takes neither the mark nor the boxes for an answer (no label line, no problem)
    full = push._prepare(rnd, sample, lambda r, s: {3: {"support_strategy": []}, 6: s["rows"][5]}, None)[0]
    assert {r["from_name"] for r in full.prediction if r["from_name"].startswith(MARK)} == {f"{MARK}_0", f"{MARK}_1"}
    lines, problems = pull.parse_annotation(rnd, full.data, {"result": _accepting(full.prediction)}, "a@x.test")
    assert problems == [] and {ln["field"] for ln in lines} == {"support_strategy"}
    # nor the form-level mark and box of a window pushed before proposals were per field
    old = [{"from_name": f"{name}_0", "to_name": "turn_0", "type": "choices", "value": {"choices": [value]}}
           for name, value in (("prefilled-form", "pre-filled"), ("prefill-checked", "pre-fill checked"))]
    again, problems = pull.parse_annotation(rnd, full.data, {"result": full.prediction + old}, "a@x.test")
    assert problems == [] and again == pull.parse_annotation(rnd, full.data, {"result": full.prediction}, "a@x.test")[0]


# --- in the browser -----------------------------------------------------------------------

_FOCUSED = """() => { const a = document.activeElement, f = a && a.closest ? a.closest('[id^=unit_]') : null;
  const box = a && a.closest ? a.closest('.lsf-choices, .lsf-text-area, .lsf-number') : null;
  let name = null;
  const key = box && Object.keys(box).find(k => k.startsWith('__reactFiber'));
  for (let x = key && box[key], i = 0; x && i < 25; x = x.return, i++) {
    const it = x.memoizedProps && x.memoizedProps.item; if (it && it.name) { name = it.name; break; } }
  return [f ? f.id : null, name]; }"""
# the fields that look proposed (the front's mark) and the word shown before each
_LOOK = """() => [...document.querySelectorAll('[data-rescue-proposed]')].map(f => [f.closest('[id^=unit_]').id,
  getComputedStyle(f, '::before').content, getComputedStyle(f).outlineStyle])"""


def _refused(page, label: str) -> None:
    """Label Studio refuses the submit with its one sentence naming the field ``label``."""
    page.get_by_role("button", name="Submit").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text(f"The proposed '{label}' is not accepted yet (the first such form from the top): check it, "
                       "then accept it (key a) or change it.", exact=True).wait_for(timeout=20_000)
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")


def _pending_is(page, want: list[list[str]]) -> None:
    page.wait_for_function(f"() => JSON.stringify(({PENDING})()) === {json.dumps(json.dumps(want, separators=(',', ':')))}",
                           timeout=10_000)


@pytest.mark.slow
def test_a_proposal_is_accepted_field_by_field_and_refused_until_then(ls_server, ls_client, ls_desks,
                                                                     new_annotators, tmp_path, chromium):
    from pipeline.labelstudio.front import FrontServer

    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    drafted = make_sample("prefill_browser/b01", "couple", 3)
    report = push.push_round(ls_desks, "transcript", [drafted], [email], k=1)  # the drafts pre-filled
    pid = report.projects[push.project_key("transcript", "couple", email)]
    task = ls_client.tasks(pid)[0]
    # a model's proposals for both therapist rows (3, 6): the pattern and the reason
    modelled = make_sample("prefill_browser/b02", "couple", 6)
    proposal = {"relation_cycle_state": "pursue_withdraw", "relation_cycle_reason": "she asks, he steps back"}
    report = push.push_round(ls_desks, "relation", [modelled], [email], k=1,
                             prelabel=lambda r, s: {3: dict(proposal), 6: dict(proposal)}, prelabel_source="model-x")
    rel_pid = report.projects[push.project_key("relation", "couple", email)]
    rel_task = ls_client.tasks(rel_pid)[0]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    front = FrontServer(ls_server.url).start()
    fields = ("dialogue_cleaned", "primary_speaker", "target")
    with chromium() as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            browser_login(page, ls_server.url, email, password, timeout_ms=60_000)
            # straight to Label Studio: each proposed field has its own "accept" box, and its own
            # validation refuses the window while one is not ticked, naming that field
            open_task(page, f"{ls_server.url}/projects/{pid}/data?task={task['id']}", prefilled=True)
            assert page.evaluate(ACCEPT_BOXES) == [[f"unit_{i}", f, True, False] for i in range(3) for f in fields]
            page.screenshot(path=str(SCREENSHOTS / "prefill_proposed.png"), full_page=True)
            _refused(page, "What is said")
            for i in range(3):
                for f in fields:
                    if (i, f) != (2, "target"):
                        page.locator(f"#proposal-{f}_{i} input").click()
            _pending_is(page, [["unit_2", "target"]])
            _refused(page, "Spoken to")
            page.locator("#proposal-target_2 input").click()
            page.get_by_role("button", name="Submit").click()
            wait_saved(ls_client, pid, drafted["sample_id"], page)

            # through the desk's front: proposals look proposed; a on a field accepts that field, an
            # edit of a field accepts that field only, Enter accepts nothing
            open_task(page, f"{front.url}/projects/{rel_pid}/data?task={rel_task['id']}", prefilled=True)
            both = [[f"unit_{i}", f] for i in (0, 1) for f in ("relation_cycle_state", "relation_cycle_reason")]
            _pending_is(page, both)
            page.wait_for_function("() => document.querySelectorAll('[data-rescue-proposed]').length === 4")
            assert page.evaluate(_LOOK) == [[f"unit_{i}", '"proposed"', "dashed"] for i in (0, 0, 1, 1)]
            page.screenshot(path=str(SCREENSHOTS / "prefill_proposed_front.png"), full_page=True)
            page.evaluate("() => document.activeElement && document.activeElement.blur()")
            page.keyboard.press("Enter")  # to form 0: its first proposal
            page.wait_for_function(f"() => ({_FOCUSED})()[1] === 'relation_cycle_state_0'")
            page.keyboard.press("a")  # accepted as it is; on to the reason
            _pending_is(page, both[1:])
            page.wait_for_function(f"() => ({_FOCUSED})()[1] === 'relation_cycle_reason_0'")
            page.keyboard.press("Enter")  # to form 1: nothing accepted
            page.wait_for_function(f"() => ({_FOCUSED})()[0] === 'unit_1'")
            _pending_is(page, both[1:])
            shown = ls_config.choice_text(load_round("relation"), "relation_cycle_state", "attack_attack")  # its words
            page.locator("#unit_1 .lsf-choices").first.locator(f"input[name='{shown}']").click()  # an edit: that field
            _pending_is(page, [both[1], both[3]])
            page.wait_for_function("() => document.querySelectorAll('[data-rescue-proposed]').length === 2")
            # the submit refused: the sentence above the first such field, the focus on it; a accepts it
            page.keyboard.press("Control+Enter")
            why = page.locator(".rescue-why")
            why.wait_for(timeout=20_000)
            assert why.inner_text() == ("The proposed 'Why' is not accepted yet (the first such form from the top): "
                                        "check it, then accept it (key a) or change it.")
            page.wait_for_function(f"() => JSON.stringify(({_FOCUSED})()) === '[\"unit_0\",\"relation_cycle_reason_0\"]'")
            assert page.evaluate("() => document.querySelector('.rescue-why').closest('[id^=unit_]').id") == "unit_0"
            page.keyboard.press("a")
            _pending_is(page, [both[3]])
            page.wait_for_function("() => !document.querySelector('.rescue-why')")
            page.keyboard.press("Control+Enter")
            why.wait_for(timeout=20_000)
            assert why.evaluate("w => w.closest('[id^=unit_]').id") == "unit_1"
            page.wait_for_function(f"() => ({_FOCUSED})()[1] === 'relation_cycle_reason_1'")
            page.keyboard.press("a")
            _pending_is(page, [])
            page.keyboard.press("Control+Enter")
            wait_saved(ls_client, rel_pid, modelled["sample_id"], page)
        except Exception:
            page.screenshot(path=str(SCREENSHOTS / "prefill_failed.png"), full_page=True)
            raise
        finally:
            front.stop()

    result = pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[email], write=False)
    assert result.problems.to_pylist() == []
    got = {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()}
    assert got == {(r["row_index"], f): r[f] for r in drafted["rows"] for f in fields}  # kept as drafted
    root = tmp_path / "data"
    result = pull.pull_round(ls_desks, "relation", DataRoot(root), annotators=[email])
    assert result.problems.to_pylist() == []
    got = {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()}
    assert (got[(3, "relation_cycle_state")], got[(6, "relation_cycle_state")]) == ("pursue_withdraw", "attack_attack")
    # the acceptance measure, field by field: the changed pattern alone is changed
    lines = {(r["row_index"], r["field"]): r["outcome"] for r in acceptance.read(DataRoot(root), "relation")}
    assert lines == {(3, "relation_cycle_state"): "kept", (3, "relation_cycle_reason"): "kept",
                     (6, "relation_cycle_state"): "changed", (6, "relation_cycle_reason"): "kept"}, lines
