"""A sequence of windows by keyboard in ONE tab, through the desk's front (pipeline/labelstudio/front/static/keys.js)
on the session's real Label Studio, in headless Chromium: three windows of the relation round in
Label Studio's label stream (which shows the next window without reloading the page, with the same
form ids), then a window of the strategy round in the same tab.

* the stale-id case: the first Enter of the next window comes to that window's first form and
  changes nothing; a number key with no list in focus only moves the focus to the first list of the
  form in view (it once acted on the previous window's last form, off screen);
* the rows that show a relation are picked by their printed row number (``7``; ``1`` ``2`` for
  row 12), never by position;
* the play key ``p`` plays the focused row's span, and again stops it;
* a proposed value (the pattern of every relation row, every strategy field) is accepted field by
  field: ``a`` on it, or its number key choosing it again; Enter accepts nothing, and the
  strategy round's forms are filled as the bench fills them (``a`` on each proposal kept);
* every choice shows its key, and a kept text's Edit action is visible when focused;
* on Label Studio's page the script finds every hook (no banner); with one missing (the Submit
  button named otherwise, as a changed page could have it) it shows the banner and a key changes nothing.

What each desk stored is read back by the pull: every answer as keyed."""
from __future__ import annotations

import json
import secrets
import time

import pytest
from ls_samples import make_sample
from test_keyboard import _ticked_when_still

from benchmarks.annotator_ui import driver
from pipeline.labelstudio.front import FrontServer
from pipeline.annotation import ls_config, naming, pull, push
from pipeline.annotation.rounds import load_round
from tests.helpers import SCREENSHOTS, browser_login, tone_wav
from pipeline.paths import DataRoot


pytestmark = pytest.mark.slow

_TASK = "() => window.Htx && Htx.task ? Htx.task.id : null"
# a form's lists: its fields' (the "accept" boxes of proposals left out)
_LISTS = "(f) => [...f.querySelectorAll('.lsf-choices')].filter(g => !g.closest('[id^=proposal-]'))"
_FOCUS = f"""() => {{ const a = document.activeElement, f = a && a.closest ? a.closest('[id^=unit_], [id^=voice_]') : null;
  const g = a && a.closest ? a.closest('.lsf-choices') : null;
  return {{form: f ? f.id : null, tag: a ? a.tagName : null, list: f && g ? ({_LISTS})(f).indexOf(g) : -1}}; }}"""
# the forms' "accept" boxes: [form, field, ticked] of those shown
_ACCEPTED = """() => [...document.querySelectorAll('[id^="proposal-"]')].filter(v => v.getClientRects().length)
  .map(v => [v.closest('[id^=unit_]').id, v.id.slice(9).replace(/_\\d+$/, ''), v.querySelector('input').checked])"""
_IN_VIEW = """(id) => { const r = document.getElementById(id).getBoundingClientRect();
  return r.bottom > 0 && r.top < window.innerHeight; }"""
_ROW_BOX = "(a) => { const b = document.querySelector(`#${a.form} input[name^=\"${a.row} \\u00b7 \"]`); return !!(b && b.checked); }"
# Label Studio's page as a changed release could have it: its Submit button named otherwise
_RENAMED_SUBMIT = """new MutationObserver(() => document.querySelectorAll('button').forEach(b => {
  if (/^(Submit|Update) current annotation$/.test(b.getAttribute('aria-label') || '')) b.removeAttribute('aria-label');
  const w = document.createTreeWalker(b, NodeFilter.SHOW_TEXT);
  for (let n = w.nextNode(); n; n = w.nextNode()) if (/^(Submit|Update)$/.test(n.textContent.trim())) n.textContent = 'Send';
})).observe(document, {childList: true, subtree: true, characterData: true});"""


def _enter_stream(page, base: str, pid: int) -> None:
    """From the project's data manager into its label stream by keys (the front focuses "Label All Tasks")."""
    page.goto(f"{base}/projects/{pid}/data")
    page.wait_for_function("() => document.activeElement && document.activeElement.textContent.trim() === 'Label All Tasks'")
    page.keyboard.press("Enter")


