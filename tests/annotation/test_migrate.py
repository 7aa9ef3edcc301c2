"""`rescue label-studio migrate-to-desks` against real Label Studio servers: a data root with the
single shared server and a round in progress (answers, a draft, an adjudication) moves to one desk
per person, and the pulled labels and adjudications stay byte-identical."""
from __future__ import annotations

import os
import secrets
import sqlite3
import stat
import time
from pathlib import Path

import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, pull, push
from pipeline.labelstudio.client import LabelStudioClient
from pipeline.labelstudio.desks import SERVICE_EMAIL, Desks, media_path
from pipeline.annotation.status import round_history
from pipeline.labelstudio.migrate import MigrationError, migrate_to_desks
from pipeline.annotation.rounds import load_round
from pipeline.labelstudio.server import DB_NAME, LabelStudioServer
from pipeline.paths import DataRoot
from pipeline.quality import adjudication
from tests.helpers import OneServerDesks, free_port, noise_wav, require_label_studio

pytestmark = pytest.mark.slow

ROUND = "emotion"
A, B, J = "ann.migrate@rescue.test", "ben.migrate@rescue.test", "jo.judge@rescue.test"


class SharedServer(OneServerDesks):
    """The layout before desks: every person's "desk" is the one shared server, with all its
    projects in view (as the old layout had them), media served from the whole data root."""

    def client(self, email):
        return self._client

    def where(self, email):
        return f"{email}'s projects on the shared server"


def _values(rnd, sample, tone: str, utterance: str | None = None) -> dict:
    values = push.input_values(rnd, sample)
    for ri, v in values.items():
        if "utterance_type" in v or v.get("tone_of_voice") is not None:
            if utterance:
                v["utterance_type"] = utterance
            v["tone_of_voice"] = f"{tone} row {ri}"
    return values


