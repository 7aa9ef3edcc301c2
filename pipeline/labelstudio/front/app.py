"""The desk's front: a comfort layer in front of ONE person's own Label Studio (their desk).

Every person has their own Label Studio server, so nothing in front of it decides who may see
what: the front knows no users, holds no token, reads no cookie and refuses nothing. Every
request goes to its one upstream as it came (the caller's Host, cookies, Authorization or
X-Api-Key headers included) and every answer comes back as Label Studio gave it, except for
these comforts, the same for everyone:

* Label Studio's build assets (``/static/``, ``/react-app/``: about 7 MB of JavaScript and
  1.5 MB of CSS a page) are fetched from the desk once (by path: a query is no new file), kept in
  memory within bounds (:class:`AssetCache`: files and bytes), gzip-compressed when the
  browser accepts it and served with cache headers and an ETag (a revalidation is answered by
  the front itself, 304). Label Studio's development server sends them with neither. Restart the
  front after upgrading Label Studio.
* Label Studio's service worker (``/sw.js``) comes with the front's build cache in front of it
  (``static/sw.js``) and the login page registers it too (:data:`SW_REGISTER_PATH`): while the
  person types their login it caches the build's scripts and styles pages have loaded through
  the front so far and serves them cache-first (Chrome keeps the compiled code of what a worker
  caches). The cache is named by the desk's ``/api/version``. ``RESCUE_NO_SW=1`` leaves Label
  Studio's worker as it is.
* Pages get the annotators' keys scripts (``static/keys.js``, ``keys-input.js``, ``keys-page.js``, in
  that order, at :data:`~pipeline.labelstudio.front.comfort.KEYS_PATHS`) and their feature flags without those
  equal to the default (:func:`~pipeline.labelstudio.front.comfort.slim_feature_flags`).
* Pages get the landing script (``static/landing.js`` at :data:`LANDING_PATH`): the login form
  focused and a login landing on the person's rounds in annotation order, the first focused; no
  project keys on the cards and no Import or Export in the data manager (what is shown only).
* The data manager's columns show only the task's heading by default
  (:func:`~pipeline.labelstudio.front.comfort.slim_columns`; ``RESCUE_NO_SLIM_COLUMNS=1``: as built).
* Build files with patches (:mod:`pipeline.labelstudio.front.patches`): applied only to the exact build they
  were written for, checked and reported at start (:meth:`Front.check`).
"""
from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import http.cookiejar
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from pipeline.labelstudio.front.comfort import (NO_SLIM_COLUMNS_ENV, NO_SW_ENV, keys_js, slim_columns,
                               slim_feature_flags, switched_off)
from pipeline.labelstudio.front.patches import BUNDLE_PATCHES, NO_PATCHES_ENV, Outcome, Patcher, PatchGroup
from pipeline.labelstudio.client import connection_limits
from pipeline.labelstudio.server import LS_VERSION

log = logging.getLogger("rescue.front")

_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "content-length"}
_ASSET_PREFIXES = ("/static/", "/react-app/")  # build assets: no project data, the same for everyone
_HASHED_NAME = re.compile(r"\.[0-9a-f]{12}\.\w+$")  # Django's manifest names never change content
ASSET_CACHE_ENTRIES = 1024  # Label Studio 1.23's build: about 1,000 files (source maps included)
ASSET_CACHE_BYTES = 96 * 2**20  # a task page loads ~9 MB (and ~2.5 MB gzipped); the whole build is ~90 MB
ASSET_MAX_AGE_S = 3600  # unhashed names (react-app chunks) may change with a Label Studio upgrade
_COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml", "application/wasm")
_CODE_TYPES = ("application/javascript", "text/javascript", "text/css")  # what the service worker caches
SW_PATH = "/sw.js"  # Label Studio's service worker, served with the front's build cache (static/sw.js) in front
SW_REGISTER_PATH = "/__rescue__/sw-register.js"  # registers SW_PATH on pages without Label Studio's app (login)
LANDING_PATH = "/__rescue__/landing.js"  # static/landing.js: login and home land on the person's rounds
_COLUMNS_PATH = "/api/dm/columns"
_STATIC = Path(__file__).resolve().parent / "static"
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


