"""A desk's server dies in the middle of a push; the CLI's people, desk and status commands,
on real desks (one Label Studio per person)."""
from __future__ import annotations

import json
import secrets
import socket

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


def test_a_desk_killed_mid_push_fails_clearly_and_a_rerun_completes(desk_factory, monkeypatch):
    """Real desks: annotator a's own Label Studio dies after the first chunk imported to it; b's
    desk (pushed side by side) gets all its tasks; the push stops naming what was done, and once
    a's desk is up again the same push completes every project on both desks with no task twice
    and a's answer kept."""
    monkeypatch.setattr(push, "IMPORT_CHUNK", 40)
    samples = [make_sample(f"synthetic/crash_{i:03d}", "couple", 5) for i in range(120)]
    annotators = ["crash-a@rescue.test", "crash-b@rescue.test"]
    for email in annotators:
        desks, _ = desk_factory(email)
    rnd = load_round("emotion")
    first = push.push_round(desks, "emotion", samples[:10], annotators)
    client_a = desks.client(annotators[0])
    pid_a = first.projects[push.project_key("emotion", "couple", annotators[0])]
    task = client_a.find_tasks(pid_a, "sample_id", samples[0]["sample_id"])[0]
    saved = client_a.create_annotation(task["id"], ls_config.values_to_results(
        rnd, task["data"], push.input_values(rnd, samples[0])), completed_by=desks.owner_id(annotators[0]))
    server_a, server_b = desks.server(annotators[0]), desks.server(annotators[1])
    pid_b = server_b.status().pid

    imported = client_a.import_tasks

    def kill_after_first_chunk(project_id, tasks):  # a's desk dies once its first chunk is in
        ids = imported(project_id, tasks)
        server_a.kill()
        return ids

    monkeypatch.setattr(client_a, "import_tasks", kill_after_first_chunk)
    try:
        with pytest.raises(push.PushError) as err:
            push.push_round(desks, "emotion", samples, annotators)
        assert not server_a.status().running and server_b.status().pid == pid_b  # only a's desk died
    finally:
        server_a.start(timeout=300)
        monkeypatch.setattr(client_a, "import_tasks", imported)
    message = str(err.value)
    assert "stopped after 150 of 220 new tasks" in message and "run the same push again" in message  # 40 + b's 110
    assert "did not answer" in message
    assert isinstance(err.value, push.PushInterrupted)  # transient: a flow's push task retries it

    again = push.push_round(desks, "emotion", samples, annotators)
    assert again.created == 220 - 150 and again.unchanged == 2 * 10 + 150 and not again.duplicates
    for key, pid in again.projects.items():
        client = desks.client(push.parse_project_key(key)[2])  # each project on its annotator's desk
        ids = [t["data"]["sample_id"] for t in client.tasks(pid)]
        assert sorted(ids) == sorted(s["sample_id"] for s in samples)  # every sample exactly once
    kept = client_a.find_tasks(pid_a, "sample_id", samples[0]["sample_id"])
    assert len(kept) == 1 and kept[0]["total_annotations"] == 1
    exported = json.loads(client_a.export_snapshot(pid_a))
    annotated = [t for t in exported if t["annotations"]]
    assert [(t["data"]["sample_id"], t["annotations"][0]["id"], t["annotations"][0]["result"]) for t in annotated] \
        == [(samples[0]["sample_id"], saved["id"], saved["result"])]


def _cli_env(monkeypatch):
    """A fresh data root's desks on free ports; passwords from the environment (never printed)."""
    password = secrets.token_urlsafe(12)
    monkeypatch.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
    monkeypatch.setenv("RESCUE_ANNOTATOR_PASSWORD", password)
    monkeypatch.setenv("COLUMNS", "320")  # rich wraps tables at the terminal width
    for var in ("RESCUE_DESK_URL", "RESCUE_DESK_PUBLIC_URL"):
        monkeypatch.delenv(var, raising=False)
    return password


def _table_cells(output: str, people) -> list[tuple[str, ...]]:
    """The status rows of ``people``, each read under its person's desk line: (round, scenario,
    annotator, rows done, skipped, samples done, drafts, last activity)."""
    cells, who = [], None
    for line in output.splitlines():
        if line.startswith("desk "):
            who = next((p for p in people if line.startswith(f"desk {p} ")), None)
        elif who and line.startswith("  ") and len(v := line.split()) >= 11 and v[3] == "/" and v[7] == "/":
            cells.append((v[0], v[1], who, " ".join(v[2:5]), v[5], " ".join(v[6:9]), v[9], " ".join(v[10:])))
    return sorted(cells)


