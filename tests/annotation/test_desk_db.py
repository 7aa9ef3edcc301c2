"""A project read from its desk's database (pipeline.labelstudio.desk_db) is Label Studio's own
export, key for key, on a real desk with every kind of record; a pull reading that way gives the
same tables as one asking the API; another schema or version falls back to the API."""
from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from ls_samples import make_sample

from pipeline.annotation import acceptance, ls_config, pull, pull_look, push, pushed

from pipeline.labelstudio import desk_db
from pipeline.labelstudio.desks import Desks
from pipeline.annotation.rounds import load_round
from pipeline.labelstudio.server import DB_NAME
from pipeline.paths import DataRoot
from tests.helpers import ThroughTheApi, annotator_desks, desk_hooks, sample_media

pytestmark = pytest.mark.slow

ROUND = "transcript"
A, B = "deskdb-a@rescue.test", "deskdb-b@rescue.test"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two real desks, the transcript round pushed to both (a 45-row sample in windows), and on
    A's desk: an annotation, an edited one, a skip, drafts of two logins, one of them on an
    annotated task, and a task whose prediction was replaced."""
    root = tmp_path_factory.mktemp("desk-db") / "data"
    with annotator_desks(root, (A, B)) as desks:
        samples = [make_sample(f"synthetic/couple_{i:03d}", "couple", 5 + i) for i in range(4)] + [
            make_sample("synthetic/family_045", "family", 45)]
        rnd = load_round(ROUND)
        report = push.push_round(desks, ROUND, samples, [A, B], root=DataRoot(root), media_url=sample_media(root, samples),
                                 window=20)
        client, owner = desks.client(A), desks.owner_id(A)
        by_id = {s["sample_id"]: s for s in samples}
        tasks = [t for key, pid in sorted(report.projects.items()) if key.endswith(A) for t in client.tasks(pid)]

        def results(task):
            return ls_config.values_to_results(rnd, task["data"], push.input_values(rnd, by_id[task["data"]["sample_id"]]))

        done = client.create_annotation(tasks[0]["id"], results(tasks[0]), completed_by=owner, lead_time=5.0)
        client._json("PATCH", f"/api/annotations/{done['id']}/", "edit an annotation", json={"lead_time": 7.5})
        client.create_annotation(tasks[1]["id"], [], completed_by=owner, was_cancelled=True)
        client.create_annotation(tasks[-1]["id"], results(tasks[-1]), completed_by=owner, lead_time=2.0)
        for task in (tasks[2], tasks[0]):  # the service login's drafts (one beside an annotation)
            client._json("POST", f"/api/tasks/{task['id']}/drafts", "save a draft", json={"result": [], "lead_time": 1.0})
        client.replace_predictions(tasks[3]["id"], results(tasks[3]), "model-2")
        yield SimpleNamespace(root=root, desks=desks, report=report, projects={
            key: pid for key, pid in report.projects.items() if key.endswith(A)})


def _differences(ours, theirs, at="") -> list[str]:
    """Where two JSON values differ, as paths (a failure names the key, not a 15-kB repr)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [d for k in sorted(set(ours) | set(theirs), key=str)
                for d in _differences(ours.get(k, "<absent>"), theirs.get(k, "<absent>"), f"{at}.{k}")]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in _differences(a, b, f"{at}[{i}]")]
    return [] if ours == theirs and type(ours) is type(theirs) else [f"{at}: ours {ours!r:.80} theirs {theirs!r:.80}"]


def _without_created_ago(items):
    """Label Studio computes ``created_ago`` ("0 minutes") from the clock when it answers."""
    return [{k: v for k, v in item.items() if k != "created_ago"} for item in items]


def test_a_project_read_from_the_desk_database_is_label_studios_export_key_for_key(world):
    client = world.desks.client(A)
    database = world.desks.database(A)
    assert database == DataRoot(world.root).desk_label_studio_dir("deskdb-a-rescue-test") / DB_NAME
    kinds = set()
    for key, pid in world.projects.items():
        exported = json.loads(client.export_tasks(pid))
        listed = acceptance.project_predictions(client, pid)
        raw, predictions = desk_db.read_project(database, pid)
        tasks = json.loads(raw)
        for task in exported:
            task["drafts"] = _without_created_ago(task["drafts"])
        assert _differences(tasks, exported) == [], key
        assert _differences(predictions, {t: _without_created_ago(ps) for t, ps in listed.items()}) == [], key
        kinds |= {"annotation" for t in tasks for a in t["annotations"] if not a["was_cancelled"]}
        kinds |= {"skip" for t in tasks for a in t["annotations"] if a["was_cancelled"]}
        kinds |= {"draft" for t in tasks if t["drafts"]}
        kinds |= {"window" for t in tasks if t["data"].get("window")}
        kinds |= {"replaced prediction" for ps in predictions.values() for p in ps if p["model_version"] == "model-2"}
    assert kinds == {"annotation", "skip", "draft", "window", "replaced prediction"}  # every kind was compared
    # the export files the desk wrote are its owner's alone (Django's uploads would be 0644)
    written = [p for p in DataRoot(world.root).desk_label_studio_dir("deskdb-a-rescue-test").rglob("*") if p.is_file()]
    assert [p for p in written if "export" in p.parts], "the export wrote no file"
    assert [p for p in written if p.stat().st_mode & 0o077] == []


