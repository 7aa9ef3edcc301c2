"""The gate's patches of Label Studio's editor bundle (``proxy.BUNDLE_PATCHES``), through a real
gate and Label Studio in headless Debian Chromium: each patch's text is in the installed Label
Studio's build exactly once (so it applies: an upgrade that changes it fails here, not silently),
the gate serves the build patched (``RESCUE_NO_BUNDLE_PATCHES=1``: as Label Studio gives it), and a
page of a round with dynamic choice lists binds exactly the keys it binds unpatched and shows the
same pre-filled annotation, built once instead of twice, for a task on the data manager's first
page of tasks and one past it. What the patches change (which annotation a page builds and shows)
is also lived through the gate: the label stream, a draft kept, a submitted annotation shown."""
from __future__ import annotations

import re
import shutil
import warnings

import httpx
import pytest
from ls_samples import CHROMIUM, CHROMIUM_ARGS, browser_login, make_sample

from pipeline.annotation import ls_config, push
from pipeline.annotation.proxy import BUNDLE_PATCHES, TASK_LIST_PAGE, ProxyServer
from pipeline.annotation.rounds import load_round
from pipeline.annotation.server import DEFAULT_VENV

pytestmark = pytest.mark.slow
# every key mark Label Studio shows on a choice: the form, the choice's text and its key
_MARKS = """() => [...document.querySelectorAll('[id^=unit_] sup')].map(s =>
    s.closest('[id^=unit_]').id + ':' + s.closest('label, .ant-checkbox-wrapper, span').textContent)"""

# each annotation the editor selects, as it tells the data manager (onSelectAnnotation)
_COUNT_SELECTED = """(() => { let LS; window.__selected = [];
  Object.defineProperty(window, 'LabelStudio', {configurable: true, get() { return LS; }, set(v) {
    LS = class extends v { constructor(root, options) {
      const told = options.onSelectAnnotation;
      options.onSelectAnnotation = function (annotation, ...rest) {
        window.__selected.push(annotation && annotation.id);
        return told && told.call(this, annotation, ...rest); };
      super(root, options); } }; } }); })()"""


# the selected annotation's results, once it has any (Label Studio as built shows them only after
# its second set-up); with the editor's own counts, for a warning
_PREFILL_SHOWN = """() => { const selected = window.Htx && window.Htx.annotationStore.selected;
  return !!selected && selected.serializeAnnotation().length > 0; }"""
_EDITOR = """() => { const s = window.Htx && window.Htx.annotationStore;
  return s && {annotations: s.annotations.length, predictions: s.predictions.length,
               results: s.selected && s.selected.serializeAnnotation().length}; }"""


# the names of the checked choices of the first form, and the selected annotation's id (pk once
# saved), draft id and number of results
_FIRST_FORM = """() => { const a = window.Htx && window.Htx.annotationStore.selected;
  return {checked: [...document.querySelectorAll('#unit_0 .lsf-choices input:checked')].map(i => i.name),
          pk: a && a.pk, draft: a && a.draftId, results: a ? a.serializeAnnotation().length : -1}; }"""


def _open_task(page, url: str, playwright) -> dict:
    """Open a task page and let it settle (the pre-filled values shown, if any come, and the
    network idle): its first form (:data:`_FIRST_FORM`) and how many annotations the editor built
    and selected (each selection reported to the data manager, :data:`_COUNT_SELECTED`)."""
    page.goto(url)
    page.wait_for_selector("#unit_0 .lsf-choices", timeout=120_000)
    try:
        page.wait_for_function(_PREFILL_SHOWN, timeout=30_000)
    except playwright.TimeoutError:
        pass  # not shown at all: the results say so
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)
    return {**page.evaluate(_FIRST_FORM), "built": len(set(page.evaluate("() => window.__selected")))}


def _build_files() -> dict[bytes, str]:
    """Each patch's text -> the build script of the installed Label Studio that holds it."""
    build = next(DEFAULT_VENV.glob("lib/python3*/site-packages/web/dist/apps/labelstudio"), None)
    if build is None:
        pytest.fail("Label Studio's build is not installed: run scripts/setup.sh")
    found = {}
    for path in sorted(build.glob("*.js")):
        body = path.read_bytes()
        for old, _ in BUNDLE_PATCHES:
            if old in body:
                assert body.count(old) == 1, f"{path.name} holds a patch's text more than once"
                found[old] = path.name
    return found


