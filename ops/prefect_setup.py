"""Prefect for the stack: the variables every stack process and client uses, the server's first
database, and the registration - work pools, the ``gpu`` and ``rescue-push`` concurrency
limits, the zombie automation (a run whose heartbeats stop is marked Crashed: a dead host) and
prefect.yaml's deployments, all idempotent.

``rescue stack register`` (and ``up``) runs the registration as ``python -m ops.prefect_setup``
in the repository: one Python process creates what is missing, then runs ``prefect deploy
--all`` through Prefect's CLI entry point (what the ``prefect`` script does) - one Prefect import
instead of two, ~4 s less per ``stack up``.

The server requires an API auth string (:func:`auth_string`): loopback is no access control on
a shared host, where any local account could otherwise post a deployment that the stack's
worker runs as the operator. The string is made once per data root, kept owner-only in
``stack/prefect-api-auth``, given to the server as ``PREFECT_SERVER_API_AUTH_STRING`` and to
every client (workers, flow runs, the sweeper, the operator's ``prefect`` CLI through ``rescue
stack env``) as ``PREFECT_API_AUTH_STRING``.

The local stack's pool starts each flow run as ONE process running Prefect's engine
(:func:`direct_engine`): ``<the stack's python> -m ops.warm_start prefect.engine``, which runs
``-m prefect.engine`` itself, or, where the stack runs its flow-run starter (unless
``RESCUE_WARM_START=0``), forks it from that process, which has already imported Prefect, the
flows and the diarization libraries (:mod:`ops.warm_start`). A process worker with no command configured starts Prefect's workspace supervisor, a
second Python process that imports Prefect, prepares the workspace and then execs the engine -
~3-4 s more per flow run on 2 cores. The deployments' pull step (the working directory) still
runs, in the engine. ``rescue stack register`` alone (compose's prefect-init, or an operator
against another server) leaves the pool's command as it is: only the stack knows the interpreter
its worker runs.
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ops.processes import StackError, StackPaths, free_server_port, healthy
from pipeline import processes
from pipeline.config import REPO_ROOT
from pipeline.paths import DataRoot
from pipeline.store import make_private_dir

WORK_POOL = "rescue-cpu"          # the process pool the local worker (and compose's cpu-worker) serves
GPU_WORK_POOL = "rescue-gpu"      # compose's GPU workers; no local worker serves it by default
GPU_LIMIT_NAME = "gpu"            # global concurrency limit held around model inference
# A migrated, empty Prefect database made by scripts/setup.d/40-prefect-db.sh: a new data root
# copies it instead of running Prefect's migrations on the server's first start (~11 s here).
PREFECT_TEMPLATE_DB = REPO_ROOT / ".venv" / "prefect-template" / "prefect.db"
# The same database with the stack's registration done (pools, limits, the zombie automation and
# prefect.yaml's deployments), made by the set-up (ops.stack.make_registered_template) and stamped
# with the fingerprint of what registration depends on: a new data root whose fingerprint matches
# starts from it and skips registering (~7 CPU s of imports and API calls on 2 cores).
REGISTERED_TEMPLATE_DB = PREFECT_TEMPLATE_DB.with_name("registered.db")
REGISTERED_STAMP = REGISTERED_TEMPLATE_DB.with_suffix(".fingerprint")
# Flow-run heartbeats and the automation that marks a run Crashed when they stop (a host that
# died leaves its runs Running otherwise). The window must exceed every worker's heartbeat
# interval: Prefect's default is 180 s, the stack's workers send one every HEARTBEAT_S.
HEARTBEAT_S = int(os.environ.get("RESCUE_HEARTBEAT_S", "30"))
ZOMBIE_AFTER_S = int(os.environ.get("RESCUE_ZOMBIE_AFTER_S", "300"))
ZOMBIE_AUTOMATION = "rescue-crash-zombie-flow-runs"


def prefect_port() -> int:
    return int(os.environ.get("RESCUE_PREFECT_PORT", "4200"))


def api_url(port: int | None = None) -> str:
    return f"http://127.0.0.1:{port or prefect_port()}/api"


def auth_file(root: DataRoot) -> Path:
    """Where the data root's Prefect API auth string lives (owner-only)."""
    return root.stack_dir() / "prefect-api-auth"


def auth_string(root: DataRoot) -> str:
    """The data root's Prefect API auth string, made (random, 0600) on first use. Two callers
    racing both read the one that won: the file is created exclusively, then renamed in place."""
    path = auth_file(root)
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if text:
        return text
    make_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    try:
        os.link(tmp, path)  # fails when another caller made it first: theirs is kept
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    text = path.read_text().strip()
    if not text:
        raise StackError(f"{path} is empty; delete it and run `rescue stack up` again "
                         f"(then restart the stack's server and workers)")
    return text


