"""The migration's middle steps (:mod:`.migrate`): each desk's copy of the old database cut down
with Label Studio's own Django ORM (in its own venv, one process for every desk, then VACUUM),
and each cut-down copy checked against the old database row by row before it is put in place.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from pipeline.labelstudio import migrate_orm
from pipeline.labelstudio.desks import SERVICE_EMAIL
from pipeline.labelstudio.migrate_plan import DeskPlan, MigrationError, OldDatabase
from pipeline.labelstudio.server import LabelStudioServer


def _ls_package(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages/label_studio/manage.py"))
    if not found:
        raise MigrationError(f"Label Studio is not installed at {venv}; run scripts/setup.sh")
    return found[0].parent


def cut_down(jobs: list[tuple[Path, DeskPlan, dict[str, str]]], admin_id: int | None, work: Path,
             venv: Path) -> dict[Path, dict]:
    """Run :mod:`.migrate_orm` on each ``(copy of the old database, plan, service account)``, one
    process for all (Label Studio's ORM, a throwaway data dir and SECRET_KEY in ``work``), then
    VACUUM each copy. ``{copy: what the script reports}``."""
    if not jobs:
        return {}
    server = LabelStudioServer(work, port=0, media_root=work / "files", venv=venv, credentials=jobs[0][2])
    env = server._env()  # the server's own environment: no telemetry, no stray settings or SECRET_KEY
    for name in ("DATABASE_NAME", "HEARTEX_DATABASE_NAME", "DJANGO_SETTINGS_MODULE", "PYTHONPATH"):  # stock settings
        env.pop(name, None)
    env.update({"RESCUE_LS_PACKAGE": str(_ls_package(venv)), "DJANGO_SETTINGS_MODULE": "core.settings.label_studio",
                "LABEL_STUDIO_BASE_DATA_DIR": str(work), "LABEL_STUDIO_DATABASE_NAME": str(jobs[0][0])})
    args = [{"db": str(db), "projects": plan.projects, "owner_id": plan.owner_id, "admin_id": admin_id,
             "service": service, "keep_authors": plan.keep_authors, "drop_authors": plan.drop_authors}
            for db, plan, service in jobs]
    proc = subprocess.run([str(venv / "bin" / "python"), "-P", migrate_orm.__file__], input=json.dumps(args),
                          env=env, cwd=work, capture_output=True, text=True, timeout=3600, umask=0o077)
    results = {Path(r["db"]): r for line in proc.stdout.splitlines() if line.startswith(migrate_orm.RESULT)
               for r in [json.loads(line[len(migrate_orm.RESULT):])]}
    if proc.returncode != 0 or len(results) != len(jobs):
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise MigrationError(f"cutting the old database down to each desk failed: {tail}")
    for db, _, _ in jobs:
        con = sqlite3.connect(db)
        try:
            con.execute("VACUUM")  # deleted rows must not linger in free pages
            con.execute("PRAGMA journal_mode=DELETE")
        finally:
            con.close()
    return results


# --- checking a desk's copy against the old database ----------------------------------------------

def desk_rows(db: Path, plan: DeskPlan, admin_id: int | None) -> dict[str, list]:
    """The rows that must be identical before and after (authors by e-mail, the admin as the service)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        users = {i: e for i, e in con.execute("SELECT id, email FROM htx_user")}
        def who(uid):
            return SERVICE_EMAIL if uid == admin_id and uid != plan.owner_id else users.get(uid)
        marks = ",".join("?" * len(plan.projects)) or "NULL"
        ps = list(plan.projects)
        drop = set(plan.drop_authors)
        out = {
            "projects": con.execute(f"SELECT id, title, description, label_config, model_version FROM project "
                                    f"WHERE id IN ({marks}) ORDER BY id", ps).fetchall(),
            "tasks": con.execute(f"SELECT id, project_id, data, meta, created_at, inner_id FROM task "
                                 f"WHERE project_id IN ({marks}) ORDER BY id", ps).fetchall(),
            "predictions": con.execute(f"SELECT p.id, p.task_id, p.result, p.model_version, p.created_at FROM prediction p "
                                       f"JOIN task t ON t.id = p.task_id WHERE t.project_id IN ({marks}) ORDER BY p.id",
                                       ps).fetchall(),
            "annotations": [(i, t, who(by), r, c, ca, ua, lt) for i, t, by, r, c, ca, ua, lt in con.execute(
                f"SELECT a.id, a.task_id, a.completed_by_id, a.result, a.was_cancelled, a.created_at, a.updated_at, "
                f"a.lead_time FROM task_completion a JOIN task t ON t.id = a.task_id WHERE t.project_id IN ({marks}) "
                f"ORDER BY a.id", ps) if by not in drop],
            "drafts": [(i, t, who(by), a, r, ca, ua, lt) for i, t, by, a, r, ca, ua, lt in con.execute(
                f"SELECT d.id, d.task_id, d.user_id, d.annotation_id, d.result, d.created_at, d.updated_at, d.lead_time "
                f"FROM tasks_annotationdraft d JOIN task t ON t.id = d.task_id WHERE t.project_id IN ({marks}) "
                f"ORDER BY d.id", ps) if by not in drop],
        }
    finally:
        con.close()
    return out


def check_copy(old_db: Path, new_db: Path, plan: DeskPlan, admin_id: int | None,
               old: OldDatabase) -> dict[str, list]:
    before, after = desk_rows(old_db, plan, admin_id), desk_rows(new_db, plan, admin_id)
    for what in before:
        if before[what] != after[what]:
            raise MigrationError(f"desk of {plan.email}: its {what} differ from the old Label Studio's after "
                                 "the copy (nothing was changed; please report this)")
    con = sqlite3.connect(f"file:{new_db}?mode=ro", uri=True)
    try:
        emails = {e.lower() for (e,) in con.execute("SELECT email FROM htx_user")}
        projects = {i for (i,) in con.execute("SELECT id FROM project")}
    finally:
        con.close()
    wanted = {SERVICE_EMAIL} | {old.users[u].lower() for u in [plan.owner_id, *plan.keep_authors] if u in old.users}
    if emails != wanted or projects != set(plan.projects):
        raise MigrationError(f"desk of {plan.email}: the copy holds users {sorted(emails)} and projects "
                             f"{sorted(projects)}, expected {sorted(wanted)} and {sorted(plan.projects)}")
    return after
