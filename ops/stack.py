"""The local stack: a Prefect server, a process worker and the desks, all on 127.0.0.1.

``rescue stack up`` starts what is not running yet (idempotent) - including a small sweeper
process that marks flow runs whose process died (a killed worker) as Crashed within
``RESCUE_SWEEP_EVERY_S`` (30 s) instead of leaving them Running - registers the work pools,
the ``gpu`` and ``rescue-push`` concurrency limits, the zombie automation (a run whose
heartbeats stop is marked Crashed: a dead host, which the sweeper cannot see) and
prefect.yaml's deployments; ``down`` stops what this module started (by the pids it
recorded, never by name); ``status`` says what runs where.

Everything lives under ``<data root>/stack/``: the server's own PREFECT_HOME (its SQLite
database), pid files, logs. Task results (the resume cache) live in
``<data root>/prefect-results`` so that a restarted server still finds them.
The desks (one Label Studio per person) are managed by :mod:`pipeline.annotation.desks`; this
module only starts and stops them. Flow runs reach each desk with its service account, read
from the data root: no Label Studio secret is in any process's environment.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import REPO_ROOT, Settings
from pipeline.paths import DataRoot
from pipeline.store import make_private_dir

WORK_POOL = "rescue-cpu"          # the process pool the local worker (and compose's cpu-worker) serves
GPU_WORK_POOL = "rescue-gpu"      # compose's GPU workers; no local worker serves it by default
GPU_LIMIT_NAME = "gpu"            # global concurrency limit held around model inference
SERVER_START_TIMEOUT_S = float(os.environ.get("RESCUE_STACK_START_TIMEOUT_S", "240"))  # slow on a busy 2-core host
# A migrated, empty Prefect database made by scripts/setup.d/40-prefect-db.sh: a new data root
# copies it instead of running Prefect's migrations on the server's first start (~11 s here).
PREFECT_TEMPLATE_DB = REPO_ROOT / ".venv" / "prefect-template" / "prefect.db"
# Flow-run heartbeats and the automation that marks a run Crashed when they stop (a host that
# died leaves its runs Running otherwise). The window must exceed every worker's heartbeat
# interval: Prefect's default is 180 s, the stack's workers send one every HEARTBEAT_S.
HEARTBEAT_S = int(os.environ.get("RESCUE_HEARTBEAT_S", "30"))
ZOMBIE_AFTER_S = int(os.environ.get("RESCUE_ZOMBIE_AFTER_S", "300"))
ZOMBIE_AUTOMATION = "rescue-crash-zombie-flow-runs"


class StackError(RuntimeError):
    """A stack component could not be started/stopped; the message says what to do."""


@dataclass(frozen=True)
class StackPaths:
    """The stack's files inside ``DataRoot.stack_dir()`` and ``DataRoot.prefect_results()``."""

    root: Path

    @property
    def home(self) -> Path:           # PREFECT_HOME of the server and worker
        return DataRoot(self.root).stack_dir() / "prefect-home"

    @property
    def pids(self) -> Path:
        return DataRoot(self.root).stack_dir() / "pids"

    @property
    def logs(self) -> Path:
        return DataRoot(self.root).stack_dir() / "logs"

    @property
    def results(self) -> Path:        # Prefect result storage = the resume cache
        return DataRoot(self.root).prefect_results()

    def pid_file(self, name: str) -> Path:
        return self.pids / f"{name}.json"

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def prefect_port() -> int:
    return int(os.environ.get("RESCUE_PREFECT_PORT", "4200"))


def api_url(port: int | None = None) -> str:
    return f"http://127.0.0.1:{port or prefect_port()}/api"


def prefect_env(data_root: Path, port: int | None = None) -> dict[str, str]:
    """The Prefect variables every stack process and every client (CLI, demo) uses."""
    paths = StackPaths(Path(data_root).resolve())
    return {
        "PREFECT_HOME": str(paths.home),
        "PREFECT_API_URL": api_url(port),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(paths.results),
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # GPU slots survive a server restart (in-memory leases leak on restart).
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem",
        # The worker asks for new runs every second (default 10 s): a deployment run starts within
        # ~1 s. One cheap query per second against a local server.
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_CLI_COLORS": "false",
        # every flow run says it is alive this often; the zombie automation (ZOMBIE_AUTOMATION)
        # marks a run Crashed when they stop (its host died). Prefect's minimum is 30 s.
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S),
        "RESCUE_DATA_ROOT": str(paths.root),
        "RESCUE_SOURCE_DIR": os.environ.get("RESCUE_SOURCE_DIR", str(REPO_ROOT)),  # prefect.yaml's pull step: code from local disk
    }


