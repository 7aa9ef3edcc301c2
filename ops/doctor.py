"""``rescue doctor``: one look at a data root's stack - what is broken, what to do about it.

One line per check, ``ok``, ``off`` or ``BROKEN``, with why and (for what is broken) what to
do; ``--json`` gives the same as one object. The exit code is 1 when something is BROKEN, else
0: an acceleration that is off is a choice or a guard at work, not a fault.

* Label Studio: the installed version (``.label-studio/venv``) against the pin.
* The accelerations tied to Label Studio 1.23.2's internals, each on or off and why, as its own
  guard decides (the same function the code calls, never a second copy of its rule): the desk
  settings (:func:`pipeline.labelstudio.server.desk_settings_choice`; the running desks' own
  settings are read from their process environment), the pull reading a desk's own database
  (:func:`pipeline.labelstudio.desk_db.off`, :meth:`~pipeline.labelstudio.desks.Desks.reached_here`),
  the front's bundle patches (:meth:`pipeline.labelstudio.front.app.Front.check` against a running desk: its
  version, then each patched file's sha256), slim columns and the service worker (their
  ``RESCUE_NO_*`` switches), the keys script (its hook check runs in the browser only) and the
  migration from a shared Label Studio (:func:`pipeline.labelstudio.migrate.nothing_to_migrate`).
* Health: each desk, each desk's front, the Prefect server (and whether it refuses calls
  without the data root's auth string), its workers and the sweeper.
* The models' digests (:func:`pipeline.lineage.model_digest`, what a stage's key records).
* The data root's modes: everything under it is owner-only but a published release
  (``rescue release publish``); anything else group or others may read is counted, first few named.

The switches are read from this process's environment: what ``rescue stack up`` run from the same
shell would start. Nothing is started, stopped or changed.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import typer

from ops.prefect_setup import api_url, auth_file
from ops.processes import StackPaths, read_pid
from ops.stack import SERVICES, STARTER, WARM_START_ENV, _prefect_port_option, _use_prefect_port, open_to_anyone, status as stack_status, worker_names
from pipeline.config import Settings
from pipeline.paths import DataRoot

OK, OFF, BROKEN = "ok", "off", "BROKEN"
SECTIONS = ("label studio", "accelerations", "desks", "fronts", "prefect", "models", "data root")
SHOWN_PATHS = 5  # exposed paths named; the rest are counted
UP = "rescue stack up"


@dataclass(frozen=True)
class Check:
    section: str
    name: str
    state: str  # OK | OFF | BROKEN
    why: str
    todo: str = ""

    def lines(self) -> list[str]:
        out = [f"  {self.state:6s} {self.name}: {self.why}"]
        return out + ([f"         -> {self.todo}"] if self.todo else [])


# --- Label Studio and the accelerations ------------------------------------------------------

def label_studio(venv: Path) -> list[Check]:
    from pipeline.labelstudio.server import LS_VERSION, installed_version

    installed = installed_version(venv)
    if installed is None:
        return [Check("label studio", "version", BROKEN, f"no Label Studio installed in {venv}",
                      "scripts/setup.sh (or bash scripts/setup.d/30-label-studio.sh)")]
    if installed != LS_VERSION:
        return [Check("label studio", "version", OK, f"Label Studio {installed}, not the pinned {LS_VERSION}: "
                      "the accelerations written for the pin stay off")]
    return [Check("label studio", "version", OK, f"Label Studio {installed} (the pinned version)")]


def _process_env(pid: int | None) -> dict[str, str] | None:
    """The environment a running process of ours was started with (/proc); None if unreadable."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes() if pid else None
    except OSError:
        return None
    if raw is None:
        return None
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _desk_settings(venv: Path, running: list[int]) -> Check:
    from pipeline.labelstudio.server import desk_settings_choice, runs_desk_settings

    on, why = desk_settings_choice(venv)
    why = f"on ({why})" if on else f"off: {why}"
    envs = [e for e in map(_process_env, running) if e is not None]
    with_them = sum(map(runs_desk_settings, envs))
    todo = ""
    if envs:
        why += f", in {with_them} of {len(envs)} running desks"
        if with_them != (len(envs) if on else 0):
            todo = "restart the desks to match: rescue label-studio down, then rescue label-studio up"
    return Check("accelerations", "desk settings", OK if on else OFF, why, todo)


