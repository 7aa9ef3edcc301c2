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
as it also does for a desk it reaches through another address (``RESCUE_DESK_URL``), and for
every desk with ``RESCUE_PULL_VIA_API=1`` (:data:`VIA_API_VAR`: Label Studio's own export, to
compare or to rule this reader out).
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from pipeline.labelstudio.server import LabelStudioServer, installed_version  # noqa: F401 (tests ask desk_db)

# The Label Studio this reader was written for and tested against. Not server.LS_VERSION: when
# the pin moves, this reader stays off until it is checked against the new schema and export.
WRITTEN_FOR = "1.23.2"
# =1: no pull reads a desk's database; every export and draft is asked of the desk's API.
VIA_API_VAR = "RESCUE_PULL_VIA_API"

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


def version_off(venv: Path) -> str | None:
    """Why this module may not read a desk of the Label Studio installed in ``venv`` (another
    version than :data:`WRITTEN_FOR`), None when it may (``rescue doctor`` says it)."""
    installed = installed_version(venv)
    return None if installed == WRITTEN_FOR else f"installed {installed or 'no Label Studio'}, written for {WRITTEN_FOR}"


def off(venv: Path) -> str | None:
    """Why no pull reads a desk's database now (``RESCUE_PULL_VIA_API=1``, or
    :func:`version_off`), None when it may: the one rule :func:`readable` and ``rescue doctor`` share."""
    if os.environ.get(VIA_API_VAR, "") not in ("", "0"):
        return f"{VIA_API_VAR}={os.environ[VIA_API_VAR]}"
    return version_off(venv)


def readable(server: LabelStudioServer) -> Path | None:
    """``server``'s database when this module may read it: not switched off (:data:`VIA_API_VAR`),
    the installed Label Studio is :data:`WRITTEN_FOR` and the database exists; None otherwise."""
    if off(server.venv) is not None:
        return None
    return server.database if server.database.is_file() else None


# How the API writes each kind of stored value, as SQL on column ``{c}``: datetimes (stored
# ``2026-12-03 22:26:00.309205``, UTC) as ``2026-12-03T22:26:00.309205Z``; booleans (0/1) as
# true/false; floats with 17 significant digits (every double read back exactly); stored JSON as
# itself; UUIDs (32 hex digits) with their hyphens. NULL stays null.
_T = "replace({c}, ' ', 'T') || 'Z'"
_B = "CASE WHEN {c} IS NULL THEN NULL WHEN {c} THEN json('true') ELSE json('false') END"
_F = "CASE WHEN {c} IS NULL THEN NULL ELSE json(printf('%!.17g', {c})) END"
_J = "json({c})"
_U = ("substr({c}, 1, 8) || '-' || substr({c}, 9, 4) || '-' || substr({c}, 13, 4) || '-' || substr({c}, 17, 4)"
      " || '-' || substr({c}, 21)")


def _object(alias: str, fields: list[tuple[str, str, str]]) -> str:
    """A ``json_object(...)`` of ``(key, column, how)`` for rows of the table read as ``alias``."""
    return "json_object(" + ", ".join(f"'{key}', " + how.format(c=f"{alias}.{column}")
                                      for key, column, how in fields) + ")"


_ANNOTATION = _object("a", [
    ("id", "id", "{c}"), ("completed_by", "completed_by_id", "{c}"), ("result", "result", _J),
    ("was_cancelled", "was_cancelled", _B), ("ground_truth", "ground_truth", _B), ("created_at", "created_at", _T),
    ("updated_at", "updated_at", _T), ("draft_created_at", "draft_created_at", _T), ("lead_time", "lead_time", _F),
    ("prediction", "prediction", _J), ("result_count", "result_count", "{c}"), ("unique_id", "unique_id", _U),
    ("import_id", "import_id", "{c}"), ("last_action", "last_action", "{c}"), ("bulk_created", "bulk_created", _B),
    ("task", "task_id", "{c}"), ("project", "project_id", "{c}"), ("updated_by", "updated_by_id", "{c}"),
    ("parent_prediction", "parent_prediction_id", "{c}"), ("parent_annotation", "parent_annotation_id", "{c}"),
    ("last_created_by", "last_created_by_id", "{c}")])
# A draft's ``created_username`` as the API makes it: "First Last email, id" (no name: "email, id").
_NAME = "(h.first_name || CASE WHEN h.last_name != '' THEN ' ' || h.last_name ELSE '' END)"
_USERNAME = f"CASE WHEN {_NAME} = '' THEN '' ELSE {_NAME} || ' ' END || h.email || ', ' || h.id"
_DRAFT = _object("d", [
    ("id", "id", "{c}"), ("user", "user_id", "h.email"), ("created_username", "user_id", _USERNAME),
    ("result", "result", _J), ("lead_time", "lead_time", _F), ("was_postponed", "was_postponed", _B),
    ("import_id", "import_id", "{c}"), ("created_at", "created_at", _T), ("updated_at", "updated_at", _T),
    ("task", "task_id", "{c}"), ("annotation", "annotation_id", "{c}")])
_PREDICTION = _object("p", [
    ("id", "id", "{c}"), ("model_version", "model_version", "{c}"), ("score", "score", _F),
    ("cluster", "cluster", "{c}"), ("neighbors", "neighbors", _J), ("mislabeling", "mislabeling", _F),
    ("created_at", "created_at", _T), ("updated_at", "updated_at", _T), ("model", "model_id", "{c}"),
    ("model_run", "model_run_id", "{c}"), ("task", "task_id", "{c}"), ("project", "project_id", "{c}"),
    ("result", "result", _J)])