def _tables(root: Path) -> dict[str, bytes]:
    r = DataRoot(root)
    return {p.name: p.read_bytes() for p in (r.labels(ROUND), r.label_problems(ROUND), r.acceptance(ROUND),
                                              r.annotation_ledger(ROUND))}


def test_a_pull_reading_the_databases_gives_the_tables_of_a_pull_through_the_api(world, tmp_path):
    asked = []
    exports_before = sorted(world.root.glob("desks/*/label-studio/export/*"))
    with desk_hooks(world.desks, (A, B), request=lambda r: asked.append(r.url.path)):
        through_db = pull.pull_round(world.desks, ROUND, DataRoot(world.root))
    read_db = _tables(world.root)
    assert through_db.labels.num_rows > 0 and through_db.new_snapshots == 4
    # a first pull reads through the databases: no export asked, no export file left on the desks
    assert asked and not [p for p in asked if p.endswith("/export") or p == "/api/predictions/"], asked
    assert sorted(world.root.glob("desks/*/label-studio/export/*")) == exports_before

    # the same state pulled through the API, from scratch (another data root with the same push record)
    other = tmp_path / "data"
    for path in (DataRoot(world.root).pushed(ROUND), pushed.sync_path(DataRoot(world.root), ROUND, "push")):
        target = other / path.relative_to(world.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    through_api = pull.pull_round(ThroughTheApi(world.desks), ROUND, DataRoot(other))
    assert _tables(other) == read_db
    assert through_api.progress == through_db.progress and through_api.missing == through_db.missing
    # the archived exports differ in bytes (Label Studio's JSON against ours) and hold the same tasks
    theirs = [json.loads(p.read_bytes()) for p in through_api.snapshots]
    for tasks in theirs:
        for task in tasks:
            task["drafts"] = _without_created_ago(task["drafts"])
    ours = [json.loads(p.read_bytes()) for p in through_db.snapshots]
    assert sorted(json.dumps(t, sort_keys=True) for t in ours) == sorted(json.dumps(t, sort_keys=True) for t in theirs)


def test_another_schema_or_version_is_read_through_the_api(world, tmp_path):
    database = world.desks.database(A)
    pid = next(iter(world.projects.values()))
    copy = tmp_path / DB_NAME
    shutil.copy2(database, copy)
    desk_db.read_project(copy, pid)  # as Label Studio 1.23.2 left it: read
    with sqlite3.connect(copy) as db:  # a key the API would rewrite from the label config
        db.execute("""UPDATE task SET data = json_set(data, '$."$undefined$"', 'x') WHERE project_id = ?""", (pid,))
    with pytest.raises(desk_db.Unavailable, match=r"holds a \$undefined\$ key"):
        desk_db.read_project(copy, pid)
    shutil.copy2(database, copy)
    with sqlite3.connect(copy) as db:
        db.execute('ALTER TABLE task_completion ADD COLUMN "review_state" text NULL')  # a later version's column
    with pytest.raises(desk_db.Unavailable, match="task_completion is not as Label Studio 1.23.2 makes it"):
        desk_db.read_project(copy, pid)
    (tmp_path / "not-a-db").write_bytes(b"garbage " * 100)
    with pytest.raises(desk_db.Unavailable, match="not-a-db"):
        desk_db.read_project(tmp_path / "not-a-db", pid)

    # another installed version: no database is offered, and the pull asks the API
    venv = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (venv / "label_studio-1.24.0.dist-info").mkdir(parents=True)
    assert desk_db.installed_version(tmp_path / "venv") == "1.24.0"
    assert Desks(DataRoot(world.root), venv=tmp_path / "venv").database(A) is None
    assert Desks(DataRoot(world.root)).database(A) == database


def test_a_look_reads_the_drafts_from_the_database_as_the_api_shows_them(world, monkeypatch):
    client, database = world.desks.client(A), world.desks.database(A)
    project = next(p for p in client.projects() if p.key == push.project_key(ROUND, "couple", A))
    since = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    for one_by_one in (pull_look.DRAFTS_ONE_BY_ONE, 0):  # drafts task by task, then by a partial export
        monkeypatch.setattr(pull_look, "DRAFTS_ONE_BY_ONE", one_by_one)
        through_api = pull_look.look(client, project, since)
        asked = []
        with desk_hooks(world.desks, (A,), request=lambda r: asked.append(r.url.path)):
            through_db = pull_look.look(client, project, since, database)
        assert through_db == through_api and through_db["drafts"] is not None
        assert asked == ["/api/tasks/"], asked  # the task query only: no draft read, no export
