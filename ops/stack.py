"""The local stack: a Prefect server, process workers, the sweeper and the desks, all on
127.0.0.1 - what ``rescue stack up`` / ``down`` / ``status`` / ``register`` / ``env`` do.

``up`` starts what is not running yet (idempotent): the Prefect server, ``workers`` process
workers on ``rescue-cpu``, the flow-run starter their flow runs are forked from
(:mod:`ops.warm_start`: Prefect, the flows and the models' libraries imported once; not with
``RESCUE_WARM_START=0``),
the sweeper (:mod:`ops.sweeper`: flow runs whose process or worker
died are marked Crashed within ``RESCUE_SWEEP_EVERY_S``, 30 s, instead of staying Running or
Pending), the desks and
each desk's front (the address its person opens; one that cannot start is said in one line and
that person's address is the desk's); it registers the work pools, the ``gpu`` and ``rescue-push`` limits, the zombie automation and
prefect.yaml's deployments (:mod:`ops.prefect_setup`). ``down`` stops what ``up`` started, by
the pids it recorded, never by name (:mod:`ops.processes`); ``status`` says what runs where.

Everything lives under ``<data root>/stack/``: the server's own PREFECT_HOME (its SQLite
database), pid files, logs. Task results (the resume cache) live in
``<data root>/prefect-results`` so that a restarted server still finds them. The server
requires the data root's API auth string and every process started here sends it
(:func:`ops.prefect_setup.auth_string`): loopback is no access control on a shared host.
The desks (one Label Studio per person) are managed by :mod:`pipeline.labelstudio.desks`; this
module only starts and stops them. Flow runs reach each desk with its service account, read
from the data root: no Label Studio secret is in any process's environment.

The stack's front: ``up``, ``down``, ``status``, ``add_worker``, ``worker_env``,
``worker_names`` and the ``cli`` (registered by :mod:`ops.cli`) are here; the Prefect settings
and registration are in :mod:`ops.prefect_setup`, the sweep in :mod:`ops.sweeper`.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import typer

from ops.prefect_setup import (API_PROCESSES_ENV, DATABASE_URL_ENVS, WORK_POOL, api_processes_ready, api_url,
                               auth_file, prefect_bin, prefect_env, prefect_port, prepare_database, register,
                               seed_database, server_env, several_processes_env)
from ops import remote, warm_start
from ops.processes import StackError, StackPaths, healthy, make_private, port_busy, read_pid, spawn, start_time, stop
from ops.sweeper import SWEEP_EVERY_S
from pipeline.config import Settings
from pipeline.paths import DataRoot
from pipeline.store import make_private_dir

SERVER_START_TIMEOUT_S = float(os.environ.get("RESCUE_STACK_START_TIMEOUT_S", "240"))  # slow on a busy 2-core host


# --- components ------------------------------------------------------------------------

def open_to_anyone(url: str) -> bool:
    """Whether the Prefect API at ``url`` answers a request without the auth string."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/flows/filter", data=b"{}", method="POST",
                                                           headers={"content-type": "application/json"}),
                                    timeout=5) as resp:
            return resp.status < 400
    except urllib.error.HTTPError as exc:
        return exc.code != 401
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _start_server(paths: StackPaths, env: dict[str, str], port: int, log, api_processes: int = 1,
                  several: dict[str, str] | None = None) -> bool:
    """Start the Prefect server (with ``api_processes`` > 1: the API in that many processes and
    its services in one more, :data:`SERVICES`, with ``several``: what
    ``prefect_setup.several_processes_env`` checked); True when its new database came already
    registered (the set-up's registered template, for this code and interpreter:
    ``prefect_setup.seed_database``)."""
    if read_pid(paths, "prefect-server") and healthy(env["PREFECT_API_URL"]):
        log(f"prefect server: already running at {env['PREFECT_API_URL']}")
        if open_to_anyone(env["PREFECT_API_URL"]):  # started by a version without the auth string
            log("prefect server: WARNING it answers without the API auth string (every local account can "
                "run code as you); restart it: rescue stack down && rescue stack up")
        several_running = paths.pid_file(SERVICES).exists()  # its services in a process of their own
        if several_running and not read_pid(paths, SERVICES):  # they ended; the API did not
            _start_services(paths, {**env, **server_env(paths.root), **(several or several_processes_env())}, log)
        if several_running != (api_processes > 1):
            log(f"prefect server: it runs its API in {'several processes' if several_running else 'one process'}, "
                f"as it was started; to change that: rescue stack down, then rescue stack up --api-processes "
                f"{api_processes}")
        return False
    if port_busy(port):
        raise StackError(f"port {port} on 127.0.0.1 is taken by a process this stack did not start; "
                         f"stop it or choose another port with RESCUE_PREFECT_PORT")
    make_private_dir(paths.home)
    argv = [prefect_bin(), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    if api_processes > 1:
        server = {**env, **server_env(paths.root), **several}
        log("prefect server: migrating its database and registering Prefect's blocks in one process first")
        prepare_database(server, paths.log_file("prefect-prepare"), SERVER_START_TIMEOUT_S)
        server = api_processes_ready(server)
        argv += ["--no-services", "--workers", str(api_processes)]
        if not read_pid(paths, SERVICES):  # they outlived the API processes: kept
            _start_services(paths, server, log)
        registered = False
    else:
        if stop(paths, SERVICES):  # left by a server in several processes: one server runs its own services
            log(f"{SERVICES}: stopped (the server runs its services itself in one process)")
        seeded, registered = seed_database(paths, engine_python=sys.executable)
        server = {**env, **server_env(paths.root), **seeded}
    pid = spawn(paths, "prefect-server", argv, server)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not healthy(env["PREFECT_API_URL"]):
        if start_time(pid) is None:
            raise StackError(f"prefect server exited at start; see {paths.log_file('prefect-server')}")
        if time.monotonic() > deadline:
            raise StackError(f"prefect server not healthy after {SERVER_START_TIMEOUT_S:.0f} s; "
                             f"see {paths.log_file('prefect-server')}")
        time.sleep(0.5)
    log(f"prefect server: started at {env['PREFECT_API_URL']} (pid {pid}"
        + (f", {api_processes} API processes)" if api_processes > 1 else ")"))
    return registered


SERVICES = "prefect-services"  # the server's background services, when its API runs in several processes


def _start_services(paths: StackPaths, env: dict[str, str], log) -> None:
    pid = spawn(paths, SERVICES, [prefect_bin(), "server", "services", "start"], env)
    log(f"{SERVICES}: the scheduler, automations and event persister in a process of their own (pid {pid}, "
        f"log {paths.log_file(SERVICES)})")


def worker_names(count: int) -> list[str]:
    """The pid-file names of the local workers: ``prefect-worker``, ``prefect-worker-2``, ..."""
    return ["prefect-worker"] + [f"prefect-worker-{i}" for i in range(2, count + 1)]


def _start_worker(paths: StackPaths, env: dict[str, str], log, limit: int, name: str = "prefect-worker") -> None:
    if read_pid(paths, name):
        log(f"{name}: already running")
        return
    # RESCUE_WORKER_NAME reaches the worker's flow-run processes: each ingest-interview run
    # records where it ran (the batch's summary shows it)
    worker = f"rescue-local-{socket.gethostname()}" + name.removeprefix("prefect-worker")
    pid = spawn(paths, name,
                [sys.executable, "-m", "ops.cli", "worker", "start", "--pool", WORK_POOL, "--type", "process",
                 "--limit", str(limit), "--name", worker], {**env, "RESCUE_WORKER_NAME": worker})
    log(f"{name}: started on pool {WORK_POOL} (pid {pid}, log {paths.log_file(name)})")


def add_worker(data_root: str | Path | None, name: str, limit: int, log=print) -> int:
    """Start one more local worker on ``rescue-cpu`` (``name``: one of :func:`worker_names`, so
    that ``down`` stops it) against the running server; its pid."""
    if name not in worker_names(int(name.rpartition("-")[2]) if name[-1].isdigit() else 1):
        raise StackError(f"worker name {name!r}: use prefect-worker or prefect-worker-N")
    settings = Settings.from_env(data_root)
    paths = StackPaths(DataRoot(settings.data_root.resolve()))
    _start_worker(paths, {**prefect_env(paths.root), **worker_env(settings)}, log, limit, name)
    return read_pid(paths, name)


STARTER = "flow-run-starter"  # the process the pool's flow runs are forked from (ops.warm_start)


# =0: `up` starts no starter, and the pool's command runs the engine itself. On by default: its
# imports run at idle priority, so they no longer slow the stack's start, and each flow run then
# starts in about a second instead of two to five (benchmarks/README.md, the demo).
WARM_START_ENV = "RESCUE_WARM_START"


def _start_starter(paths: StackPaths, env: dict[str, str], log) -> None:
    if read_pid(paths, STARTER) or os.environ.get(WARM_START_ENV) == "0":
        return
    sock = env[warm_start.SOCKET_ENV]
    pid = spawn(paths, STARTER, [sys.executable, "-m", "ops.warm_start", "serve", "--socket", sock], env)
    log(f"{STARTER}: flow runs start from its imports once they are made (pid {pid}, log {paths.log_file(STARTER)})")


def _start_sweeper(paths: StackPaths, env: dict[str, str], log) -> None:
    if read_pid(paths, "sweeper"):
        return
    pid = spawn(paths, "sweeper", [sys.executable, "-m", "ops.sweeper"], env)
    log(f"sweeper: marks flow runs whose process or worker died as Crashed every {SWEEP_EVERY_S:.0f} s (pid {pid})")


def _desks(settings: Settings):
    from pipeline.labelstudio.desks import Desks

    return Desks(DataRoot(settings.data_root), settings)


def _label_studio_up(settings: Settings, log) -> None:
    from pipeline.labelstudio.desks import DeskError

    desks = _desks(settings)
    try:
        desks.up(log=log)
    except DeskError as exc:
        raise StackError(f"desks: {exc}") from None
    # each person's address is their desk's front; one that cannot start is said in one line
    # (that person's address is then the desk's) and the stack goes on
    desks.fronts_up(log=log)


def worker_env(settings: Settings) -> dict[str, str]:
    """What flow runs need besides Prefect's variables: how to reach the desks, and the stack's
    flow-run starter (:mod:`ops.warm_start`)."""
    stack_dir = DataRoot(settings.data_root.resolve()).stack_dir()
    return {"RESCUE_DESK_URL": settings.desk_url, "RESCUE_DESK_BASE_PORT": str(settings.desk_base_port),
            warm_start.SOCKET_ENV: warm_start.socket_path(stack_dir)}


def up(data_root: str | Path | None = None, *, label_studio: bool = True, worker_limit: int = 4,
       workers: int = 1, api_processes: int | None = None, log=print) -> dict[str, str]:
    """Start whatever is not running; returns the Prefect client variables. ``workers`` process
    workers poll ``rescue-cpu`` (``worker_limit`` flow runs each): a batch's interviews spread
    over all of them. A batch run waits for its interviews while holding one slot of a worker,
    so the pool needs at least two slots in all. ``api_processes`` > 1: the server's API in that
    many processes (PostgreSQL and Redis: :func:`ops.prefect_setup.several_processes_env`);
    default ``RESCUE_PREFECT_API_PROCESSES``, else 1."""
    settings = Settings.from_env(data_root)
    paths = StackPaths(DataRoot(settings.data_root.resolve()))
    port = prefect_port()
    if api_processes is None:
        try:
            api_processes = int(os.environ.get(API_PROCESSES_ENV) or 1)
        except ValueError:
            raise StackError(f"{API_PROCESSES_ENV}={os.environ[API_PROCESSES_ENV]!r}: give a whole number") from None
    several = several_processes_env() if api_processes > 1 else None  # before anything starts: what is missing
    env = prefect_env(paths.root, port)
    make_private(paths)
    # Label Studio and the Prefect server start side by side (each mostly waits for its own
    # imports); the worker starts while the pools and deployments are registered.
    ls_error: list[BaseException] = []
    ls = threading.Thread(target=_catch(ls_error, _label_studio_up), args=(settings, log), daemon=True)
    if label_studio:
        ls.start()
    _start_starter(paths, {**env, **worker_env(settings)}, log)  # its imports beside the server's start
    registered = _start_server(paths, env, port, log, api_processes, several)
    for name in worker_names(workers):
        _start_worker(paths, {**env, **worker_env(settings)}, log, worker_limit, name)
    _start_sweeper(paths, env, log)
    if registered:
        log("prefect: pools, limits, automation and deployments came registered with the new database "
            "(the set-up's template, for this code)")
    else:
        register(env, log, engine_python=sys.executable)  # the workers run this interpreter (prefect_bin)
    if label_studio:
        ls.join()
    if ls_error:
        raise ls_error[0]
    return env


def _catch(errors: list[BaseException], fn):
    def run(*args):
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
            errors.append(exc)
    return run


def make_registered_template(log=print) -> bool:
    """The set-up's step (scripts/setup.d/40-prefect-db.sh): start a stack without desks on a
    throw-away data root and a free port, register, stop it, and keep its database as the
    registered template (``prefect_setup.save_registered_template``). Nothing when the template
    for this code already exists, or there is no migrated template to start from. Returns
    whether it made one."""
    import tempfile

    from ops.prefect_setup import PREFECT_TEMPLATE_DB, registered_template_matches, save_registered_template

    if not PREFECT_TEMPLATE_DB.is_file() or registered_template_matches(sys.executable):
        return False
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    saved = {k: os.environ.get(k) for k in ("RESCUE_PREFECT_PORT", WARM_START_ENV)}
    os.environ.update({"RESCUE_PREFECT_PORT": str(port), WARM_START_ENV: "0"})
    try:
        with tempfile.TemporaryDirectory(prefix="rescue-prefect-template-") as tmp:
            try:
                up(tmp, label_studio=False, log=lambda line: None)
            finally:
                down(tmp, label_studio=False, log=lambda line: None)
            save_registered_template(StackPaths(DataRoot(Path(tmp).resolve())).home / "prefect.db", sys.executable)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    log("setup: a registered template Prefect database (new stacks skip registering while the code is unchanged)")
    return True


def down(data_root: str | Path | None = None, *, label_studio: bool = True, log=print) -> None:
    settings = Settings.from_env(data_root)
    paths = StackPaths(DataRoot(settings.data_root.resolve()))
    extra = sorted(p.stem for p in paths.pids.glob("prefect-worker-*.json")) if paths.pids.is_dir() else []
    for name in ("sweeper", "prefect-worker", *extra, STARTER, "prefect-server", SERVICES):
        log(f"{name}: {'stopped' if stop(paths, name) else 'was not running'}")
    if label_studio:
        stopped = _desks(settings).down()
        log(f"desks: {'stopped ' + ', '.join(stopped) if stopped else 'none was running'}")


def status(data_root: str | Path | None = None) -> dict[str, dict[str, str]]:
    settings = Settings.from_env(data_root)
    paths = StackPaths(DataRoot(settings.data_root.resolve()))
    url = api_url()
    out = {
        "prefect-server": {"state": "running" if read_pid(paths, "prefect-server") and healthy(url)
                           else "stopped", "url": url.removesuffix("/api")},
        "prefect-worker": {"state": "running" if read_pid(paths, "prefect-worker") else "stopped",
                           "pool": WORK_POOL},
    }
    if paths.pid_file(SERVICES).exists():  # a server whose API runs in several processes
        out[SERVICES] = {"state": "running" if read_pid(paths, SERVICES) else "stopped"}
    desks = _desks(settings)
    for desk, st in desks.status():
        out[f"desk {desk.email}"] = {"state": "running" if st.healthy else ("starting" if st.running else "stopped"),
                                     "role": desk.role, "url": desks.url(desk),
                                     "front": desks.front_url(desk) or "none"}
    return out


# --- command line: `rescue stack ...` (registered by ops/cli.py) --------------------------

cli = typer.Typer(help="The local stack on 127.0.0.1: Prefect server, worker, the desks (Label Studio per person).",
                  no_args_is_help=True)
cli.add_typer(remote.cli, name="remote")
_DATA_ROOT = typer.Option(None, help="Data root (default $RESCUE_DATA_ROOT or ./data).")


def _prefect_port_option():
    return typer.Option(None, "--prefect-port", envvar="RESCUE_PREFECT_PORT", show_envvar=True, min=1, max=65535,
                        show_default="4200", help="Port of the Prefect server on 127.0.0.1.")


def _use_prefect_port(port: int | None) -> None:
    """The stack's processes and every later command read the port from the environment."""
    if port is not None:
        os.environ["RESCUE_PREFECT_PORT"] = str(port)


def _or_exit(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except StackError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from None


@cli.command("up")
def _cli_up(data_root: Path = _DATA_ROOT,
            label_studio: bool = typer.Option(True, help="Also start the desks."),
            worker_limit: int = typer.Option(4, help="Flow runs each local worker runs at once."),
            workers: int = typer.Option(1, min=1, help="Local workers on the rescue-cpu pool."),
            api_processes: int = typer.Option(
                1, "--api-processes", min=1, envvar=API_PROCESSES_ENV, show_envvar=True,
                help="Processes serving the Prefect API (more than 1: PREFECT_API_DATABASE_CONNECTION_URL in "
                     "PostgreSQL and PREFECT_REDIS_MESSAGING_URL; docs/SCALING.md)."),
            prefect_port: int = _prefect_port_option()) -> None:
    """Start the server, register pools/limits/deployments, start workers (idempotent). Each
    desk and its front keep the ports they were given when the person was added (`rescue
    annotators add --desk-base-port/--front-base-port`)."""
    _use_prefect_port(prefect_port)
    env = _or_exit(up, data_root, label_studio=label_studio, worker_limit=worker_limit, workers=workers,
                   api_processes=api_processes)
    typer.echo(f"\nPrefect UI: {env['PREFECT_API_URL'].removesuffix('/api')}\n"
               f'Point the prefect CLI at it:  eval "$(rescue stack env)"')


@cli.command("down")
def _cli_down(data_root: Path = _DATA_ROOT,
              label_studio: bool = typer.Option(True, help="Also stop the desks."),
              prefect_port: int = _prefect_port_option()) -> None:
    """Stop what `rescue stack up` started (by recorded pid)."""
    _use_prefect_port(prefect_port)
    _or_exit(down, data_root, label_studio=label_studio)


@cli.command("status")
def _cli_status(data_root: Path = _DATA_ROOT, prefect_port: int = _prefect_port_option()) -> None:
    """What runs where; exit 1 if the Prefect server or worker is down (or the services of an API
    in several processes)."""
    _use_prefect_port(prefect_port)
    st = status(data_root)
    for name, info in st.items():
        typer.echo(f"{name:16s} " + "  ".join(f"{k}={v}" for k, v in info.items()))
    if any(info["state"] != "running" for n, info in st.items()
           if n in ("prefect-server", "prefect-worker", SERVICES)):
        raise typer.Exit(1)


@cli.command("register")
def _cli_register(data_root: Path = _DATA_ROOT) -> None:
    """(Re)register pools, the `gpu` limit and prefect.yaml's deployments with the server at
    PREFECT_API_URL (docker-compose's prefect-init runs this; also after parameter changes)."""
    env = prefect_env(DataRoot(Settings.from_env(data_root).data_root.resolve()))
    _or_exit(register, {k: v for k, v in env.items() if k not in os.environ})  # compose sets its own


@cli.command("prepare-database")
def _cli_prepare_database(data_root: Path = _DATA_ROOT) -> None:
    """Migrate the Prefect server's database (PREFECT_API_DATABASE_CONNECTION_URL) and register
    Prefect's blocks in one server process, so that API processes started together need do
    neither (`up --api-processes` does this itself; docker-compose's prefect-db-init runs it)."""
    if not any(os.environ.get(k) for k in DATABASE_URL_ENVS):
        typer.secho("error: set PREFECT_API_DATABASE_CONNECTION_URL to the server's database", fg="red", err=True)
        raise typer.Exit(1)
    paths = StackPaths(DataRoot(Settings.from_env(data_root).data_root.resolve()))
    make_private_dir(paths.logs)
    # the scratch server on this host's 127.0.0.1 wants the auth string too: compose's, or the data root's
    auth = os.environ.get("PREFECT_SERVER_API_AUTH_STRING") or server_env(paths.root)["PREFECT_SERVER_API_AUTH_STRING"]
    _or_exit(prepare_database, {"PREFECT_SERVER_API_AUTH_STRING": auth}, paths.log_file("prefect-prepare"),
             SERVER_START_TIMEOUT_S)
    typer.echo("prefect database: migrated, Prefect's blocks registered")


@cli.command("env")
def _cli_env(data_root: Path = _DATA_ROOT, prefect_port: int = _prefect_port_option()) -> None:
    """Print `export` lines for the prefect CLI:  eval "$(rescue stack env)". The API auth string
    is read from its owner-only file by the shell that evaluates them, never printed."""
    _use_prefect_port(prefect_port)
    import shlex

    root = DataRoot(Settings.from_env(data_root).data_root.resolve())
    env = prefect_env(root)
    for key in ("PREFECT_API_URL", "PREFECT_HOME", "PREFECT_RESULTS_LOCAL_STORAGE_PATH"):
        typer.echo(f"export {key}={shlex.quote(env[key])}")
    typer.echo(f'export PREFECT_API_AUTH_STRING="$(cat {shlex.quote(str(auth_file(root)))})"')
