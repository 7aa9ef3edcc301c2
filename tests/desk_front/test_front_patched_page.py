"""A task page through the front with the editor patched (``desk_front.patches``) behaves as the
page as built, in headless Debian Chromium: a page of a round with dynamic choice lists (whose
hotkey re-binding a patch coalesces) binds exactly the keys it binds unpatched and shows the
same pre-filled annotation."""
from __future__ import annotations

import re

import pytest
from front_pages import emotion_project

from desk_front import FrontServer
from tests.helpers import EDITOR_STORE, browser_login, open_task

pytestmark = pytest.mark.slow
# every key mark Label Studio shows on a choice: the form, the choice's text and its key
_MARKS = """() => [...document.querySelectorAll('[id^=unit_] sup')].map(s =>
    s.closest('[id^=unit_]').id + ':' + s.closest('label, .ant-checkbox-wrapper, span').textContent)"""
_RESULTS = """() => { const a = window.Htx && window.Htx.annotationStore.selected;
  return a ? a.serializeAnnotation().length : -1; }"""


def test_a_patched_page_binds_the_same_keys_and_shows_the_same_prefill(ls_server, ls_client, ls_credentials,
                                                                       monkeypatch, chromium):
    project, task, prediction, people = emotion_project(ls_client, "keys", keys=True)

    def page_through(front: FrontServer) -> tuple[list[str], int, dict]:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            browser_login(page, front.url, ls_credentials["LABEL_STUDIO_USERNAME"],
                          ls_credentials["LABEL_STUDIO_PASSWORD"], timeout_ms=60_000)
            open_task(page, f"{front.url}/projects/{project.id}/data?task={task}", prefilled=True)
            page.wait_for_timeout(1000)
            return page.evaluate(_MARKS), page.evaluate(_RESULTS), page.evaluate(EDITOR_STORE)

    try:
        with monkeypatch.context() as env:
            env.setenv("RESCUE_NO_BUNDLE_PATCHES", "1")
            plain = FrontServer(ls_server.url).start()
            try:
                assert plain.report.applied() == []
                unpatched = page_through(plain)
            finally:
                plain.stop()
        front = FrontServer(ls_server.url).start()
        try:
            assert front.report.applied() and front.report.applied() == [o.group for o in front.report.outcomes]
            patched = page_through(front)
        finally:
            front.stop()
    finally:
        ls_client.request("DELETE", f"/api/projects/{project.id}/", "delete the test project")

    (unpatched_marks, unpatched_results, unpatched_store), (marks, results, store) = unpatched, patched
    # the page shows keys, on a people list too: the comparison compares something
    assert any(re.sub(r"\[\w\]$", "", mark.split(":", 1)[1]) in people for mark in unpatched_marks), unpatched_marks
    assert marks == unpatched_marks
    assert results == unpatched_results == len(prediction), {"unpatched": unpatched_store, "patched": store}
