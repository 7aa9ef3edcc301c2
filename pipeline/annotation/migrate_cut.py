"""The migration's middle steps (:mod:`.migrate`): each desk's copy of the old database cut down
with Label Studio's own Django ORM (in its own venv, one process for every desk, then VACUUM),
and each cut-down copy checked against the old database row by row before it is put in place.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from pipeline.annotation.desks import SERVICE_EMAIL
from pipeline.annotation.migrate_plan import DeskPlan, MigrationError, OldDatabase
from pipeline.annotation.server import LabelStudioServer


_DJANGO = r"""
import json, os, sys
sys.path.insert(0, os.environ["RESCUE_LS_PACKAGE"])
import django
django.setup()  # the slow part (tens of seconds on a busy machine): once for every desk
from django.db import connection, transaction
from core.utils.common import temporary_disconnect_all_signals
from users.models import User
from projects.models import Project
from tasks.models import Annotation, AnnotationDraft, Task
from organizations.models import Organization
from rest_framework.authtoken.models import Token
from io_storages.localfiles.models import LocalFilesExportStorage, LocalFilesImportStorage
from data_export.models import Export
from data_import.models import FileUpload


def cut_down(args):
    keep_projects = set(args["projects"])
    owner, admin, service = args["owner_id"], args["admin_id"], args["service"]
    keep_authors, drop_authors = set(args["keep_authors"]), set(args["drop_authors"])
    out = {}
    with transaction.atomic(), temporary_disconnect_all_signals():
        Project._base_manager.exclude(id__in=keep_projects).delete()
        # other adjudicators' answers and drafts: theirs go to their own desks
        dropped = Annotation._base_manager.filter(task__project_id__in=keep_projects, completed_by_id__in=drop_authors)
        touched = sorted(set(dropped.values_list("task_id", flat=True)))
        AnnotationDraft._base_manager.filter(task__project_id__in=keep_projects, user_id__in=drop_authors).delete()
        AnnotationDraft._base_manager.filter(annotation__in=dropped).delete()
        dropped.delete()
        users = {owner, admin} | keep_authors
        User._base_manager.exclude(id__in={u for u in users if u is not None}).delete()
        for user in User._base_manager.filter(id__in=keep_authors):
            user.is_active = False
            user.set_unusable_password()
            user.save()
            Token.objects.filter(user=user).delete()
        org = Organization.objects.order_by("id").first()
        if admin is not None and admin != owner:  # the old admin becomes the desk's service account
            svc = User._base_manager.get(id=admin)
            svc.email = svc.username = service["LABEL_STUDIO_USERNAME"]
            svc.is_active = True
        else:  # the old admin is this desk's owner (or there was none): a new service account
            svc = User.objects.create_user(email=service["LABEL_STUDIO_USERNAME"],
                                           password=service["LABEL_STUDIO_PASSWORD"])
            svc.is_staff = svc.is_superuser = True
            if org is not None:
                org.add_user(svc)
        svc.set_password(service["LABEL_STUDIO_PASSWORD"])
        if org is not None:
            svc.active_organization = org
        svc.save()
        Token.objects.filter(user=svc).delete()
        Token.objects.create(user=svc, key=service["LABEL_STUDIO_USER_TOKEN"])
        if org is not None:
            org.reset_token()  # an old invite link opens no desk
        LocalFilesImportStorage._base_manager.all().delete()
        LocalFilesExportStorage._base_manager.all().delete()
        Export._base_manager.all().delete()
        with connection.cursor() as cur:
            names = set(connection.introspection.table_names(cur))
            for table in ("django_session", "django_admin_log", "core_deletedrow", "tasks_tasklock",
                          "token_blacklist_blacklistedtoken", "token_blacklist_outstandingtoken"):
                if table in names:
                    cur.execute(f"DELETE FROM {table}")
        for project in Project._base_manager.filter(id__in=keep_projects):
            ids = list(Task._base_manager.filter(id__in=touched, project=project).values_list("id", flat=True))
            if ids:
                project._update_tasks_counters_and_is_labeled(ids)
        out["uploads"] = [f.file.name for f in FileUpload._base_manager.filter(project_id__in=keep_projects) if f.file]
        out["dropped"] = len(touched)
    return out


for job in json.loads(sys.stdin.read()):
    connection.close()
    connection.settings_dict["NAME"] = job["db"]  # each desk's own copy of the old database
    result = cut_down(job)
    if connection.settings_dict["NAME"] != job["db"]:
        raise SystemExit("the database changed under the migration")
    connection.close()
    print("RESCUE-MIGRATION-RESULT " + json.dumps({"db": job["db"], **result}), flush=True)
"""


def _ls_package(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages/label_studio/manage.py"))
    if not found:
        raise MigrationError(f"Label Studio is not installed at {venv}; run scripts/setup.sh")
    return found[0].parent


def cut_down(jobs: list[tuple[Path, DeskPlan, dict[str, str]]], admin_id: int | None, work: Path,
             venv: Path) -> dict[Path, dict]:
    """Run :data:`_DJANGO` on each ``(copy of the old database, plan, service account)``, one
    process for all (Label Studio's ORM, a throwaway data dir and SECRET_KEY in ``work``), then
    VACUUM each copy. ``{copy: what the script reports}``."""
    if not jobs:
        return {}
    server = LabelStudioServer(work, port=0, media_root=work / "files", venv=venv, credentials=jobs[0][2])
    env = server._env()  # the server's own environment: no telemetry, no stray settings or SECRET_KEY
    for name in ("DATABASE_NAME", "HEARTEX_DATABASE_NAME", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update({"RESCUE_LS_PACKAGE": str(_ls_package(venv)), "DJANGO_SETTINGS_MODULE": "core.settings.label_studio",
                "LABEL_STUDIO_BASE_DATA_DIR": str(work), "LABEL_STUDIO_DATABASE_NAME": str(jobs[0][0])})
    args = [{"db": str(db), "projects": plan.projects, "owner_id": plan.owner_id, "admin_id": admin_id,
             "service": service, "keep_authors": plan.keep_authors, "drop_authors": plan.drop_authors}
            for db, plan, service in jobs]
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", _DJANGO], input=json.dumps(args), env=env,
                          cwd=work, capture_output=True, text=True, timeout=3600, umask=0o077)
    results = {Path(r["db"]): r for line in proc.stdout.splitlines() if line.startswith("RESCUE-MIGRATION-RESULT ")
               for r in [json.loads(line.split(" ", 1)[1])]}
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
