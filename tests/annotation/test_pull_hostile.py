"""A poisoned desk stops nobody's pull and loses no label: on real desks (one Label Studio per
annotator), after a first pull, annotator A saves a malformed answer, imports a task of their
own, edits a task's data and deletes one window of a long sample. `rescue annotate pull` then
writes everyone's labels as before (B's new ones, A's earlier ones), names each of the four in
one problem line (desk, task, sample) and exits as a pull with problems does. The
`annotation-round` flow run on that round then completes and names them in its summary."""
from __future__ import annotations

import contextlib
import json
import secrets

import pyarrow.parquet as pq
import pytest
from ls_samples import make_sample
from typer.testing import CliRunner

from pipeline import corpus
from pipeline.annotation import ls_config, push
from pipeline.labelstudio.desks import Desks
from pipeline.annotation.rounds import load_round
from pipeline.cli import app
from pipeline.paths import DataRoot
from tests.helpers import free_port

pytestmark = pytest.mark.slow

ROUND = "emotion"


def _env(monkeypatch) -> None:
    monkeypatch.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
    monkeypatch.setenv("RESCUE_ANNOTATOR_PASSWORD", secrets.token_urlsafe(12))
    monkeypatch.setenv("COLUMNS", "320")  # one problem, one line
    for var in ("RESCUE_DESK_URL", "RESCUE_DESK_PUBLIC_URL"):
        monkeypatch.delenv(var, raising=False)


def _answer(client, project_id: int, rnd, by_id: dict, user_id: int) -> None:
    """Every task answered with its sample's input values (what a careful annotator submits)."""
    for task in client.tasks(project_id):
        values = push.input_values(rnd, by_id[task["data"]["sample_id"]])
        client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                 completed_by=user_id, lead_time=5.0)


def _lines(root) -> list[tuple]:
    table = pq.read_table(DataRoot(root).labels(ROUND)).to_pylist()
    return sorted((r["sample_id"], r["row_index"], r["annotator"], r["field"], r["value"]) for r in table)


