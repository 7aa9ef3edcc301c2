"""``rescue label-studio migrate-to-desks``: from the single shared Label Studio to one desk per person.

Data roots made before desks have one Label Studio (``DataRoot.label_studio_dir()``) holding every
annotator's round projects (``rescue-project:<round>/<scenario>/<e-mail>``) and the adjudication
projects (``rescue-adjudication:<round>/<scenario>``). The migration moves each person's work to
their own desk (:mod:`.desks`) so that nothing is lost and pulled labels stay identical (the same
annotation ids, results and timestamps):

1. The old server is stopped when it runs; a consistent copy of its database is taken with
   SQLite's backup API into a private scratch folder (``desks/.migration``).
2. The plan is read from that copy: each round project goes to its annotator's desk, every
   adjudication project to each adjudicator's desk (only people named with ``--adjudicator``).
   Refused (:class:`MigrationError`, nothing changed) when adjudication projects exist and nobody
   is named, when a named adjudicator annotated a round (a project, the push record or a label
   table names them), when answers or drafts in an adjudication project are by someone not named,
   or when a person's desk already holds a database this migration did not make.
3. For each person, the copy is cut down with Label Studio's own Django ORM (the Label Studio
   venv's python, a throwaway data dir and SECRET_KEY): every other project is deleted (with its
   tasks, answers, drafts, predictions), every other user too. The old admin becomes the desk's
   service account (e-mail ``desks.SERVICE_EMAIL``, password and legacy token of the desk's
   ``service.json``); any other author of an answer or draft in the person's own projects is
   kept, deactivated and without password or token, so such answers stay (and a pull reports
   them, as before, as not the owner's). Local-files storages, export snapshots, sessions, JWTs,
   lock, admin-log and deleted-row backup rows are removed, the organization's invite token is
   renewed (an old signup link opens no desk). Then ``VACUUM``: deleted rows (other people's
   answers, password hashes, old tokens) leave no trace in free pages.
4. The copy is checked against the old database row by row (projects, tasks, predictions, the
   owner's answers and drafts, with ids and timestamps), placed as the desk's database (a new
   desk makes its own ``SECRET_KEY``: the old ``.env`` is never copied), the tasks' media are
   linked into the desk's file root (:meth:`.desks.Desks.stage_media`), the desk is started, the
   projects get their local storage on that file root through the service account, the API is
   checked (service token, owner, projects, task counts), and the desk is stopped again.
5. Only when every desk is verified, the old data dir is renamed (never deleted) to
   ``label-studio.migrated-<UTC date-time>`` and narrowed to owner-only: everything stays there.
   A second run finds no ``label-studio`` folder and says so (a no-op). An interrupted run can be
   run again: a desk already finished from the same old database (and unchanged since) is kept.

Start the desks afterwards with ``rescue label-studio up``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import store
from pipeline.annotation import desks as desks_mod
from pipeline.annotation.client import LabelStudioError
from pipeline.annotation.desks import SERVICE_EMAIL, Desks, DeskError, media_path
from pipeline.annotation.push import parse_project_key
from pipeline.annotation.pushed import pushed_annotators
from pipeline.annotation.server import DB_NAME, DEFAULT_VENV, LabelStudioServer, LabelStudioServerError
from pipeline.config import Settings
from pipeline.errors import Locked
from pipeline.paths import DataRoot

ADJUDICATION_PREFIX = "rescue-adjudication:"
MIGRATED_PREFIX = "label-studio.migrated-"
SCRATCH = ".migration"            # under desks/: the old database's copy and the per-desk work dirs
DESK_MARKER = "migration.json"    # under desks/<slug>/: from which old database this desk was made
RECORD = "migration.json"         # under desks/: what the migration did
BRING_UP_WORKERS = 4              # desks started at once to set their storages and check them (as Desks.up)


class MigrationError(RuntimeError):
    """The migration cannot go on; the message says why and what to do. The old data dir is untouched."""


class MigrationLocked(MigrationError, Locked):
    """Another migration of the data root holds its lock: transient, it passes when that one ends."""


# --- the report -----------------------------------------------------------------------------

@dataclass
class DeskMove:
    email: str
    role: str
    projects: int = 0
    tasks: int = 0
    annotations: int = 0
    drafts: int = 0
    kept_authors: list[str] = field(default_factory=list)  # other authors kept, deactivated
    reused: bool = False                                    # finished by an earlier, interrupted run


@dataclass
class MigrationReport:
    data_root: Path
    noop: bool = False
    reason: str = ""
    desks: list[DeskMove] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)   # projects of no person (kept in the old dir)
    old_dir: Path | None = None                            # where the old data now is
    seconds: float = 0.0

    def summary(self) -> str:
        if self.noop:
            return f"nothing to migrate: {self.reason}"
        lines = [f"migrated {len(self.desks)} desks in {self.seconds:.0f} s; the old Label Studio data is kept "
                 f"at {self.old_dir} (owner-only; delete it once you no longer need it)"]
        for d in self.desks:
            extra = " (finished by an earlier run)" if d.reused else ""
            if d.kept_authors:
                extra += f"; answers by {', '.join(d.kept_authors)} kept there (deactivated logins)"
            lines.append(f"  {d.email} ({d.role}): {d.projects} projects, {d.tasks} tasks, "
                         f"{d.annotations} answers, {d.drafts} drafts{extra}")
        if self.left_behind:
            lines.append(f"  not moved (no person's project; still in the old data): {', '.join(self.left_behind)}")
        lines.append("start the desks with `rescue label-studio up`")
        return "\n".join(lines)


# --- reading the old database ------------------------------------------------------------------

@dataclass
class _Old:
    """What the migration needs of the old database (read with plain SQL from the copy)."""

    users: dict[int, str]                   # id -> e-mail
    admin_id: int | None                    # the organization's creator: the old admin
    projects: dict[int, str]                # id -> key (last line of the description)
    titles: dict[int, str]
    tasks: dict[int, list[tuple[int, str]]]  # project -> [(task id, media url)]
    work: dict[int, list[tuple[str, int, int | None]]]  # project -> [("annotation"|"draft", id, author)]

    def email(self, user_id: int | None) -> str:
        return self.users.get(user_id, f"user {user_id}") if user_id is not None else "no author"


def _key(description: str | None) -> str:
    lines = (description or "").strip().splitlines()
    return lines[-1].strip() if lines else ""


def _read_old(db: Path) -> _Old:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        users = {i: e for i, e in con.execute("SELECT id, email FROM htx_user")}
        row = con.execute("SELECT created_by_id FROM organization ORDER BY id LIMIT 1").fetchone()
        admin = row[0] if row and row[0] in users else (min(users) if users else None)
        projects, titles = {}, {}
        for pid, title, desc in con.execute("SELECT id, title, description FROM project"):
            projects[pid], titles[pid] = _key(desc), title
        tasks: dict[int, list[tuple[int, str]]] = {p: [] for p in projects}
        for tid, pid, data in con.execute("SELECT id, project_id, data FROM task ORDER BY id"):
            try:
                url = (json.loads(data) or {}).get("media_url") or ""
            except (ValueError, AttributeError):
                url = ""
            tasks.setdefault(pid, []).append((tid, url if isinstance(url, str) else ""))
        work: dict[int, list] = {p: [] for p in projects}
        for aid, pid, by in con.execute("SELECT a.id, t.project_id, a.completed_by_id FROM task_completion a "
                                        "JOIN task t ON t.id = a.task_id"):
            work.setdefault(pid, []).append(("annotation", aid, by))
        for did, pid, by in con.execute("SELECT d.id, t.project_id, d.user_id FROM tasks_annotationdraft d "
                                        "JOIN task t ON t.id = d.task_id"):
            work.setdefault(pid, []).append(("draft", did, by))
    finally:
        con.close()
    return _Old(users, admin, projects, titles, tasks, work)


def _snapshot(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (its backup API), written owner-only."""
    target.unlink(missing_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")
    finally:
        dst.close()
        src.close()
    os.chmod(target, 0o600)


# --- the plan -------------------------------------------------------------------------------

@dataclass
class _Plan:
    email: str
    role: str
    projects: list[int]
    owner_id: int | None
    keep_authors: list[int] = field(default_factory=list)   # other authors of work kept (deactivated)
    drop_authors: list[int] = field(default_factory=list)   # their work leaves this desk (other adjudicators)


def _annotated(root: DataRoot, old: _Old) -> dict[str, str]:
    """lower e-mail -> why that person counts as having annotated a round."""
    out: dict[str, str] = {}
    for key in old.projects.values():
        parsed = parse_project_key(key)
        if parsed:
            out.setdefault(parsed[2].lower(), f"has the round project {key}")
    pushed_dir = root.annotation_dir() / "pushed"
    for path in sorted(pushed_dir.glob("*.json")) if pushed_dir.is_dir() else []:
        name = path.stem
        try:
            for who in pushed_annotators(root, name):
                out.setdefault(who.lower(), f"was given round {name} (annotation/pushed/{path.name})")
            labels = root.labels(name)
        except ValueError:
            continue
        if labels.is_file():
            for who in set(pq.read_table(labels, columns=["annotator"]).column("annotator").to_pylist()):
                if who:
                    out.setdefault(who.lower(), f"has labels in round {name}")
    return out


def _plan(root: DataRoot, old: _Old, adjudicators: Sequence[str]) -> tuple[list[_Plan], list[str]]:
    by_email = {e.lower(): i for i, e in old.users.items()}
    annot: dict[str, list[int]] = {}
    adjudication: list[int] = []
    left: list[str] = []
    for pid, key in sorted(old.projects.items()):
        parsed = parse_project_key(key)
        if parsed:
            annot.setdefault(parsed[2], []).append(pid)
        elif key.startswith(ADJUDICATION_PREFIX):
            adjudication.append(pid)
        else:
            left.append(f"project {pid} {old.titles.get(pid)!r}")
    judges = list(dict.fromkeys(a.strip() for a in adjudicators if a.strip()))
    if adjudication and not judges:
        raise MigrationError(
            f"the old Label Studio has {len(adjudication)} adjudication projects but no adjudicator was named: "
            "run again with `--adjudicator EMAIL` (repeat for each person who adjudicates; each gets the "
            "adjudication projects on their own desk, with their own answers)")
    annotated = _annotated(root, old)
    clash = [f"{j} ({annotated[j.lower()]})" for j in judges if j.lower() in annotated]
    if clash:
        raise MigrationError(f"an adjudicator never annotates a round they adjudicate: {'; '.join(clash)}. "
                             "Name someone else with --adjudicator")
    if SERVICE_EMAIL in {j.lower() for j in judges} | {a.lower() for a in annot}:
        raise MigrationError(f"{SERVICE_EMAIL} is the desks' service account, not a person")
    judge_ids = {by_email[j.lower()] for j in judges if j.lower() in by_email}
    strangers: dict[str, int] = {}
    for pid in adjudication:
        for _, _, by in old.work.get(pid, []):
            if by is not None and by not in judge_ids:
                strangers[old.email(by)] = strangers.get(old.email(by), 0) + 1
    if strangers:
        raise MigrationError(
            "answers or drafts in the adjudication projects are by people not named as adjudicators: "
            + ", ".join(f"{who} ({n})" for who, n in sorted(strangers.items()))
            + ". Name them with --adjudicator if they adjudicate (an annotator of a round cannot), or delete "
              "those answers in the old Label Studio first")
    plans: list[_Plan] = []
    for email, pids in sorted(annot.items()):
        owner = by_email.get(email.lower())
        authors = {by for pid in pids for _, _, by in old.work.get(pid, []) if by is not None}
        plans.append(_Plan(email, "annotator", pids, owner, sorted(authors - {owner, old.admin_id})))
    for judge in judges:
        owner = by_email.get(judge.lower())
        plans.append(_Plan(judge, "adjudicator", list(adjudication), owner,
                           drop_authors=sorted(judge_ids - {owner})))
    return plans, left


# --- cutting one copy down (Label Studio's ORM, in its own venv) -------------------------------

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


def _cut_down(jobs: list[tuple[Path, _Plan, dict[str, str]]], admin_id: int | None, work: Path,
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

def _rows(db: Path, plan: _Plan, admin_id: int | None) -> dict[str, list]:
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


def _check_copy(old_db: Path, new_db: Path, plan: _Plan, admin_id: int | None, old: _Old) -> dict[str, list]:
    before, after = _rows(old_db, plan, admin_id), _rows(new_db, plan, admin_id)
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


# --- the migration ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _lock(root: DataRoot) -> Iterator[None]:
    store.make_private_dir(root.desks_dir())
    with open(os.open(root.desks_dir() / "migration.lock", os.O_RDWR | os.O_CREAT, 0o600)) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MigrationLocked("another migration of this data root is running (it holds "
                                  f"{root.desks_dir() / 'migration.lock'}); try again once it has finished") from None
        yield


def _sha256(path: Path) -> str:
    return store.sha256_file(path)


def _migrated_dirs(root: DataRoot) -> list[Path]:
    return sorted(p for p in root.root.glob(f"{MIGRATED_PREFIX}*") if p.is_dir())


def migrate_to_desks(data_root: str | os.PathLike, adjudicators: Sequence[str] = (),
                     log: Callable[[str], None] = print, *, venv: Path = DEFAULT_VENV,
                     timeout: float = 300.0) -> MigrationReport:
    """Move the single shared Label Studio of ``data_root`` to one desk per person (see the module)."""
    started = time.monotonic()
    root = DataRoot(data_root)
    report = MigrationReport(root.root)
    old_dir = root.label_studio_dir()
    old_db = old_dir / DB_NAME
    if not old_db.is_file():
        done = _migrated_dirs(root)
        report.noop = True
        report.reason = (f"already migrated to desks (the old Label Studio data is kept at {done[-1]})" if done else
                         f"no shared Label Studio database at {old_db}")
        return report  # the summary says why
    settings = Settings.from_env(root.root)
    desks = Desks(root, settings, venv=venv)
    with _lock(root):
        scratch = store.make_private_dir(root.desks_dir() / SCRATCH)
        copy = scratch / "old.sqlite3"
        try:
            def prepare() -> tuple[str, _Old, list[_Plan], list[str]]:
                _snapshot(old_db, copy)
                old = _read_old(copy)
                return _sha256(old_db), old, *_plan(root, old, adjudicators)

            source_sha, old, plans, report.left_behind = prepare()  # refusals come before anything is stopped
            old_server = LabelStudioServer(old_dir, port=settings.label_studio_port, media_root=root.root, venv=venv)
            if old_server.status().running:
                log(f"stopping the shared Label Studio (pid {old_server.status().pid}): the desks replace it")
                old_server.stop()
                source_sha, old, plans, report.left_behind = prepare()  # its last state
            log(f"old Label Studio: {len(old.projects)} projects, {len(old.users)} users; "
                f"{len(plans)} desks to make ({sum(p.role == 'annotator' for p in plans)} annotators, "
                f"{sum(p.role == 'adjudicator' for p in plans)} adjudicators)")
            for line in report.left_behind:
                log(f"not moved (no person's project): {line}")
            # every desk registered and free before anything is written into one
            registered = {}
            for plan in plans:
                try:
                    desk = desks.register(plan.email, plan.role)
                except DeskError as exc:
                    raise MigrationError(f"{plan.email}: {exc}") from None
                registered[plan.email] = desk
                ls_dir = root.desk_label_studio_dir(desk.slug)
                if (ls_dir / DB_NAME).exists() and not _finished(root, desk.slug, source_sha, ls_dir / DB_NAME):
                    raise MigrationError(
                        f"{plan.email} already has a desk with its own Label Studio database ({ls_dir / DB_NAME}); "
                        "the migration would overwrite it. Stop that desk (`rescue label-studio down -a "
                        f"{plan.email}`) and move its folder {root.desk_dir(desk.slug)} away (keep it) to migrate")
            jobs, works = [], {}
            for plan in plans:
                desk = registered[plan.email]
                db = root.desk_label_studio_dir(desk.slug) / DB_NAME
                if db.exists() and _finished(root, desk.slug, source_sha, db):
                    continue
                work_db = store.make_private_dir(scratch / desk.slug) / DB_NAME
                shutil.copyfile(copy, work_db)
                os.chmod(work_db, 0o600)
                jobs.append((work_db, plan, desks.service(desk)))
                works[plan.email] = work_db
            if jobs:
                log(f"cutting the old database down to each of {len(jobs)} desks (Label Studio's own code; "
                    "a minute or more)")
            results = _cut_down(jobs, old.admin_id, store.make_private_dir(scratch / "_django"), venv)
            def one(plan: _Plan) -> DeskMove:
                work_db = works.get(plan.email)
                return _migrate_one(root, desks, registered[plan.email], plan, old, copy, source_sha, work_db,
                                    results.get(work_db, {}), timeout, log)

            with ThreadPoolExecutor(max(1, min(BRING_UP_WORKERS, len(plans)))) as pool:  # desks start side by side
                report.desks = list(pool.map(one, plans))
            # every desk verified: the old data dir goes out of the way, kept whole and private
            target = root.root / f"{MIGRATED_PREFIX}{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
            old_dir.rename(target)
            store.make_private_dir(target)
            report.old_dir = target
            report.seconds = time.monotonic() - started
            store.atomic_write_text(root.desks_dir() / RECORD, store.canonical_json({
                "migrated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "old_database_sha256": source_sha, "old_data": target.name,
                "desks": [d.__dict__ for d in report.desks], "left_behind": report.left_behind}))
            log(f"the old Label Studio data is kept at {target}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)  # copies of everyone's data: never left behind
            desks.close()
    return report


def _finished(root: DataRoot, desk_slug: str, source_sha: str, db: Path) -> bool:
    """The desk's database was made by a migration from this same old database and is unchanged since."""
    try:
        marker = json.loads((root.desk_dir(desk_slug) / DESK_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("source") == source_sha and marker.get("database") == _sha256(db)


def _migrate_one(root: DataRoot, desks: Desks, desk: desks_mod.Desk, plan: _Plan, old: _Old, copy: Path,
                 source_sha: str, work_db: Path | None, result: dict, timeout: float, log) -> DeskMove:
    """Check one desk's cut-down copy (``work_db``), put it in place, bring the desk up once to set its
    storages and check it through the API; ``work_db`` None: finished by an earlier run, kept."""
    move = DeskMove(plan.email, plan.role, projects=len(plan.projects),
                    kept_authors=[old.email(u) for u in plan.keep_authors])
    ls_dir = store.make_private_dir(root.desk_label_studio_dir(desk.slug))
    db = ls_dir / DB_NAME
    if work_db is None:
        rows = _rows(db, plan, old.admin_id)
        move.tasks, move.annotations, move.drafts = len(rows["tasks"]), len(rows["annotations"]), len(rows["drafts"])
        move.reused = True
        log(f"desk of {plan.email}: already migrated by an earlier run; kept")
        return move
    if plan.owner_id is None:
        log(f"note: {plan.email} has no login in the old Label Studio; give them one with "
            f"`rescue annotators add {plan.email}{' --adjudicator' if plan.role == 'adjudicator' else ''}`")
    for uid in plan.keep_authors:
        log(f"note: {old.email(uid)} answered or drafted in {plan.email}'s projects; kept there as a deactivated "
            "login (never counted by a pull)")
    rows = _check_copy(copy, work_db, plan, old.admin_id, old)
    move.tasks, move.annotations, move.drafts = len(rows["tasks"]), len(rows["annotations"]), len(rows["drafts"])
    # into place: the desk makes its own SECRET_KEY (.env) on its first start
    tmp = ls_dir / f".{DB_NAME}.migrating"
    shutil.copyfile(work_db, tmp)
    os.chmod(tmp, 0o600)
    tmp.replace(db)
    shutil.rmtree(work_db.parent, ignore_errors=True)
    try:
        _bring_up(root, desks, desk, plan, old, result, ls_dir, timeout)
    except BaseException:
        db.unlink(missing_ok=True)  # a fresh copy of the old data, unused: a re-run makes it again
        raise
    store.atomic_write_text(root.desk_dir(desk.slug) / DESK_MARKER, store.canonical_json(
        {"source": source_sha, "database": _sha256(db), "projects": plan.projects}))
    log(f"desk of {plan.email} ({plan.role}): {len(plan.projects)} projects, {move.tasks} tasks, "
        f"{move.annotations} answers, {move.drafts} drafts; verified")
    return move


def _bring_up(root: DataRoot, desks: Desks, desk: desks_mod.Desk, plan: _Plan, old: _Old, result: dict,
              ls_dir: Path, timeout: float) -> None:
    """Uploads and media into the desk, its local storages set, its API checked; the desk stopped again."""
    for name in result.get("uploads") or []:  # uploaded task files of the kept projects (rare)
        src, dst = root.label_studio_upload(name), root.desk_label_studio_upload(desk.slug, name)
        if src.is_file():
            store.make_private_dir(dst.parent)
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o600)
    # media into the desk's own file root, the storages onto it, and a check through the API
    server = desks.server(desk)
    try:
        server.start(timeout=timeout)
        client = desks.client(plan.email)
        if client.whoami().get("email", "").lower() != SERVICE_EMAIL:
            raise MigrationError(f"desk of {plan.email}: the service account's token does not log in as {SERVICE_EMAIL}")
        live = {p.id: p for p in client.projects()}
        if set(live) != set(plan.projects):
            raise MigrationError(f"desk of {plan.email} lists projects {sorted(live)}, expected {sorted(plan.projects)}")
        for pid in plan.projects:
            urls = [u for _, u in old.tasks.get(pid, []) if media_path(u)]
            for folder in desks.stage_media(plan.email, urls):
                client.add_local_storage(pid, str(folder))
            if len(client.tasks(pid)) != len(old.tasks.get(pid, [])):
                raise MigrationError(f"desk of {plan.email}: project {pid} shows another number of tasks than before")
        if plan.owner_id is not None and desks.owner_id(plan.email) is None:
            raise MigrationError(f"desk of {plan.email}: their login is missing after the copy")
    except (LabelStudioServerError, LabelStudioError, DeskError) as exc:
        raise MigrationError(f"desk of {plan.email}: {exc}") from None
    finally:
        server.stop()
