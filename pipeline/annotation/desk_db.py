"""A project's export read from its desk's own database, in the shape of Label Studio's export.

Label Studio's synchronous export (``/api/projects/<id>/export``) serialises every task through
Django REST framework: about 3 ms of the desk's CPU per task, 3.3-5.9 s for a RESCUE-sized
project on a 2-core machine, and a copy written under the desk's ``export/`` folder that Label
Studio never removes. A desk is ours (:mod:`.desks`: its database lives under the data root, made
and started by the pipeline), so a pull on the same machine reads the same rows from that
database directly, read-only, in one transaction (a consistent state, never a half-saved one),
and builds the same JSON: the same tasks, annotations, drafts and prediction ids with the same
keys and values (``tests/annotation/test_desk_db.py`` compares both on a real desk), but for the
drafts' ``created_ago`` ("3 minutes"), which Label Studio computes from the clock at export time.

This reads a third party's private schema, so it is tied to the exact version it was written
for, all or nothing: :func:`read_project` answers only when the desk's Label Studio is
:data:`WRITTEN_FOR` and every table it reads has exactly the columns listed here; otherwise it
raises :class:`Unavailable` and the pull asks the desk's API (:meth:`.client.LabelStudioClient.export_tasks`),
as it also does for a desk it reaches through another address (``RESCUE_DESK_URL``).
"""
from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

# The Label Studio this reader was written for and tested against. Not server.LS_VERSION: when
# the pin moves, this reader stays off until it is checked against the new schema and export.
WRITTEN_FOR = "1.23.2"

# Every column of every table read, exactly as Label Studio 1.23.2's migrations leave them: one
# column more or less (another version's schema) and the export is asked of the API instead.
_COLUMNS = {
    "task": ("id", "data", "created_at", "updated_at", "is_labeled", "project_id", "meta", "overlap",
             "file_upload_id", "updated_by_id", "inner_id", "total_annotations", "cancelled_annotations",
             "total_predictions", "comment_count", "last_comment_updated_at", "unresolved_comment_count",
             "precomputed_agreement", "allow_skip"),
    "task_completion": ("id", "result", "was_cancelled", "created_at", "updated_at", "task_id", "prediction",
                        "lead_time", "result_count", "completed_by_id", "ground_truth", "parent_prediction_id",
                        "last_action", "last_created_by_id", "project_id", "updated_by_id", "unique_id",
                        "draft_created_at", "import_id", "bulk_created", "parent_annotation_id"),
    "tasks_annotationdraft": ("id", "result", "created_at", "updated_at", "task_id", "user_id", "annotation_id",
                              "was_postponed", "lead_time", "import_id"),
    "prediction": ("id", "result", "score", "model_version", "created_at", "updated_at", "task_id", "cluster",
                   "mislabeling", "neighbors", "project_id", "model_run_id", "model_id"),
    "task_comment_authors": ("id", "task_id", "user_id"),
    "htx_user": None,  # only id, email, first_name and last_name are read (checked below)
}
_USER_COLUMNS = ("id", "email", "first_name", "last_name")


class Unavailable(Exception):
    """The database cannot be read as this module expects (another schema, a file that is not
    there or not a database): the caller asks the API instead."""


def installed_version(venv: Path) -> str | None:
    """The Label Studio version installed in ``venv`` (its dist-info folder), None when none is."""
    found = sorted(Path(venv).glob("lib/python3*/site-packages/label_studio-*.dist-info"))
    return found[0].name[len("label_studio-"):-len(".dist-info")] if len(found) == 1 else None


def _time(value: str | None) -> str | None:
    """A stored datetime (``2026-12-03 22:26:00.309205``, UTC) as the API writes it
    (``2026-12-03T22:26:00.309205Z``; Django stores no fraction when it is zero, nor does the API)."""
    return None if value is None else value.replace(" ", "T", 1) + "Z"


def _json(value: str | None):
    return None if value is None else json.loads(value)


def _bool(value: int | None) -> bool | None:
    return None if value is None else bool(value)


def _check_schema(db: sqlite3.Connection) -> None:
    for table, columns in _COLUMNS.items():
        have = tuple(row[1] for row in db.execute(f'PRAGMA table_info("{table}")'))
        wanted = _USER_COLUMNS if columns is None else columns
        if (columns is None and not set(wanted) <= set(have)) or (columns is not None and have != columns):
            raise Unavailable(f"table {table} is not as Label Studio {WRITTEN_FOR} makes it")