def _desk_database(desks, venv: Path) -> Check:
    from pipeline.labelstudio import desk_db

    off = desk_db.off(venv)
    if off is None:
        elsewhere = [d for d in desks.all() if not desks.reached_here(d)]
        if elsewhere:
            off = f"RESCUE_DESK_URL reaches {len(elsewhere)} desk(s) elsewhere ({desks.url(elsewhere[0])})"
    if off is not None:
        return Check("accelerations", "pull from desk databases", OFF, f"off: {off}; pulls ask the desks' API")
    return Check("accelerations", "pull from desk databases", OK,
                 f"on (Label Studio {desk_db.WRITTEN_FOR} = written for {desk_db.WRITTEN_FOR})")


def _bundle_patches(upstream: str | None, fronts: list[int]) -> Check:
    """The front's own start check (:meth:`pipeline.labelstudio.front.app.Front.check`) against a running desk."""
    from pipeline.labelstudio.front.patches import NO_PATCHES_ENV

    return _running_fronts_differ(_patches_checked(upstream), NO_PATCHES_ENV, fronts)


def _patches_checked(upstream: str | None) -> Check:
    from pipeline.labelstudio.front.app import Front

    if upstream is None:
        return Check("accelerations", "bundle patches", OFF, "off: no desk answers to check them against")

    async def check():
        front = Front(upstream)
        try:
            return await front.check()
        finally:
            await front.client.aclose()

    quiet = logging.getLogger("rescue.front")
    was, quiet.disabled = quiet.disabled, True  # the front's own log lines: said here instead
    try:
        report = asyncio.run(check())
    finally:
        quiet.disabled = was
    applied = [o for o in report.outcomes if o.applied]
    if report.outcomes and len(applied) == len(report.outcomes):
        return Check("accelerations", "bundle patches", OK,
                     f"on ({', '.join(o.group for o in applied)}: Label Studio {report.release}, sha256 as written)")
    reasons = "; ".join(f"{o.group}: {o.reason}" for o in report.outcomes if not o.applied)
    return Check("accelerations", "bundle patches", OFF, f"off: {reasons or 'the desk did not say its version'}")


def _running_fronts_differ(check: Check, var: str, fronts: list[int]) -> Check:
    """``check`` with what to do where running fronts were started with ``var`` otherwise."""
    from pipeline.labelstudio.front.comfort import switched_off

    envs = [e for e in map(_process_env, fronts) if e is not None]
    differ = sum(switched_off(var, e) != switched_off(var) for e in envs)
    if not differ:
        return check
    return replace(check, todo=f"{differ} of {len(envs)} running fronts differ: restart them "
                               "(rescue label-studio down, then rescue label-studio up)")


def _front_switches(fronts: list[int]) -> list[Check]:
    from pipeline.labelstudio.front.comfort import KEYS_FILE, NO_SLIM_COLUMNS_ENV, NO_SW_ENV, switched_off

    out = []
    for name, var, on in (("slim columns", NO_SLIM_COLUMNS_ENV, "the task list shows the heading only"),
                          ("service worker", NO_SW_ENV, "the front's build cache in the browser")):
        check = (Check("accelerations", name, OFF, f"off: {var}=1") if switched_off(var)
                 else Check("accelerations", name, OK, f"on ({on})"))
        out.append(_running_fronts_differ(check, var, fronts))
    if KEYS_FILE.is_file():
        out.append(Check("accelerations", "keys script", OK, "on (its hooks are checked in the browser only: "
                         "a banner)"))
    else:
        out.append(Check("accelerations", "keys script", BROKEN, f"{KEYS_FILE} is missing",
                         "restore pipeline/labelstudio/front/static/keys.js from the repository"))
    return out


def _migration(root) -> Check:
    from pipeline.labelstudio.migrate import nothing_to_migrate

    why = nothing_to_migrate(root)
    if why is not None:
        return Check("accelerations", "migration", OK, f"nothing to migrate ({why})")
    return Check("accelerations", "migration", BROKEN,
                 f"the shared Label Studio at {root.label_studio_dir()} is on no desk yet",
                 "rescue label-studio migrate-to-desks [--adjudicator EMAIL]")


# --- health ---------------------------------------------------------------------------------