_TASK = _object("t", [
    ("id", "id", "{c}"), ("data", "data", _J), ("meta", "meta", _J), ("created_at", "created_at", _T),
    ("updated_at", "updated_at", _T), ("allow_skip", "allow_skip", _B), ("inner_id", "inner_id", "{c}"),
    ("total_annotations", "total_annotations", "{c}"), ("cancelled_annotations", "cancelled_annotations", "{c}"),
    ("total_predictions", "total_predictions", "{c}"), ("comment_count", "comment_count", "{c}"),
    ("unresolved_comment_count", "unresolved_comment_count", "{c}"),
    ("last_comment_updated_at", "last_comment_updated_at", _T), ("project", "project_id", "{c}"),
    ("updated_by", "updated_by_id", "{c}")])


def _check_schema(db: sqlite3.Connection) -> None:
    for table, columns in _COLUMNS.items():
        have = tuple(row[1] for row in db.execute(f'PRAGMA table_info("{table}")'))
        wanted = _USER_COLUMNS if columns is None else columns
        if (columns is None and not set(wanted) <= set(have)) or (columns is not None and have != columns):
            raise Unavailable(f"table {table} is not as Label Studio {WRITTEN_FOR} makes it")


def read_project(database: Path, project_id: int) -> tuple[bytes, dict[int, list[dict]]]:
    """``(the export's JSON, task id -> its predictions as /api/predictions/ lists them)`` of one
    project, read in one read-only transaction; SQLite writes the JSON (its JSON functions), so
    nothing is decoded here but the predictions. Raises :class:`Unavailable`."""
    with _reading(database) as db:
        return _read(db, project_id)


@contextlib.contextmanager
def _reading(database: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection in one transaction (one snapshot: what Label Studio saves
    meanwhile waits for the read), its schema checked; any SQLite error is :class:`Unavailable`."""
    try:
        db = sqlite3.connect(f"{Path(database).resolve().as_uri()}?mode=ro", uri=True, timeout=30.0,
                             isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise Unavailable(f"{database}: {exc}") from None
    try:
        db.execute("BEGIN")
        _check_schema(db)
        yield db
    except sqlite3.Error as exc:
        raise Unavailable(f"{database}: {exc}") from None
    finally:
        db.close()


def read_drafts(database: Path, project_id: int, task_ids: list[int]) -> list[dict]:
    """The drafts of those tasks of the project (every login's), as the export gives them (a
    pull's look digests them). Raises :class:`Unavailable`."""
    out: list[dict] = []
    with _reading(database) as db:
        for at in range(0, len(task_ids), 500):  # SQLite takes a few thousand parameters at most
            part = task_ids[at:at + 500]
            out += [json.loads(text) for (text,) in db.execute(
                f"SELECT {_DRAFT} FROM tasks_annotationdraft d JOIN task t ON d.task_id = t.id JOIN htx_user h ON "
                f"h.id = d.user_id WHERE t.project_id = ? AND d.task_id IN ({','.join('?' * len(part))}) "
                "ORDER BY d.id", (project_id, *part))]
    return out


def _read(db: sqlite3.Connection, project_id: int) -> tuple[bytes, dict[int, list[dict]]]:
    undefined = db.execute("SELECT t.id FROM task t WHERE t.project_id = ? AND "
                           "json_type(t.data, '$.\"$undefined$\"') IS NOT NULL LIMIT 1", (project_id,)).fetchone()
    if undefined:  # the API rewrites that key from the label config
        raise Unavailable(f"task {undefined[0]} holds a $undefined$ key")

    def by_task(table: str, alias: str, obj: str, join: str = "") -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for task, text in db.execute(f"SELECT {alias}.task_id, {obj} FROM {table} {alias} JOIN task t ON "
                                     f"{alias}.task_id = t.id {join} WHERE t.project_id = ? ORDER BY {alias}.id",
                                     (project_id,)):
            out.setdefault(task, []).append(text)
        return out

    annotations = by_task("task_completion", "a", _ANNOTATION)
    drafts = by_task("tasks_annotationdraft", "d", _DRAFT, "JOIN htx_user h ON h.id = d.user_id")
    predictions = {task: [json.loads(p) for p in texts] for task, texts in by_task("prediction", "p", _PREDICTION).items()}
    authors: dict[int, list[str]] = {}
    for task, user in db.execute("SELECT c.task_id, c.user_id FROM task_comment_authors c JOIN task t "
                                 "ON c.task_id = t.id WHERE t.project_id = ? ORDER BY c.id", (project_id,)):
        authors.setdefault(task, []).append(str(user))
    parts = []
    for task, text in db.execute(f"SELECT t.id, {_TASK} FROM task t WHERE t.project_id = ? ORDER BY t.id",
                                 (project_id,)):
        ids = ",".join(str(p["id"]) for p in predictions.get(task, []))
        parts.append(f'{text[:-1]},"annotations":[{",".join(annotations.get(task, []))}],'
                     f'"drafts":[{",".join(drafts.get(task, []))}],"predictions":[{ids}],'
                     f'"comment_authors":[{",".join(authors.get(task, []))}]}}')  # text ends with its "}"
    return ("[" + ",".join(parts) + "]").encode("utf-8"), predictions