@contextlib.contextmanager
def prefect_harness():
    """Prefect's test harness (a temporary server) for the flow run in this process."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180), \
            temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def test_a_poisoned_desk_is_named_line_by_line_and_every_label_stays(tmp_path, monkeypatch):
    _env(monkeypatch)
    root = tmp_path / "data"
    rnd = load_round(ROUND)
    samples = [make_sample("synthetic/hostile_1", "couple", 6), make_sample("synthetic/hostile_2", "couple", 6),
               make_sample("synthetic/hostile_3", "couple", 36), make_sample("synthetic/hostile_4", "couple", 6)]
    by_id = {s["sample_id"]: s for s in samples}
    corpus.save_samples(DataRoot(root), samples, corpus.WORK)
    a, b = "hostile-a@rescue.test", "hostile-b@rescue.test"
    runner = CliRunner()
    dr = ["--data-root", str(root)]
    try:
        for who in (a, b):
            added = runner.invoke(app, ["annotators", "add", who, *dr])
            assert added.exit_code == 0, added.output
        pushed = runner.invoke(app, ["annotate", "push", ROUND, *dr, "-a", a, "-a", b])
        assert pushed.exit_code == 0, pushed.output
        desks = Desks(DataRoot(root))
        projects = {}
        for who in (a, b):
            client = desks.client(who)
            (project,) = [p for p in client.projects() if push.parse_project_key(p.key) == (ROUND, "couple", who)]
            projects[who] = project.id
            _answer(client, project.id, rnd, by_id, desks.owner_id(who))
        first = runner.invoke(app, ["annotate", "pull", ROUND, *dr])
        assert first.exit_code == 0 and "0 problems" in first.output, first.output
        before = _lines(root)
        assert {(sid, who) for sid, _, who, _, _ in before} == {(s["sample_id"], w) for s in samples for w in (a, b)}

        # A poisons their desk, each the way Label Studio accepts (HTTP 2xx).
        ca, pa_ = desks.client(a), projects[a]
        tasks = {(t["data"]["sample_id"], (t["data"].get("window") or {}).get("index")): t
                 for t in json.loads(ca.export_tasks(pa_))}
        assert len([k for k in tasks if k[0] == "synthetic/hostile_3"]) >= 3  # the long sample is windowed
        malformed = tasks[("synthetic/hostile_1", None)]
        ann = malformed["annotations"][0]["id"]
        ca.request("PATCH", f"/api/annotations/{ann}/", "save a malformed answer",
                   json={"result": [{"from_name": "utterance_type_0", "to_name": "turn_0", "type": "choices",
                                     "value": {"text": [1]}}]})
        edited = tasks[("synthetic/hostile_2", None)]
        data = dict(edited["data"], participants=["Ann", "Ben", "Mallory"])
        ca.update_task(edited["id"], data)
        phantom_data = {k: v for k, v in malformed["data"].items() if k != "content_sha"}
        (phantom,) = ca.import_tasks(pa_, [{"data": dict(phantom_data, sample_id="synthetic/never_given")}])
        phantom_task = ca.request("GET", f"/api/tasks/{phantom}/", "read the phantom task").json()
        values = push.input_values(rnd, by_id["synthetic/hostile_1"])
        ca.create_annotation(phantom, ls_config.values_to_results(rnd, phantom_task["data"], values),
                             completed_by=desks.owner_id(a))
        window = tasks[("synthetic/hostile_3", 1)]
        ca.request("DELETE", f"/api/tasks/{window['id']}/", "delete one window")
        # B's pull has something new: B saves one answer again, after a longer look (lead time 9 s)
        cb = desks.client(b)
        b_task = next(t for t in json.loads(cb.export_tasks(projects[b]))
                      if t["data"]["sample_id"] == "synthetic/hostile_4")
        cb.request("PATCH", f"/api/annotations/{b_task['annotations'][0]['id']}/", "save an answer again",
                   json={"lead_time": 9.0})

        pulled = runner.invoke(app, ["annotate", "pull", ROUND, *dr])
        assert pulled.exit_code == 0, pulled.output
        problems = pq.read_table(DataRoot(root).label_problems(ROUND)).to_pylist()
        assert {p["annotator"] for p in problems} == {a}, [p["problem"] for p in problems]
        where = desks.where(a)
        want = {
            "synthetic/hostile_1": f"task {malformed['id']} on {where}",
            "synthetic/hostile_2": f"task {edited['id']} on {where}: its data was edited on the desk",
            "synthetic/never_given": f"task {phantom} on {where}: synthetic/never_given was never pushed",
            "synthetic/hostile_3": f"part 2 of {window['data']['window']['count']} of synthetic/hostile_3 deleted on "
                                   f"the desk after the push ({where}); labels pulled for the sample before are kept",
        }
        assert sorted(p["sample_id"] for p in problems) == sorted(want), problems
        for p in problems:
            assert want[p["sample_id"]] in p["problem"], p
        assert f"annotation {ann} of task {malformed['id']}" in next(
            p["problem"] for p in problems if p["sample_id"] == "synthetic/hostile_1")
        out = pulled.output.splitlines()
        for sid, text in want.items():  # one line each on the terminal, naming the sample, the desk and the task
            assert len([ln for ln in out if sid in ln and a in ln and text.split(" on ")[0] in ln]) == 1, pulled.output

        after = _lines(root)
        assert after == before  # A lost nothing, B's lines stand, the phantom sample has none
        times = {(r["sample_id"], r["annotator"]): r["lead_time_s"]
                 for r in pq.read_table(DataRoot(root).labels(ROUND)).to_pylist()}
        assert times[("synthetic/hostile_4", b)] == 9.0 and times[("synthetic/hostile_1", b)] == 5.0  # B's pull went on
        assert times[("synthetic/hostile_1", a)] == 5.0
        rebuilt = runner.invoke(app, ["annotate", "acceptance", ROUND, "--rebuild", *dr])  # the archive agrees
        assert rebuilt.exit_code == 0, rebuilt.output
        status = runner.invoke(app, ["annotate", "status", *dr])  # the live check names the deleted window's sample
        assert status.exit_code == 0, status.output
        assert [ln for ln in status.output.splitlines() if ln.startswith("missing task")] == [
            f"missing task: {ROUND} couple {a}: synthetic/hostile_3 was pushed but is gone from Label Studio "
            "(deleted); `rescue annotate push` recreates it"], status.output

        # The round's flow: it completes, and its summary names each task or answer not counted.
        from prefect.client.orchestration import get_client

        from flows.annotation_round import annotation_round_flow

        with prefect_harness():
            state = annotation_round_flow(round_name=ROUND, data_root=str(root), open_next=False, return_state=True)
            assert state.is_completed(), state.message
            with get_client(sync_client=True) as client:
                markdown = next(str(x.data) for x in client.read_artifacts() if x.key == f"round-{ROUND}-summary")
        assert "4 tasks or answers not counted" in markdown
        for sid, text in want.items():
            assert len([ln for ln in markdown.splitlines() if sid in ln and text.split(" on ")[0] in ln]) == 1, markdown
    finally:
        Desks(DataRoot(root)).down()
