"""Run by Label Studio's own python (its venv), never in the pipeline's: each desk's copy of the
old database cut down with Label Studio's Django ORM. :func:`.migrate_cut.cut_down` starts it as
``python -P migrate_orm.py`` (``-P``: this folder's modules must not shadow Label Studio's own),
with Label Studio's settings in the environment and the jobs (a JSON list) on stdin; for each
job it prints one line, :data:`RESULT` and a JSON object. ``django.setup()``, the slow part (tens
of seconds on a busy machine), runs once for every desk.

The pipeline imports this module only for :data:`RESULT`: Django is imported inside the functions.
"""
import json
import os
import sys

RESULT = "RESCUE-MIGRATION-RESULT "  # starts each job's line on stdout


def cut_down(args: dict) -> dict:
    """One desk's copy (the database Django is connected to) cut down to ``args``' projects and
    people; what the pipeline needs back (uploaded files of the kept projects, tasks touched)."""
    from core.utils.common import temporary_disconnect_all_signals
    from data_export.models import Export
    from data_import.models import FileUpload
    from django.db import connection, transaction
    from io_storages.localfiles.models import LocalFilesExportStorage, LocalFilesImportStorage
    from organizations.models import Organization
    from projects.models import Project
    from rest_framework.authtoken.models import Token
    from tasks.models import Annotation, AnnotationDraft, Task
    from users.models import User

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


def main() -> None:
    sys.path.insert(0, os.environ["RESCUE_LS_PACKAGE"])  # Label Studio's apps are top-level packages there
    import django

    django.setup()
    from django.db import connection

    for job in json.loads(sys.stdin.read()):
        connection.close()
        connection.settings_dict["NAME"] = job["db"]  # each desk's own copy of the old database
        result = cut_down(job)
        if connection.settings_dict["NAME"] != job["db"]:
            raise SystemExit("the database changed under the migration")
        connection.close()
        print(RESULT + json.dumps({"db": job["db"], **result}), flush=True)


if __name__ == "__main__":
    main()
