"""Start, stop and check the local Label Studio server.

The server runs from its own virtual environment (``.label-studio/venv``, made by
``scripts/setup.d/30-label-studio.sh``) on 127.0.0.1, with its database and media under the
data root. Admin e-mail, password and API token come from the environment
(``LABEL_STUDIO_USERNAME``, ``LABEL_STUDIO_PASSWORD``, ``LABEL_STUDIO_USER_TOKEN``) and apply
on the first start only (when Label Studio creates its organization). Signup without an invite
link is closed and telemetry is off. The token is never printed.

A desk runs with :data:`DESK_SETTINGS` (Label Studio's settings less its request-log middleware,
the telemetry hook that parses every request body, with its task counters counted in SQL, and
with guards: cross-site writes with the session cookie refused, failed logins limited per account
and address, a logged-out session ended for good) when the installed Label Studio is the
version that module was written for; any other version, or ``RESCUE_LS_STOCK_SETTINGS=1``, runs
Label Studio's settings unchanged. A person's password goes to the server's python on stdin
(:meth:`LabelStudioServer.set_password`), never on a command line.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from pipeline import processes
from pipeline.config import REPO_ROOT
from pipeline.store import make_private_dir

LS_VERSION = "1.23.2"  # the one pin: scripts/setup.d/30-label-studio.sh installs this version
DEFAULT_VENV = REPO_ROOT / ".label-studio" / "venv"
# A migrated empty database made by scripts/setup.d/30-label-studio.sh: copied into a new data
# dir it spares the first start Label Studio's migrations (35 s idle, minutes on a busy machine).
TEMPLATE_DB = REPO_ROOT / ".label-studio" / "template" / "label_studio.sqlite3"
DB_NAME = "label_studio.sqlite3"
CREDENTIAL_VARS = ("LABEL_STUDIO_USERNAME", "LABEL_STUDIO_PASSWORD", "LABEL_STUDIO_USER_TOKEN")
# The only variables a server inherits: Label Studio reads ~160 settings from the environment,
# each as LABEL_STUDIO_X, HEARTEX_X or plain X (DATABASE_NAME, SECRET_KEY, HOST, ...), so any
# other inherited one could make two desks share a database or a key. Its settings are ours alone.
_INHERITED_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME",
                   "PYTHONDONTWRITEBYTECODE")
# Label Studio's settings for a desk (see that module): a folder holding it and the app it adds,
# put on the server's PYTHONPATH so nothing else of ours is importable there.
DESK_SETTINGS = Path(__file__).resolve().parent / "desk_settings" / "rescue_desk_settings.py"
MIN_PASSWORD_LENGTH = 12  # a person's login (not the service account's, which is random)
STOCK_SETTINGS_VAR = "RESCUE_LS_STOCK_SETTINGS"  # =1: run Label Studio's own settings (to compare)
_LISTEN_RE = re.compile(r"Starting development server at http://[^:/]+:(\d+)")


@functools.lru_cache(maxsize=8)  # asked on every start and every pull; an install changes only with set-up
def installed_version(venv: Path) -> str | None:
    """The Label Studio version installed in ``venv`` (its dist-info folder), None when none is."""
    found = sorted(Path(venv).glob("lib/python3*/site-packages/label_studio-*.dist-info"))
    return found[0].name[len("label_studio-"):-len(".dist-info")] if len(found) == 1 else None


def desk_settings_written_for() -> str | None:
    """The Label Studio release :data:`DESK_SETTINGS` was written for (read, not imported: it
    runs only inside Label Studio's venv)."""
    found = re.search(r'^WRITTEN_FOR = "([^"]+)"', DESK_SETTINGS.read_text(), re.M) if DESK_SETTINGS.is_file() else None
    return found.group(1) if found else None


def runs_desk_settings(environ: dict[str, str]) -> bool:
    """Whether a desk process with this environment runs with :data:`DESK_SETTINGS`."""
    return environ.get("DJANGO_SETTINGS_MODULE") == DESK_SETTINGS.stem


def desk_settings_choice(venv: Path = DEFAULT_VENV) -> tuple[bool, str]:
    """Whether a desk started now runs with :data:`DESK_SETTINGS`, and why (``rescue doctor``
    says it): only for the Label Studio that module was written for, and not with
    ``RESCUE_LS_STOCK_SETTINGS=1``."""
    if os.environ.get(STOCK_SETTINGS_VAR, "") not in ("", "0"):
        return False, f"{STOCK_SETTINGS_VAR}={os.environ[STOCK_SETTINGS_VAR]}"
    if not DESK_SETTINGS.is_file():
        return False, f"{DESK_SETTINGS} is missing"
    written_for, installed = desk_settings_written_for(), installed_version(venv)
    if not written_for:
        return False, f"{DESK_SETTINGS.name} names no WRITTEN_FOR version"
    if written_for != installed:
        return False, f"installed {installed or 'no Label Studio'}, written for {written_for}"
    return True, f"Label Studio {installed} = written for {written_for}"


class LabelStudioServerError(RuntimeError):
    """The server could not be started, stopped or reached; the message says why and what to do."""


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    healthy: bool
    pid: int | None
    url: str
    data_dir: Path
    version: str | None = None

    def describe(self) -> str:
        state = "up" if self.healthy else ("starting or unhealthy" if self.running else "down")
        pid = f", pid {self.pid}" if self.pid else ""
        ver = f", Label Studio {self.version}" if self.version else ""
        if self.version and self.version != LS_VERSION:
            ver += f" (WARNING: the pipeline is written for {LS_VERSION}; run scripts/setup.sh)"
        return f"Label Studio {state} at {self.url}{pid}{ver} (data: {self.data_dir})"


class LabelStudioServer:
    """One Label Studio server: ``data_dir`` holds its database, pid file and log."""

    def __init__(self, data_dir: Path, port: int = 8080, media_root: Path | None = None,
                 venv: Path = DEFAULT_VENV, host: str = "127.0.0.1",
                 credentials: dict[str, str] | None = None, extra_env: dict[str, str] | None = None):
        """``credentials``: the first user's ``CREDENTIAL_VARS`` (a desk's service account);
        default: those variables of the environment. ``extra_env``: more settings for the server."""
        self.credentials = dict(credentials) if credentials is not None else None
        self.extra_env = dict(extra_env or {})
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.host = host
        self.media_root = Path(media_root).resolve() if media_root else self.data_dir.parent
        self.venv = Path(venv)
        self.database = self.data_dir / DB_NAME
        self.pid_file = self.data_dir / "server.pid"
        self.log_file = self.data_dir / "server.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- state ---------------------------------------------------------------------------
    def _pid(self) -> int | None:
        """The server's pid while the process it recorded still runs (same start time), else None."""
        rec = processes.recorded(self.pid_file)
        if rec is not None:
            return int(rec["pid"])
        try:  # a bare pid, as desks started before start times were recorded wrote it
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if processes.start_time(pid) is not None else None

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether ``/health`` answers UP. A probe, not a call that needs the server: no answer,
        a server error or an answer of another shape all mean False, and nothing is raised (the
        wait in :meth:`start` says what did not become healthy; the API client raises the
        transient family where the server is needed)."""
        try:
            r = httpx.get(f"{self.url}/health", timeout=timeout)
            return r.status_code == 200 and r.json().get("status") == "UP"
        except (httpx.HTTPError, ValueError, AttributeError):  # AttributeError: JSON, not an object
            return False

    def version(self) -> str | None:
        """The server's Label Studio version; None where it does not tell (a probe, as :meth:`healthy`)."""
        try:
            r = httpx.get(f"{self.url}/api/version", timeout=2.0)
            return (r.json().get("release") or r.json().get("label-studio-os-package", {}).get("version")) \
                if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    def status(self) -> ServerStatus:
        pid = self._pid()
        healthy = pid is not None and self.healthy()
        return ServerStatus(pid is not None, healthy, pid, self.url, self.data_dir,
                            self.version() if healthy else None)

    def _port_free(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((self.host, self.port))
            except OSError:
                return False
        return True

    # --- start / stop --------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        creds = self.credentials if self.credentials is not None else os.environ
        missing = [v for v in CREDENTIAL_VARS if not creds.get(v)]
        if missing:
            raise LabelStudioServerError(
                f"set {', '.join(missing)} in the environment before starting Label Studio "
                "(admin e-mail, password and a 40-hex-character API token)")
        token = creds["LABEL_STUDIO_USER_TOKEN"]
        if not re.fullmatch(r"[0-9a-fA-F]{40}", token):
            raise LabelStudioServerError("LABEL_STUDIO_USER_TOKEN must be 40 hexadecimal characters "
                                         "(e.g. `python -c 'import secrets; print(secrets.token_hex(20))'`)")
        if "@" not in creds["LABEL_STUDIO_USERNAME"]:
            raise LabelStudioServerError("LABEL_STUDIO_USERNAME must be an e-mail address")
        # Nothing else inherited: not another server's credentials, SECRET_KEY (each server keeps
        # its own in its data dir's .env, so a session of one means nothing on another) or database.
        env = {k: v for k, v in os.environ.items() if k in _INHERITED_VARS}
        env.update({v: creds[v] for v in CREDENTIAL_VARS})
        env.update({
            "LABEL_STUDIO_BASE_DATA_DIR": str(self.data_dir),
            "DJANGO_DB": "sqlite",
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
            "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true",
            "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(self.media_root),
            "LATEST_VERSION_CHECK": "false",
            "COLLECT_ANALYTICS": "false",
            "SENTRY_DSN": "",
            "FRONTEND_SENTRY_DSN": "",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
            # Label Studio runs `git describe` from its package folder, which lies inside this
            # checkout, and would show our latest commit in /api/version: no repository for it.
            "GIT_DIR": str(self.data_dir / "no-git"),
            # Label Studio's request log (ContextLogMiddleware, on with its own settings) writes a
            # server id to appdirs' user_config_dir (~/.config/label-studio/user_id) whatever
            # COLLECT_ANALYTICS says; the XDG folders keep that and its cache/data dirs inside
            # the private data dir.
            "XDG_CONFIG_HOME": str(self.data_dir / "xdg" / "config"),
            "XDG_DATA_HOME": str(self.data_dir / "xdg" / "data"),
            "XDG_CACHE_HOME": str(self.data_dir / "xdg" / "cache"),
        })
        env.update(self._settings_env())
        env.update(self.extra_env)
        return env

    def _settings_env(self) -> dict[str, str]:
        """:data:`DESK_SETTINGS` for the version it was written for, all or nothing: {} (Label
        Studio's own settings) for any other version or with ``RESCUE_LS_STOCK_SETTINGS=1``."""
        if not desk_settings_choice(self.venv)[0]:
            return {}
        # the folder is in the repository: its modules are read, never compiled into it
        return {"PYTHONPATH": str(DESK_SETTINGS.parent), "DJANGO_SETTINGS_MODULE": DESK_SETTINGS.stem,
                "PYTHONDONTWRITEBYTECODE": "1"}

    def _template(self) -> Path | None:
        """:data:`TEMPLATE_DB` where this server's Label Studio is the version that made it (the
        default venv's, migrated by set-up): a database migrated by another version is never
        copied (its schema is not that version's); such a server runs its own migrations."""
        if not TEMPLATE_DB.is_file() or installed_version(self.venv) != installed_version(DEFAULT_VENV):
            return None
        return TEMPLATE_DB

    def _executable(self) -> Path:
        exe = self.venv / "bin" / "label-studio"
        if not exe.exists():
            raise LabelStudioServerError(
                f"Label Studio is not installed at {self.venv}; run scripts/setup.sh "
                f"(or bash scripts/setup.d/30-label-studio.sh)")
        return exe

    def start(self, timeout: float = 300.0) -> ServerStatus:
        """Start the server unless it already runs; wait until ``/health`` answers UP."""
        current = self.status()
        if current.healthy:
            return current
        if current.running:  # our process exists but does not answer: wait for it, else say so
            return self._wait(current.pid, timeout)
        if not self._port_free():
            raise LabelStudioServerError(
                f"port {self.port} on {self.host} is taken by another process; stop it or choose "
                f"another port (RESCUE_LABEL_STUDIO_PORT / --port)")
        env = self._env()
        exe = self._executable()
        make_private_dir(self.data_dir)  # its database holds transcripts and answers: owner-only
        self.media_root.mkdir(parents=True, exist_ok=True)
        db = self.database
        if not db.exists() and self._template() is not None:
            tmp_db = db.with_suffix(".tmp")
            shutil.copyfile(TEMPLATE_DB, tmp_db)
            os.chmod(tmp_db, 0o600)
            tmp_db.replace(db)
        for existing in (db, self.log_file, self.pid_file):  # from before files were private
            if existing.exists():
                os.chmod(existing, 0o600)
        proc = processes.spawn(  # what it writes: 0600 / 0700
            [str(exe), "start", "--no-browser", "--internal-host", self.host, "--port", str(self.port),
             "--data-dir", str(self.data_dir)], log_file=self.log_file, cwd=self.data_dir, env=env)
        processes.record(self.pid_file, proc.pid)
        return self._wait(proc.pid, timeout)

    def _listen_port(self) -> int | None:
        try:
            ports = _LISTEN_RE.findall(self.log_file.read_text(errors="replace"))
        except OSError:
            return None
        return int(ports[-1]) if ports else None

    def _wait(self, pid: int, timeout: float) -> ServerStatus:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return self.status()
            if self._pid() is None:
                raise LabelStudioServerError(
                    f"Label Studio exited during start-up; see {self.log_file}")
            port = self._listen_port()
            if port is not None and port != self.port:
                # Label Studio moves to the next free port on its own when its port is busy.
                self.stop()
                raise LabelStudioServerError(
                    f"port {self.port} was taken, Label Studio moved to port {port}; stopped it. "
                    f"Free port {self.port} or choose another port")
            time.sleep(0.5)
        raise LabelStudioServerError(
            f"Label Studio (pid {pid}) did not become healthy at {self.url}/health within "
            f"{timeout:.0f} s; see {self.log_file}")

    def stop(self, timeout: float = 20.0) -> bool:
        """Stop the server (SIGTERM, then SIGKILL); False when it was not running."""
        pid = self._pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return False
        processes.stop(pid, timeout)
        return True

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would; used by the crash tests."""
        pid = self._pid()
        if pid is not None:
            processes.kill(pid)

    def manage(self, *args: str, timeout: float = 120.0) -> str:
        """Run a ``label-studio`` management command against this server's database."""
        proc = subprocess.run([str(self._executable()), *args, "--data-dir", str(self.data_dir)],
                              env=self._env(), cwd=self.data_dir, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise LabelStudioServerError(f"label-studio {args[0]} failed: {' | '.join(tail)}")
        return proc.stdout

    def set_password(self, email: str, password: str, timeout: float = 120.0) -> None:
        """Set a person's login password (Label Studio's API ignores passwords on user creation),
        which ends their sessions (Django's session hash) and replaces their API tokens: the
        legacy token is made anew and every personal access token (JWT) is blacklisted. The
        password goes to Label Studio's python on its stdin: never on a command line
        (``/proc/<pid>/cmdline``) or in an environment."""
        if len(password) < MIN_PASSWORD_LENGTH:
            raise LabelStudioServerError(f"the password for {email} has {len(password)} characters; "
                                         f"a person's password needs at least {MIN_PASSWORD_LENGTH}")
        python = self.venv / "bin" / "python"
        self._executable()  # the same message as every command where Label Studio is missing
        proc = subprocess.run([str(python), "-c", _SET_PASSWORD, email], input=password, env=self._env(),
                              cwd=self.data_dir, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise LabelStudioServerError(f"setting the password of {email} at {self.data_dir} failed: "
                                         f"{' | '.join(tail)}")


# Run by Label Studio's python with the server's settings (argv: the e-mail; stdin: the password).
_SET_PASSWORD = """
import importlib.util, os, sys
sys.path.insert(0, importlib.util.find_spec("label_studio").submodule_search_locations[0])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "label_studio.core.settings.label_studio")
import django
django.setup()
from django.db import transaction
from rest_framework.authtoken.models import Token
from rest_framework_simplejwt.token_blacklist.models import BlacklistedToken, OutstandingToken
from users.models import User

password = sys.stdin.read()
user = User.objects.filter(email=sys.argv[1]).first()
if user is None:
    sys.exit(f"no login {sys.argv[1]} on this server")
with transaction.atomic():
    user.set_password(password)  # changes the session hash: every session of theirs ends
    user.save(update_fields=["password"])
    Token.objects.filter(user=user).delete()
    Token.objects.create(user=user)
    for token in OutstandingToken.objects.filter(user=user):
        BlacklistedToken.objects.get_or_create(token=token)
"""
