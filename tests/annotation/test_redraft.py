"""Drafts under answers are never replaced silently, on real desks (one Label Studio per person)
and a real re-draft: one synthetic interview is ingested, transcribed, diarized and segmented,
pushed as the transcript round and answered through the desk's API; then the segmenter changes
(one line of ``pipeline/media/turns.py`` in a scratch copy of the package put first on
PYTHONPATH, as tests/flows/test_stale_keys.py does) and `rescue segment` makes new drafts.

The next push keeps the old drafts and tasks and says so in one line; a push with `--redraft
SAMPLE` puts the new drafts in the work store, archives the answered task and pushes it anew;
the pull reports the old answer in one line and does not count it. Through `rescue` on the CLI
path, and through the `ingest-batch` flow (parameter ``redraft``)."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import corpus
from pipeline.annotation import ls_config, push
from pipeline.labelstudio.desks import Desks
from pipeline.annotation.rounds import load_round
from pipeline.cli import app
from pipeline.config import Settings
from pipeline.paths import DataRoot
from tests.helpers import free_port, package_copy_with

pytestmark = pytest.mark.slow

SID = "redraft_couple/s01"
ROUND = "transcript"
RESCUE = Path(sys.executable).with_name("rescue")
A, B = "redraft-a@rescue.test", "redraft-b@rescue.test"


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    from pipeline.synthetic import interviews as synth

    path = tmp_path_factory.mktemp("redraft-batch")
    synth.make_batch(path, [{"name": "s01", "scenario": "couple", "seed": 7, "n_rows": 6, "group": "redraft_couple"}])
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A scratch copy of the package whose segmenter writes every row's text in capitals."""
    line = 'return re.sub(r"\\s+", " ", " ".join(u.text for u in units)).strip()'
    return package_copy_with(tmp_path_factory.mktemp("redraft-code"), "pipeline/media/turns.py", line, line + ".upper()")


def _env(monkeypatch) -> None:
    monkeypatch.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
    monkeypatch.setenv("RESCUE_ANNOTATOR_PASSWORD", secrets.token_urlsafe(12))
    monkeypatch.setenv("COLUMNS", "320")
    for var in ("RESCUE_DESK_URL", "RESCUE_DESK_PUBLIC_URL"):
        monkeypatch.delenv(var, raising=False)