def test_cli_people_desks_push_pull_status_up_down_on_real_desks(tmp_path, monkeypatch):
    """`rescue annotators add/list`, `annotate push/pull/status` and `label-studio
    up/status/down` on a fresh data root's real desks (one Label Studio per person)."""
    password = _cli_env(monkeypatch)
    root = tmp_path / "data"
    corpus.save_samples(DataRoot(root), [make_sample("synthetic/cli_001", "couple", 6), make_sample("synthetic/cli_002", "family", 5)],
                        corpus.WORK)
    a, b = "cli-a@rescue.test", "cli-b@rescue.test"
    runner = CliRunner()
    dr = ["--data-root", str(root)]
    try:
        for who in (a, b):
            added = runner.invoke(app, ["annotators", "add", who, *dr])
            assert added.exit_code == 0, added.output
            assert f"annotator {who} ready: http://127.0.0.1:" in added.output and password not in added.output
        desks = Desks(DataRoot(root))
        listed = runner.invoke(app, ["annotators", "list", "--json", *dr])
        assert listed.exit_code == 0, listed.output
        # no front runs yet (`label-studio up` / `stack up` start them): the address is the desk's
        assert json.loads(listed.output) == [{"email": w, "role": "annotator", "url": desks.url(w),
                                              "desk_url": desks.url(w)} for w in (a, b)]
        assert desks.url(a) != desks.url(b)  # two desks, two servers
        plain = runner.invoke(app, ["annotators", "list", *dr])
        assert [line.split() for line in plain.output.splitlines()] == [
            [w, "annotator", desks.url(w), "(desk:", desks.url(w) + ")"] for w in (a, b)]

        args = [*dr, "-a", a, "-a", b]
        pushed = runner.invoke(app, ["annotate", "push", "relation", *args])
        assert pushed.exit_code == 0, pushed.output
        assert "4 projects for 2 annotators; 4 tasks created" in " ".join(pushed.output.split())
        for who in (a, b):  # each annotator's projects on their own desk, none on the other's
            assert sorted(push.parse_project_key(p.key)[2] for p in desks.client(who).projects()) == [who, who]
        again = runner.invoke(app, ["annotate", "push", "relation", *args])
        assert "0 tasks created, 0 updated, 4 unchanged" in " ".join(again.output.split())
        pulled = runner.invoke(app, ["annotate", "pull", "relation", *args])
        assert pulled.exit_code == 0 and "0 label lines, 0 problems, 4 exports (4 new)" in pulled.output
        status = runner.invoke(app, ["annotate", "status", *dr])
        assert status.exit_code == 0, status.output
        for who in (a, b):
            assert f"desk {who} (annotator): up at {desks.public_url(who)}" in status.output
        cells = _table_cells(status.output, (a, b))
        # rows with controls (therapist rows): couple rows 3 and 6, family row 3; one sample each
        assert cells == sorted([("relation", sc, who, f"0 / {2 if sc == 'couple' else 1}", "0",
                                 "0 / 1", "0", "-") for sc in ("couple", "family") for who in (a, b)])
        bad = runner.invoke(app, ["annotate", "push", "colours", *args])
        assert bad.exit_code == 1 and "no annotation round 'colours'" in bad.output

        # a task deleted on a's desk after the push: `rescue annotate status` names it
        pid = next(p.id for p in desks.client(a).projects() if p.key == push.project_key("relation", "couple", a))
        victim = desks.client(a).tasks(pid)[0]
        desks.client(a).request("DELETE", f"/api/tasks/{victim['id']}/", "delete a task (test)")
        status = runner.invoke(app, ["annotate", "status", *dr, "-r", "relation", "-a", a])
        assert status.exit_code == 0, status.output
        assert f"missing task: relation couple {a}: {victim['data']['sample_id']} was pushed but is gone" in \
            " ".join(status.output.split()), status.output

        # up is idempotent (the same servers), status names each desk and its version
        pids = {who: desks.server(who).status().pid for who in (a, b)}
        up = runner.invoke(app, ["label-studio", "up", *dr])
        assert up.exit_code == 0, up.output
        assert up.output.count("up at") == 2 and {w: desks.server(w).status().pid for w in (a, b)} == pids
        ls_status = runner.invoke(app, ["label-studio", "status", *dr])
        assert ls_status.exit_code == 0 and ls_status.output.count("1.23.2") == 2, ls_status.output
        # down --annotator stops that desk only; status then says so (exit 1), and up brings it back
        down = runner.invoke(app, ["label-studio", "down", "--annotator", a, *dr])
        assert down.exit_code == 0 and f"stopped: {a}" in down.output, down.output
        assert not desks.server(a).status().running and desks.server(b).status().pid == pids[b]
        ls_status = runner.invoke(app, ["label-studio", "status", *dr])
        assert ls_status.exit_code == 1 and f"{a} (annotator): Label Studio down" in ls_status.output
        st = runner.invoke(app, ["annotate", "status", *dr])
        assert st.exit_code == 1 and f"desks down: {a}" in " ".join(st.output.split()), st.output
        up = runner.invoke(app, ["label-studio", "up", "--annotator", a, *dr])
        assert up.exit_code == 0 and desks.server(a).status().healthy, up.output
        assert desks.server(b).status().pid == pids[b]

        # a desk whose service token is wrong: an authentication error that never shows the token
        service = DataRoot(root).desk_service(desks.get(b).slug)
        good = service.read_text()
        wrong = "fedcba9876543210fedcba9876543210fedcba98"
        service.write_text(json.dumps({**json.loads(good), "LABEL_STUDIO_USER_TOKEN": wrong}))
        try:
            for cmd in (["annotate", "status"], ["annotate", "pull", "relation"]):
                out = runner.invoke(app, [*cmd, *dr])
                text = " ".join(out.output.split())
                assert out.exit_code == 1 and "rejected the API token" in text, out.output
                assert wrong not in out.output and json.loads(good)["LABEL_STUDIO_USER_TOKEN"] not in out.output
        finally:
            service.write_text(good)
    finally:
        Desks(DataRoot(root)).down()


def test_cli_refuses_a_taken_port(tmp_path, monkeypatch):
    _cli_env(monkeypatch)
    root = tmp_path / "data"
    desk = Desks(DataRoot(root)).register("busy@rescue.test", "annotator")  # its port was free when registered
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", desk.port))
        busy.listen()
        out = CliRunner().invoke(app, ["label-studio", "up", "--data-root", str(root)])
    assert out.exit_code == 1
    assert f"port {desk.port} on 127.0.0.1 is taken" in " ".join(out.output.split()), out.output
    assert not (DataRoot(root).desk_label_studio_dir(desk.slug) / "server.pid").exists()


def test_render_configs_check_passes(monkeypatch):
    out = CliRunner().invoke(app, ["annotate", "render-configs", "--check"])
    assert out.exit_code == 0 and "match" in out.output
