"""Every part of Label Studio's internals the pipeline relies on, beyond its public REST API: what
each piece is, the release it was written for, its guard, and what happens without it.

One table, checked by ``tests/annotation/test_labelstudio_internals.py``: every file named exists,
every module that touches an internal is listed, each version guard accepts the pinned release,
and docs/UPGRADING.md has a section for each, in this order. That guide says how to win each one
back after moving the pin (:data:`pipeline.labelstudio.server.LS_VERSION`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Internal:
    name: str                                  # as docs/UPGRADING.md's section heading calls it
    files: tuple[str, ...]                     # relative to the repository root
    relies_on: str                             # what of Label Studio it uses
    written_for: Callable[[], str | None] | None  # the release its guard accepts (None: no version guard)
    guard: str                                 # how it switches itself off
    without_it: str                            # what the pipeline does then
    switch: str | None = None                  # the variable that turns it off by hand


def _desk_settings_release() -> str | None:
    from pipeline.labelstudio.server import desk_settings_written_for
    return desk_settings_written_for()


def _desk_db_release() -> str | None:
    from pipeline.labelstudio import desk_db
    return desk_db.WRITTEN_FOR


INTERNALS: tuple[Internal, ...] = (
    Internal(
        name="The desk settings and the task counters app",
        files=("pipeline/labelstudio/desk_settings/rescue_desk_settings.py",
               "pipeline/labelstudio/desk_settings/rescue_desk_counters.py",
               "pipeline/labelstudio/desk_settings/rescue_desk_guard.py"),
        relies_on="its Django settings (MIDDLEWARE, sessions, CSRF) and tasks.functions.update_tasks_counters",
        written_for=_desk_settings_release,
        guard="used only where the installed release is WRITTEN_FOR; on it, refuses to load if the middleware "
              "or update_tasks_counters' source (sha256) differ",
        without_it="desks run Label Studio's own settings: pushes cost more CPU, no extra login guards",
        switch="RESCUE_LS_STOCK_SETTINGS"),
    Internal(
        name="The pull reading a desk's database",
        files=("pipeline/labelstudio/desk_db.py",),
        relies_on="six tables of its SQLite database, column for column, and its export JSON",
        written_for=_desk_db_release,
        guard="the installed release is WRITTEN_FOR, the desk is on this machine and every table has exactly "
              "the expected columns",
        without_it="pulls export through each desk's API: slower, the same tables",
        switch="RESCUE_PULL_VIA_API"),
    Internal(
        name="The front's bundle patches",
        files=("pipeline/labelstudio/front/patches.py",),
        relies_on="exact texts in its minified editor build",
        written_for=None,  # tied to the build file's sha256 instead (PatchGroup.sha256)
        guard="a group applies only on the pinned /api/version, the file's sha256 and each old text found "
              "exactly once; then all of its replacements, otherwise none",
        without_it="every file is served as built (a long task page costs more CPU)",
        switch="RESCUE_NO_BUNDLE_PATCHES"),
    Internal(
        name="The keys script's hooks",
        files=("pipeline/labelstudio/front/static/keys.js",),
        relies_on="parts of its task page (the task object, choice lists, React's model, the Submit button)",
        written_for=None,  # checked in the browser, hook by hook (HOOKS)
        guard="if any hook is missing the page shows a banner and the keys do nothing at all",
        without_it="annotators use the mouse and Label Studio's own keys"),
    Internal(
        name="The migration from a shared Label Studio",
        files=("pipeline/labelstudio/migrate.py", "pipeline/labelstudio/migrate_plan.py",
               "pipeline/labelstudio/migrate_cut.py", "pipeline/labelstudio/migrate_orm.py"),
        relies_on="its database's tables (SQL) and its Django ORM models of ten apps",
        written_for=None,  # run with the release that made the shared database
        guard="runs only where a shared database waits; refuses before any change when the plan does not hold; "
              "checks every desk row by row before the old folder is renamed",
        without_it="a data root already on desks has nothing to migrate"),
    Internal(
        name="A person's password and tokens",
        files=("pipeline/labelstudio/server.py",),
        relies_on="its Django user model, DRF's token and simplejwt's blacklist models (a script run by its python)",
        written_for=None,  # no public API sets a password: the script fails with a clear error instead
        guard="none: a failure stops `rescue annotators add` with the server's own error",
        without_it="nobody can be given a desk; the maintainer fixes the script (tests/annotation/test_desks.py)"),
    Internal(
        name="The template database",
        files=("pipeline/labelstudio/server.py", "scripts/setup.d/30-label-studio.sh"),
        relies_on="a SQLite database migrated once by setup, copied into each new desk",
        written_for=None,  # tied to the installed release of the default venv, not a constant
        guard="copied only into a desk whose Label Studio is the release that migrated it",
        without_it="a new desk runs Label Studio's migrations on its first start (minutes)"),
)