def server_env(root: DataRoot) -> dict[str, str]:
    """What the Prefect server alone gets besides :func:`prefect_env`: the auth string it requires."""
    return {"PREFECT_SERVER_API_AUTH_STRING": auth_string(root)}


def prefect_env(root: DataRoot, port: int | None = None) -> dict[str, str]:
    """The Prefect variables every stack process and every client (CLI, demo) uses, the API auth
    string included (:func:`auth_string`)."""
    paths = StackPaths(root)
    return {
        "PREFECT_HOME": str(paths.home),
        "PREFECT_API_URL": api_url(port),
        "PREFECT_API_AUTH_STRING": auth_string(paths.root),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(paths.results),
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # GPU slots survive a server restart (in-memory leases leak on restart).
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem",
        # The worker asks for new runs every second (default 10 s): a deployment run starts within
        # ~1 s. Each poll costs the server about 30 ms of CPU (3 % of a core per worker, 2 cores).
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_CLI_COLORS": "false",
        # Every client a flow run opens would first ask the server for a CSRF token (refused:
        # the stack's server does not use them; it wants the auth string) and for its version
        # (the stack's processes run the server's own install): about six requests per flow run.
        # The token requests are kept when the operator turns CSRF protection on.
        "PREFECT_CLIENT_CSRF_SUPPORT_ENABLED": os.environ.get("PREFECT_SERVER_CSRF_PROTECTION_ENABLED", "false"),
        "PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED": "false",
        # every flow run says it is alive this often; the zombie automation (ZOMBIE_AUTOMATION)
        # marks a run Crashed when they stop (its host died). Prefect's minimum is 30 s.
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S),
        "RESCUE_DATA_ROOT": str(paths.root),
        "RESCUE_SOURCE_DIR": os.environ.get("RESCUE_SOURCE_DIR", str(REPO_ROOT)),  # prefect.yaml's pull step: code from local disk
    }


def prefect_bin() -> str:
    return str(Path(sys.executable).with_name("prefect"))


# --- the server in several API processes ------------------------------------------------------

# `rescue stack up --api-processes N`: the API in N processes (Prefect's `server start --workers
# N`), its background services (scheduler, automations, event persister...) in one process of
# their own. The processes share the PostgreSQL database and pass events, their causal order,
# concurrency leases and background work through Redis (prefect-redis): nothing of the server's
# state lives in one process's memory.
API_PROCESSES_ENV = "RESCUE_PREFECT_API_PROCESSES"
REDIS_URL_ENV = "PREFECT_REDIS_MESSAGING_URL"  # prefect-redis's own variable: the one place the operator names Redis
DATABASE_URL_ENVS = ("PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL")
REDIS_SERVER_MODULES = {
    "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging",
    "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
    "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
    # GPU slots' leases in Redis: every API process sees them, and they outlive a server restart
    "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
}


def several_processes_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """What the server's API processes and its services process need besides :func:`server_env`
    when the API runs in several processes, after checking what it needs of the operator: the
    database in PostgreSQL (``PREFECT_API_DATABASE_CONNECTION_URL``) and a Redis that answers
    (``PREFECT_REDIS_MESSAGING_URL``; Docket's background work goes there too unless
    ``PREFECT_SERVER_DOCKET_URL`` says otherwise). Raises StackError naming what is missing."""
    environ = os.environ if environ is None else environ
    database = next((environ[k] for k in DATABASE_URL_ENVS if environ.get(k)), "")
    if not database.startswith("postgresql"):
        raise StackError("several API processes need the server's database in PostgreSQL (SQLite serves one "
                         "process): set PREFECT_API_DATABASE_CONNECTION_URL=postgresql+asyncpg://USER@HOST:5432/DB")
    url = environ.get(REDIS_URL_ENV, "")
    if not url:
        raise StackError(f"several API processes pass their events and leases through Redis: set {REDIS_URL_ENV}="
                         "redis://HOST:6379/N (a database number nothing else uses)")
    _ping_redis(url)
    return {**REDIS_SERVER_MODULES, "PREFECT_SERVER_DOCKET_URL": environ.get("PREFECT_SERVER_DOCKET_URL") or url}


def _ping_redis(url: str) -> None:
    """Raise StackError unless the Redis at ``url`` answers; the message names its host, port and
    database, never its password."""
    from urllib.parse import urlsplit

    import redis

    try:
        parts = urlsplit(url)
        where = f"{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"
    except ValueError:
        raise StackError(f"{REDIS_URL_ENV} is not a URL (redis://HOST:6379/N)") from None
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        raise StackError(f"Redis at {where} ({REDIS_URL_ENV}) does not answer: {type(exc).__name__}: {exc}") from None