def desks_and_fronts(desks) -> tuple[list[Check], list[int], list[int], str | None]:
    """The desks' and fronts' checks, the running desks' and fronts' pids and a desk that
    answers (or None)."""
    from pipeline.labelstudio.desks import DeskError

    checks, pids, front_pids, answering = [], [], [], None
    try:
        registered = desks.all()
    except DeskError as exc:
        return [Check("desks", "registry", BROKEN, str(exc))], [], [], None
    if not registered:
        checks.append(Check("desks", "desks", OK, "none yet", "add people: rescue annotators add EMAIL"))
    for desk in registered:
        name = f"{desk.email}'s desk"
        try:
            st = desks.server(desk).status()
        except DeskError as exc:
            checks.append(Check("desks", name, BROKEN, str(exc)))
            continue
        start = f"rescue label-studio up --annotator {desk.email} (or {UP})"
        if st.healthy:
            pids.append(st.pid)
            answering = answering or desks.url(desk)
            checks.append(Check("desks", name, OK, f"up at {st.url} ({desk.role}, Label Studio {st.version})"))
        elif st.running:
            checks.append(Check("desks", name, BROKEN, f"pid {st.pid} runs but {st.url}/health does not answer",
                                f"see {desks.server(desk).log_file}; then {start}"))
        else:
            checks.append(Check("desks", name, BROKEN, f"down ({st.url})", f"start it: {start}"))
        front = desks.front(desk)
        fname = f"{desk.email}'s front"
        if front is None:
            checks.append(Check("fronts", fname, OFF, "no front port yet (given at the next start)", ""))
        elif front.pid() is None:
            checks.append(Check("fronts", fname, BROKEN, f"down ({front.url}): their address is the desk's",
                                f"start it: {start}"))
        elif not front.healthy():
            checks.append(Check("fronts", fname, BROKEN, f"runs at {front.url}, but its desk does not answer "
                                "through it", f"start the desk: {start}" if not st.healthy else
                                f"see {front.log_file}"))
        else:
            checks.append(Check("fronts", fname, OK, f"up at {front.url} -> {front.upstream}"))
        if front is not None and front.pid() is not None:
            front_pids.append(front.pid())
    return checks, pids, front_pids, answering


def prefect(root: DataRoot) -> list[Check]:
    paths = StackPaths(root)
    url = api_url()
    st = stack_status(root)
    server = st["prefect-server"]
    out = []
    if server["state"] == "running":
        if open_to_anyone(url):
            out.append(Check("prefect", "server", BROKEN, f"{url} answers without the API auth string",
                             "restart it: rescue stack down && rescue stack up"))
        else:
            out.append(Check("prefect", "server", OK, f"up at {url}, auth string required"))
    elif read_pid(paths, "prefect-server"):
        out.append(Check("prefect", "server", BROKEN, f"runs but {url}/health does not answer",
                         f"see {paths.log_file('prefect-server')}; rescue stack down && {UP}"))
    else:
        out.append(Check("prefect", "server", BROKEN, f"down ({url})", f"start it: {UP}"))
    if SERVICES in st:  # the API in several processes: Prefect's services run in one of their own
        pid = read_pid(paths, SERVICES)
        out.append(Check("prefect", SERVICES, OK, f"running (pid {pid}): scheduler, automations, events") if pid else
                   Check("prefect", SERVICES, BROKEN, "not running: no automation (the zombie one) acts, no "
                         "event is stored", f"with PREFECT_REDIS_MESSAGING_URL set as before: {UP}; see "
                         f"{paths.log_file(SERVICES)}"))
    secret = auth_file(root)
    if not secret.is_file():
        out.append(Check("prefect", "auth string", BROKEN, f"{secret} is missing", f"{UP} makes it"))
    elif secret.stat().st_mode & 0o077:
        out.append(Check("prefect", "auth string", BROKEN, f"{secret} is readable by others",
                         f"chmod 600 {secret}, then restart the stack (a new string: delete it first)"))
    else:
        out.append(Check("prefect", "auth string", OK, f"{secret} (owner-only)"))
    extra = sorted(p.stem for p in paths.pids.glob("prefect-worker-*.json")) if paths.pids.is_dir() else []
    for name in dict.fromkeys([*worker_names(1), *extra, "sweeper"]):
        pid = read_pid(paths, name)
        out.append(Check("prefect", name, OK, f"running (pid {pid})") if pid else
                   Check("prefect", name, BROKEN, "not running", f"start it: {UP}"))
    pid = read_pid(paths, STARTER)
    out.append(Check("prefect", STARTER, OK, f"running (pid {pid}): flow runs are forked from its imports") if pid
               else Check("prefect", STARTER, OFF, "off: each flow run imports Prefect and the models itself "
                          f"({WARM_START_ENV}=0 was set before {UP}; without it they are forked from one process)"))
    return out


# --- models and modes -------------------------------------------------------------------------

