"""A small Label Studio REST client: the calls the annotation rounds need, with clear errors.

Plain HTTP (httpx) against the Label Studio 1.23 API, authenticated with a legacy API token (a
desk's service account, :mod:`.desks`). Errors name what was attempted and never include the
token. (label-studio-sdk is not used: these few calls need only httpx, and the SDK would bring
opencv, pandas and nltk into the pipeline's environment.)
Other stages (adjudication) create their own projects with :meth:`ensure_project` and
:meth:`import_tasks` (inline predictions).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from pipeline.config import Secret


class LabelStudioError(RuntimeError):
    """Any failure talking to Label Studio."""


class LabelStudioAuthError(LabelStudioError):
    """The server rejected the API token."""


class LabelStudioUnavailable(LabelStudioError):
    """The server did not answer (not started, killed, wrong URL)."""


@dataclass(frozen=True)
class Project:
    id: int
    title: str
    label_config: str
    model_version: str
    description: str = ""

    @property
    def key(self) -> str:
        """The pipeline's identity of a project: the last line of its description."""
        lines = self.description.strip().splitlines()
        return lines[-1].strip() if lines else ""


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


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


class LabelStudioClient:
    def __init__(self, url: str, token: Secret | str, timeout: float = 120.0):
        token = token if isinstance(token, Secret) else Secret(token)
        if not token:
            raise LabelStudioAuthError("no Label Studio API token (a desk's service account in <data root>/desks/)")
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout, limits=connection_limits(self.url),
                                  headers={"Authorization": f"Token {token.value}"})

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
            raise LabelStudioError(f"Label Studio refused to {what} (HTTP {r.status_code}): {body}")
        return r

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
        out, page = [], 1
        while True:
            body = self._json("GET", "/api/projects/", "list projects",
                              params={"page": page, "page_size": 100,
                                      "include": "id,title,description,label_config,model_version"})
            items = body["results"] if isinstance(body, dict) else body
            out += [Project(p["id"], p["title"], p.get("label_config") or "", p.get("model_version") or "",
                            p.get("description") or "") for p in items]
            if not isinstance(body, dict) or not body.get("next"):
                return out
            page += 1

    def find_project(self, key: str) -> Project | None:
        return next((p for p in self.projects() if p.key == key), None)

    def ensure_project(self, key: str, title: str, label_config: str, model_version: str = "",
                       description: str = "") -> Project:
        """The project identified by ``key`` (kept as the last description line; titles are
        limited to 50 characters), created when missing, its config updated when changed."""
        project = self.find_project(key)
        if project is None:
            description = f"{description}\n{key}".strip()
            body = self._json("POST", "/api/projects/", f"create project {title!r}", json={
                "title": title[:50], "description": description, "label_config": label_config,
                "model_version": model_version, "show_collab_predictions": True,
                "maximum_annotations": 1, "show_skip_button": True})
            return Project(body["id"], title[:50], label_config, model_version, description)
        changes = {}
        if project.label_config.strip() != label_config.strip():
            changes["label_config"] = label_config
        if project.model_version != model_version:
            changes["model_version"] = model_version
        if changes:
            self._json("PATCH", f"/api/projects/{project.id}/", f"update project {title!r}", json=changes)
            project = Project(project.id, project.title, label_config, model_version, project.description)
        return project

    def add_local_storage(self, project_id: int, path: str, title: str = "media") -> None:
        """Let the project serve local media files under ``path`` (within the document root)."""
        existing = self._json("GET", "/api/storages/localfiles/", "list local storages",
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

    def find_tasks(self, project_id: int, key: str, value: str) -> list[dict]:
        """Tasks whose ``data[key] == value`` (server-side filter on task data)."""
        query = {"filters": {"conjunction": "and", "items": [
            {"filter": f"filter:tasks:data.{key}", "operator": "equal", "type": "String", "value": value}]}}
        body = self._json("GET", "/api/tasks/", f"find task {key}={value}",
                          params={"project": project_id, "query": json.dumps(query), "fields": "task_only"})
        return body.get("tasks", [])

    def import_tasks(self, project_id: int, tasks: list[dict]) -> list[int]:
        """Import tasks (each ``{"data":..., "predictions": [...], "annotations": [...]}``)."""
        body = self._json("POST", f"/api/projects/{project_id}/import", f"import {len(tasks)} tasks",
                          params={"return_task_ids": "true"}, json=tasks)
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
    def export_tasks(self, project_id: int) -> bytes:
        """Every task of a project with its annotations, as raw JSON bytes (synchronous export).

        About twice as fast as a snapshot export; annotations name their user by id
        (``completed_by``), predictions are given by id.
        """
        r = self.request("GET", f"/api/projects/{project_id}/export", f"export project {project_id}",
                         params={"exportType": "JSON", "download_all_tasks": "true"})
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


def chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