def _prefect_bin() -> str:
    return str(Path(sys.executable).with_name("prefect"))


# --- pid files: a pid is ours only if its start time matches what we recorded ---------------

def _start_time(pid: int) -> str | None:
    """The process's start time, None when it is gone - or a zombie (killed, not yet reaped by
    the process that started it, e.g. a worker SIGKILLed under a long-lived `up` caller)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]
    except (OSError, IndexError):
        return None


def _read_pid(paths: StackPaths, name: str) -> int | None:
    try:
        rec = json.loads(paths.pid_file(name).read_text())
    except (OSError, ValueError):
        return None
    pid = int(rec["pid"])
    return pid if _start_time(pid) == rec["start_time"] else None


def make_private(paths: StackPaths) -> None:
    """The stack's state is owner-only: ``stack/`` (pids, logs, the Prefect home and its database:
    flow parameters, logs with sample ids) and ``prefect-results/`` (the resume cache holds stage
    results) are 0700 folders; files already there are narrowed to 0600."""
    stack = DataRoot(paths.root).stack_dir()
    for folder in (stack, paths.pids, paths.logs, paths.home, paths.results):
        make_private_dir(folder)
    for folder in (stack, paths.results):
        for p in folder.rglob("*"):
            if p.is_file() and not p.is_symlink():
                os.chmod(p, 0o600)
            elif p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o700)


def _private_file(path: Path):
    """Open ``path`` for appending, created 0600."""
    return open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")


def _write_pid(paths: StackPaths, name: str, pid: int) -> None:
    make_private_dir(paths.pids)
    tmp = paths.pid_file(name).with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "start_time": _start_time(pid)}))
    os.chmod(tmp, 0o600)
    os.replace(tmp, paths.pid_file(name))


def _spawn(paths: StackPaths, name: str, argv: list[str], env: dict[str, str]) -> int:
    make_private_dir(paths.logs)
    log = _private_file(paths.log_file(name))
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env={**os.environ, **env}, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, umask=0o077,  # 0600 / 0700
                            start_new_session=True)  # own process group: `down` stops its children too
    log.close()
    _write_pid(paths, name, proc.pid)
    return proc.pid


def _stop(paths: StackPaths, name: str, timeout: float = 20.0) -> bool:
    pid = _read_pid(paths, name)
    paths.pid_file(name).unlink(missing_ok=True)
    if pid is None:
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if _start_time(pid) is None:
                return True
            time.sleep(0.2)
    return True


def _port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


# --- components ------------------------------------------------------------------------

def _start_server(paths: StackPaths, env: dict[str, str], port: int, log) -> None:
    if _read_pid(paths, "prefect-server") and _healthy(env["PREFECT_API_URL"]):
        log(f"prefect server: already running at {env['PREFECT_API_URL']}")
        return
    if _port_busy(port):
        raise StackError(f"port {port} on 127.0.0.1 is taken by a process this stack did not start; "
                         f"stop it or choose another port with RESCUE_PREFECT_PORT")
    make_private_dir(paths.home)
    _seed_database(paths)
    pid = _spawn(paths, "prefect-server",
                 [_prefect_bin(), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not _healthy(env["PREFECT_API_URL"]):
        if _start_time(pid) is None:
            raise StackError(f"prefect server exited at start; see {paths.log_file('prefect-server')}")
        if time.monotonic() > deadline:
            raise StackError(f"prefect server not healthy after {SERVER_START_TIMEOUT_S:.0f} s; "
                             f"see {paths.log_file('prefect-server')}")
        time.sleep(0.5)
    log(f"prefect server: started at {env['PREFECT_API_URL']} (pid {pid})")


def _seed_database(paths: StackPaths) -> None:
    """A new server's SQLite database starts as a copy of the migrated template (when setup made
    one and the operator did not point Prefect at another database)."""
    db = paths.home / "prefect.db"
    if db.exists() or not PREFECT_TEMPLATE_DB.is_file() or os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL"):
        return
    tmp = db.with_suffix(".tmp")
    shutil.copyfile(PREFECT_TEMPLATE_DB, tmp)
    os.chmod(tmp, 0o600)
    os.replace(tmp, db)


def zombie_automation(within_s: int = ZOMBIE_AFTER_S):
    """Prefect's documented zombie detection ("detect zombie flows"): once a flow run has sent a
    heartbeat, expect another heartbeat or a final state within ``within_s``; if none comes,
    set the run Crashed. Runs on any Prefect 3 server (its triggers service), not only Cloud."""
    from datetime import timedelta

    from prefect.automations import AutomationCore, ChangeFlowRunState, EventTrigger, Posture, ResourceSpecification
    from prefect.client.schemas.objects import StateType

    if within_s <= HEARTBEAT_S:
        raise StackError(f"RESCUE_ZOMBIE_AFTER_S={within_s} must exceed the heartbeat interval "
                         f"(RESCUE_HEARTBEAT_S={HEARTBEAT_S}), or every healthy run is marked Crashed")
    return AutomationCore(
        name=ZOMBIE_AUTOMATION,
        description=f"rescue stack register: a flow run with no heartbeat for {within_s} s is marked Crashed "
                    f"(its worker or host died); run the deployment again, finished work comes from the cache",
        enabled=True,
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=within_s)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=(
            f"no heartbeat for {within_s} s: its worker or host died; run the deployment again - "
            f"finished work is reused from the cache"))],
    )


def ensure_zombie_automation(within_s: int = ZOMBIE_AFTER_S) -> str:
    """Create the zombie automation, or bring the one of that name up to date; never a second
    copy. Returns what it did: created | updated | unchanged."""
    from prefect.client.orchestration import get_client

    want = zombie_automation(within_s)
    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(ZOMBIE_AUTOMATION)
        if not found:
            client.create_automation(want)
            return "created"
        keep, *extra = found
        for dup in extra:  # two registers racing on an older version: keep one
            client.delete_automation(dup.id)
        fields = ("description", "enabled", "trigger", "actions", "actions_on_trigger", "actions_on_resolve")
        if all(getattr(keep, f) == getattr(want, f) for f in fields) and not extra:
            return "unchanged"
        client.update_automation(keep.id, want)
        return "updated"


def register(env: dict[str, str], log=print) -> None:
    """Work pools, the strict `gpu` limit, the zombie automation and prefect.yaml's deployments
    (all idempotent).

    One Python process does both: it creates what is missing, then runs `prefect deploy --all`
    through the CLI's own entry point (the `prefect` script does exactly this) - one Prefect
    import instead of two, ~4 s less per `stack up`."""
    code = ("import sys; from flows import ensure_infrastructure; "
            "made = ensure_infrastructure(sys.argv[1].split(','), sys.argv[2], int(sys.argv[3])); "
            "print('created: ' + (', '.join(made) or 'nothing'), flush=True); "
            "from ops.stack import ensure_zombie_automation; "
            "print('zombie automation: ' + ensure_zombie_automation(), flush=True); "
            "from prefect.cli import app; sys.argv = ['prefect', '--no-prompt', 'deploy', '--all']; sys.exit(app())")
    proc = subprocess.run([sys.executable, "-c", code, f"{WORK_POOL},{GPU_WORK_POOL}", GPU_LIMIT_NAME,
                           os.environ.get("RESCUE_GPU_SLOTS", "1")], cwd=REPO_ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise StackError(f"registering work pools / the gpu limit / prefect.yaml's deployments failed:\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    log(f"prefect: pools {WORK_POOL}/{GPU_WORK_POOL}, limits '{GPU_LIMIT_NAME}' and 'rescue-push', "
        f"automation '{ZOMBIE_AUTOMATION}' (no heartbeat for {ZOMBIE_AFTER_S} s -> Crashed), "
        f"deployments from prefect.yaml registered")


def worker_names(count: int) -> list[str]:
    """The pid-file names of the local workers: ``prefect-worker``, ``prefect-worker-2``, ..."""
    return ["prefect-worker"] + [f"prefect-worker-{i}" for i in range(2, count + 1)]


def _start_worker(paths: StackPaths, env: dict[str, str], log, limit: int, name: str = "prefect-worker") -> None:
    if _read_pid(paths, name):
        log(f"{name}: already running")
        return
    # RESCUE_WORKER_NAME reaches the worker's flow-run processes: each ingest-interview run
    # records where it ran (the batch's summary shows it)
    worker = f"rescue-local-{socket.gethostname()}" + name.removeprefix("prefect-worker")
    pid = _spawn(paths, name,
                 [_prefect_bin(), "worker", "start", "--pool", WORK_POOL, "--type", "process",
                  "--limit", str(limit), "--name", worker], {**env, "RESCUE_WORKER_NAME": worker})
    log(f"{name}: started on pool {WORK_POOL} (pid {pid}, log {paths.log_file(name)})")


def add_worker(data_root: str | Path | None, name: str, limit: int, log=print) -> int:
    """Start one more local worker on ``rescue-cpu`` (``name``: one of :func:`worker_names`, so
    that ``down`` stops it) against the running server; its pid."""
    if name not in worker_names(int(name.rpartition("-")[2]) if name[-1].isdigit() else 1):
        raise StackError(f"worker name {name!r}: use prefect-worker or prefect-worker-N")
    settings = Settings.from_env(data_root)
    paths = StackPaths(settings.data_root.resolve())
    _start_worker(paths, {**prefect_env(paths.root), **worker_env(settings)}, log, limit, name)
    return _read_pid(paths, name)


# --- crashed flow runs: the sweeper ------------------------------------------------------
SWEEP_EVERY_S = float(os.environ.get("RESCUE_SWEEP_EVERY_S", "30"))


def _flow_process_alive(pid: int) -> bool:
    """A live process that runs Prefect (a reused pid running something else counts as dead)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"prefect" in cmdline or b"flows" in cmdline