def _control_project(ls_client, new_annotators, name: str):
    """A control project opened by the admin (whom the gate lets through): an emotion window
    without the config's hidden key holders, so that Label Studio gives its choices keys, those
    of the people lists ("who feels it") among them, which are loaded from the task data
    (dynamic choices, whose loading a patch changes). The task with the emotion round's
    prediction twice: first in the project (on the task list's first page, which a page of it
    loads first) and after a page's worth of other tasks (not on it: a page reloaded or a task
    link opened late in a batch), where the data manager takes another path. Returns the
    project, the two tasks' ids, the prediction's results and the people."""
    [email] = new_annotators(1)
    sample = make_sample(f"synthetic/gate_patches_{name}", "family", 8)
    report = push.push_round(ls_client, "emotion", [sample], [email], k=1, prelabel=None)
    pushed = ls_client.find_tasks(report.projects[push.project_key("emotion", "family", email)],
                                  "sample_id", sample["sample_id"])[0]
    config = ls_config.render_config(load_round("emotion"), "family").replace(
        "\n".join(ls_config.hotkey_sink()) + "\n", "")
    control = ls_client.ensure_project(f"rescue-test:gate-patches-{name}", "gate patches control", config)
    predictions = ls_client.request("GET", f"/api/tasks/{pushed['id']}", "read the pushed task").json()["predictions"]
    assert predictions and predictions[0]["result"], "the emotion round pre-fills its defaults"
    control_task = {"data": pushed["data"], "predictions": [{"result": predictions[0]["result"]}]}
    ls_client.import_tasks(control.id, [control_task] + [{"data": pushed["data"]}] * TASK_LIST_PAGE + [control_task])
    tasks = sorted(ls_client.tasks(control.id), key=lambda t: t["id"])
    return control, (tasks[0]["id"], tasks[-1]["id"]), predictions[0]["result"], \
        {e["value"] for e in tasks[0]["data"]["entities"]}


def test_the_gate_patches_the_editor_and_a_page_binds_the_same_keys(ls_server, ls_client, ls_credentials,
                                                                   new_annotators, monkeypatch):
    playwright = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian chromium is not installed (scripts/setup.sh installs it)")
    files = _build_files()
    missing = [old[:60] for old, _ in BUNDLE_PATCHES if old not in files]
    assert not missing, f"Label Studio's build no longer holds these patched spots (revisit BUNDLE_PATCHES): {missing}"

    control, (listed, unlisted), prediction, people = _control_project(ls_client, new_annotators, "keys")

    def marks_through(gate: ProxyServer, task: int, retry_unfilled: bool = False) -> tuple[list[str], int, int]:
        """The key marks of the task's page, how many annotations the editor built and selected
        (each selection reported to the data manager) and the results of the one on show."""
        with playwright.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.add_init_script(_COUNT_SELECTED)
                browser_login(page, gate.url, ls_credentials["LABEL_STUDIO_USERNAME"],
                              ls_credentials["LABEL_STUDIO_PASSWORD"], timeout_ms=60_000)
                shown = _open_task(page, f"{gate.url}/projects/{control.id}/data?task={task}", playwright)
                if not shown["results"] and retry_unfilled:
                    unfilled = f"the editor: {page.evaluate(_EDITOR)}, selected {page.evaluate('() => window.__selected')}"
                else:
                    return page.evaluate(_MARKS), shown["built"], shown["results"]
            finally:
                browser.close()
        # One CI run saw Label Studio as built (not through the gate) select its second annotation
        # without the pre-fill (not reproduced here in 5 runs, 4 of them beside busy loops); the
        # voice-naming test saw the same once. Say what the editor held and open the page once more; the
        # gate's page gets no second try.
        warnings.warn(f"Label Studio as built showed no pre-fill ({unfilled}); the page is opened again")
        return marks_through(gate, task, retry_unfilled=False)

    token = ls_credentials["LABEL_STUDIO_USER_TOKEN"]
    try:
        with monkeypatch.context() as env:
            env.setenv("RESCUE_NO_BUNDLE_PATCHES", "1")
            plain = ProxyServer(ls_server.url, token).start()
            try:
                for old, name in files.items():
                    assert old in httpx.get(f"{plain.url}/react-app/{name}", timeout=60).content
                unpatched = [marks_through(plain, t, retry_unfilled=True) for t in (listed, unlisted)]
            finally:
                plain.stop()
        gate = ProxyServer(ls_server.url, token).start()
        try:
            for old, new in BUNDLE_PATCHES:
                served = httpx.get(f"{gate.url}/react-app/{files[old]}", timeout=60).content
                assert old not in served and served.count(new) == 1
            patched = [marks_through(gate, t) for t in (listed, unlisted)]
        finally:
            gate.stop()
    finally:
        ls_client.request("DELETE", f"/api/projects/{control.id}/", "delete the control project")

    for where, (unpatched_marks, built_unpatched, shown_unpatched), (marks, built, shown) in zip(
            ("listed", "unlisted"), unpatched, patched):
        # the control shows keys, on a people list too: the check below compares something
        assert any(re.sub(r"\[\w\]$", "", mark.split(":", 1)[1]) in people for mark in unpatched_marks), unpatched_marks
        assert marks == unpatched_marks, where
        # Label Studio as built makes the annotation twice (its data manager's second set-up);
        # through the gate once, pre-filled as before
        assert built_unpatched == 2 and built == 1, (where, built_unpatched, built)
        assert shown == shown_unpatched == len(prediction), (where, shown, shown_unpatched)


