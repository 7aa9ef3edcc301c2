"""The server dies in the middle of a push; the CLI's server and status commands."""
from __future__ import annotations

import json
import socket

import pytest
from ls_samples import make_sample
from typer.testing import CliRunner

from pipeline import corpus
from pipeline.annotation import ls_config, push
from pipeline.annotation.rounds import load_round
from pipeline.cli import app

pytestmark = pytest.mark.slow


def test_server_killed_mid_push_fails_clearly_and_a_rerun_completes(ls_server, ls_client, new_annotators, monkeypatch):
    monkeypatch.setattr(push, "IMPORT_CHUNK", 40)
    samples = [make_sample(f"synthetic/crash_{i:03d}", "couple", 5) for i in range(120)]
    annotators = new_annotators(2)
    rnd = load_round("emotion")
    first = push.push_round(ls_client, "emotion", samples[:10], annotators)
    pid_a = first.projects[push.project_key("emotion", "couple", annotators[0])]
    task = ls_client.find_tasks(pid_a, "sample_id", samples[0]["sample_id"])[0]
    user = ls_client.find_user(annotators[0])
    saved = ls_client.create_annotation(task["id"], ls_config.values_to_results(
        rnd, task["data"], push.input_values(rnd, samples[0])), completed_by=user["id"])

    def kill_after_first_chunk(done, total):
        if done == 40:
            ls_server.kill()

    try:
        with pytest.raises(push.PushError) as err:
            push.push_round(ls_client, "emotion", samples, annotators, on_chunk=kill_after_first_chunk)
    finally:
        ls_server.start(timeout=300)
    message = str(err.value)
    assert "stopped after 40 of 220 new tasks" in message and "run the same push again" in message
    assert "did not answer" in message

    again = push.push_round(ls_client, "emotion", samples, annotators)
    assert again.created == 220 - 40 and again.unchanged == 2 * 10 + 40 and not again.duplicates
    for pid in again.projects.values():
        ids = [t["data"]["sample_id"] for t in ls_client.tasks(pid)]
        assert sorted(ids) == sorted(s["sample_id"] for s in samples)  # every sample exactly once
    kept = ls_client.find_tasks(pid_a, "sample_id", samples[0]["sample_id"])
    assert len(kept) == 1 and kept[0]["total_annotations"] == 1
    exported = json.loads(ls_client.export_snapshot(pid_a))
    annotated = [t for t in exported if t["annotations"]]
    assert [(t["data"]["sample_id"], t["annotations"][0]["id"], t["annotations"][0]["result"]) for t in annotated] \
        == [(samples[0]["sample_id"], saved["id"], saved["result"])]


def _env(monkeypatch, ls_server):
    monkeypatch.setenv("RESCUE_LABEL_STUDIO_PORT", str(ls_server.port))
    monkeypatch.setenv("RESCUE_LABEL_STUDIO_URL", ls_server.url)


def test_cli_up_is_idempotent_and_status_reports(ls_server, ls_data_root, monkeypatch):
    _env(monkeypatch, ls_server)
    pid = ls_server.status().pid
    runner = CliRunner()
    up = runner.invoke(app, ["label-studio", "up", "--data-root", str(ls_data_root)])
    assert up.exit_code == 0, up.output
    assert "up at" in up.output and ls_server.status().pid == pid  # the same server, not a second one
    status = runner.invoke(app, ["label-studio", "status", "--data-root", str(ls_data_root)])
    assert status.exit_code == 0 and "1.23.2" in status.output


def test_cli_refuses_a_taken_port(ls_credentials, tmp_path, monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = CliRunner().invoke(app, ["label-studio", "up", "--data-root", str(tmp_path), "--port", str(port)])
    assert out.exit_code == 1
    assert f"port {port} on 127.0.0.1 is taken" in " ".join(out.output.split())
    assert not (tmp_path / "label-studio" / "server.pid").exists()


def test_cli_wrong_token_is_an_auth_error_that_hides_the_token(ls_server, ls_data_root, monkeypatch):
    _env(monkeypatch, ls_server)
    wrong = "fedcba9876543210fedcba9876543210fedcba98"
    monkeypatch.setenv("LABEL_STUDIO_USER_TOKEN", wrong)
    for args in (["annotate", "status"], ["annotate", "pull", "emotion"]):
        out = CliRunner().invoke(app, [*args, "--data-root", str(ls_data_root)])
        text = " ".join(out.output.split())
        assert out.exit_code == 1 and "rejected the API token" in text, out.output
        assert wrong not in out.output


def test_cli_push_pull_status_on_the_interviews_in_annotation(ls_server, ls_client, new_annotators, tmp_path,
                                                               monkeypatch):
    _env(monkeypatch, ls_server)
    monkeypatch.setenv("COLUMNS", "320")  # rich wraps tables at the terminal width
    root = tmp_path / "data"
    corpus.save_samples(root, [make_sample("synthetic/cli_001", "couple", 6), make_sample("synthetic/cli_002", "family", 5)],
                        corpus.WORK)
    a, b = new_annotators(2)
    runner = CliRunner()
    args = ["--data-root", str(root), "-a", a, "-a", b]
    pushed = runner.invoke(app, ["annotate", "push", "relation", *args])
    assert pushed.exit_code == 0, pushed.output
    assert "4 projects for 2 annotators; 4 tasks created" in " ".join(pushed.output.split())
    again = runner.invoke(app, ["annotate", "push", "relation", *args])
    assert "0 tasks created, 0 updated, 4 unchanged" in " ".join(again.output.split())
    pulled = runner.invoke(app, ["annotate", "pull", "relation", *args])
    assert pulled.exit_code == 0 and "0 label lines, 0 problems, 4 exports (4 new)" in pulled.output
    status = runner.invoke(app, ["annotate", "status", "--data-root", str(root)])
    lines = [line for line in status.output.splitlines() if a in line or b in line]
    cells = sorted(tuple(c.strip() for c in line.strip("│ ").split("│")) for line in lines)
    # rows with controls (therapist rows): couple rows 3 and 6, family row 3; one sample each
    assert [c[:8] for c in cells] == sorted([("relation", sc, who, f"0 / {2 if sc == 'couple' else 1}", "0",
                                             "0 / 1", "0", "-") for sc in ("couple", "family") for who in (a, b)])
    assert all(c[8].startswith(ls_server.url + "/projects/") for c in cells)
    bad = runner.invoke(app, ["annotate", "push", "colours", *args])
    assert bad.exit_code == 1 and "no annotation round 'colours'" in bad.output


def test_render_configs_check_passes(monkeypatch):
    out = CliRunner().invoke(app, ["annotate", "render-configs", "--check"])
    assert out.exit_code == 0 and "match" in out.output
