"""The gate's service worker, in headless Debian Chromium through a real gate and Label Studio:
the login page registers it; once the gate has seen a task page, the worker caches Label
Studio's build (scripts and styles) and the next page gets them from its cache; Label Studio's
own worker (presigned media links) is still part of it."""
from __future__ import annotations

import secrets
import shutil

import httpx
import pytest
from ls_samples import CHROMIUM, CHROMIUM_ARGS, make_sample

from pipeline.annotation import push
from pipeline.annotation.proxy import SW_PATH, ProxyServer

pytestmark = pytest.mark.slow
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


def test_login_page_registers_the_worker_which_serves_the_build_from_its_cache(ls_server, ls_client, new_annotators,
                                                                              ls_credentials):
    playwright = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian chromium is not installed (scripts/setup.sh installs it)")
    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    sample = make_sample("synthetic/service_worker_001", "couple", 6)
    report = push.push_round(ls_client, "emotion", [sample], [email], k=1, prelabel=None)
    pid = report.projects[push.project_key("emotion", "couple", email)]
    task = ls_client.find_tasks(pid, "sample_id", sample["sample_id"])[0]
    gate = ProxyServer(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"]).start()
    try:
        worker = httpx.get(f"{gate.url}{SW_PATH}").text
        assert "rescue-ls-" in worker and "handlePresignedUrl" in worker  # ours in front of Label Studio's
        with playwright.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{gate.url}/user/login/")
            first = page.evaluate(_SETTLED_CACHE)  # registered by the login page itself (no app there)
            assert first["script"] == f"{gate.url}{SW_PATH}" and len(first["names"]) == 1
            page.fill("input[name=email]", email)
            page.fill("input[name=password]", password)
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "/user/login" not in url, timeout=60_000)
            url = f"{gate.url}/projects/{pid}/data?task={task['id']}"
            page.goto(url)
            page.wait_for_selector("#unit_0 .lsf-choices", timeout=120_000)
            page.wait_for_load_state("networkidle")
            # the gate has now seen the app's scripts; the worker the next check finds caches them
            cached = page.evaluate(_SETTLED_CACHE)
            main = [u for u in cached["urls"] if u.startswith("/react-app/main.js")]
            assert main and any(u.startswith("/react-app/") and u.endswith(".css") for u in cached["urls"])
            assert len(cached["urls"]) > len(first["urls"])
            # the next page: the app's main script comes from the worker's cache, and the form shows
            scripts = {}
            page.on("response", lambda r: scripts.setdefault(r.url.removeprefix(gate.url), r.from_service_worker))
            page.goto(url)
            page.wait_for_selector("#unit_0 .lsf-choices", timeout=120_000)
            assert scripts.get(main[0]) is True, scripts
            assert scripts.get(f"/api/tasks/{task['id']}?project={pid}") is not True  # data never from the cache
            context.close()
            browser.close()
    finally:
        gate.stop()
