"""A task page through the front with the editor patched (``pipeline.labelstudio.front.patches``) behaves as the
page as built, in headless Debian Chromium: a page of a round with dynamic choice lists (whose
hotkey re-binding a patch coalesces) builds the same tree of tags (whose children a patch
dispatches instead of validating), binds exactly the keys it binds unpatched and shows the same
pre-filled annotation; a submit in the label stream builds only the next task's editor and
stores the same answers."""
from __future__ import annotations

import re

import pytest
from front_pages import emotion_project

from pipeline.labelstudio.front import FrontServer
from tests.helpers import EDITOR_STORE, browser_login, open_task

pytestmark = pytest.mark.slow
# every key mark Label Studio shows on a choice: the form, the choice's text and its key
_MARKS = """() => [...document.querySelectorAll('[id^=unit_] sup')].map(s =>
    s.closest('[id^=unit_]').id + ':' + s.closest('label, .ant-checkbox-wrapper, span').textContent)"""
_RESULTS = """() => { const a = window.Htx && window.Htx.annotationStore.selected;
  return a ? a.serializeAnnotation().length : -1; }"""
# the editor's state tree of the selected annotation as a snapshot, less its made-up ids
_TREE = """() => JSON.stringify(Htx.annotationStore.selected.root.toJSON(),
  (k, v) => (k === 'id' || k === 'pid') ? undefined : v)"""


def test_a_patched_page_builds_the_same_tree_binds_the_same_keys_and_shows_the_same_prefill(
        ls_server, ls_client, ls_credentials, monkeypatch, chromium):
    project, task, prediction, people = emotion_project(ls_client, "keys", keys=True)

    def page_through(front: FrontServer) -> tuple[list[str], int, dict, str]:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            browser_login(page, front.url, ls_credentials["LABEL_STUDIO_USERNAME"],
                          ls_credentials["LABEL_STUDIO_PASSWORD"], timeout_ms=60_000)
            open_task(page, f"{front.url}/projects/{project.id}/data?task={task}", prefilled=True)
            page.wait_for_timeout(1000)
            return page.evaluate(_MARKS), page.evaluate(_RESULTS), page.evaluate(EDITOR_STORE), page.evaluate(_TREE)

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

    (unpatched_marks, unpatched_results, unpatched_store, unpatched_tree), (marks, results, store, tree) = \
        unpatched, patched
    # the same tree of tags (children dispatched, not validated): none (null) where a tag has none
    assert '"children":null' in unpatched_tree and '"type":"choice"' in unpatched_tree
    assert tree == unpatched_tree
    # the page shows keys, on a people list too: the comparison compares something
    assert any(re.sub(r"\[\w\]$", "", mark.split(":", 1)[1]) in people for mark in unpatched_marks), unpatched_marks
    assert marks == unpatched_marks
    assert results == unpatched_results == len(prediction), {"unpatched": unpatched_store, "patched": store}


# each time the editor's forms are put into the page (a build of an annotation's view), counted from
# the page's start; React puts a whole view in at once
_COUNT_BUILDS = """(() => { window.__builds = 0; new MutationObserver(rs => { for (const r of rs) for (const n of r.addedNodes)
  if (n.nodeType === 1 && (n.matches('.lsf-choices') || n.querySelector('.lsf-choices'))) window.__builds++; })
  .observe(document, {childList: true, subtree: true}); })()"""
# in the order they happen: the save asked of the desk (its POST of the annotation) and the editor's
# forms taken out of the page ("down")
_SAVE_ORDER = """(() => { window.__order = []; const f = window.fetch;
  window.fetch = function (url, init) { if (/\\/annotations\\/?(\\?|$)/.test(String(url)) && init && init.method === 'POST')
    window.__order.push('save'); return f.apply(this, arguments); };
  new MutationObserver(rs => { for (const r of rs) for (const n of r.removedNodes)
    if (n.nodeType === 1 && (n.matches('.lsf-choices') || n.querySelector('.lsf-choices'))) window.__order.push('down'); })
  .observe(document, {childList: true, subtree: true}); })()"""
