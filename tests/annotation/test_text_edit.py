"""Correcting a pre-filled text through the desk's front: the text box stays open while the
person types, and that text's proposal is accepted once the text is left (its own "accept" box
ticked, not the speaker's or the addressee's: an edit accepts the field edited only).

Found by ``benchmarks/bench_annotator_ui.py`` (its key echo on the transcript round timed out on
some pages): the front ticked the box at the first key typed into a pre-filled text, with a
click, and Label Studio closes a text being edited on any click anywhere. The text box closed
under the person's fingers and the rest of their typing went to the page. And Label Studio's own
Tab out of a text being edited closes it without keeping what was typed: the front keeps it first.

Real Label Studio (the session's server), the real front, headless Chromium.
"""
from __future__ import annotations

import json
import secrets

import pytest

from pipeline.annotation import pull, push
from tests.annotation.ls_samples import make_sample
from tests.helpers import SCREENSHOTS, browser_login, open_task, wait_saved
from pipeline.paths import DataRoot

# each form's "accept" boxes: [text, speaker, addressee] ticked
_CHECKED = """() => [0, 1].map(i => ['dialogue_cleaned', 'primary_speaker', 'target'].map(f =>
  document.querySelector(`#proposal-${f}_${i} input`).checked))"""
_NONE, _TEXT = [False, False, False], [True, False, False]
_EDITED_VALUE = "() => document.activeElement && document.activeElement.tagName === 'TEXTAREA' ? document.activeElement.value : null"


def _edit_first_text(page, form: int) -> str:
    """Open form ``form``'s pre-filled text for editing; its text before the edit."""
    before = page.locator(f"#unit_{form} [data-testid=htx-textbox-content]").first.inner_text()
    page.locator(f"#unit_{form} [data-testid=htx-textbox-edit-button]").first.click()
    page.wait_for_function("() => document.activeElement && document.activeElement.tagName === 'TEXTAREA'")
    page.keyboard.press("End")
    return before


@pytest.mark.slow
def test_typing_in_a_prefilled_text_keeps_it_open_and_accepts_that_text_only_when_left(
        ls_server, ls_client, ls_desks, new_annotators, tmp_path, chromium):
    from pipeline.labelstudio.front import FrontServer

    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    drafted = make_sample("text_edit/t01", "couple", 2)
    report = push.push_round(ls_desks, "transcript", [drafted], [email], k=1)  # the segmenter's drafts pre-filled
    pid = report.projects[push.project_key("transcript", "couple", email)]
    task = ls_client.tasks(pid)[0]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    front = FrontServer(ls_server.url).start()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 2000})
        try:
            browser_login(page, front.url, email, password, timeout_ms=60_000)
            open_task(page, f"{front.url}/projects/{pid}/data?task={task['id']}", prefilled=True)
            assert page.evaluate(_CHECKED) == [_NONE, _NONE]

            # form 0: typed at full speed, the box stays open and holds every key; left by Tab, ticked
            first = _edit_first_text(page, 0)
            page.keyboard.type(" amen", delay=0)
            assert page.evaluate(_EDITED_VALUE) == first + " amen", "the text box closed while typing"
            assert page.evaluate(_CHECKED) == [_NONE, _NONE]  # not yet: the text is still being typed
            page.keyboard.press("Tab")
            page.wait_for_function(f"() => ({_CHECKED})()[0][0] === true")
            assert page.evaluate(_CHECKED) == [_TEXT, _NONE]
            # kept: Label Studio's own Tab closes the text without keeping it (checked directly on the
            # desk, the typed words were gone); the front keeps it first
            assert page.locator("#unit_0 [data-testid=htx-textbox-content]").first.inner_text() == first + " amen"

            # form 1: typed, then Ctrl+Enter from inside the text submits (the text kept, its box ticked)
            second = _edit_first_text(page, 1)
            page.keyboard.type(" indeed", delay=0)
            assert page.evaluate(_EDITED_VALUE) == second + " indeed", "the text box closed while typing"
            # the speakers and addressees are still proposals: the submit is refused, naming the first
            page.keyboard.press("Control+Enter")
            why = page.locator(".rescue-why")
            why.wait_for(timeout=20_000)
            assert why.inner_text().startswith("The proposed 'Speaker' is not accepted yet")
            assert page.evaluate(_CHECKED) == [_TEXT, _TEXT]  # the text typed in form 1 was kept and accepted
            for i in (0, 1):  # a on each: accepted as proposed
                for f in ("primary_speaker", "target"):
                    page.evaluate("([i, n]) => [...document.querySelectorAll(`#unit_${i} .lsf-choices`)]"
                                  ".filter(g => !g.closest('[id^=proposal-]'))[n].querySelector('input:checked')"
                                  ".focus()", [i, ("primary_speaker", "target").index(f)])
                    page.keyboard.press("a")
                    page.wait_for_function(f"() => document.querySelector('#proposal-{f}_{i} input').checked")
            page.keyboard.press("Control+Enter")
            wait_saved(ls_client, pid, drafted["sample_id"])
        except Exception:
            page.screenshot(path=str(SCREENSHOTS / "text_edit.png"), full_page=True)
            raise
        finally:
            front.stop()

    result = pull.pull_round(ls_desks, "transcript", DataRoot(tmp_path), annotators=[email], write=False)
    assert result.problems.to_pylist() == []
    texts = {r["row_index"]: json.loads(r["value"]) for r in result.labels.to_pylist() if r["field"] == "dialogue_cleaned"}
    rows = {r["row_index"]: r for r in drafted["rows"]}
    assert texts == {1: rows[1]["dialogue_cleaned"] + " amen", 2: rows[2]["dialogue_cleaned"] + " indeed"}
