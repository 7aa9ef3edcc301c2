"""Desks: one Label Studio server per person, so that a blind round is blind by construction.

Label Studio Community lets every login of a server read and write every project of it (no
roles, no per-project permissions), and lets any login add a local-files storage on any folder
of its file root. So each person - annotator or adjudicator - gets a server of their own, a
*desk*, and a desk holds only its owner's work:

* its own data dir (``DataRoot.desk_label_studio_dir``: SQLite database, the ``SECRET_KEY`` in
  ``.env``, log), its own port on 127.0.0.1, started from the template database;
* its own file root (``DataRoot.desk_files``, Label Studio's local-files document root): hard
  links (or copies) of the media of its own tasks, at the same relative paths as under the data
  root, and nothing else;
* a service account, the server's first user, which only the pipeline uses: its e-mail,
  password and API token live in ``DataRoot.desk_service`` (owner-only, outside the file root);
* the person's own login, made by ``rescue annotators add``. Signup without a link is closed.

Roles are explicit (``annotator`` or ``adjudicator``) and kept in the registry
(``DataRoot.desks_registry``, owner-only), with each desk's port, its front's port (the comfort
layer a person opens, :mod:`.fronts`) and a random site name that names neither the person nor
the role (a public host name of the TLS recipe, ``{site}`` in ``RESCUE_DESK_PUBLIC_URL``). A pull counts only answers by a desk's owner
(:mod:`.pull`); whatever else a desk holds is reported, never counted.

Push, pull, status and adjudication take a :class:`DeskAccess`: for each person, a client of
their desk, the owner's user id there and a way to place media in their file root.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

import httpx

from pipeline import store
from pipeline.labelstudio import desk_db
from pipeline.labelstudio.client import LabelStudioClient, LabelStudioFault, LabelStudioUnavailable
from pipeline.labelstudio.fronts import FrontError, FrontProcess
from pipeline.labelstudio.server import (DEFAULT_VENV, MIN_PASSWORD_LENGTH, LabelStudioServer, LabelStudioServerError,
                                        ServerStatus)
from pipeline.config import Settings
from pipeline.paths import DataRoot

ROLES = ("annotator", "adjudicator")
SERVICE_EMAIL = "pipeline@rescue.invalid"  # the service account's login on every desk
MEDIA_URL_PREFIX = "/data/local-files/?d="  # Label Studio's URL of a file under its file root


class DeskError(RuntimeError):
    """A desk could not be made, found or reached; the message says which and what to do."""


@dataclass(frozen=True)
class Desk:
    email: str
    role: str
    port: int
    slug: str
    front_port: int = 0  # 0: none yet (a registry from before fronts; given at the next start)
    site: str = ""       # random DNS label for public names: reveals neither who nor which role
    # a program answers at this desk, not a person (demo, benches, rehearsals); None: a registry
    # from before this was recorded (set by the next registration)
    simulated: bool | None = False


def front_base_port(settings: Settings) -> int:
    """Fronts take ports from ``RESCUE_FRONT_BASE_PORT`` up (default: 100 above the desks')."""
    return int(os.environ.get("RESCUE_FRONT_BASE_PORT") or settings.desk_base_port + 100)


def new_site() -> str:
    return f"desk-{secrets.token_hex(6)}"


class DeskAccess(Protocol):
    """What the annotation stages need of the desks (production: :class:`Desks`)."""

    def people(self, role: str | None = None) -> list[str]: ...

    def client(self, email: str) -> LabelStudioClient: ...

    def owner_id(self, email: str) -> int | None: ...

    def stage_media(self, email: str, urls: Iterable[str]) -> list[Path]: ...

    def where(self, email: str) -> str: ...

    def public_url(self, email: str) -> str: ...

    def database(self, email: str) -> Path | None: ...


def desk_slug(email: str) -> str:
    """A desk's folder name and ``{slug}`` in URL templates: one DNS label (``alice-example-org``)."""
    return re.sub(r"[^a-z0-9]+", "-", email.lower()).strip("-")[:50] or "desk"


def media_path(url: str) -> str | None:
    """The data-root-relative path of a local-files media URL (``/data/local-files/?d=...``)."""
    return url[len(MEDIA_URL_PREFIX):] if url and url.startswith(MEDIA_URL_PREFIX) else None


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class Desks:
    """The desks of one data root (the registry is the one source of who has which role)."""

    def __init__(self, root: DataRoot, settings: Settings | None = None, venv: Path = DEFAULT_VENV,
                 host: str | None = None):
        """``host``: the address desks listen on (default ``RESCUE_DESK_HOST``, else 127.0.0.1;
        0.0.0.0 only inside a container whose ports are published on 127.0.0.1)."""
        self.root = root
        self.settings = settings or Settings.from_env(self.root.root)
        self.venv = venv
        self.host = host or self.settings.desk_host
        self._clients: dict[str, LabelStudioClient] = {}
        self._owner_ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Desks({str(self.root)!r})"

    # --- the registry --------------------------------------------------------------------
    def all(self) -> list[Desk]:
        path = self.root.desks_registry()
        if not path.is_file():
            return []
        try:
            entries = json.loads(path.read_text())["desks"]
            return [Desk(e["email"], e["role"], int(e["port"]), e["slug"], int(e.get("front_port") or 0),
                         str(e.get("site") or ""), None if "simulated" not in e else e["simulated"] is True)
                    for e in entries]
        except (ValueError, KeyError, TypeError) as exc:
            raise DeskError(f"{path}: the desk registry is unreadable ({exc}); restore it from a backup") from None

    def get(self, email: str) -> Desk:
        wanted = email.strip().lower()
        for desk in self.all():
            if desk.email.lower() == wanted:
                return desk
        raise DeskError(f"{email} has no desk in {self.root}; add them with `rescue annotators add {email}`")

    def people(self, role: str | None = None) -> list[str]:
        return sorted(d.email for d in self.all() if role is None or d.role == role)

    def annotators(self) -> list[str]:
        return self.people("annotator")

    def adjudicators(self) -> list[str]:
        return self.people("adjudicator")

    @contextlib.contextmanager
    def _registry_lock(self) -> Iterator[None]:
        store.make_private_dir(self.root.desks_dir())
        with open(os.open(self.root.desks_lock(), os.O_RDWR | os.O_CREAT, 0o600)) as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def _write(self, desks: list[Desk]) -> None:
        text = store.canonical_json({"desks": [asdict(d) for d in sorted(desks, key=lambda d: d.email)]})
        store.atomic_write_text(self.root.desks_registry(), text)  # 0600: the folder is private

    def simulated(self) -> set[str]:
        """The e-mails registered as simulated annotators (``rescue annotators add --simulated``)."""
        return {d.email for d in self.all() if d.simulated}

    def register(self, email: str, role: str, simulated: bool = False) -> Desk:
        """The person's desk entry, made (with its service account) when missing. A person has
        one role; asking for the other is refused (a person who annotated must not adjudicate).
        ``simulated``: a program answers here; recorded once, never changed (it is what the
        release's card says of each round's answers)."""
        email = email.strip()
        if role not in ROLES:
            raise DeskError(f"role {role!r} is not one of {', '.join(ROLES)}")
        if "@" not in email or any(c.isspace() or ord(c) < 32 for c in email):
            raise DeskError(f"{email!r} is not an e-mail address")
        if email.lower() == SERVICE_EMAIL:
            raise DeskError(f"{email} is the desks' service account")
        with self._registry_lock():
            desks = self.all()
            for d in desks:
                if d.email.lower() == email.lower():
                    if d.role != role:
                        raise DeskError(f"{d.email} already has a desk as {d.role}; a person has one role")
                    if d.simulated is None:  # recorded now, once
                        d = replace(d, simulated=bool(simulated))
                        self._write([x for x in desks if x.email != d.email] + [d])
                    elif d.simulated != simulated:
                        was = "a simulated annotator" if d.simulated else "a person"
                        raise DeskError(f"{d.email} is registered as {was}; that is never changed "
                                        "(use another e-mail)")
                    return d
            taken_slugs = {d.slug for d in desks}
            name = desk_slug(email)
            if name in taken_slugs:  # two e-mails with the same slug
                name = f"{name[:40]}-{hashlib.sha256(email.lower().encode()).hexdigest()[:8]}"
            taken_ports = {d.port for d in desks} | {d.front_port for d in desks}
            port = self._free_port(self.settings.desk_base_port, taken_ports)
            front = self._free_port(front_base_port(self.settings), taken_ports | {port})
            desk = Desk(email, role, port, name, front, new_site(), simulated)
            store.make_private_dir(self.root.desk_dir(desk.slug))
            service = {"LABEL_STUDIO_USERNAME": SERVICE_EMAIL, "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(24),
                       "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20)}
            if not self.root.desk_service(desk.slug).is_file():
                store.atomic_write_text(self.root.desk_service(desk.slug), json.dumps(service))
            self._write([*desks, desk])
        return desk

    def _free_port(self, start: int, taken: set[int]) -> int:
        port = start
        while port in taken or not _port_free(port, self.host):
            port += 1
        return port

    def registered_fronts(self) -> list[Desk]:
        """Every desk with its front's port and site name (given now to desks registered before fronts)."""
        return self._with_fronts()

    def _with_fronts(self) -> list[Desk]:
        """Every desk, those registered before fronts given a front port and a site name."""
        if all(d.front_port and d.site for d in self.all()):
            return self.all()
        with self._registry_lock():
            desks = self.all()
            taken = {d.port for d in desks} | {d.front_port for d in desks}
            done = []
            for d in desks:
                if not d.front_port:
                    d = dataclasses.replace(d, front_port=self._free_port(front_base_port(self.settings), taken))
                    taken.add(d.front_port)
                done.append(d if d.site else dataclasses.replace(d, site=new_site()))
            self._write(done)
        return done

    # --- one desk --------------------------------------------------------------------------
    def _desk(self, desk: Desk | str) -> Desk:
        return desk if isinstance(desk, Desk) else self.get(desk)

    def service(self, desk: Desk | str) -> dict[str, str]:
        """The desk's service account (``LABEL_STUDIO_USERNAME/PASSWORD/USER_TOKEN``); never printed."""
        path = self.root.desk_service(self._desk(desk).slug)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise DeskError(f"{path}: the desk's service account is missing or unreadable ({type(exc).__name__}); "
                            "the desk cannot be reached without it") from None

    def server(self, desk: Desk | str) -> LabelStudioServer:
        desk = self._desk(desk)
        files = store.make_private_dir(self.root.desk_files(desk.slug))  # its media are private interviews
        extra = {}
        if self.settings.desk_public_url:  # a login posted through a TLS proxy comes from that origin
            origin = httpx.URL(self.public_url(desk))
            extra["LABEL_STUDIO_CSRF_TRUSTED_ORIGINS"] = f"{origin.scheme}://{origin.netloc.decode()}"
        return LabelStudioServer(self.root.desk_label_studio_dir(desk.slug), port=desk.port, media_root=files,
                                 venv=self.venv, host=self.host, credentials=self.service(desk), extra_env=extra)

    def url(self, desk: Desk | str) -> str:
        """How the pipeline reaches the desk (``RESCUE_DESK_URL``, default its port on 127.0.0.1)."""
        desk = self._desk(desk)
        return self.settings.desk_url.format(port=desk.port, slug=desk.slug).rstrip("/")

    def public_url(self, desk: Desk | str) -> str:
        """The address the desk's person opens: ``RESCUE_DESK_PUBLIC_URL`` (``{site}``, ``{port}``,
        ``{front_port}``, ``{slug}`` filled in), else their front's while it runs, else the desk's."""
        desk = self._desk(desk)
        template = self.settings.desk_public_url
        if template:
            return template.format(port=desk.port, slug=desk.slug, site=desk.site,
                                   front_port=desk.front_port).rstrip("/")
        return self.front_url(desk) or self.url(desk)

    # --- fronts (the comfort layer a person opens; it holds no security role) ----------------
    def front(self, desk: Desk | str) -> FrontProcess | None:
        """The desk's front (None while the registry gives it no port: before its first start)."""
        desk = self._desk(desk)
        if not desk.front_port:
            return None
        return FrontProcess(self.root.desk_dir(desk.slug) / "front", self.url(desk), desk.front_port)

    def front_url(self, desk: Desk | str) -> str | None:
        """The front's address while its process runs, else None."""
        front = self.front(desk)
        return front.url if front is not None and front.pid() is not None else None

    def fronts_up(self, emails: Iterable[str] | None = None, log=print) -> dict[str, str | None]:
        """Start a front per desk (all, or those of ``emails``), side by side: each person's front
        address, or None where it could not start (one line says why; their address is the desk's)."""
        from concurrent.futures import ThreadPoolExecutor

        wanted = {self.get(e).email for e in emails} if emails else None
        desks = [d for d in self._with_fronts() if wanted is None or d.email in wanted]

        def start(desk: Desk) -> str | None:
            try:
                url = self.front(desk).start()
            except (FrontError, OSError) as exc:
                log(f"front of {desk.email}: not started ({exc}); their address is the desk's: {self.url(desk)}")
                return None
            log(f"front of {desk.email}: {url} -> {self.url(desk)}")
            return url

        with ThreadPoolExecutor(max(1, min(4, len(desks)))) as pool:
            return dict(zip((d.email for d in desks), pool.map(start, desks)))

    def fronts_down(self, emails: Iterable[str] | None = None) -> list[str]:
        """Stop the fronts (all, or those of ``emails``); the e-mails of those that were running."""
        return [d.email for d in self.select(emails) if (f := self.front(d)) is not None and f.stop()]

    def where(self, email: str) -> str:
        """Words naming a person's desk, for problems and errors."""
        try:
            return f"{email}'s desk ({self.url(email)})"
        except DeskError:
            return f"{email}'s desk (none registered)"

    def database(self, email: str) -> Path | None:
        """The desk's database, for a pull to read a project without the API (:mod:`.desk_db`):
        only when the pipeline reaches the desk at its own port on this machine (the default
        ``RESCUE_DESK_URL``) and the installed Label Studio is the one that reader was written for;
        None otherwise."""
        desk = self.get(email)
        if not self.reached_here(desk):
            return None
        return desk_db.readable(LabelStudioServer(self.root.desk_label_studio_dir(desk.slug), venv=self.venv))

    def reached_here(self, desk: Desk | str) -> bool:
        """Whether the pipeline reaches the desk at its own port on this machine (the default
        ``RESCUE_DESK_URL``), so that its database is the one the desk serves."""
        desk = self._desk(desk)
        url = httpx.URL(self.url(desk))
        return url.host in ("127.0.0.1", "localhost") and url.port == desk.port

    def client(self, email: str) -> LabelStudioClient:
        desk = self.get(email)
        with self._lock:
            if desk.email not in self._clients:
                self._clients[desk.email] = LabelStudioClient(self.url(desk), self.service(desk)["LABEL_STUDIO_USER_TOKEN"])
            return self._clients[desk.email]

    def owner_id(self, email: str) -> int | None:
        """The person's user id on their own desk (None while they have no login there)."""
        desk = self.get(email)
        if desk.email not in self._owner_ids:
            user = self.client(desk.email).find_user(desk.email)
            if user is None:
                return None
            self._owner_ids[desk.email] = int(user["id"])
        return self._owner_ids[desk.email]

    def stage_media(self, email: str, urls: Iterable[str]) -> list[Path]:
        """Place the media behind ``urls`` (local-files URLs, paths relative to the data root) in
        the person's file root at the same relative paths (a hard link, else a copy); returns the
        folders holding them (each becomes a local storage of the person's projects)."""
        desk = self.get(email)
        store.make_private_dir(self.root.desk_files(desk.slug))
        folders: set[Path] = set()
        for rel in sorted({p for u in urls if (p := media_path(u))}):
            source = self.root.resolve(rel)
            target = self.root.desk_file(desk.slug, rel)
            if target.parent not in folders:  # once per folder (a push stages every sample's file)
                store.make_private_dir(target.parent)
                folders.add(target.parent)
            if not source.is_file():
                continue  # the task shows no audio; push reports nothing more than before
            if target.exists() and os.path.samefile(source, target):
                continue
            tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
            try:
                os.link(source, tmp)
            except OSError:  # another file system, or links not allowed: a private copy
                shutil.copyfile(source, tmp)
                os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        return sorted(folders)

    # --- people ------------------------------------------------------------------------------
    def add(self, email: str, role: str, password: str, *, timeout: float = 300.0, simulated: bool = False) -> Desk:
        """``rescue annotators add``: the person's desk (registered, started) and their login on
        it with ``password`` (at least :data:`MIN_PASSWORD_LENGTH` characters). Idempotent: an
        existing person gets their password set again, which ends their sessions and replaces
        their API tokens (:meth:`LabelStudioServer.set_password`)."""
        if not password:
            raise DeskError(f"no password for {email} (set RESCUE_ANNOTATOR_PASSWORD or use --password-stdin)")
        if len(password) < MIN_PASSWORD_LENGTH:
            raise DeskError(f"the password for {email} has {len(password)} characters; a person's password needs "
                            f"at least {MIN_PASSWORD_LENGTH}")
        desk = self.register(email, role, simulated)
        server = self.server(desk)
        try:
            server.start(timeout=timeout)
            if self.client(desk.email).find_user(desk.email) is None:
                self._sign_up(desk, password)
            else:  # Label Studio's API cannot set a password: Django can, in the desk's own python
                server.set_password(desk.email, password)
        except LabelStudioServerError as exc:
            raise DeskError(f"desk of {desk.email}: {exc}") from None
        return desk

    def _sign_up(self, desk: Desk, password: str) -> None:
        """The person's login through the desk's own signup form and invite link (a second, where
        the management command that sets a password takes 15 s). The form is reached without the
        API client, so its faults join the transient family here: no answer is
        :class:`LabelStudioUnavailable`, HTTP 5xx :class:`LabelStudioFault`, each naming the URL."""
        invite = self.client(desk.email)._json("GET", "/api/invite", "read the desk's invite link")["invite_url"]
        with httpx.Client(base_url=self.url(desk), timeout=60) as http:
            form = http.base_url.join(invite.split("?", 1)[0])  # named without its invite token
            try:
                shown = http.get(invite)
                r = shown if shown.status_code >= 500 else http.post(
                    invite, headers={"Referer": f"{self.url(desk)}{invite}"},
                    data={"csrfmiddlewaretoken": http.cookies.get("csrftoken", ""), "email": desk.email,
                          "password": password})
            except httpx.TransportError as exc:
                raise LabelStudioUnavailable(
                    f"desk of {desk.email}: Label Studio at {form} did not answer while signing {desk.email} up "
                    f"({type(exc).__name__}); is it running? (`rescue label-studio status`)") from None
        if r.status_code >= 500:
            raise LabelStudioFault(f"desk of {desk.email}: Label Studio at {form} failed while signing "
                                   f"{desk.email} up (HTTP {r.status_code})")
        if r.status_code != 302:  # the form is shown again with its complaint (e.g. a short password)
            said = re.findall(r'field_errors">\s*<li>([^<]+)<', r.text)
            raise DeskError(f"desk of {desk.email}: Label Studio refused the login (HTTP {r.status_code}"
                            f"{': ' + '; '.join(x.strip() for x in said) if said else ''})")

    # --- servers ------------------------------------------------------------------------------
    def select(self, emails: Iterable[str] | None = None) -> list[Desk]:
        return [self.get(e) for e in emails] if emails else self.all()

    def up(self, emails: Iterable[str] | None = None, *, timeout: float = 300.0, log=print) -> list[ServerStatus]:
        """Start the desks (all, or those of ``emails``) side by side; each waits for /health."""
        from concurrent.futures import ThreadPoolExecutor

        desks = self.select(emails)
        errors: list[str] = []

        def start(desk: Desk) -> ServerStatus | None:
            try:
                status = self.server(desk).start(timeout=timeout)
            except (LabelStudioServerError, DeskError) as exc:
                errors.append(f"desk of {desk.email}: {exc}")
                return None
            log(f"desk of {desk.email} ({desk.role}): {status.describe()}")
            return status

        with ThreadPoolExecutor(max(1, min(4, len(desks)))) as pool:
            started = [s for s in pool.map(start, desks) if s is not None]
        if errors:
            raise DeskError("; ".join(errors))
        return started

    def down(self, emails: Iterable[str] | None = None) -> list[str]:
        """Stop the desks and their fronts (all, or those of ``emails``); the e-mails of the desks
        that were running."""
        self.fronts_down(emails)
        return [d.email for d in self.select(emails) if self.server(d).stop()]

    def status(self) -> list[tuple[Desk, ServerStatus]]:
        return [(d, self.server(d).status()) for d in self.all()]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
