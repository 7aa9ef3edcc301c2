"""The migration's first steps (:mod:`.migrate`): a consistent copy of the old shared Label
Studio's database, what the migration needs of it, and the plan - which person's desk gets which
projects, whose other work stays with them (deactivated) or leaves (another adjudicator's).

Every refusal of the plan is a :class:`MigrationError` raised before anything is stopped or
written; the error of the whole migration is defined here, in its lowest module.
"""
from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.labelstudio.desks import SERVICE_EMAIL


@dataclass(frozen=True)
class RoundHistory:
    """What the migration needs of the pipeline's own records (the annotation side builds it:
    :func:`pipeline.annotation.pushed.round_history`); this package reads only Label Studio."""

    annotator_of: Callable[[str], str | None]  # a project key -> its annotator's e-mail (None: not a round project)
    is_adjudication: Callable[[str], bool]     # a project key -> whether it is an adjudication project
    annotated: Mapping[str, str]                # lower e-mail -> why that person annotated a round (records)


class MigrationError(RuntimeError):
    """The migration cannot go on; the message says why and what to do. The old data dir is untouched."""


# --- reading the old database ------------------------------------------------------------------

@dataclass
class OldDatabase:
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


def read_old(db: Path) -> OldDatabase:
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
    return OldDatabase(users, admin, projects, titles, tasks, work)


def snapshot(source: Path, target: Path) -> None:
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
class DeskPlan:
    email: str
    role: str
    projects: list[int]
    owner_id: int | None
    keep_authors: list[int] = field(default_factory=list)   # other authors of work kept (deactivated)
    drop_authors: list[int] = field(default_factory=list)   # their work leaves this desk (other adjudicators)


def _annotated(old: OldDatabase, history: RoundHistory) -> dict[str, str]:
    """lower e-mail -> why that person counts as having annotated a round."""
    out: dict[str, str] = {}
    for key in old.projects.values():
        if who := history.annotator_of(key):
            out.setdefault(who.lower(), f"has the round project {key}")
    for who, why in history.annotated.items():
        out.setdefault(who.lower(), why)
    return out


def plan_desks(old: OldDatabase, adjudicators: Sequence[str],
               history: RoundHistory) -> tuple[list[DeskPlan], list[str]]:
    by_email = {e.lower(): i for i, e in old.users.items()}
    annot: dict[str, list[int]] = {}
    adjudication: list[int] = []
    left: list[str] = []
    for pid, key in sorted(old.projects.items()):
        if who := history.annotator_of(key):
            annot.setdefault(who, []).append(pid)
        elif history.is_adjudication(key):
            adjudication.append(pid)
        else:
            left.append(f"project {pid} {old.titles.get(pid)!r}")
    judges = list(dict.fromkeys(a.strip() for a in adjudicators if a.strip()))
    if adjudication and not judges:
        raise MigrationError(
            f"the old Label Studio has {len(adjudication)} adjudication projects but no adjudicator was named: "
            "run again with `--adjudicator EMAIL` (repeat for each person who adjudicates; each gets the "
            "adjudication projects on their own desk, with their own answers)")
    annotated = _annotated(old, history)
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
    plans: list[DeskPlan] = []
    for email, pids in sorted(annot.items()):
        owner = by_email.get(email.lower())
        authors = {by for pid in pids for _, _, by in old.work.get(pid, []) if by is not None}
        plans.append(DeskPlan(email, "annotator", pids, owner, sorted(authors - {owner, old.admin_id})))
    for judge in judges:
        owner = by_email.get(judge.lower())
        plans.append(DeskPlan(judge, "adjudicator", list(adjudication), owner,
                           drop_authors=sorted(judge_ids - {owner})))
    return plans, left