def _env_key(path: Path) -> str:
    return next(line.split("=", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("SECRET_KEY="))


def test_migrate_to_desks_keeps_every_answer_and_draft_and_isolates_people(ls_credentials, tmp_path, monkeypatch):
    require_label_studio()
    t0 = time.monotonic()
    monkeypatch.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
    root = DataRoot(tmp_path / "data")
    rnd = load_round(ROUND)
    samples = [make_sample(f"migrate/couple_{i:03d}", "couple", 6, seed=i) for i in range(3)]
    by_id = {s["sample_id"]: s for s in samples}
    for i, s in enumerate(samples):
        noise_wav(root.root / "media" / f"mig-{i}.wav")
    url_of = {s["sample_id"]: f"/data/local-files/?d=media/mig-{i}.wav" for i, s in enumerate(samples)}

    # --- the old layout: one shared server, two annotators, one adjudicator --------------------
    old = LabelStudioServer(root.label_studio_dir(), port=free_port(), media_root=root.root)
    old.start(timeout=400)
    desks = None
    try:
        client = LabelStudioClient(old.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"])
        shared = SharedServer(old, client)
        for email in (A, B):
            shared.add(email)
        shared.add(J, "adjudicator")
        report = push.push_round(shared, ROUND, samples, [A, B], root=root,
                                 media_url=lambda s: url_of[s["sample_id"]])
        users = {u["email"]: u["id"] for u in client.users()}
        tag = secrets.token_hex(4)
        a_mark, b_mark, draft_mark = f"annanswer{tag}", f"benanswer{tag}", f"anndraft{tag}"
        pa = report.projects[push.project_key(ROUND, "couple", A)]
        pb = report.projects[push.project_key(ROUND, "couple", B)]
        a_tasks, b_tasks = client.tasks(pa), client.tasks(pb)
        for task in a_tasks[:-1]:  # A leaves the last task with a draft only
            values = _values(rnd, by_id[task["data"]["sample_id"]], a_mark)
            client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                     completed_by=users[A], lead_time=4.0)
        for task in b_tasks:  # B disagrees on the utterance type: adjudication has work
            values = _values(rnd, by_id[task["data"]["sample_id"]], b_mark, "accusation")
            client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                     completed_by=users[B], lead_time=5.0)
        draft_task = a_tasks[-1]
        values = _values(rnd, by_id[draft_task["data"]["sample_id"]], draft_mark)
        draft = client._json("POST", f"/api/tasks/{draft_task['id']}/drafts", "save a draft", json={
            "result": ls_config.values_to_results(rnd, draft_task["data"], values), "lead_time": 1})
        # a draft made in the UI is the annotator's own (the API makes it the caller's)
        con = sqlite3.connect(root.label_studio_dir() / DB_NAME)
        with con:
            con.execute("UPDATE tasks_annotationdraft SET user_id = ? WHERE id = ?", (users[A], draft["id"]))
        con.close()
        draft_row = sqlite3.connect(root.label_studio_dir() / DB_NAME).execute(
            "SELECT id, task_id, result, created_at, updated_at FROM tasks_annotationdraft WHERE id = ?",
            (draft["id"],)).fetchone()

        before = pull.pull_round(shared, ROUND, root)
        labels_before = root.labels(ROUND).read_bytes()
        assert before.labels.num_rows > 0 and set(before.labels.column("annotator").to_pylist()) == {A, B}
        adj = adjudication.push_round(shared, root, ROUND, samples)
        assert adj.tasks_created > 0
        adj_pid = adj.projects[f"couple/{J}"]
        for task in client.tasks(adj_pid)[:2]:
            values = _values(rnd, by_id[task["data"]["sample_id"]], "judged", "defense")
            client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                     completed_by=users[J], lead_time=6.0)
        adj_before = adjudication.pull_round(shared, root, ROUND)
        adj_bytes_before = adj_before.path.read_bytes()
        assert adj_before.table.num_rows > 0
        client.close()
        old_key = _env_key(root.label_studio_dir() / ".env")
        old_db_bytes = (root.label_studio_dir() / DB_NAME).read_bytes()
        setup_s = time.monotonic() - t0

        # --- refusals: nothing stopped, nothing written -------------------------------------
        with pytest.raises(MigrationError, match="adjudication projects but no adjudicator"):
            migrate_to_desks(root, history=round_history(root), log=lambda m: None)
        with pytest.raises(MigrationError, match="never annotates a round"):
            migrate_to_desks(root, [J, A], history=round_history(root), log=lambda m: None)
        assert old.status().healthy and not root.desks_registry().exists()

        # --- the migration --------------------------------------------------------------------
        t1 = time.monotonic()
        lines: list[str] = []

        def log(message: str) -> None:
            lines.append(message)
            print(f"[{time.monotonic() - t1:5.0f} s] {message}")
        result = migrate_to_desks(root, [J], history=round_history(root), log=log)
        migrate_s = time.monotonic() - t1
        assert not result.noop and not old.status().running  # the shared server was stopped
        assert not root.label_studio_dir().exists() and result.old_dir and result.old_dir.is_dir()
        assert (result.old_dir / DB_NAME).read_bytes() == old_db_bytes  # the old data kept, untouched
        assert stat.S_IMODE(os.stat(result.old_dir).st_mode) == 0o700
        assert not (root.desks_dir() / ".migration").exists()
        moves = {d.email: d for d in result.desks}
        assert set(moves) == {A, B, J} and moves[A].drafts == 1 and moves[A].annotations == len(a_tasks) - 1
        assert any("verified" in line for line in lines) and result.summary()

        desks = Desks(root)
        assert desks.annotators() == [A, B] and desks.adjudicators() == [J]
        desks.up()
        after = pull.pull_round(desks, ROUND, root)
        assert root.labels(ROUND).read_bytes() == labels_before  # identical labels: ids, timestamps, values
        assert after.labels.equals(before.labels)
        adj_after = adjudication.pull_round(desks, root, ROUND)
        assert adj_after.path.read_bytes() == adj_bytes_before and not adj_after.ignored

        # the draft is on A's desk, as A's
        a = desks.client(A)
        [project] = a.projects()
        assert project.id == pa and {u["email"] for u in a.users()} == {A, SERVICE_EMAIL}
        full = {t["id"]: t for t in a.tasks(pa, fields="all")}
        assert draft_task["id"] in full
        a_db = root.desk_label_studio_dir(desks.get(A).slug) / DB_NAME
        con = sqlite3.connect(f"file:{a_db}?mode=ro", uri=True)
        assert con.execute("SELECT id, task_id, result, created_at, updated_at FROM tasks_annotationdraft "
                           "WHERE user_id = ?", (desks.owner_id(A),)).fetchall() == [draft_row]
        con.close()
        # the media are served from A's own file root
        r = a.request("GET", "/data/local-files/", "read a media file",
                      params={"d": media_path(url_of[draft_task["data"]["sample_id"]])})
        assert r.status_code == 200 and r.content[:4] == b"RIFF"
        assert (root.desk_files(desks.get(A).slug) / "media" / "mig-0.wav").is_file()
        # B's and J's desks hold their own work only
        assert [p.id for p in desks.client(B).projects()] == [pb]
        assert [p.key for p in desks.client(J).projects()] == [adjudication.project_key(ROUND, "couple")]
        desks.down()

        # nothing of B in A's database file (VACUUM: not even in free pages); nothing of A in B's
        raw_a = a_db.read_bytes()
        for needle in (B, b_mark, J):
            assert needle.encode() not in raw_a, needle
        raw_b = (root.desk_label_studio_dir(desks.get(B).slug) / DB_NAME).read_bytes()
        for needle in (A, a_mark, draft_mark):
            assert needle.encode() not in raw_b, needle
        # each desk has its own new SECRET_KEY; its files are owner-only
        keys = set()
        for email in (A, B, J):
            ls_dir = root.desk_label_studio_dir(desks.get(email).slug)
            keys.add(_env_key(ls_dir / ".env"))
            assert stat.S_IMODE(os.stat(ls_dir / DB_NAME).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(root.desk_dir(desks.get(email).slug)).st_mode) == 0o700
        assert len(keys) == 3 and old_key not in keys

        # a second run is a no-op that says so
        said: list[str] = []
        again = migrate_to_desks(root, [J], history=round_history(root), log=said.append)
        assert again.noop and "already migrated" in again.summary() and str(result.old_dir) in again.summary()
        assert desks.annotators() == [A, B] and not said
        print(f"\nsetup {setup_s:.0f} s, migration of 3 desks {migrate_s:.0f} s, total {time.monotonic() - t0:.0f} s")
    finally:
        if desks is not None:
            desks.down()
            desks.close()
        old.stop()