def _proc_env(code: Path | None = None, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")}
    env["RESCUE_MODELS_DIR"] = str(Settings.from_env().models_dir)
    env["COLUMNS"] = "200"
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return {**env, **(extra or {})}


def _run(cmd: list[str], env: dict, cwd: Path) -> str:
    run = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (cmd, run.stdout[-3000:], run.stderr[-3000:])
    assert "Traceback" not in run.stderr, (cmd, run.stderr[-3000:])
    return run.stdout


def _segment(root: Path, code: Path | None = None) -> str:
    return _run([str(RESCUE), "segment", "--all", "--data-root", str(root)], _proc_env(code), root.parent)


def _invoke(runner: CliRunner, *args: str) -> str:
    out = runner.invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return out.output


def _work_texts(root: Path) -> list[str]:
    (sample,) = [s for s in corpus.load_work(DataRoot(root)) if s["sample_id"] == SID]
    return [r["dialogue_cleaned"] for r in sample["rows"]]


def _tasks(desks: Desks, who: str) -> list[dict]:
    client = desks.client(who)
    (project,) = [p for p in client.projects() if push.parse_project_key(p.key) == (ROUND, "couple", who)]
    return json.loads(client.export_tasks(project.id))


def _answer(desks: Desks, who: str) -> int:
    """``who`` answers the sample's task with the drafts as they are; the annotation's id."""
    rnd = load_round(ROUND)
    (task,) = _tasks(desks, who)
    (sample,) = [s for s in corpus.load_work(DataRoot(desks.root)) if s["sample_id"] == SID]
    saved = desks.client(who).create_annotation(
        task["id"], ls_config.values_to_results(rnd, task["data"], push.input_values(rnd, sample)),
        completed_by=desks.owner_id(who), lead_time=4.0)
    return saved["id"]


def _label_lines(root: Path) -> set[tuple[str, str]]:
    return {(r["sample_id"], r["annotator"]) for r in pq.read_table(DataRoot(root).labels(ROUND)).to_pylist()}


def _archived_answers(root: Path) -> set[int]:
    out = set()
    for path in (DataRoot(root).exports_dir(ROUND)).glob("*/*/*.json"):
        if not path.name.endswith(".predictions.json"):
            out |= {a["id"] for t in json.loads(path.read_bytes()) for a in t.get("annotations") or []}
    return out


def _check_after_redraft(root: Path, desks: Desks, answers: dict[str, int], old_task: str,
                         old_texts: list[str]) -> None:
    """The new drafts are in the work store and on both desks; both answered tasks are archived
    by the push (B's answer was never pulled) and gone from the desks."""
    assert _work_texts(root) == [t.upper() for t in old_texts] != old_texts
    for who in (A, B):
        (task,) = _tasks(desks, who)
        assert not task["annotations"] and [t["text"] for t in task["data"]["turns"]] == _work_texts(root)
        assert task["data"]["content_sha"] != old_task  # a task of the new drafts (Label Studio may reuse the id)
    record = json.loads(DataRoot(root).pushed(ROUND).read_text())["replaced"]
    assert set(record) == {SID} and set(record[SID]) == {A, B}
    for who in (A, B):
        assert record[SID][who]["answers"] == 1 and record[SID][who]["shas"] == [old_task]
        (export,) = record[SID][who]["exports"]
        archived = json.loads((root / export).read_bytes())
        assert [a["id"] for t in archived for a in t["annotations"]] == [answers[who]], export
        assert (root / export).with_name(Path(export).stem + ".predictions.json").is_file()


def _check_pull(runner: CliRunner, root: Path) -> None:
    """The pull says, in one line per annotator, that the old answers are archived and not
    counted; it counts nothing of them."""
    pulled = _invoke(runner, "annotate", "pull", ROUND, "--data-root", str(root))
    for who in (A, B):
        lines = [ln for ln in pulled.splitlines() if ln.startswith(f"  replaced drafts {SID}: ") and who in ln]
        assert len(lines) == 1 and f"1 answer of {who} to its replaced drafts (--redraft) are archived in " \
            "annotation/exports/transcript/couple/" in lines[0] and lines[0].endswith("not counted"), pulled
    assert _label_lines(root) == set(), pulled  # the earlier pull's lines of A's old answer are gone


def test_cli_keeps_answered_drafts_until_redraft_then_archives_the_answer(batch, scratch, tmp_path, monkeypatch):
    _env(monkeypatch)
    root = tmp_path / "data"
    dr = ["--data-root", str(root)]
    runner = CliRunner()
    for stage in (["ingest", str(batch)], ["transcribe", "--all"], ["diarize", "--all"]):
        _run([str(RESCUE), *stage, *dr], _proc_env(), tmp_path)
    assert "(made: not made yet)" in _segment(root)
    try:
        for who in (A, B):
            _invoke(runner, "annotators", "add", who, *dr)
        desks = Desks(DataRoot(root))
        first = _invoke(runner, "annotate", "push", ROUND, *dr)
        assert "1 segmented interviews admitted" in first and "2 tasks created" in first, first
        old_texts = _work_texts(root)
        answers = {A: _answer(desks, A)}
        (old_task,) = [t["data"]["content_sha"] for t in _tasks(desks, A)]
        _invoke(runner, "annotate", "pull", ROUND, *dr)
        assert _label_lines(root) == {(SID, A)}
        answers[B] = _answer(desks, B)  # after the pull: only on B's desk

        # the segmenter changes: new drafts, which the next push does not put under the answers
        assert "pipeline/media/turns.py changed" in _segment(root, scratch)
        kept = _invoke(runner, "annotate", "push", ROUND, *dr)
        lines = [ln for ln in kept.splitlines() if SID in ln]
        assert lines == [f"kept old drafts: {SID}: re-drafted, but it has answers (round transcript: {A}, {B}): its "
                         f"old drafts and tasks are kept; `--redraft {SID}` replaces them (the old answers are then "
                         "archived, not counted)"], kept
        assert _work_texts(root) == old_texts
        for who in (A, B):
            assert [(t["data"]["content_sha"], len(t["annotations"])) for t in _tasks(desks, who)] == [(old_task, 1)]
        assert "0 tasks created, 0 updated, 2 unchanged" in kept, kept
        again = _invoke(runner, "annotate", "push", ROUND, *dr)  # said on every run until decided
        assert [ln for ln in again.splitlines() if SID in ln] == lines

        replaced = _invoke(runner, "annotate", "push", ROUND, "--redraft", SID, *dr)
        assert f"re-drafted: {SID}: its new drafts replace the old" in replaced, replaced
        for who in (A, B):
            assert f"replaced: {SID} ({who}): 1 answered task archived, pushed anew" in replaced, replaced
        assert "2 tasks created, 0 updated" in replaced, replaced
        _check_after_redraft(root, desks, answers, old_task, old_texts)
        quiet = _invoke(runner, "annotate", "push", ROUND, *dr)  # done: nothing more to say or replace
        assert SID not in quiet and "0 tasks created, 0 updated, 2 unchanged" in quiet, quiet
        _check_pull(runner, root)
        rebuilt = _invoke(runner, "annotate", "acceptance", ROUND, "--rebuild", *dr)  # the archive agrees
        assert "error" not in rebuilt.lower(), rebuilt
    finally:
        Desks(DataRoot(root)).down()


# --- through the ingest-batch flow ---------------------------------------------------------------

RUN_FLOW = """
import json, sys
from flows.ingest_batch import ingest_batch_flow
result = ingest_batch_flow(batch_dir=sys.argv[1], data_root=sys.argv[2], fan_out=False,
                           redraft=json.loads(sys.argv[3]) or None)
print("RESULT " + json.dumps({"item": result["items"][sys.argv[4]], "pushed": result["pushed"]}))
"""


def _flow(batch: Path, root: Path, env: dict, redraft: list[str] = ()) -> tuple[dict, str]:
    """One ingest-batch run in a process of its own: its result, and its log."""
    run = subprocess.run([sys.executable, "-c", RUN_FLOW, str(batch), str(root), json.dumps(list(redraft)), SID],
                         env=env, cwd=root.parent, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), run.stdout + run.stderr


def test_the_ingest_batch_flow_keeps_answered_drafts_until_redraft(batch, scratch, prefect_harness, tmp_path,
                                                                    monkeypatch):
    from prefect.settings import PREFECT_API_URL

    _env(monkeypatch)
    root = tmp_path / "data"
    dr = ["--data-root", str(root)]
    runner = CliRunner()
    prefect = {"PREFECT_API_URL": PREFECT_API_URL.value(), "RESCUE_GPU_LIMIT": "", "RESCUE_PUSH_LIMIT": "",
               "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path / "results")}
    try:
        for who in (A, B):
            _invoke(runner, "annotators", "add", who, *dr)
        desks = Desks(DataRoot(root))
        first, _ = _flow(batch, root, _proc_env(extra=prefect))
        assert first["pushed"]["created"] == 2 and first["pushed"]["held"] == [], first
        old_texts = _work_texts(root)
        answers = {who: _answer(desks, who) for who in (A, B)}
        (old_task,) = [t["data"]["content_sha"] for t in _tasks(desks, A)]

        code = _proc_env(scratch, extra=prefect)
        held, log = _flow(batch, root, code)
        assert held["item"]["executed"] == ["segment"], held
        line = (f"{SID}: re-drafted, but it has answers (round transcript: {A}, {B}): its old drafts and tasks are "
                f"kept; `--redraft {SID}` replaces them (the old answers are then archived, not counted)")
        assert held["pushed"]["held"] == [line] and held["pushed"]["created"] == 0, held
        assert len([ln for ln in log.splitlines() if f"kept old drafts: {SID}: re-drafted" in ln]) == 1, log[-3000:]
        assert _work_texts(root) == old_texts

        replaced, log = _flow(batch, root, code, [SID])
        assert replaced["pushed"]["held"] == [] and replaced["pushed"]["created"] == 2, replaced
        assert sorted(replaced["pushed"]["redrafted"]) == [
            f"{SID} ({who}): 1 answered tasks archived, pushed anew" for who in (A, B)], replaced
        assert len([ln for ln in log.splitlines() if f"re-drafted: {SID} ({A})" in ln]) == 1, log[-3000:]
        _check_after_redraft(root, desks, answers, old_task, old_texts)
        _check_pull(runner, root)
    finally:
        Desks(DataRoot(root)).down()
