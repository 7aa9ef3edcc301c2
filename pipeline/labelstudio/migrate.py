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

Steps 1-2 are :mod:`.migrate_plan` (the copy, its reading, the plan and its refusals), the
cutting down and the row-by-row check of step 3-4 :mod:`.migrate_cut`; this module runs them in
order, puts each desk in place and brings it up, and reports.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pipeline import store
from pipeline.labelstudio import desks as desks_mod
from pipeline.labelstudio.client import LabelStudioError
from pipeline.labelstudio.desks import SERVICE_EMAIL, Desks, DeskError, media_path
from pipeline.labelstudio.migrate_cut import check_copy, cut_down, desk_rows
from pipeline.labelstudio.migrate_plan import (DeskPlan, MigrationError, OldDatabase, RoundHistory, plan_desks,
                                              read_old, snapshot)
from pipeline.labelstudio.server import DB_NAME, DEFAULT_VENV, LabelStudioServer, LabelStudioServerError
from pipeline.config import Settings
from pipeline.errors import Locked
from pipeline.paths import DataRoot

MIGRATED_PREFIX = "label-studio.migrated-"
SCRATCH = ".migration"            # under desks/: the old database's copy and the per-desk work dirs
DESK_MARKER = "migration.json"    # under desks/<slug>/: from which old database this desk was made
RECORD = "migration.json"         # under desks/: what the migration did
BRING_UP_WORKERS = 4              # desks started at once to set their storages and check them (as Desks.up)


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


def nothing_to_migrate(root: DataRoot) -> str | None:
    """Why the data root has nothing to migrate (done already, or never had a shared Label
    Studio); None when its shared Label Studio's database is there to move to desks."""
    old_db = root.label_studio_dir() / DB_NAME
    if old_db.is_file():
        return None
    done = _migrated_dirs(root)
    return (f"already migrated to desks (the old Label Studio data is kept at {done[-1]})" if done else
            f"no shared Label Studio database at {old_db}")


def migrate_to_desks(root: DataRoot, adjudicators: Sequence[str] = (),
                     log: Callable[[str], None] = print, *, history: RoundHistory, venv: Path = DEFAULT_VENV,
                     timeout: float = 300.0) -> MigrationReport:
    """Move the single shared Label Studio of ``root`` to one desk per person (see the module)."""
    started = time.monotonic()
    report = MigrationReport(root.root)
    old_dir = root.label_studio_dir()
    old_db = old_dir / DB_NAME
    if (noop := nothing_to_migrate(root)) is not None:
        report.noop, report.reason = True, noop
        return report  # the summary says why
    settings = Settings.from_env(root.root)
    desks = Desks(root, settings, venv=venv)
    with _lock(root):
        scratch = store.make_private_dir(root.desks_dir() / SCRATCH)
        copy = scratch / "old.sqlite3"
        try:
            def prepare() -> tuple[str, OldDatabase, list[DeskPlan], list[str]]:
                snapshot(old_db, copy)
                old = read_old(copy)
                return _sha256(old_db), old, *plan_desks(old, adjudicators, history)

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
            results = cut_down(jobs, old.admin_id, store.make_private_dir(scratch / "_django"), venv)
            def one(plan: DeskPlan) -> DeskMove:
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


def _migrate_one(root: DataRoot, desks: Desks, desk: desks_mod.Desk, plan: DeskPlan, old: OldDatabase,
                 copy: Path, source_sha: str, work_db: Path | None, result: dict, timeout: float, log) -> DeskMove:
    """Check one desk's cut-down copy (``work_db``), put it in place, bring the desk up once to set its
    storages and check it through the API; ``work_db`` None: finished by an earlier run, kept."""
    move = DeskMove(plan.email, plan.role, projects=len(plan.projects),
                    kept_authors=[old.email(u) for u in plan.keep_authors])
    ls_dir = store.make_private_dir(root.desk_label_studio_dir(desk.slug))
    db = ls_dir / DB_NAME
    if work_db is None:
        rows = desk_rows(db, plan, old.admin_id)
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
    rows = check_copy(copy, work_db, plan, old.admin_id, old)
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


def _bring_up(root: DataRoot, desks: Desks, desk: desks_mod.Desk, plan: DeskPlan, old: OldDatabase,
              result: dict, ls_dir: Path, timeout: float) -> None:
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
