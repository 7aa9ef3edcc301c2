"""The front's service worker and asset cache, in headless Debian Chromium through a real front
and Label Studio: the login page registers the worker; once the front has seen a task page, the
worker caches Label Studio's build (scripts and styles) and the next page gets them from its
cache; Label Studio's own worker (presigned media links) is still part of it. The build assets
come from the front's memory with cache headers, gzip and 304s."""
from __future__ import annotations

import gzip

import httpx
import pytest
from front_pages import emotion_project

from pipeline.labelstudio.front import FrontServer
from pipeline.labelstudio.front.app import SW_PATH, SW_REGISTER_PATH

# the page's registration once no worker version is installing or waiting, and the build cache's keys
_SETTLED_CACHE = """async () => {
    const reg = await navigator.serviceWorker.ready;
    await reg.update();
    for (let i = 0; i < 600 && (reg.installing || reg.waiting); i++) await new Promise(r => setTimeout(r, 100));
    const names = (await caches.keys()).filter(n => n.startsWith("rescue-ls-"));
    const urls = [];
    for (const n of names) for (const r of await (await caches.open(n)).keys()) urls.push(new URL(r.url).pathname + new URL(r.url).search);
    return {script: reg.active && reg.active.scriptURL, names, urls};
}"""


def test_build_assets_come_from_the_fronts_cache(ls_server):
    front = FrontServer(ls_server.url).start()
    try:
        page = httpx.get(f"{front.url}/user/login/", timeout=60)
        assert f'<script src="{SW_REGISTER_PATH}"></script>' in page.text
        script = next(p for p in ("/react-app/main.js", "/static/js/main.js") if
                      httpx.get(f"{ls_server.url}{p}", timeout=60).status_code == 200)
        built = httpx.get(f"{ls_server.url}{script}", timeout=60).content
        first = httpx.get(f"{front.url}{script}", headers={"accept-encoding": "gzip"}, timeout=60)
        assert first.status_code == 200 and first.headers["content-encoding"] == "gzip"
        assert first.content == built  # (this file carries no patch) httpx decodes the gzip
        assert "max-age" in first.headers["cache-control"] and first.headers["etag"]
        again = httpx.get(f"{front.url}{script}", headers={"if-none-match": first.headers["etag"]}, timeout=60)
        assert again.status_code == 304 and not again.content
        raw = httpx.get(f"{front.url}{script}", headers={"accept-encoding": "identity"}, timeout=60)
        assert raw.content == built and "content-encoding" not in raw.headers
        with httpx.stream("GET", f"{front.url}{script}", headers={"accept-encoding": "gzip"}, timeout=60) as r:
            compressed = b"".join(r.iter_raw())
        assert len(compressed) < len(built) and gzip.decompress(compressed) == built
        missing = httpx.get(f"{front.url}/react-app/no-such-file.js", timeout=60)
        assert missing.status_code == httpx.get(f"{ls_server.url}/react-app/no-such-file.js").status_code != 200
    finally:
        front.stop()


@pytest.mark.slow
def test_login_page_registers_the_worker_which_serves_the_build_from_its_cache(ls_server, ls_client, ls_credentials,
                                                                              chromium):
    project, task, _, _ = emotion_project(ls_client, "service-worker", "couple")
    front = FrontServer(ls_server.url).start()
    try:
        worker = httpx.get(f"{front.url}{SW_PATH}").text
        assert "rescue-ls-" in worker and "handlePresignedUrl" in worker  # ours in front of Label Studio's
        with chromium() as browser:
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{front.url}/user/login/")
            first = page.evaluate(_SETTLED_CACHE)  # registered by the login page itself (no app there)
            assert first["script"] == f"{front.url}{SW_PATH}" and len(first["names"]) == 1
            page.fill("input[name=email]", ls_credentials["LABEL_STUDIO_USERNAME"])
            page.fill("input[name=password]", ls_credentials["LABEL_STUDIO_PASSWORD"])
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "/user/login" not in url, timeout=60_000)
            url = f"{front.url}/projects/{project.id}/data?task={task}"
            page.goto(url)
            page.wait_for_selector("#unit_0 .lsf-choices", timeout=120_000)
            page.wait_for_load_state("networkidle")
            # the front has now seen the app's scripts; the worker the next check finds caches them
            cached = page.evaluate(_SETTLED_CACHE)
            main = [u for u in cached["urls"] if u.startswith("/react-app/main.js")]
            assert main and any(u.startswith("/react-app/") and u.endswith(".css") for u in cached["urls"])
            assert len(cached["urls"]) > len(first["urls"])
            # the next page: the app's main script comes from the worker's cache, and the form shows
            scripts = {}
            page.on("response", lambda r: scripts.setdefault(r.url.removeprefix(front.url), r.from_service_worker))
            page.goto(url)
            page.wait_for_selector("#unit_0 .lsf-choices", timeout=120_000)
            assert scripts.get(main[0]) is True, scripts
            assert scripts.get(f"/api/tasks/{task}?project={project.id}") is not True  # data never from the cache
            context.close()
    finally:
        front.stop()
        ls_client.request("DELETE", f"/api/projects/{project.id}/", "delete the test project")
