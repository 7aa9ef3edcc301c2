"""A small Label Studio REST client: the calls the annotation rounds need, with clear errors.

Plain HTTP (httpx) against the Label Studio 1.23 API, authenticated with a legacy API token (a
desk's service account, :mod:`.desks`). Errors name what was attempted and never include the
token. (label-studio-sdk is not used: these few calls need only httpx, and the SDK would bring
opencv, pandas and nltk into the pipeline's environment.)
Other stages (adjudication) create their own projects with :meth:`ensure_project` and
:meth:`import_tasks` (inline predictions).
"""
from __future__ import annotations

import datetime as dt
import itertools
import json
import ssl
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import lru_cache

import httpx

from pipeline.config import Secret
from pipeline.errors import ServerFault, Unreachable


class LabelStudioError(RuntimeError):
    """Any failure talking to Label Studio."""


class LabelStudioAuthError(LabelStudioError):
    """The server rejected the API token."""


class LabelStudioUnavailable(LabelStudioError, Unreachable):
    """The server did not answer (not started, killed, wrong URL, too slow): transient."""


class LabelStudioFault(LabelStudioError, ServerFault):
    """The server answered with a server error (HTTP 5xx, e.g. its SQLite database locked past
    its wait): transient. A 4xx answer stays a plain :class:`LabelStudioError`: asking again
    would be refused again."""


@dataclass(frozen=True)
class Project:
    id: int
    title: str
    label_config: str
    model_version: str
    description: str = ""
    # As listed (:meth:`LabelStudioClient.projects`): the instruction panel, and live counts that
    # any task, annotation or prediction added or deleted changes (``PROJECT_COUNTS``, in order).
    instruction: str | None = None
    show_instruction: bool | None = None
    counts: tuple[int, ...] | None = None

    @property
    def key(self) -> str:
        """The pipeline's identity of a project: the last line of its description."""
        lines = self.description.strip().splitlines()
        return lines[-1].strip() if lines else ""


_LOOPBACK = ("127.0.0.1", "localhost", "::1")

# Counted by Label Studio for every project it lists (SQL counts, never cached).
PROJECT_COUNTS = ("task_number", "total_annotations_number", "skipped_annotations_number", "total_predictions_number")
_PROJECT_FIELDS = ",".join(("id", "title", "description", "label_config", "model_version", "expert_instruction",
                            "show_instruction") + PROJECT_COUNTS)
# Label Studio's data manager reads filter times in this form (``data_manager.managers.DATETIME_FORMAT``).
LS_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

# How long a write to Label Studio may take between stamping ``updated_at`` and committing it.
# The stamp is taken just before the write's statement (``auto_now``), which then waits at most
# 5 s for SQLite's write lock (Python's default ``timeout``; Label Studio sets none; a longer wait
# fails the write, it never commits late) and commits on its own (Label Studio runs without
# ATOMIC_REQUESTS): 10 s leaves twice that. A look at a project at server time T therefore sees
# every change stamped before T - SETTLE_S, and any change it does not see yet will carry a stamp
# of T - SETTLE_S or later: the pull asks next time for the tasks changed since then
# (:meth:`LabelStudioClient.changed_tasks`), the push for the tasks changed since its newest.
SETTLE_S = 10.0
ID_CHUNK = 400  # task ids per request when they travel in its URL


def parse_time(value: str | None) -> dt.datetime | None:
    """A timestamp as Label Studio writes it (``2026-01-02T03:04:05.123456Z``; no fraction when it
    is 0), as an aware UTC datetime (None for None). Compare these, never the strings."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.timezone.utc)


def format_time(value: dt.datetime) -> str:
    """``value`` (aware) in the form Label Studio's filters read, UTC with microseconds."""
    return value.astimezone(dt.timezone.utc).strftime(LS_TIME_FORMAT)


def server_time(response: httpx.Response) -> dt.datetime | None:
    """The server's clock when it answered (its ``Date`` header, whole seconds, rounded down)."""
    try:
        return parsedate_to_datetime(response.headers["date"]).astimezone(dt.timezone.utc)
    except (KeyError, TypeError, ValueError):
        return None


def connection_limits(url: str) -> httpx.Limits:
    """How many connections to Label Studio at ``url`` an HTTP client keeps open. None on this
    machine's loopback: Label Studio's server (Django's, one process) writes an answer's head and
    body apart, and on a kept-alive connection the body then waits for the client's delayed ACK,
    40 ms more on every request (measured on 127.0.0.1: ``/api/version`` 52 ms kept alive, 10 ms
    on a new connection, which costs well under 1 ms there). Elsewhere (TLS, a real network)
    connections are kept, as usual."""
    if httpx.URL(url).host in _LOOPBACK:
        return httpx.Limits(max_keepalive_connections=0)
    return httpx.Limits()


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """One verifying TLS context per process (httpx would load the CA bundle for every client:
    ~50 ms each, and a pull or push makes one client per desk)."""
    return httpx.create_ssl_context()  # what httpx makes by default (certifi, or SSL_CERT_FILE / _DIR)


