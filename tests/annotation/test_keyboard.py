"""Keyboard-first through the desk's front (pipeline/labelstudio/front/static/keys.js), in headless Chromium on
the session's Label Studio: a whole window of a round by keyboard alone, from the project list into
the label stream (the benchmark's own driver, benchmarks/bench_annotator_ui.py --keyboard); a
refused submit says why next to the field; Ctrl+Enter submits from a focused checkbox (Label
Studio's own key ignores inputs); number keys in "Who is each voice?" change only that voice."""
from __future__ import annotations

import secrets
import time

import pyarrow as pa
import pytest
from ls_samples import make_sample
from test_voice_naming import neutral

from benchmarks.annotator_ui import driver
from benchmarks.annotator_ui.browser import form_ready
from pipeline.labelstudio.front import FrontServer
from pipeline import schemas
from pipeline.annotation import push
from pipeline.annotation.rounds import load_round
from pipeline.paths import DataRoot
from pipeline.store import write_parquet
from tests.helpers import SCREENSHOTS, browser_login


pytestmark = pytest.mark.slow
# what each list of each form holds ticked, in one look: {form id: [[names], ...] per .lsf-choices}
_TICKED = ("() => Object.fromEntries([...document.querySelectorAll('[id^=unit_], [id^=voice_]')].map(f => [f.id, "
           "[...f.querySelectorAll('.lsf-choices')].map(g => [...g.querySelectorAll('input')].filter(i => i.checked)"
           ".map(i => i.name))]))")


def _ticked_when_still(page, form: str) -> dict:
    """Every form's ticks once two looks 0.5 s apart agree and hold `form`: a task page may draw its
    forms anew after they first appear (slowly, on a loaded machine)."""
    last = None
    for _ in range(120):
        now = page.evaluate(_TICKED)
        if now == last and form in now:
            return now
        last = now
        time.sleep(0.5)
    raise AssertionError(f"the forms never held still with {form}: {last}")


@pytest.fixture
def browser_page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    return page


def _saved(client, pid: int, task_id: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.request("GET", f"/api/tasks/{task_id}/", "read the task").json().get("total_annotations"):
            return True
        time.sleep(0.5)
    return False


def test_a_window_by_keyboard_alone_submits_with_ctrl_enter_on_a_checkbox(ls_server, ls_client, ls_desks,
                                                                         new_annotators, browser_page):
    page, rnd = browser_page, load_round("strategy")
    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    sample = make_sample("synthetic/keyboard_001", "couple", 6)  # therapist rows 3 (no strategy), 6 (a strategy)
    report = push.push_round(ls_desks, "strategy", [sample], [email], k=1, prelabel=None)
    pid = report.projects[push.project_key("strategy", "couple", email)]
    front = FrontServer(ls_server.url).start()
    try:
        browser_login(page, front.url, email, password, timeout_ms=60_000)
        seen = {}

        def refused_then_checkbox(stage):
            if stage == "open":  # nothing filled: Ctrl+Enter is refused, in words, next to the field
                page.keyboard.press("Control+Enter")
                why = page.locator("#unit_0 .rescue-why")
                why.wait_for()
                seen["why"] = why.inner_text()
                # the reason stands right before the field it names, and the focus is in that field
                in_field = ("() => document.activeElement.closest('.lsf-choices') === "
                            "document.querySelector('#unit_0 .rescue-why').nextElementSibling")
                page.wait_for_function(in_field)
                # and it stays there: the dialog's closing gives the focus back late on a slow machine
                time.sleep(0.8)
                assert page.evaluate(in_field), page.evaluate("() => document.activeElement.outerHTML.slice(0, 200)")
                # the visible focus ring: round the focused choice's label
                seen["ring"] = page.evaluate("() => getComputedStyle(document.activeElement.closest('label')).outlineStyle")
                # the window afresh (the same task: still unlabeled), its first Enter for form 0 again
                page.reload()
                form_ready(page)
                page.wait_for_load_state("networkidle")
            else:  # filled: back onto a choice list by keys, then Ctrl+Enter from that checkbox
                for _ in range(10):
                    if page.evaluate("() => document.activeElement.type") == "checkbox":
                        break
                    page.keyboard.press("Shift+Tab")
                seen["focus"] = page.evaluate("() => document.activeElement.type")

        got = driver.keyboard_window(page, front.url, pid, rnd, push.input_values(rnd, sample), hook=refused_then_checkbox)
        page.screenshot(path=str(SCREENSHOTS / "keyboard_strategy.png"), full_page=True)
        assert seen["why"].startswith("Strategy is missing"), seen
        assert seen["ring"] == "solid", seen
        assert seen["focus"] == "checkbox", seen
        assert got["left"] == [], got  # every field as wanted, by keys alone
        assert got["tabs"] <= got["units"], got  # each list one Tab stop: at most one Tab a row
        assert _saved(ls_client, pid, got["task"]), "Ctrl+Enter on a focused checkbox did not submit"
    finally:
        front.stop()


def test_number_keys_in_the_voice_block_change_only_that_voice(ls_server, ls_client, ls_desks, new_annotators,
                                                                tmp_path, browser_page):
    page = browser_page
    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    script, draft, table = neutral("synthetic/keyboard_voices", "couple", 7)
    write_parquet(pa.Table.from_pylist(table, schema=schemas.DRAFT_VOICES),
                  DataRoot(tmp_path).draft_voices(draft["sample_id"]))
    report = push.push_round(ls_desks, "transcript", [draft], [email], k=1, root=DataRoot(tmp_path))
    pid = report.projects[push.project_key("transcript", "couple", email)]
    task = ls_client.find_tasks(pid, "sample_id", draft["sample_id"])[0]
    front = FrontServer(ls_server.url).start()
    try:
        browser_login(page, front.url, email, password, timeout_ms=60_000)
        page.goto(f"{front.url}/projects/{pid}/data?task={task['id']}")
        page.locator("#voice_1 .lsf-choices input").first.wait_for()
        page.wait_for_load_state("networkidle")
        before = _ticked_when_still(page, "voice_1")
        # the keyboard's way into the list: focus on its one Tab stop (then the key, as a person would)
        page.locator("#voice_1 .lsf-choices input[tabindex='0']").focus()
        options = page.evaluate("() => [...document.querySelectorAll('#voice_1 .lsf-choices input')].map(i => i.name)")
        page.keyboard.press("2")
        page.wait_for_function("n => document.querySelector(`#voice_1 input[name='${n}']`).checked", arg=options[1])
        after = _ticked_when_still(page, "voice_1")
        assert after["voice_1"] == [[options[1]], []]  # its list, and its "accept" box (no name proposed: hidden)
        assert after.keys() == before.keys()
        # every other voice and every row as it was (before: row 1's speaker changed, off-screen)
        assert {f: v for f, v in after.items() if f != "voice_1"} == {f: v for f, v in before.items() if f != "voice_1"}
    finally:
        front.stop()
