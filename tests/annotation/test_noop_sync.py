"""A push or pull again with nothing new is a no-op: it asks each real desk only
whether anything moved - the requests are counted on the desks' own HTTP clients - and writes
nothing. Anything that did move after it is seen: tasks deleted or edited, annotations added,
changed, deleted, moved or skipped, drafts saved or changed. After every change the pull's tables
equal those of a pull that reads everything again (no sync state)."""
from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, pull, pull_look, push, pushed
from pipeline.labelstudio.client import parse_time
from pipeline.labelstudio.desks import Desks
from pipeline.annotation.rounds import load_round
from pipeline.paths import DataRoot
from tests.helpers import annotator_desks, desk_hooks, sample_media

pytestmark = pytest.mark.slow

ROUND = "transcript"
A, B = "noop-a@rescue.test", "noop-b@rescue.test"
WINDOW = 20  # units per task: the 45-row sample is pushed as 3 windows


def _samples() -> list[dict]:
    return [make_sample(f"synthetic/couple_{i:03d}", "couple", 6 + i % 4) for i in range(8)] + [
        make_sample("synthetic/family_001", "family", 7), make_sample("synthetic/family_045", "family", 45)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two annotators, each with a real desk (one Label Studio each) under one data root, the
    transcript round pushed to both with a WAV per sample (as `rescue annotate push` does)."""
    root = tmp_path_factory.mktemp("noop-sync") / "data"
    with annotator_desks(root, (A, B)) as desks:
        samples = _samples()
        world = SimpleNamespace(root=root, desks=desks, samples=samples, rnd=load_round(ROUND),
                                media_url=sample_media(root, samples))
        world.first = _push(world, samples)
        yield world


def _push(world, samples, desks=None):
    return push.push_round(desks or world.desks, ROUND, samples, [A, B], root=DataRoot(world.root),
                           media_url=world.media_url, window=WINDOW)


@contextlib.contextmanager
def _counted(desks: Desks, people=(A, B)):
    """Every request the desks' clients send, as ``Counter({"GET /api/tasks/": n, ...})``."""
    counts: Counter = Counter()

    def hook(request):
        counts[f"{request.method} {request.url.path}"] += 1

    with desk_hooks(desks, people, request=hook):
        yield counts


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and modification time of every file the push and pull keep (archive excluded)."""
    r = DataRoot(root)
    paths = [r.labels(ROUND), r.label_problems(ROUND), r.acceptance(ROUND), r.annotation_ledger(ROUND),
             r.pushed(ROUND), pushed.sync_path(DataRoot(root), ROUND, "push"), pushed.sync_path(DataRoot(root), ROUND, "pull")]
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in paths if p.is_file()}


def _tasks(world, who, scenario):
    pid = world.first.projects[push.project_key(ROUND, scenario, who)]
    return pid, world.desks.client(who).tasks(pid)


def _annotate(world, who, task, edit=None, cancelled=False):
    sample = next(s for s in world.samples if s["sample_id"] == task["data"]["sample_id"])
    values = push.input_values(world.rnd, sample)
    if edit:
        values = edit(values)
    result = [] if cancelled else ls_config.values_to_results(world.rnd, task["data"], values)
    return world.desks.client(who).create_annotation(task["id"], result, completed_by=world.desks.owner_id(who),
                                                     lead_time=5.0, was_cancelled=cancelled)


def _pull(world, desks=None):
    return pull.pull_round(desks or Desks(DataRoot(world.root)), ROUND, DataRoot(world.root))


def _read_all_again(world):
    """The tables a pull gives that reads every project again (no pull state), not written."""
    state = pushed.sync_path(DataRoot(world.root), ROUND, "pull")
    saved = state.read_bytes()
    state.unlink()
    try:
        return pull.pull_round(Desks(DataRoot(world.root)), ROUND, DataRoot(world.root), write=False)
    finally:
        state.write_bytes(saved)


def _lines(table):
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


# --- push --------------------------------------------------------------------------------------

def test_a_push_again_with_nothing_new_lists_each_desk_once_and_asks_each_project_once(world):
    n_tasks = world.first.created
    assert n_tasks == 2 * (9 + 3) and len(world.first.projects) == 4  # 9 one-task samples + 3 windows, twice
    before = _files(world.root)
    fresh = Desks(DataRoot(world.root))  # as a second `rescue annotate push` would
    with _counted(fresh) as asked:
        again = _push(world, world.samples, fresh)
    assert (again.created, again.updated, again.unchanged) == (0, 0, n_tasks)
    assert again.changed_after_annotation == [] and again.duplicates == []
    # one listing of projects per desk, one query per project for the tasks changed since: nothing else
    assert asked == Counter({"GET /api/projects/": 2, "GET /api/tasks/": 4}), asked
    assert _files(world.root) == before  # nothing written (push record, push state)


def test_a_push_sees_what_moved_on_a_desk_since_the_last_one(world):
    desks = world.desks
    # a task deleted on A's desk is made again; B's desk is asked only what changed
    pid, tasks = _tasks(world, A, "couple")
    gone = tasks[0]
    desks.client(A).request("DELETE", f"/api/tasks/{gone['id']}/", "delete a task")
    with _counted(desks, [B]) as asked_b:
        report = _push(world, world.samples)
    assert (report.created, report.updated) == (1, 0)
    assert asked_b == Counter({"GET /api/projects/": 1, "GET /api/tasks/": 2})
    assert sorted(t["data"]["sample_id"] for t in desks.client(A).tasks(pid)) == \
        sorted(t["data"]["sample_id"] for t in tasks)

    # a task's data edited on A's desk (its content hash no longer the push's): refreshed
    _, tasks = _tasks(world, A, "couple")
    edited = tasks[1]
    desks.client(A).update_task(edited["id"], {**edited["data"], "content_sha": "edited on the desk"})
    report = _push(world, world.samples)
    assert (report.created, report.updated) == (0, 1)
    fixed = next(t for t in desks.client(A).tasks(pid) if t["id"] == edited["id"])
    assert fixed["data"]["content_sha"] == edited["data"]["content_sha"]

    # B annotates a task after the push; then its sample changes: B's task is left as it is
    # (reported), A's unannotated task is updated - the annotation made after the last push is seen
    _, b_tasks = _tasks(world, B, "couple")
    target = b_tasks[2]
    _annotate(world, B, target)
    changed = copy.deepcopy(world.samples)
    sid = target["data"]["sample_id"]
    next(s for s in changed if s["sample_id"] == sid)["rows"][0]["dialogue_cleaned"] = "a corrected first line"
    report = _push(world, changed)
    assert report.changed_after_annotation == [(B, sid)]
    assert (report.created, report.updated) == (0, 1)
    b_pid = world.first.projects[push.project_key(ROUND, "couple", B)]
    kept = next(t for t in desks.client(B).tasks(b_pid) if t["id"] == target["id"])
    assert kept["data"]["content_sha"] == target["data"]["content_sha"] and kept["total_annotations"] == 1
    a_task = next(t for t in desks.client(A).tasks(pid) if t["data"]["sample_id"] == sid)
    assert a_task["data"]["turns"][0]["text"] == "a corrected first line"
    world.samples = changed

    # and a push again is a no-op once more
    before = _files(world.root)
    with _counted(desks) as asked:
        again = _push(world, world.samples)
    assert (again.created, again.updated) == (0, 0) and again.changed_after_annotation == [(B, sid)]
    assert asked == Counter({"GET /api/projects/": 2, "GET /api/tasks/": 4}), asked
    assert _files(world.root) == before


def test_a_push_never_writes_over_an_annotated_task_the_push_state_calls_unannotated(world):
    """The push state is a cache: a task it wrongly holds as unannotated (here: edited so) is read
    again before the push would change it, and left as it is."""
    _, tasks = _tasks(world, A, "family")
    task = next(t for t in tasks if "window" not in t["data"] and not t["total_annotations"])
    _annotate(world, A, task)
    _push(world, world.samples)  # the state now knows the annotation
    path = pushed.sync_path(DataRoot(world.root), ROUND, "push")
    state = json.loads(path.read_bytes())
    record = state["projects"][push.project_key(ROUND, "family", A)]
    row = next(r for r in record["tasks"] if r[3] == task["id"])
    assert row[5] == 1
    row[5] = 0  # the cache is wrong
    path.write_text(json.dumps(state))
    changed = copy.deepcopy(world.samples)
    sid = task["data"]["sample_id"]
    next(s for s in changed if s["sample_id"] == sid)["rows"][0]["dialogue_cleaned"] = "changed once annotated"
    report = _push(world, changed)
    assert (A, sid) in report.changed_after_annotation
    now = next(t for t in world.desks.client(A).tasks(world.first.projects[push.project_key(ROUND, "family", A)])
               if t["id"] == task["id"])
    assert now["data"]["content_sha"] == task["data"]["content_sha"]  # not written over
    assert (B, sid) not in report.changed_after_annotation  # B's copy (unannotated) was updated
    world.samples = changed


# --- pull --------------------------------------------------------------------------------------

def test_a_pull_again_with_nothing_new_asks_a_few_requests_and_writes_nothing(world):
    for who in (A, B):
        for scenario in ("couple", "family"):
            _, tasks = _tasks(world, who, scenario)
            for task in tasks:
                if not task["total_annotations"] and (who == A or task["data"]["sample_id"].endswith("001")):
                    _annotate(world, who, task)
    reader = Desks(DataRoot(world.root))
    with _counted(reader) as first_asked:
        first = _pull(world, reader)
    assert first.labels.num_rows and first.new_snapshots == 4
    # nothing to compare with: each project read without a look (its look read off the export),
    # from its desk's database (pipeline.labelstudio.desk_db): per desk only its users and projects
    assert first_asked == Counter({"GET /api/users/": 2, "GET /api/projects/": 2}), first_asked
    before = _files(world.root)
    fresh = Desks(DataRoot(world.root))  # as a second `rescue annotate pull` would
    with _counted(fresh) as asked:
        again = pull.pull_round(fresh, ROUND, DataRoot(world.root))
    # per desk its users and projects; per project the tasks changed since the last pull (or holding a draft)
    assert asked == Counter({"GET /api/users/": 2, "GET /api/projects/": 2, "GET /api/tasks/": 4}), asked
    assert again.new_snapshots == 0 and again.snapshots == first.snapshots
    assert again.labels.equals(first.labels) and again.problems.equals(first.problems)
    assert again.progress == first.progress and again.missing == first.missing
    assert _files(world.root) == before  # tables, ledger, acceptance and state: not written again


def _seen(world, change: str, expect_new: int = 1):
    """Pull after ``change``: a new export is archived, the tables equal a pull that reads
    everything again, and a pull right after is a no-op."""
    result = _pull(world)
    assert result.new_snapshots == expect_new, change
    full = _read_all_again(world)
    assert _lines(result.labels) == _lines(full.labels), change
    assert _lines(result.problems) == _lines(full.problems), change
    before = _files(world.root)
    fresh = Desks(DataRoot(world.root))
    with _counted(fresh) as asked:
        again = _pull(world, fresh)
    assert again.new_snapshots == 0 and _files(world.root) == before, change
    # a no-op reads only: no export, no write; one query per project, one per task holding a draft
    assert all(k.startswith("GET ") and "/export" not in k for k in asked), (change, asked)
    assert asked["GET /api/tasks/"] == 4 and asked["GET /api/users/"] == asked["GET /api/projects/"] == 2, asked
    return result


def _labels_of(result, who, sid):
    return {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()
            if r["annotator"] == who and r["sample_id"] == sid}


def test_every_change_after_a_no_op_pull_is_seen(world):
    desks = world.desks
    client = desks.client(B)
    _pull(world)
    _pull(world)  # a no-op
    _, tasks = _tasks(world, B, "couple")
    bare = [t for t in tasks if not t["total_annotations"]]
    assert len(bare) >= 5

    # an annotation added
    added = _annotate(world, B, bare[0])
    sid = bare[0]["data"]["sample_id"]
    result = _seen(world, "annotation added")
    assert _labels_of(result, B, sid)

    # an annotation changed (its text)
    row = bare[0]["data"]["units"][0]["row_index"]
    result_before = _labels_of(result, B, sid)
    sample = next(s for s in world.samples if s["sample_id"] == sid)
    values = push.input_values(world.rnd, sample)
    values[row] = dict(values[row], dialogue_cleaned="changed by the annotator")
    client._json("PATCH", f"/api/annotations/{added['id']}/", "change an annotation",
                 json={"result": ls_config.values_to_results(world.rnd, bare[0]["data"], values)})
    result = _seen(world, "annotation changed")
    assert _labels_of(result, B, sid)[(row, "dialogue_cleaned")] == "changed by the annotator"
    assert result_before[(row, "dialogue_cleaned")] != "changed by the annotator"

    # a draft saved (by a login of the desk), then changed: both are new states of the export
    draft = client._json("POST", f"/api/tasks/{bare[1]['id']}/drafts", "save a draft",
                         json={"result": [], "lead_time": 2.0})
    _seen(world, "draft saved")
    client._json("PATCH", f"/api/drafts/{draft['id']}/", "change a draft", json={"lead_time": 3.0})
    _seen(world, "draft changed")

    # an annotation moved to another task: reported by the ledger, not counted
    client._json("PATCH", f"/api/annotations/{added['id']}/", "move an annotation", json={"task": bare[2]["id"]})
    result = _seen(world, "annotation moved")
    assert any(p["annotator"] == B and "moved from" in p["problem"] for p in result.problems.to_pylist())
    assert not _labels_of(result, B, sid)

    # an annotation deleted: its lines go
    victim = _annotate(world, B, bare[4])
    assert _labels_of(_seen(world, "annotation added"), B, bare[4]["data"]["sample_id"])
    client.request("DELETE", f"/api/annotations/{victim['id']}/", "delete an annotation")
    result = _seen(world, "annotation deleted")
    assert not _labels_of(result, B, bare[4]["data"]["sample_id"])

    # a task skipped
    _annotate(world, B, bare[3], cancelled=True)
    result = _seen(world, "task skipped")
    assert any(p["annotator"] == B and p["sample_id"] == bare[3]["data"]["sample_id"]
               and p["problem"] == "skipped (cancelled) by the annotator" for p in result.problems.to_pylist())

    # a task deleted after the push: reported as gone, its earlier lines kept
    _, family = _tasks(world, A, "family")
    lost = next(t for t in family if t["total_annotations"] and "window" not in t["data"])
    before = _labels_of(_pull(world), A, lost["data"]["sample_id"])
    desks.client(A).request("DELETE", f"/api/tasks/{lost['id']}/", "delete a task")
    result = _seen(world, "task deleted")
    assert (lost["data"]["sample_id"], A) in result.missing
    assert before and _labels_of(result, A, lost["data"]["sample_id"]) == before
    assert pq.read_table(DataRoot(world.root).labels(ROUND)).equals(result.labels)


def test_a_look_read_off_an_export_is_the_look_label_studio_shows(world):
    """A pull exports a project it has nothing to compare with without looking at it, and keeps
    the look read off the export (``pull_look.look_from_export``) for the next pull: it must be
    the look Label Studio shows, or that pull would export again, or miss a change. Checked on
    every project of both desks, with annotations, a skipped task, drafts on one task and on
    more than a look reads one by one, from a time before every task and from the middle."""
    client = world.desks.client(A)
    _, couple = _tasks(world, A, "couple")
    _, family = _tasks(world, A, "family")
    for task in couple[:pull_look.DRAFTS_ONE_BY_ONE + 1] + family[:1]:
        client._json("POST", f"/api/tasks/{task['id']}/drafts", "save a draft", json={"result": [], "lead_time": 1.0})
    _, theirs = _tasks(world, B, "couple")
    bare = [t for t in theirs if not t["total_annotations"] and not t["cancelled_annotations"]]
    _annotate(world, B, bare[0], cancelled=True)  # a skipped task
    compared = partial = 0
    for who in (A, B):
        desk = world.desks.client(who)
        for project in desk.projects():
            tasks = json.loads(desk.export_tasks(project.id))
            stamps = sorted(parse_time(t["updated_at"]) for t in tasks)
            for since in (stamps[0] - dt.timedelta(days=1), stamps[len(stamps) // 2]):
                shown = pull_look.look(desk, project, since)
                assert pull_look.look_from_export(project, since, tasks) == shown, (who, project.key, since)
                compared += 1
            partial += 0 < len(shown["window"]) < len(tasks)  # from the middle: a part of the tasks
            if who == A:
                assert shown["drafts"] is not None
    assert compared == 8 and partial