class LabelStudioClient:
    def __init__(self, url: str, token: Secret | str, timeout: float = 120.0):
        token = token if isinstance(token, Secret) else Secret(token)
        if not token:
            raise LabelStudioAuthError("no Label Studio API token (a desk's service account in <data root>/desks/)")
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout, limits=connection_limits(self.url),
                                  headers={"Authorization": f"Token {token.value}"}, verify=_tls())
        self._clock = threading.local()

    def __repr__(self) -> str:
        return f"LabelStudioClient({self.url!r}, token=****)"

    def close(self) -> None:
        self._http.close()

    # --- transport -----------------------------------------------------------------------
    def request(self, method: str, path: str, what: str, **kwargs) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kwargs)
        except (httpx.TransportError,) as exc:
            raise LabelStudioUnavailable(
                f"Label Studio at {self.url} did not answer while trying to {what} "
                f"({type(exc).__name__}); is it running? (`rescue label-studio status`)") from None
        if r.status_code in (401, 403):
            raise LabelStudioAuthError(
                f"Label Studio at {self.url} rejected the API token while trying to {what} "
                f"(HTTP {r.status_code}); check the desk's service account (<data root>/desks/<desk>/service.json)")
        if r.status_code >= 400:
            body = r.text[:300].replace("\n", " ")
            error = LabelStudioFault if r.status_code >= 500 else LabelStudioError
            raise error(f"Label Studio refused to {what} (HTTP {r.status_code}): {body}")
        self._clock.answered = server_time(r)
        return r

    def answered_at(self) -> dt.datetime | None:
        """The server's clock at its last answer to this thread (None before any, or without a
        ``Date`` header)."""
        return getattr(self._clock, "answered", None)

    def _json(self, method: str, path: str, what: str, **kwargs):
        r = self.request(method, path, what, **kwargs)
        return r.json() if r.content else None

    # --- users ---------------------------------------------------------------------------
    def whoami(self) -> dict:
        return self._json("GET", "/api/current-user/whoami", "check the API token")

    def users(self) -> list[dict]:
        return self._json("GET", "/api/users/", "list users")

    def find_user(self, email: str) -> dict | None:
        return next((u for u in self.users() if u["email"].lower() == email.lower()), None)

    def create_user(self, email: str) -> dict:
        """Create a login for ``email`` (or return the existing one); passwords are set elsewhere."""
        existing = self.find_user(email)
        if existing:
            return existing
        return self._json("POST", "/api/users/", f"create user {email}",
                          json={"email": email, "username": email})

    # --- projects ------------------------------------------------------------------------
    def projects(self) -> list[Project]:
        """Every project of the server (one request per 100), with its instruction panel and
        its live counts (:data:`PROJECT_COUNTS`)."""
        out, page = [], 1
        while True:
            body = self._json("GET", "/api/projects/", "list projects",
                              params={"page": page, "page_size": 100, "include": _PROJECT_FIELDS})
            items = body["results"] if isinstance(body, dict) else body
            out += [Project(p["id"], p["title"], p.get("label_config") or "", p.get("model_version") or "",
                            p.get("description") or "", p.get("expert_instruction"), p.get("show_instruction"),
                            tuple(p[k] for k in PROJECT_COUNTS) if all(k in p for k in PROJECT_COUNTS) else None)
                    for p in items]
            if not isinstance(body, dict) or not body.get("next"):
                return out
            page += 1

    def find_project(self, key: str) -> Project | None:
        return next((p for p in self.projects() if p.key == key), None)

    def ensure_project(self, key: str, title: str, label_config: str, model_version: str = "",
                       description: str = "", listed: list[Project] | None = None,
                       instruction: str | None = None) -> Project:
        """The project identified by ``key`` (kept as the last description line; titles are
        limited to 50 characters), created when missing, its config updated when changed.
        ``listed``: the server's projects as just listed (:meth:`projects`; saves a listing).
        ``instruction``: the instruction panel a project made now starts with (shown)."""
        project = next((p for p in listed if p.key == key), None) if listed is not None else self.find_project(key)
        if project is None:
            description = f"{description}\n{key}".strip()
            shown = {"expert_instruction": instruction, "show_instruction": True} if instruction is not None else {}
            body = self._json("POST", "/api/projects/", f"create project {title!r}", json={
                "title": title[:50], "description": description, "label_config": label_config,
                "model_version": model_version, "show_collab_predictions": True,
                "maximum_annotations": 1, "show_skip_button": True, **shown})
            return Project(body["id"], title[:50], label_config, model_version, description,
                           body.get("expert_instruction"), body.get("show_instruction"))
        changes = {}
        if project.label_config.strip() != label_config.strip():
            changes["label_config"] = label_config
        if project.model_version != model_version:
            changes["model_version"] = model_version
        if changes:
            self._json("PATCH", f"/api/projects/{project.id}/", f"update project {title!r}", json=changes)
            project = Project(project.id, project.title, label_config, model_version, project.description,
                              project.instruction, project.show_instruction, project.counts)
        return project

    def add_local_storage(self, project_id: int, path: str, title: str = "media", *, new: bool = False) -> None:
        """Let the project serve local media files under ``path`` (within the document root).
        ``new``: the project was made just now (it has no storage to look at)."""
        existing = [] if new else self._json("GET", "/api/storages/localfiles/", "list local storages",
                                             params={"project": project_id})
        if any(s.get("path") == path for s in existing or []):
            return
        self._json("POST", "/api/storages/localfiles/", "add local media storage", json={
            "project": project_id, "path": path, "title": title, "use_blob_urls": False})

    # --- tasks ---------------------------------------------------------------------------
    def tasks(self, project_id: int, *, fields: str = "task_only", page_size: int = 1000) -> list[dict]:
        """Every task of a project, page by page: ``id``, ``data``, annotation counts
        (``fields="all"``: the data manager's full task fields, drafts included)."""
        out, page = [], 1
        while True:
            try:
                body = self._json("GET", "/api/tasks/", f"list tasks of project {project_id}",
                                  params={"project": project_id, "page": page, "page_size": page_size,
                                          "fields": fields})
            except LabelStudioError as exc:  # the data manager answers 404 past the last page
                if "HTTP 404" in str(exc) and page > 1:
                    return out
                raise
            items = body.get("tasks", [])
            out += items
            if len(out) >= body.get("total", 0) or not items:
                return out
            page += 1

    def changed_tasks(self, project_id: int, since: dt.datetime | None, *, drafts: bool = False, ids: Iterable[int] = (),
                      include: str = "id,updated_at,total_annotations,cancelled_annotations",
                      page_size: int = 5000) -> tuple[list[dict], dt.datetime | None]:
        """``(tasks, server time)``: the project's tasks whose ``updated_at`` is ``since`` or later
        - and, with ``drafts``, every task holding a draft (``draft_exists``) - with only the
        ``include`` fields (newest first), and the server's clock at the first answer. With
        ``ids``: those tasks only (``since`` ignored). One request per ``page_size`` tasks.

        Label Studio sets a task's ``updated_at`` whenever the task, one of its annotations or
        one of its predictions is saved or deleted (``Task.save``, ``Annotation.update_task``,
        ``Prediction.update_task``); drafts leave it alone."""
        ids = sorted(set(ids))
        if len(ids) > ID_CHUNK:  # the ids travel in the URL: a few hundred at a time
            parts = [self.changed_tasks(project_id, since, ids=part, include=include, page_size=page_size)
                     for part in chunks(ids, ID_CHUNK)]
            return [t for tasks, _ in parts for t in tasks], parts[0][1]
        if ids:
            query: dict = {"selectedItems": {"all": False, "included": ids}}
        else:
            items = [{"filter": "filter:tasks:updated_at", "operator": "greater_or_equal", "type": "Datetime",
                      "value": format_time(since)}]
            if drafts:
                items.append({"filter": "filter:tasks:draft_exists", "operator": "equal", "type": "Boolean",
                              "value": True})
            query = {"filters": {"conjunction": "or", "items": items}}
        query["ordering"] = ["-tasks:updated_at"]
        out: list[dict] = []
        page, when = 1, None
        while True:
            try:
                r = self.request("GET", "/api/tasks/", f"list the changed tasks of project {project_id}",
                                 params={"project": project_id, "page": page, "page_size": page_size,
                                         "fields": "task_only", "include": include, "query": json.dumps(query)})
            except LabelStudioError as exc:  # the data manager answers 404 past the last page
                if "HTTP 404" in str(exc) and page > 1:
                    return out, when
                raise
            when = when or server_time(r)
            body = r.json()
            items = body.get("tasks", [])
            out += items
            if len(out) >= body.get("total", 0) or not items:
                return out, when
            page += 1

    def newest_task(self, project_id: int) -> tuple[dict | None, int]:
        """``(the task Label Studio changed last (id, updated_at), how many tasks the project
        has)``: one small request whatever the project's size."""
        body = self._json("GET", "/api/tasks/", f"look at project {project_id}", params={
            "project": project_id, "page": 1, "page_size": 1, "fields": "task_only", "include": "id,updated_at",
            "query": json.dumps({"ordering": ["-tasks:updated_at"]})})
        tasks = body.get("tasks") or []
        return (tasks[0] if tasks else None), int(body.get("total", 0))

    def task_drafts(self, task_id: int) -> list[dict]:
        """Every draft of a task, whoever saved it (``GET /api/tasks/<id>/drafts``)."""
        return self._json("GET", f"/api/tasks/{task_id}/drafts", f"list the drafts of task {task_id}") or []

    def find_tasks(self, project_id: int, key: str, value: str) -> list[dict]:
        """Tasks whose ``data[key] == value`` (server-side filter on task data)."""
        query = {"filters": {"conjunction": "and", "items": [
            {"filter": f"filter:tasks:data.{key}", "operator": "equal", "type": "String", "value": value}]}}
        body = self._json("GET", "/api/tasks/", f"find task {key}={value}",
                          params={"project": project_id, "query": json.dumps(query), "fields": "task_only"})
        return body.get("tasks", [])

    def import_tasks(self, project_id: int, tasks: Sequence[dict | str]) -> list[int]:
        """Import tasks (each ``{"data":..., "predictions": [...], "annotations": [...]}``, or that
        object's JSON text already made: :meth:`.push_tasks.Prepared.task_json`)."""
        text = "[" + ",".join(t if isinstance(t, str) else json.dumps(t) for t in tasks) + "]"
        body = self._json("POST", f"/api/projects/{project_id}/import", f"import {len(tasks)} tasks",
                          params={"return_task_ids": "true"}, content=text.encode("utf-8"),
                          headers={"Content-Type": "application/json"})
        return list(body.get("task_ids") or [])

    def update_task(self, task_id: int, data: dict) -> None:
        self._json("PATCH", f"/api/tasks/{task_id}/", "update a task's data", json={"data": data})

    def replace_predictions(self, task_id: int, result: list[dict], model_version: str) -> None:
        for p in self._json("GET", "/api/predictions/", "list predictions", params={"task": task_id}) or []:
            self.request("DELETE", f"/api/predictions/{p['id']}/", "delete an outdated prediction")
        if result:
            self._json("POST", "/api/predictions/", "create a prediction",
                       json={"task": task_id, "result": result, "model_version": model_version})

    def create_annotation(self, task_id: int, result: list[dict], completed_by: int | None = None,
                          lead_time: float | None = None, was_cancelled: bool = False) -> dict:
        payload: dict = {"result": result, "was_cancelled": was_cancelled}
        if completed_by is not None:
            payload["completed_by"] = completed_by
        if lead_time is not None:
            payload["lead_time"] = lead_time
        return self._json("POST", f"/api/tasks/{task_id}/annotations/", "create an annotation", json=payload)

    # --- export --------------------------------------------------------------------------
    def export_tasks(self, project_id: int, ids: Iterable[int] = ()) -> bytes:
        """Every task of a project (or only the tasks ``ids``) with its annotations and every
        login's drafts, as raw JSON bytes (synchronous export).

        About twice as fast as a snapshot export; annotations name their user by id
        (``completed_by``), predictions are given by id.
        """
        params: dict = {"exportType": "JSON", "download_all_tasks": "true"}
        if ids:
            params["ids[]"] = sorted(set(ids))  # in the URL: callers pass at most ID_CHUNK
        r = self.request("GET", f"/api/projects/{project_id}/export", f"export project {project_id}", params=params)
        return r.content

    def export_snapshot(self, project_id: int, timeout: float = 600.0) -> bytes:
        """A snapshot export (JSON, every task, users as objects) as raw bytes."""
        snap = self._json("POST", f"/api/projects/{project_id}/exports/", "create an export snapshot", json={
            "title": "rescue-pull",
            "task_filter_options": {"only_with_annotations": False},
            "serialization_options": {"predictions": {"only_id": False},
                                      "annotations__completed_by": {"only_id": False},
                                      "drafts": {"only_id": True}}})
        deadline = time.monotonic() + timeout
        while snap.get("status") not in ("completed", "failed"):
            if time.monotonic() > deadline:
                raise LabelStudioError(f"export of project {project_id} did not finish in {timeout:.0f} s")
            time.sleep(0.2)
            snap = self._json("GET", f"/api/projects/{project_id}/exports/{snap['id']}", "poll an export")
        if snap["status"] == "failed":
            raise LabelStudioError(f"export of project {project_id} failed on the server")
        r = self.request("GET", f"/api/projects/{project_id}/exports/{snap['id']}/download",
                         "download an export", params={"exportType": "JSON"})
        # Snapshots pile up on the server otherwise; the bytes are archived by the caller.
        self.request("DELETE", f"/api/projects/{project_id}/exports/{snap['id']}", "delete an export")
        return r.content


def chunks(items: Iterable, size: int) -> Iterable[list]:
    """Lists of ``size`` items (the last one shorter), taken from ``items`` as they come."""
    it = iter(items)
    while part := list(itertools.islice(it, size)):
        yield part