def sweep(log=print) -> list[str]:
    """Mark flow runs left RUNNING by a process that is gone (a killed worker, a crashed host) as
    Crashed, naming the pid (CANCELLING ones as Cancelled: a cancel was asked for); a rerun of the deployment then resumes from the
    cache. Uses the Prefect server at PREFECT_API_URL. The local stack's server listens on
    127.0.0.1 only, so every flow-run process it knows ran on this host; multi-host stacks use
    Prefect's flow-run heartbeats with the zombie automation (:func:`ensure_zombie_automation`)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled, Crashed

    swept = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
            type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.CANCELLING]))))
        for run in runs:
            raw = str(run.infrastructure_pid or "").rpartition(":")[2]
            if not raw.isdigit() or _flow_process_alive(int(raw)):
                continue  # not started by a worker (in-process run), or still running
            if run.state.type == StateType.CANCELLING:
                # someone asked to cancel it and its process is gone: that is what they asked for
                # (the worker's runner may be about to say so itself; either way it ends Cancelled)
                client.set_flow_run_state(run.id, Cancelled(
                    message=f"cancelled; its process (pid {raw}) is gone"), force=True)
                what = "Cancelled"
            else:
                client.set_flow_run_state(run.id, Crashed(
                    message=f"its process (pid {raw}) is gone: the worker or host died while it ran; "
                            f"run the deployment again - finished work is reused from the cache"), force=True)
                what = "Crashed"
            swept.append(f"{run.name} ({run.id})")
            log(f"sweeper: flow run {run.name} marked {what} (process {raw} is gone)")
    return swept


def sweeper_loop(every: float = SWEEP_EVERY_S) -> None:
    """``rescue stack up`` runs this as its own process: a sweep now (runs left Running by the
    previous stack), then every ``every`` seconds."""
    while True:
        try:
            sweep()
        except Exception as exc:  # noqa: BLE001 - the server may be restarting: try again later
            print(f"sweeper: {type(exc).__name__}: {exc}", flush=True)
        time.sleep(every)


def _start_sweeper(paths: StackPaths, env: dict[str, str], log) -> None:
    if _read_pid(paths, "sweeper"):
        return
    pid = _spawn(paths, "sweeper", [sys.executable, "-c", "from ops.stack import sweeper_loop; sweeper_loop()"], env)
    log(f"sweeper: marks flow runs whose process died as Crashed every {SWEEP_EVERY_S:.0f} s (pid {pid})")


def _desks(settings: Settings):
    from pipeline.annotation.desks import Desks

    return Desks(settings.data_root, settings)


def _label_studio_up(settings: Settings, log) -> None:
    from pipeline.annotation.desks import DeskError

    try:
        _desks(settings).up(log=log)
    except DeskError as exc:
        raise StackError(f"desks: {exc}") from None


def worker_env(settings: Settings) -> dict[str, str]:
    """What flow runs need besides Prefect's variables: how to reach the desks."""
    return {"RESCUE_DESK_URL": settings.desk_url, "RESCUE_DESK_BASE_PORT": str(settings.desk_base_port)}