def read_project(database: Path, project_id: int) -> tuple[list[dict], dict[int, list[dict]]]:
    """``(tasks as the export gives them, task id -> its predictions as /api/predictions/ lists
    them)`` of one project, read in one read-only transaction. Raises :class:`Unavailable`."""
    try:
        db = sqlite3.connect(f"{Path(database).resolve().as_uri()}?mode=ro", uri=True, timeout=30.0,
                             isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise Unavailable(f"{database}: {exc}") from None
    try:
        db.execute("BEGIN")  # one snapshot: what Label Studio saves meanwhile waits for this read
        _check_schema(db)
        return _read(db, project_id)
    except sqlite3.Error as exc:
        raise Unavailable(f"{database}: {exc}") from None
    finally:
        db.close()


def _read(db: sqlite3.Connection, project_id: int) -> tuple[list[dict], dict[int, list[dict]]]:
    users = {row[0]: row for row in db.execute("SELECT id, email, first_name, last_name FROM htx_user")}
    annotations: dict[int, list[dict]] = {}
    for (aid, result, cancelled, created, updated, task, prediction, lead, count, by, truth, parent_prediction,
         action, last_by, project, updated_by, unique, draft_created, import_id, bulk, parent_annotation) in db.execute(
            "SELECT a.* FROM task_completion a JOIN task t ON a.task_id = t.id WHERE t.project_id = ? ORDER BY a.id",
            (project_id,)):
        annotations.setdefault(task, []).append({
            "id": aid, "completed_by": by, "result": _json(result), "was_cancelled": bool(cancelled),
            "ground_truth": bool(truth), "created_at": _time(created), "updated_at": _time(updated),
            "draft_created_at": _time(draft_created), "lead_time": lead, "prediction": _json(prediction),
            "result_count": count, "unique_id": unique and str(uuid.UUID(unique)), "import_id": import_id, "last_action": action,
            "bulk_created": _bool(bulk), "task": task, "project": project, "updated_by": updated_by,
            "parent_prediction": parent_prediction, "parent_annotation": parent_annotation,
            "last_created_by": last_by})
    drafts: dict[int, list[dict]] = {}
    for did, result, created, updated, task, user, annotation, postponed, lead, import_id in db.execute(
            "SELECT d.* FROM tasks_annotationdraft d JOIN task t ON d.task_id = t.id WHERE t.project_id = ? "
            "ORDER BY d.id", (project_id,)):
        who = users.get(user)
        drafts.setdefault(task, []).append({
            "id": did, "user": who[1] if who else None, "created_username": _username(who),
            "result": _json(result), "lead_time": lead, "was_postponed": bool(postponed), "import_id": import_id,
            "created_at": _time(created), "updated_at": _time(updated), "task": task, "annotation": annotation})
    predictions: dict[int, list[dict]] = {}
    for (pid, result, score, version, created, updated, task, cluster, mislabeling, neighbors, project, model_run,
         model) in db.execute("SELECT p.* FROM prediction p JOIN task t ON p.task_id = t.id WHERE t.project_id = ? "
                              "ORDER BY p.id", (project_id,)):
        predictions.setdefault(task, []).append({
            "id": pid, "model_version": version, "score": score, "cluster": cluster,
            "neighbors": _json(neighbors), "mislabeling": mislabeling, "created_at": _time(created),
            "updated_at": _time(updated), "model": model, "model_run": model_run, "task": task, "project": project,
            "result": _json(result)})
    authors: dict[int, list[int]] = {}
    for task, user in db.execute("SELECT c.task_id, c.user_id FROM task_comment_authors c JOIN task t "
                                 "ON c.task_id = t.id WHERE t.project_id = ? ORDER BY c.id", (project_id,)):
        authors.setdefault(task, []).append(user)
    tasks = []
    for (tid, data, created, updated, _labeled, project, meta, _overlap, _upload, updated_by, inner, total,
         cancelled, n_predictions, comments, last_comment, unresolved, _agreement, allow_skip) in db.execute(
            "SELECT * FROM task WHERE project_id = ? ORDER BY id", (project_id,)):
        data = _json(data)
        if isinstance(data, dict) and "$undefined$" in data:  # the API rewrites that key from the config
            raise Unavailable(f"task {tid} holds a $undefined$ key")
        tasks.append({
            "id": tid, "annotations": annotations.get(tid, []), "drafts": drafts.get(tid, []),
            "predictions": [p["id"] for p in predictions.get(tid, [])], "data": data, "meta": _json(meta),
            "created_at": _time(created), "updated_at": _time(updated), "allow_skip": _bool(allow_skip),
            "inner_id": inner, "total_annotations": total, "cancelled_annotations": cancelled,
            "total_predictions": n_predictions, "comment_count": comments, "unresolved_comment_count": unresolved,
            "last_comment_updated_at": _time(last_comment), "project": project, "updated_by": updated_by,
            "comment_authors": authors.get(tid, [])})
    return tasks, predictions


def _username(user: tuple | None) -> str:
    """Label Studio's ``created_username`` of a draft: "First Last email, id"."""
    if user is None:
        return ""
    _, email, first, last = user
    name = (first or "") + (f" {last}" if last else "")
    return name + (" " if name else "") + f"{email}, {user[0]}"