def _next_window(page, previous) -> int:
    page.wait_for_function("(prev) => window.Htx && Htx.task && Htx.task.id !== prev && "
                           "document.querySelector('#unit_0 .lsf-choices input')", arg=previous, timeout=120_000)
    page.wait_for_load_state("networkidle")
    close = page.locator('button[aria-label="Close modal"]')  # the round's instructions, on the first entry
    if driver.appears(close, 3):
        page.keyboard.press("Escape")
        close.wait_for(state="detached", timeout=10_000)
    _ticked_when_still(page, "unit_0")
    assert page.locator(".rescue-off").count() == 0, page.locator(".rescue-off").inner_text()  # every hook found
    return page.evaluate(_TASK)


def _wait_focus(page, form: str, tag: str | None = None, list_index: int | None = None) -> None:
    page.wait_for_function("(w) => { const a = document.activeElement, f = a && a.closest && a.closest('#' + w.form);"
                           " if (!f) return false; if (w.tag && a.tagName !== w.tag) return false;"
                           " if (w.list === null) return true; const g = a.closest('.lsf-choices');"
                           f" return !!g && ({_LISTS})(f).indexOf(g) === w.list; }}",
                           arg={"form": form, "tag": tag, "list": list_index}, timeout=20_000)


def _relation_form(page, k: driver.KeyCounter, form: str, evidence: list[int], check_keys: bool = False,
                   accept: bool = False) -> None:
    """One relation form by keys, its focus already in its first list: pattern 1, proposed (a
    one-answer list: on to the reason), accepted by ``a`` (``accept``) or by its key 1 again, the
    reason typed and kept (on to the rows), each evidence row by its number."""
    _wait_focus(page, form, list_index=0)
    unit = int(form.split("_")[1])
    shown = [a for a in page.evaluate(_ACCEPTED) if a[0] == form]
    assert shown == [[form, "relation_cycle_state", False]], shown  # the pattern alone came proposed
    if check_keys:  # every choice shows its key; the rows list shows its row numbers (no mark of its own)
        marks = page.evaluate("(f) => [...document.querySelectorAll(`#${f} .lsf-choices`)].map(g => "
                              "[...g.querySelectorAll('label')].map(l => [l.textContent.trim(), l.getAttribute('data-rescue-key')]))",
                              form)
        n = len(marks[0])
        assert [m for _, m in marks[0]] == [str((i + 1) % 10) if i < 10 else "-" if i == n - 1 else None
                                            for i in range(n)], marks[0]
        [rows] = [g for g in marks if g and all(text.split(" ")[0].isdigit() and " \u00b7 " in text for text, _ in g)]
        assert {m for _, m in rows} == {None}, rows
    k.press("a" if accept else "1")
    page.wait_for_function(f"() => document.querySelector('#proposal-relation_cycle_state_{unit} input').checked")
    _wait_focus(page, form, tag="TEXTAREA")
    k.type("the rows show it")
    k.press("Shift+Enter")
    _wait_focus(page, form, list_index=1)
    for row in evidence:
        for digit in str(row):
            k.press(digit)
        page.wait_for_function(_ROW_BOX, arg={"form": form, "row": row}, timeout=5_000)