def up(data_root: str | Path | None = None, *, label_studio: bool = True, worker_limit: int = 4,
       workers: int = 1, log=print) -> dict[str, str]:
    """Start whatever is not running; returns the Prefect client variables. ``workers`` process
    workers poll ``rescue-cpu`` (``worker_limit`` flow runs each): a batch's interviews spread
    over all of them. A batch run waits for its interviews while holding one slot of a worker,
    so the pool needs at least two slots in all."""
    settings = Settings.from_env(data_root)
    paths = StackPaths(settings.data_root.resolve())
    port = prefect_port()
    env = prefect_env(paths.root, port)
    make_private(paths)
    # Label Studio and the Prefect server start side by side (each mostly waits for its own
    # imports); the worker starts while the pools and deployments are registered.
    ls_error: list[BaseException] = []
    ls = threading.Thread(target=_catch(ls_error, _label_studio_up), args=(settings, log), daemon=True)
    if label_studio:
        ls.start()
    _start_server(paths, env, port, log)
    for name in worker_names(workers):
        _start_worker(paths, {**env, **worker_env(settings)}, log, worker_limit, name)
    _start_sweeper(paths, env, log)
    register(env, log)
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


def down(data_root: str | Path | None = None, *, label_studio: bool = True, log=print) -> None:
    settings = Settings.from_env(data_root)
    paths = StackPaths(settings.data_root.resolve())
    extra = sorted(p.stem for p in paths.pids.glob("prefect-worker-*.json")) if paths.pids.is_dir() else []
    for name in ("sweeper", "prefect-worker", *extra, "prefect-server"):
        log(f"{name}: {'stopped' if _stop(paths, name) else 'was not running'}")
    if label_studio:
        stopped = _desks(settings).down()
        log(f"desks: {'stopped ' + ', '.join(stopped) if stopped else 'none was running'}")