def models(settings: Settings, root: DataRoot) -> list[Check]:
    """Each model under the models dir with its digest (the one stage keys record); the two the
    pipeline loads by default (offline diarization, sentence splitter data) must be there."""
    from pipeline.lineage import DigestCache, model_digest
    from pipeline.media.keys import NLTK_DATA, OFFLINE_DIARIZATION

    cache = DigestCache(root)  # reads the root's digest cache; writes nothing
    folder = settings.models_dir
    names = sorted({OFFLINE_DIARIZATION, NLTK_DATA} | ({p.name for p in folder.iterdir() if not p.name.startswith(".")}
                                                        if folder.is_dir() else set()) - {"downloads"})
    out = [Check("models", "models dir", OK, str(folder)) if folder.is_dir() else
           Check("models", "models dir", BROKEN, f"{folder} is not a folder", "scripts/setup.sh makes it "
                 "(or set RESCUE_MODELS_DIR)")]
    for name in names:
        digest = model_digest(folder / name, cache)
        if digest == "missing":
            out.append(Check("models", name, BROKEN, f"missing at {folder / name}",
                             "scripts/setup.sh (scripts/setup.d/20-models.sh) builds it"))
        else:
            out.append(Check("models", name, OK, f"sha256 {digest[:16]}"))
    return out


def exposed(root: DataRoot) -> list[Path]:
    """What under ``root`` group or others may read (mode bits; links are not followed), but a
    published release (``releases/<version>`` made readable by ``rescue release publish``)."""
    found: list[Path] = []
    releases = root.releases_dir()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        keep = []
        for name in sorted(dirnames):
            st = (here / name).lstat()
            if stat.S_ISLNK(st.st_mode) or (here == releases and st.st_mode & 0o044):
                continue  # a link's own mode means nothing; a published release is readable by design
            if st.st_mode & 0o044:
                found.append(here / name)
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            with contextlib.suppress(OSError):
                st = (here / name).lstat()
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o044:
                    found.append(here / name)
    return found


def data_root(root: DataRoot) -> list[Check]:
    if not root.root.is_dir():
        return [Check("data root", "modes", BROKEN, f"{root} is not a folder", "rescue stack up makes it")]
    found = exposed(root)
    if not found:
        return [Check("data root", "modes", OK, f"owner-only under {root} (published releases aside)")]
    shown = ", ".join(str(p) for p in found[:SHOWN_PATHS]) + (f" and {len(found) - SHOWN_PATHS} more"
                                                              if len(found) > SHOWN_PATHS else "")
    return [Check("data root", "modes", BROKEN, f"{len(found)} path(s) readable by group or others: {shown}",
                  "chmod go-rwx them (files 600, folders 700); publish a release with rescue release publish")]


# --- all of it ------------------------------------------------------------------------------

def run(data_root_path: str | Path | None = None) -> list[Check]:
    """Every check, in :data:`SECTIONS` order."""
    from pipeline.labelstudio.desks import Desks
    from pipeline.labelstudio.server import DEFAULT_VENV

    settings = Settings.from_env(data_root_path)
    root = DataRoot(settings.data_root.resolve())  # built once: every check takes it
    desks = Desks(root, settings)
    try:
        health, pids, front_pids, answering = desks_and_fronts(desks)
        checks = label_studio(DEFAULT_VENV)
        checks += [_desk_settings(DEFAULT_VENV, pids), _desk_database(desks, DEFAULT_VENV),
                   _bundle_patches(answering, front_pids), *_front_switches(front_pids), _migration(root)]
        checks += health + prefect(root) + models(settings, root) + data_root(root)
    finally:
        desks.close()
    return sorted(checks, key=lambda c: SECTIONS.index(c.section))


def doctor_command(
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object: ok and every check."),
    prefect_port: Optional[int] = _prefect_port_option(),
) -> None:
    """Check the stack: Label Studio's version, which accelerations are on or off and why, each
    desk's, front's and Prefect's health, the models' digests and the data root's modes. Exit 1
    when something is BROKEN (each such line says what to do)."""
    _use_prefect_port(prefect_port)
    checks = run(data_root)
    broken = [c for c in checks if c.state == BROKEN]
    if as_json:
        typer.echo(json.dumps({"ok": not broken, "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        section = None
        for check in checks:
            if check.section != section:
                section = check.section
                typer.echo(f"{section}:")
            for line in check.lines():
                typer.echo(line)
        typer.echo(f"{len(broken)} broken" if broken else "nothing broken")
    if broken:
        raise typer.Exit(1)