_STREAM_CONFIG = ('<View><Text name="text" value="$text"/><Choices name="pick" toName="text" choice="single">'
                  '<Choice value="alpha"/><Choice value="beta"/></Choices></View>')
_DONE = "All tasks in the queue have been completed"


def test_a_submit_in_the_stream_builds_the_next_task_only(ls_server, ls_client, ls_credentials, monkeypatch,
                                                          chromium):
    """Label Studio's data manager builds the editor of the task just submitted twice more on the way
    to the next one (its loader lifted after the save and after the next task's answer); patched,
    each submit builds the next task once, and the stream's end shows "nothing to label" as built;
    the save is asked for before the editor is taken down (as built: after). What is stored is the same."""
    def stream(front: FrontServer, name: str) -> tuple[list[int], list, list[list[str]]]:
        project = ls_client.ensure_project(f"rescue-test:desk-front-stream-{name}", f"stream {name}", _STREAM_CONFIG)
        try:
            ids = ls_client.import_tasks(project.id, [{"data": {"text": f"task {i}"}} for i in range(3)])
            builds, orders = [], []
            with chromium() as browser:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(120_000)
                page.add_init_script(_COUNT_BUILDS)
                page.add_init_script(_SAVE_ORDER)
                browser_login(page, front.url, ls_credentials["LABEL_STUDIO_USERNAME"],
                              ls_credentials["LABEL_STUDIO_PASSWORD"], timeout_ms=60_000)
                page.goto(f"{front.url}/projects/{project.id}/data?labeling=1")
                for i in range(len(ids)):
                    page.wait_for_function("() => window.Htx && Htx.task && document.querySelector('.lsf-choices input')")
                    old = page.evaluate("() => Htx.task.id")
                    page.locator(".lsf-choices label", has_text="alpha").click()
                    page.evaluate("() => { window.__builds = 0; window.__order = []; }")
                    page.click('button[aria-label="Submit current annotation"]')
                    if i < len(ids) - 1:
                        page.wait_for_function("""(old) => window.Htx && Htx.task && Htx.task.id !== old
                          && document.querySelector('.lsf-choices input')""", arg=old)
                    else:
                        page.get_by_text(_DONE).wait_for()
                    page.wait_for_timeout(500)  # anything still coming would be counted
                    builds.append(page.evaluate("() => window.__builds"))
                    orders.append(page.evaluate("() => window.__order.filter((x, i, a) => a.indexOf(x) === i)"))
            stored = [[r["value"] for a in ls_client.request("GET", f"/api/tasks/{t}/", "read a task").json()["annotations"]
                       for r in a["result"]] for t in ids]
            return builds, stored, orders
        finally:
            ls_client.request("DELETE", f"/api/projects/{project.id}/", "delete the test project")

    with monkeypatch.context() as env:
        env.setenv("RESCUE_NO_BUNDLE_PATCHES", "1")
        plain = FrontServer(ls_server.url).start()
        try:
            unpatched = stream(plain, "plain")
        finally:
            plain.stop()
    front = FrontServer(ls_server.url).start()
    try:
        assert "datamanager-submit-1.23.2" in front.report.applied()
        patched = stream(front, "patched")
    finally:
        front.stop()
    (unpatched_builds, unpatched_stored, unpatched_orders), (builds, stored, orders) = unpatched, patched
    # as built the editor is taken down before the save is asked for; patched the save is asked first
    assert unpatched_orders == [["down", "save"]] * 3 and orders == [["save", "down"]] * 3, (unpatched_orders, orders)
    # as built, the last submit builds the submitted task's editor once more before "nothing to label":
    # one build puts k lists in; every other submit builds it twice more, then the next task's
    k = unpatched_builds[-1]
    assert k >= 1 and all(n >= 3 * k for n in unpatched_builds[:-1]), unpatched_builds
    assert builds == [k, k, 0], {"patched": builds, "unpatched": unpatched_builds}
    assert stored == unpatched_stored == [[{"choices": ["alpha"]}]] * 3