def status(data_root: str | Path | None = None) -> dict[str, dict[str, str]]:
    settings = Settings.from_env(data_root)
    paths = StackPaths(settings.data_root.resolve())
    url = api_url()
    out = {
        "prefect-server": {"state": "running" if _read_pid(paths, "prefect-server") and _healthy(url)
                           else "stopped", "url": url.removesuffix("/api")},
        "prefect-worker": {"state": "running" if _read_pid(paths, "prefect-worker") else "stopped",
                           "pool": WORK_POOL},
    }
    desks = _desks(settings)
    for desk, st in desks.status():
        out[f"desk {desk.email}"] = {"state": "running" if st.healthy else ("starting" if st.running else "stopped"),
                                     "role": desk.role, "url": desks.url(desk)}
    return out


# --- command line: `rescue stack ...` (registered in pipeline/cli.py) -------------------

import typer  # noqa: E402

cli = typer.Typer(help="The local stack on 127.0.0.1: Prefect server, worker, the desks (Label Studio per person).",
                  no_args_is_help=True)
_DATA_ROOT = typer.Option(None, help="Data root (default $RESCUE_DATA_ROOT or ./data).")


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
            workers: int = typer.Option(1, min=1, help="Local workers on the rescue-cpu pool.")) -> None:
    """Start the server, register pools/limits/deployments, start workers (idempotent)."""
    env = _or_exit(up, data_root, label_studio=label_studio, worker_limit=worker_limit, workers=workers)
    typer.echo(f"\nPrefect UI: {env['PREFECT_API_URL'].removesuffix('/api')}\n"
               f'Point the prefect CLI at it:  eval "$(rescue stack env)"')


@cli.command("down")
def _cli_down(data_root: Path = _DATA_ROOT,
              label_studio: bool = typer.Option(True, help="Also stop the desks.")) -> None:
    """Stop what `rescue stack up` started (by recorded pid)."""
    _or_exit(down, data_root, label_studio=label_studio)


@cli.command("status")
def _cli_status(data_root: Path = _DATA_ROOT) -> None:
    """What runs where; exit 1 if the Prefect server or worker is down."""
    st = status(data_root)
    for name, info in st.items():
        typer.echo(f"{name:16s} " + "  ".join(f"{k}={v}" for k, v in info.items()))
    if any(st[n]["state"] != "running" for n in ("prefect-server", "prefect-worker")):
        raise typer.Exit(1)


@cli.command("register")
def _cli_register(data_root: Path = _DATA_ROOT) -> None:
    """(Re)register pools, the `gpu` limit and prefect.yaml's deployments with the server at
    PREFECT_API_URL (docker-compose's prefect-init runs this; also after parameter changes)."""
    env = prefect_env(Settings.from_env(data_root).data_root)
    _or_exit(register, {k: v for k, v in env.items() if k not in os.environ})  # compose sets its own


@cli.command("env")
def _cli_env(data_root: Path = _DATA_ROOT) -> None:
    """Print `export` lines for the prefect CLI:  eval "$(rescue stack env)"."""
    env = prefect_env(Settings.from_env(data_root).data_root)
    for key in ("PREFECT_API_URL", "PREFECT_HOME", "PREFECT_RESULTS_LOCAL_STORAGE_PATH"):
        typer.echo(f"export {key}={env[key]}")