def no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that never keeps a cookie (every request carries only its caller's). Given to
    an httpx client as the jar itself: wrapped in ``httpx.Cookies`` it would be copied, policy lost."""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


@dataclass
class StartReport:
    """What the front found at start: the desk's release and each patch group's outcome."""

    upstream: str
    release: str | None = None
    version_ok: bool = False
    outcomes: list[Outcome] = field(default_factory=list)

    def applied(self) -> list[str]:
        return [o.group for o in self.outcomes if o.applied]


class Front:
    """The state of one front: its desk, the asset cache, the patches (no users, no token)."""

    def __init__(self, upstream: str, patches: tuple[PatchGroup, ...] | None = None, *,
                 max_entries: int = ASSET_CACHE_ENTRIES, max_bytes: int = ASSET_CACHE_BYTES):
        self.upstream = upstream.rstrip("/")
        # No cookie jar: every request carries only its caller's cookies.
        self.client = httpx.AsyncClient(base_url=self.upstream, timeout=300, follow_redirects=False,
                                        cookies=no_cookies(), limits=connection_limits(upstream))
        self.patcher = Patcher(BUNDLE_PATCHES if patches is None else tuple(patches),
                               enabled=not switched_off(NO_PATCHES_ENV))
        self.version: dict | None = None  # the desk's /api/version answer
        self.report = StartReport(self.upstream)
        self._checked = asyncio.Lock()
        # path -> {"type", "body", "gz", "etag", "cache"}: bounded, as any caller may ask for anything
        self.assets = AssetCache(max_entries, max_bytes)
        self._fetching: dict[str, asyncio.Future] = {}  # one fetch of a path at a time, however many ask
        # the build's scripts and styles pages have loaded so far, in order: what the service
        # worker caches (sw.js); learnt from the pages, as the chunks a page loads are named only in its code
        self.code_assets: dict[str, str] = {}  # path -> the address pages ask for
        self.own_worker: str | None = None  # Label Studio's own /sw.js

    async def _read_version(self) -> None:
        """The desk's release, once; patches off (one warning) when it is not :data:`LS_VERSION`."""
        async with self._checked:
            if self.version is not None:
                return
            try:
                r = await self.client.get("/api/version")
                r.raise_for_status()
                version = r.json()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("desk front: %s/api/version did not answer (%s); bundle patches wait for it",
                            self.upstream, exc)
                return
            self.version = version if isinstance(version, dict) else {"release": None}
            release = self.version.get("release")
            self.report.release = release
            self.report.version_ok = release == LS_VERSION
            log.info("desk front: %s is Label Studio %s", self.upstream, release)
            if release != LS_VERSION:
                log.warning("desk front: Label Studio %s at %s is not the pinned %s "
                            "(pipeline.labelstudio.server.LS_VERSION): no bundle patch is applied",
                            release, self.upstream, LS_VERSION)
                self.patcher.disable(f"Label Studio {release}, not {LS_VERSION}")

    async def check(self) -> StartReport:
        """At start: the desk's version, then each patched build file fetched once (kept in the
        asset cache) and one log line per group: applied, or why not."""
        await self._read_version()
        for group in self.patcher.groups.values():
            if self.version is None:  # the desk does not answer (yet): nothing is patched meanwhile
                outcome = Outcome(group.name, group.path, False, "the desk's version is not known")
                self.patcher.record(outcome, quiet=True)
                continue
            try:
                await self.asset_entry(group.path)
            except httpx.HTTPError as exc:
                self.patcher.record(Outcome(group.name, group.path, False, f"not fetched ({exc})"))
        self.report.outcomes = [self.patcher.outcomes[g.name] for g in self.patcher.groups.values()
                                if g.name in self.patcher.outcomes]
        return self.report

    async def asset_entry(self, path: str) -> dict | httpx.Response:
        """A build asset from memory, fetched from the desk once (patched where a group applies);
        the desk's answer itself when it is not a 200. Keyed by the path alone: Label Studio
        serves its build files whatever the query says, so a query (``?v=1``, ``?v=2``, ...) is
        no new file and cannot fill the cache; only what the desk answers 200 (a file of its own
        build) is kept, and :class:`AssetCache` bounds that too."""
        entry = self.assets.get(path)
        if entry is not None:
            return entry
        waiting = self._fetching.get(path)
        if waiting is not None:  # someone fetches it already: their answer
            return await asyncio.shield(waiting)
        fetch = asyncio.get_running_loop().create_future()
        self._fetching[path] = fetch
        try:
            answer = await self._fetch_asset(path)
        except BaseException as exc:
            fetch.set_exception(exc)
            fetch.exception()  # read here: nobody else may be waiting
            raise
        else:
            fetch.set_result(answer)
            return answer
        finally:
            del self._fetching[path]

    async def _fetch_asset(self, path: str) -> dict | httpx.Response:
        import anyio

        r = await self.client.get(path)
        if r.status_code != 200:
            if self.patcher.wants(path):
                group = self.patcher.groups[path]
                self.patcher.record(Outcome(group.name, path, False, f"the desk answers {r.status_code}"))
            return r
        kind = r.headers.get("content-type", "application/octet-stream")
        body = r.content
        if self.patcher.wants(path):
            if self.version is None:
                await self._read_version()
            if self.version is None:
                group = self.patcher.groups[path]
                self.patcher.record(Outcome(group.name, path, False, "the desk's version is not known"), quiet=True)
            else:
                body = self.patcher.patch(path, body)
        gz = None
        if kind.startswith(_COMPRESSIBLE) and len(body) > 1024:
            gz = await anyio.to_thread.run_sync(lambda: gzip.compress(body, 6, mtime=0))
        hashed = _HASHED_NAME.search(path) is not None
        entry = {"type": kind, "body": body, "gz": gz, "etag": '"' + hashlib.sha256(body).hexdigest()[:20] + '"',
                 "cache": "public, max-age=31536000, immutable" if hashed else f"public, max-age={ASSET_MAX_AGE_S}"}
        if self.version is not None or not self.patcher.wants(path):  # unpatched for want of a version: ask again
            self.assets.put(path, entry)
        return entry



class AssetCache:
    """The front's build assets in memory, least recently used first out: at most ``max_entries``
    files and ``max_bytes`` (each file's body and its gzip counted). A file over a quarter of
    ``max_bytes`` is served but not kept."""

    def __init__(self, max_entries: int = ASSET_CACHE_ENTRIES, max_bytes: int = ASSET_CACHE_BYTES):
        from collections import OrderedDict

        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[str, dict] = OrderedDict()
        self.bytes = 0

    @staticmethod
    def size(entry: dict) -> int:
        return len(entry["body"]) + len(entry["gz"] or b"")

    def __len__(self) -> int:
        return len(self._entries)

    def paths(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, path: str) -> bool:
        return path in self._entries

    def get(self, path: str) -> dict | None:
        entry = self._entries.get(path)
        if entry is not None:
            self._entries.move_to_end(path)
        return entry

    def put(self, path: str, entry: dict) -> None:
        size = self.size(entry)
        if size > self.max_bytes // 4:
            return
        old = self._entries.pop(path, None)
        if old is not None:
            self.bytes -= self.size(old)
        self._entries[path] = entry
        self.bytes += size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            _, gone = self._entries.popitem(last=False)
            self.bytes -= self.size(gone)


def make_app(upstream: str, *, patches: tuple[PatchGroup, ...] | None = None,
             cache_entries: int = ASSET_CACHE_ENTRIES, cache_bytes: int = ASSET_CACHE_BYTES):
    """The front as an ASGI app (Starlette) in front of the one desk at ``upstream``.
    ``patches``: the bundle patch groups (default :data:`pipeline.labelstudio.front.patches.BUNDLE_PATCHES`).
    Its start (the app's lifespan) runs :meth:`Front.check`; ``app.state.front.report`` holds
    what it found."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    front = Front(upstream, patches, max_entries=cache_entries, max_bytes=cache_bytes)
    client = front.client
    slim_cols = not switched_off(NO_SLIM_COLUMNS_ENV)
    with_worker = not switched_off(NO_SW_ENV)
    keys_entries = {path: {"type": "application/javascript", "body": body, "gz": None,
                           "etag": '"' + hashlib.sha256(body).hexdigest()[:20] + '"',
                           "cache": f"public, max-age={ASSET_MAX_AGE_S}"} for path, body in keys_js().items()}
    register_js = (_STATIC / "sw-register.js").read_bytes().replace(b"__SW_PATH__", SW_PATH.encode())
    register_entry = {"type": "application/javascript", "body": register_js, "gz": None,
                      "etag": '"' + hashlib.sha256(register_js).hexdigest()[:20] + '"',
                      "cache": f"public, max-age={ASSET_MAX_AGE_S}"}
    landing_js = (_STATIC / "landing.js").read_bytes()
    landing_entry = {"type": "application/javascript", "body": landing_js, "gz": None,
                     "etag": '"' + hashlib.sha256(landing_js).hexdigest()[:20] + '"',
                     "cache": f"public, max-age={ASSET_MAX_AGE_S}"}
    sw_template = (_STATIC / "sw.js").read_text()  # read once: browsers ask for the worker on every page
    page_tags = ((f'<script src="{SW_REGISTER_PATH}"></script>' if with_worker else "")
                 + "".join(f'<script src="{path}"></script>' for path in keys_entries)
                 + f'<script src="{LANDING_PATH}"></script>').encode()

    def asset_response(request: Request, entry: dict) -> Response:
        headers = {"cache-control": entry["cache"], "etag": entry["etag"], "vary": "Accept-Encoding"}
        if request.headers.get("if-none-match") == entry["etag"]:
            return Response(status_code=304, headers=headers)
        body = entry["body"]
        if entry["gz"] is not None and "gzip" in request.headers.get("accept-encoding", ""):
            body, headers["content-encoding"] = entry["gz"], "gzip"
        return Response(body if request.method == "GET" else b"", headers=headers, media_type=entry["type"])

    async def asset(request: Request) -> Response:
        path = request.url.path
        entry = await front.asset_entry(path)
        if isinstance(entry, httpx.Response):
            return Response(entry.content, status_code=entry.status_code, media_type=entry.headers.get("content-type"))
        if entry["type"].startswith(_CODE_TYPES):
            # one address per file of the build (bounded as the build is): the first one asked for,
            # query and all (the app's pages ask for main.js?v=<version>, what the worker must match)
            query = request.url.query
            front.code_assets.setdefault(path, path + (f"?{query}" if query else ""))
        return asset_response(request, entry)

    async def service_worker(request: Request) -> Response:
        """Label Studio's service worker with the front's build cache (static/sw.js) in front of
        it, filled in with the desk's version and the build's scripts and styles seen so far."""
        if front.version is None:
            await front._read_version()
        if front.own_worker is None:
            try:
                own = await client.get(SW_PATH)
                own.raise_for_status()
            except httpx.HTTPError:
                return Response("Label Studio's service worker is not there", status_code=503)
            front.own_worker = own.text
        if front.version is None:
            return Response("Label Studio's version is not known", status_code=503)
        build = hashlib.sha256(json.dumps(front.version, sort_keys=True).encode()).hexdigest()[:16]
        code = sw_template.replace("__BUILD__", build).replace(
            "__ASSETS__", json.dumps(list(front.code_assets.values()))) + front.own_worker
        return Response(code, media_type="text/javascript", headers={"cache-control": "no-cache"})

    async def forward(request: Request):
        path = request.url.path
        if request.method in ("GET", "HEAD"):
            if path.startswith(_ASSET_PREFIXES):
                return await asset(request)
            if path in keys_entries:
                return asset_response(request, keys_entries[path])
            if path == LANDING_PATH:
                return asset_response(request, landing_entry)
            if with_worker and path == SW_PATH:
                return await service_worker(request)
            if with_worker and path == SW_REGISTER_PATH:
                return asset_response(request, register_entry)
        # everything else as it came; the caller's Host stays (Django checks it against Origin: CSRF)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        upstream_request = client.build_request(request.method, path, params=request.url.query or None,
                                                headers=headers, content=await request.body())
        try:
            r = await client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            return Response(f"the desk at {front.upstream} does not answer ({type(exc).__name__})",
                            status_code=502, media_type="text/plain")
        # every header line as it came (several Set-Cookie lines stay several lines)
        raw = [(k.lower(), v) for k, v in r.headers.multi_items() if k.lower() not in _HOP]
        ok_get = request.method == "GET" and r.status_code == 200
        page = ok_get and r.headers.get("content-type", "").startswith("text/html")
        columns = ok_get and slim_cols and path.rstrip("/") == _COLUMNS_PATH
        if page or columns:
            payload = await r.aread()  # decoded
            await r.aclose()
            if page:  # every page: the worker registered, the keys, the flags slimmed
                payload = slim_feature_flags(payload)
                at = payload.rfind(b"</body>")
                payload = payload[:at] + page_tags + payload[at:] if at >= 0 else payload + page_tags
            else:
                payload = slim_columns(payload)
            response = Response(payload, status_code=r.status_code)
            raw = [(k, v) for k, v in raw if k != "content-encoding"]
        else:
            async def stream():
                try:
                    async for chunk in r.aiter_raw():
                        yield chunk
                finally:
                    await r.aclose()
            response = StreamingResponse(stream(), status_code=r.status_code)
        kept = [(k, v) for k, v in response.raw_headers if k.decode() == "content-length"]
        response.raw_headers = kept + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in raw]
        return response

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await front.check()
        yield
        await client.aclose()

    app = Starlette(routes=[Route("/{path:path}", forward, methods=_METHODS)], lifespan=lifespan)
    app.state.front = front
    return app


def _log_to_stderr() -> None:
    """The start report on the console (uvicorn configures only its own loggers)."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        log.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


class FrontServer:
    """The front served by uvicorn in a background thread (tests, benchmarks)."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0, *,
                 patches: tuple[PatchGroup, ...] | None = None, cache_entries: int = ASSET_CACHE_ENTRIES,
                 cache_bytes: int = ASSET_CACHE_BYTES):
        import socket

        import uvicorn

        if port == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        self.host, self.port = host, port
        self.app = make_app(upstream, patches=patches, cache_entries=cache_entries, cache_bytes=cache_bytes)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=port, log_level="warning",
                                                     lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def report(self) -> StartReport:
        return self.app.state.front.report

    def start(self, timeout: float = 60) -> "FrontServer":
        """Serve, once the start check (:meth:`Front.check`) is done."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the desk's front did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def serve(upstream: str, host: str = "127.0.0.1", port: int = 8090) -> None:
    """Serve the front of the desk at ``upstream`` on ``host:port`` until interrupted (the CLI's
    ``rescue annotate front``); the start report is logged on stderr."""
    import uvicorn

    _log_to_stderr()
    uvicorn.run(make_app(upstream), host=host, port=port, log_level="warning", lifespan="on")


def main(argv: list[str] | None = None) -> None:
    """``python -m pipeline.labelstudio.front UPSTREAM [--host H] [--port P]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pipeline.labelstudio.front", description=main.__doc__)
    parser.add_argument("upstream", help="the desk's address, e.g. http://127.0.0.1:8081")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args(argv)
    serve(args.upstream, args.host, args.port)