def test_windows_and_rounds_in_one_tab_by_keys(ls_server, ls_client, ls_desks, new_annotators, ls_data_root,
                                               tmp_path, chromium):
    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    tone_wav(ls_data_root / "media" / "keys_sequence.wav", seconds=60)
    media = lambda s: "/data/local-files/?d=media/keys_sequence.wav"  # noqa: E731
    sample = make_sample("synthetic/keys_sequence_001", "couple", 18)  # therapist rows 3, 6, ..., 18
    # a model's proposal for every therapist row: pattern 1 (the first choice, as its key says)
    first = load_round("relation").field("relation_cycle_state").options("couple")[0]
    report = push.push_round(ls_desks, "relation", [sample], [email], k=1, media_url=media, window=2,
                             prelabel=lambda r, s: {row["row_index"]: {"relation_cycle_state": first} for row in s["rows"]
                                                    if row["primary_speaker"] == "Therapist"}, prelabel_source="model-x")
    relation_pid = report.projects[push.project_key("relation", "couple", email)]
    assert len(ls_client.tasks(relation_pid)) == 3  # three windows of two rows
    short = make_sample("synthetic/keys_sequence_002", "couple", 6)
    report = push.push_round(ls_desks, "strategy", [short], [email], k=1, prelabel=push.input_values,
                             prelabel_source="input", media_url=media)  # every field proposed
    strategy_pid = report.projects[push.project_key("strategy", "couple", email)]
    # the rows each therapist row's evidence names: row 9's list starts at row 3, so its 7th choice is row 9
    evidence = {3: [3], 6: [6], 9: [7, 9], 12: [12], 15: [15], 18: [18]}
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    front = FrontServer(ls_server.url).start()
    with chromium(player=True) as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)
            browser_login(page, front.url, email, password, timeout_ms=60_000)
            k = driver.KeyCounter(page)
            _enter_stream(page, front.url, relation_pid)
            task = None
            for window in range(3):
                task = _next_window(page, task)
                units = page.evaluate("() => Htx.task.dataObj.units.map(u => u.row_index)")
                before = _ticked_when_still(page, f"unit_{len(units) - 1}")
                page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
                if window == 2:
                    # a number key with no list in focus: to the first list of the form in view, nothing changes
                    k.press("2")
                    focus = page.evaluate(_FOCUS)
                    assert focus["list"] == 0 and page.evaluate(_IN_VIEW, focus["form"]), focus  # (scrolled to it)
                    assert _ticked_when_still(page, "unit_0") == before, "a number key changed a form"
                    assert focus["form"] == "unit_0", focus
                else:
                    # the window's first Enter: its first form, nothing changed (not the last window's last form)
                    k.press("Enter")
                    _wait_focus(page, "unit_0", list_index=0)
                    assert _ticked_when_still(page, "unit_0") == before, "Enter changed a form"
                for i, row in enumerate(units):
                    if i:
                        k.press("Enter")  # on to the next form: the last one's proposals are as they were
                        assert [a for a in page.evaluate(_ACCEPTED) if a[0] == f"unit_{i}"] == [
                            [f"unit_{i}", "relation_cycle_state", False]], "Enter accepted a proposal"
                    if window == 0 and i == 0:
                        # the play key: the focused row's span plays, and the key again stops it
                        k.press("p")
                        page.wait_for_function("() => { const m = document.querySelector('#unit_0 audio');"
                                               " return m && !m.paused && m.currentTime > 0; }", timeout=20_000)
                        k.press("p")
                        page.wait_for_function("() => document.querySelector('#unit_0 audio').paused", timeout=5_000)
                        _wait_focus(page, "unit_0", list_index=0)
                    if row == 9:  # key 7 is row 7, never the 7th choice (row 9)
                        _wait_focus(page, f"unit_{i}", list_index=0)
                    _relation_form(page, k, f"unit_{i}", evidence[row], check_keys=window == 0 and i == 0,
                                   accept=window != 1)
                    if row == 9:
                        assert page.evaluate(_ROW_BOX, {"form": f"unit_{i}", "row": 7})
                # a kept text's Edit action shows when it has the focus
                page.locator("#unit_0 [data-testid=htx-textbox-edit-button], #unit_0 button[aria-label='Edit Region']"
                             ).first.focus()
                page.wait_for_function("() => getComputedStyle(document.activeElement.closest('.lsf-textarea__actions')"
                                       " || document.activeElement).opacity === '1'", timeout=5_000)  # (a 0.15 s fade)
                page.screenshot(path=str(SCREENSHOTS / f"keys_sequence_relation_{window}.png"))
                k.press("Control+Enter")
                deadline = time.monotonic() + 60
                while ls_client.request("GET", f"/api/tasks/{task}/", "read the task").json().get("total_annotations") != 1:
                    if page.locator(".rescue-why").count():
                        raise AssertionError(f"window {window}: submit refused: {page.locator('.rescue-why').first.inner_text()}")
                    assert time.monotonic() < deadline, f"window {window} was not saved"
                    time.sleep(0.5)

            # the next round in the same tab
            rnd = load_round("strategy")
            _enter_stream(page, front.url, strategy_pid)
            _next_window(page, None)
            data = page.evaluate("() => Htx.task.dataObj")
            truth = push.input_values(rnd, short)
            want_all = {r["from_name"]: ls_config.result_value(r) for r in ls_config.values_to_results(rnd, data, truth)}
            assert {a[1] for a in page.evaluate(_ACCEPTED)} == {
                "support_strategy__1__strategy_type", "support_strategy__1__target", "support_strategy__1__strategy_content"}
            k.press("Enter")
            _wait_focus(page, "unit_0")
            left = []
            for i in range(len(data["units"])):
                want = {n: v for n, v in want_all.items() if (naming.parse_control_name(n) or (0, 0, 0, -1))[3] == i}
                left += driver.keyboard_form(k, f"unit_{i}", want)
                k.press("Enter")
            assert left == []
            assert all(ticked for *_, ticked in page.evaluate(_ACCEPTED))  # every proposal accepted by a
            k.press("Control+Enter")
            strategy_task = page.evaluate(_TASK)
            deadline = time.monotonic() + 60
            while not ls_client.request("GET", f"/api/tasks/{strategy_task}/", "read").json().get("total_annotations"):
                assert time.monotonic() < deadline, "the strategy window was not saved"
                time.sleep(0.5)

        finally:
            front.stop()

    result = pull.pull_round(ls_desks, "relation", DataRoot(tmp_path), annotators=[email], write=False)
    assert result.problems.to_pylist() == []
    got = {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()}
    for row, rows in evidence.items():
        assert sorted(got[(row, "relation_cycle_evidence_rows")]) == [r - 1 for r in rows], (row, got)
        assert got[(row, "relation_cycle_reason")] == "the rows show it"
    assert len({got[(row, "relation_cycle_state")] for row in evidence}) == 1  # pattern 1 everywhere
    strategy = pull.pull_round(ls_desks, "strategy", DataRoot(tmp_path), annotators=[email], write=False)
    assert strategy.problems.to_pylist() == []