def prepare_database(env: dict[str, str], log_file: Path, timeout_s: float) -> None:
    """Migrate the server's database and register Prefect's block types in ONE server process (on
    a free port of 127.0.0.1, with the auth string in ``env``; stopped once it answers). API
    processes started together each do both as they start, and on a new database they race
    (duplicate keys); after this they start with neither."""
    port = free_server_port()
    url = f"http://127.0.0.1:{port}/api"
    proc = processes.spawn([prefect_bin(), "server", "start", "--host", "127.0.0.1", "--port", str(port),
                            "--no-services"], log_file=log_file, cwd=REPO_ROOT,
                           env={**os.environ, **env, "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "true",
                                "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "true",
                                "PREFECT_SERVER_UI_ENABLED": "false"})
    try:
        deadline = time.monotonic() + timeout_s
        while not healthy(url):
            if proc.poll() is not None:
                raise StackError(f"preparing the Prefect database: the server exited ({proc.returncode}); "
                                 f"see {log_file}")
            if time.monotonic() > deadline:
                raise StackError(f"preparing the Prefect database: no answer after {timeout_s:.0f} s; see {log_file}")
            time.sleep(0.5)
    finally:
        processes.stop(proc.pid)
        proc.wait()


def api_processes_ready(env: dict[str, str]) -> dict[str, str]:
    """What the API processes get after :func:`prepare_database`: neither step again."""
    return {**env, "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false",
            "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false"}