def test_through_the_gate_a_page_keeps_drafts_and_shows_submitted_work(ls_server, ls_client, ls_credentials,
                                                                      new_annotators):
    """What the hand-over patches change (which annotation a page builds and shows), lived through
    the gate for a task on the task list's first page and one that is not: the label stream
    opens the first task pre-filled, built once; a choice changed is kept as a draft and shown
    again when the page is reopened; once submitted, the page shows the submitted annotation."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian chromium is not installed (scripts/setup.sh installs it)")
    control, tasks, prediction, _ = _control_project(ls_client, new_annotators, "work")
    admin = ls_credentials["LABEL_STUDIO_USERNAME"], ls_credentials["LABEL_STUDIO_PASSWORD"]

    def task_json(task: int) -> dict:
        return ls_client.request("GET", f"/api/tasks/{task}", "read a control task").json()

    gate = ProxyServer(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"]).start()
    try:
        with playwright.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.add_init_script(_COUNT_SELECTED)
                browser_login(page, gate.url, *admin, timeout_ms=60_000)

                stream = _open_task(page, f"{gate.url}/projects/{control.id}/data?labeling=1", playwright)
                assert stream["built"] == 1 and stream["results"] == len(prediction), stream
                for task in tasks:
                    url = f"{gate.url}/projects/{control.id}/data?task={task}"
                    shown = _open_task(page, url, playwright)
                    assert shown["built"] == 1 and shown["results"] == len(prediction) and shown["pk"] is None, shown
                    # change the first form's first list: pick a choice not picked
                    picked = page.locator("#unit_0 .lsf-choices").first.locator("input:not(:checked)").first
                    name = picked.get_attribute("name")
                    picked.click()
                    page.wait_for_function("n => [...document.querySelectorAll('#unit_0 .lsf-choices input:checked')]"
                                           ".some(i => i.name === n)", arg=name)
                    # Label Studio saves a draft 5 s after the last change
                    for _ in range(100):
                        if drafts := task_json(task)["drafts"]:
                            break
                        page.wait_for_timeout(200)
                    assert drafts, f"no draft saved for task {task}"
                    again = _open_task(page, url, playwright)
                    assert again["built"] == 1 and name in again["checked"] and again["draft"], (task, name, again)
                    # submitted (as the page would, with its draft; the form's other required
                    # fields are left as pre-filled, which the page itself would not submit)
                    result = page.evaluate("() => window.Htx.annotationStore.selected.serializeAnnotation()")
                    submitted = ls_client.request("POST", f"/api/tasks/{task}/annotations/", "submit the draft",
                                                  json={"result": result, "draft_id": again["draft"]}).json()
                    assert not task_json(task)["drafts"], "the submitted draft is gone"
                    after = _open_task(page, url, playwright)
                    assert after["pk"] == str(submitted["id"]) and name in after["checked"], (task, after, submitted["id"])
                    assert after["results"] == len(submitted["result"]) and after["built"] == 1, (task, after)
            finally:
                browser.close()
    finally:
        gate.stop()
        ls_client.request("DELETE", f"/api/projects/{control.id}/", "delete the control project")