def test_a_changed_page_shows_the_banner_and_the_keys_do_nothing(ls_server, ls_client, ls_desks, new_annotators,
                                                                   chromium):
    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    sample = make_sample("synthetic/keys_banner_001", "couple", 6)
    report = push.push_round(ls_desks, "strategy", [sample], [email], k=1, prelabel=None)
    pid = report.projects[push.project_key("strategy", "couple", email)]
    task = ls_client.find_tasks(pid, "sample_id", sample["sample_id"])[0]
    front = FrontServer(ls_server.url).start()
    with chromium() as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)
            page.add_init_script(_RENAMED_SUBMIT)
            browser_login(page, front.url, email, password, timeout_ms=60_000)
            page.goto(f"{front.url}/projects/{pid}/data?task={task['id']}")
            page.locator("#unit_0 .lsf-choices input").first.wait_for()
            banner = page.locator(".rescue-off")
            banner.wait_for(timeout=30_000)
            assert banner.inner_text().startswith("keyboard helpers are off: this Label Studio page changed")
            assert "Submit" in banner.inner_text()
            was = _ticked_when_still(page, "unit_0")
            page.locator("#unit_0 .lsf-choices input").first.focus()
            for key in ("2", "Enter", "-"):
                page.keyboard.press(key)
            assert _ticked_when_still(page, "unit_0") == was
            assert page.locator("label[data-rescue-key]").count() == 0  # nothing else of the keys either
            page.screenshot(path=str(SCREENSHOTS / "keys_banner.png"))
        finally:
            front.stop()