def registration_fingerprint(engine_python: str) -> str:
    """What the stack's registration depends on: Prefect's version, the workers' interpreter, the
    variables it reads, prefect.yaml and the code (a flow's parameters become its deployment's
    schema). Any change and a new data root registers as before."""
    import hashlib
    from importlib.metadata import version

    h = hashlib.sha256()
    for part in (version("prefect"), str(Path(engine_python).absolute()), os.environ.get("RESCUE_GPU_SLOTS", "1"),
                 str(HEARTBEAT_S), str(ZOMBIE_AFTER_S)):
        h.update(part.encode() + b"\0")
    files = [REPO_ROOT / "prefect.yaml"] + sorted(p for d in ("flows", "ops", "pipeline")
                                                  for p in (REPO_ROOT / d).rglob("*.py"))
    for f in files:
        h.update(str(f.relative_to(REPO_ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def registered_template_matches(engine_python: str | None) -> bool:
    try:
        stamp = REGISTERED_STAMP.read_text().strip()
    except OSError:
        return False
    return bool(engine_python) and REGISTERED_TEMPLATE_DB.is_file() and stamp == registration_fingerprint(engine_python)


def seed_database(paths: StackPaths, engine_python: str | None = None) -> tuple[dict[str, str], bool]:
    """A new server's SQLite database starts as a copy of a template made by the set-up (when
    there is one and the operator did not point Prefect at another database): the registered
    one when its fingerprint matches ``engine_python``'s (:func:`registration_fingerprint`),
    else the migrated, empty one. Returns what the server's environment gets besides, and
    whether the copy is already registered. When the copy was migrated by the installed Prefect
    (its version stamp), the server skips its migration check on this first start (it loads
    every migration script: ~0.5 CPU s); any later start, or an older template, migrates as usual."""
    db = paths.home / "prefect.db"
    if db.exists() or not PREFECT_TEMPLATE_DB.is_file() or os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL"):
        return {}, False
    registered = registered_template_matches(engine_python)
    tmp = db.with_suffix(".tmp")
    shutil.copyfile(REGISTERED_TEMPLATE_DB if registered else PREFECT_TEMPLATE_DB, tmp)
    os.chmod(tmp, 0o600)
    os.replace(tmp, db)
    from importlib.metadata import version

    try:
        stamp = PREFECT_TEMPLATE_DB.with_name("version").read_text().strip()
    except OSError:
        return {}, registered
    return ({"PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false"} if stamp == version("prefect") else {}), registered


def save_registered_template(db: Path, engine_python: str) -> None:
    """Keep ``db`` (a stopped server's database, just registered for ``engine_python``) as the
    registered template, stamped with its fingerprint; the copy goes through SQLite's backup, so
    a write-ahead log left beside it is included."""
    import sqlite3

    tmp = REGISTERED_TEMPLATE_DB.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    src, dst = sqlite3.connect(db), sqlite3.connect(tmp)
    try:
        with dst:
            src.backup(dst)
        dst.execute("pragma journal_mode=delete")  # one self-contained file: copied, and read, alone
    finally:
        src.close()
        dst.close()
    REGISTERED_STAMP.unlink(missing_ok=True)  # a template without its stamp is never used
    os.replace(tmp, REGISTERED_TEMPLATE_DB)
    REGISTERED_STAMP.write_text(registration_fingerprint(engine_python) + "\n")


# --- the zombie automation ------------------------------------------------------------------

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


# --- the flow-run command -------------------------------------------------------------------

ENGINE_COMMANDS = (" -m prefect.engine", " -m ops.warm_start prefect.engine")  # this module's, old and new


def engine_command(python: str) -> str:
    """What the pool's worker runs per flow run: the engine, forked from the stack's flow-run
    starter when it runs (:mod:`ops.warm_start`), else started by ``python`` itself."""
    from prefect.utilities.processutils import command_to_string

    return command_to_string([python, "-m", "ops.warm_start", "prefect.engine"])


def direct_engine(pool: str, python: str) -> str:
    """Make ``pool``'s default flow-run command :func:`engine_command` (one process per flow run,
    not the workspace supervisor plus the engine). A command someone else set (another
    interpreter, a wrapper) is left alone; this module's earlier command is brought up to date.
    Returns what it did: set | unchanged | kept <command>."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolUpdate

    want = engine_command(python)
    with get_client(sync_client=True) as client:
        found = client.read_work_pool(pool)
        template = found.base_job_template
        if not template and found.type == "process":  # created without one: the worker uses the default
            from prefect.workers.process import ProcessWorker

            template = ProcessWorker.get_default_base_job_template()
        prop = template.get("variables", {}).get("properties", {}).get("command")
        if prop is None:  # not a process pool's template
            return "kept (no command variable)"
        have = prop.get("default")
        if have == want:
            return "unchanged"
        if have and not have.endswith(ENGINE_COMMANDS):
            return f"kept {have}"
        prop["default"] = want
        client.update_work_pool(pool, WorkPoolUpdate(base_job_template=template))
    return "set"


# --- registration ---------------------------------------------------------------------------

def register(env: dict[str, str], log=print, *, engine_python: str | None = None) -> None:
    """Work pools, the strict `gpu` limit, the `rescue-push` limit, the zombie automation and
    prefect.yaml's deployments (all idempotent), with ``env`` over this environment: runs
    :func:`main` as its own process in the repository (``prefect deploy`` reads prefect.yaml there).
    ``engine_python``: the interpreter of the stack's worker; its pool then starts each flow run
    as one process (:func:`direct_engine`)."""
    argv = [sys.executable, "-m", "ops.prefect_setup", "--pools", f"{WORK_POOL},{GPU_WORK_POOL}",
            "--gpu-limit", GPU_LIMIT_NAME, "--gpu-slots", os.environ.get("RESCUE_GPU_SLOTS", "1")]
    if engine_python:
        argv += ["--engine-python", engine_python]
    proc = subprocess.run(argv, cwd=REPO_ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise StackError(f"registering work pools / the gpu limit / prefect.yaml's deployments failed:\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    log(f"prefect: pools {WORK_POOL}/{GPU_WORK_POOL}, limits '{GPU_LIMIT_NAME}' and 'rescue-push', "
        f"automation '{ZOMBIE_AUTOMATION}' (no heartbeat for {ZOMBIE_AFTER_S} s -> Crashed), "
        f"deployments from prefect.yaml registered")


def main(argv: list[str] | None = None) -> int:
    """``python -m ops.prefect_setup --pools A,B --gpu-limit gpu --gpu-slots 1``: the registration
    against the server at PREFECT_API_URL, from the repository root (``prefect deploy --all``
    reads ./prefect.yaml). Exit status: prefect deploy's."""
    from flows import ensure_infrastructure

    parser = argparse.ArgumentParser(prog="python -m ops.prefect_setup", description=main.__doc__)
    parser.add_argument("--pools", default=f"{WORK_POOL},{GPU_WORK_POOL}", help="work pools, comma-separated")
    parser.add_argument("--gpu-limit", default=GPU_LIMIT_NAME, help="the GPU concurrency limit's name")
    parser.add_argument("--gpu-slots", type=int, default=1, help="its slots (GPUs)")
    parser.add_argument("--engine-python", default=None,
                        help=f"the interpreter of the {WORK_POOL} worker: each flow run is then one "
                             f"`<python> -m ops.warm_start prefect.engine` process")
    args = parser.parse_args(argv)
    made = ensure_infrastructure([p for p in args.pools.split(",") if p], args.gpu_limit, args.gpu_slots)
    print("created: " + (", ".join(made) or "nothing"), flush=True)
    if args.engine_python:
        print(f"{WORK_POOL} flow-run command: " + direct_engine(WORK_POOL, args.engine_python), flush=True)
    print("zombie automation: " + ensure_zombie_automation(), flush=True)
    from prefect.cli import app

    sys.argv = ["prefect", "--no-prompt", "deploy", "--all"]
    return app()


if __name__ == "__main__":
    sys.exit(main())
