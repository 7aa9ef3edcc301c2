"""The keys scripts themselves (pipeline/labelstudio/front/static/keys*.js, as the front serves them) in headless Chromium,
on a small page with the parts of Label Studio's task page it relies on: its hooks, checked at
load (one missing: a banner and nothing else); key state that belongs to the window on screen;
row numbers as the keys of a list of rows; every choice showing its key; a kept text's Edit
action visible when focused; a proposed value (pre-filled) accepted field by field: the key a on the
field, or an edit of that field only, and never by Enter; a voice's proposed name (Who is each voice?)
alike, its refusal naming the voice. The same on Label Studio's real page: tests/annotation/test_keys_sequence.py."""
from __future__ import annotations

import json
import time

import pytest

from pipeline.labelstudio.front.comfort import KEYS_FILES

_ROWS = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]


def _form(i: int, rows: list[int] | None = None, prefilled: bool = False) -> str:
    """A form: a list of people, a list of rows (``rows``), a kept text. ``prefilled``: its lists
    come proposed (Bob; the first row), each with its "accept" box (the page names the box's view
    "proposal-" + the list's name, as Label Studio's View idAttr does)."""
    def tick(name):
        return " checked" if prefilled and name in ("Bob", f"{(rows or [0])[0]} \u00b7 Ann: words") else ""
    accept = ('<div class="proposal"><label><input type="checkbox" name="accept"> proposed: accept it</label></div>'
              if prefilled else "")
    people = "".join(f'<label class="ant-checkbox-wrapper"><input type="checkbox" name="{p}"{tick(p)}><span>{p}</span>'
                     f'</label>' for p in ("Therapist", "Ann", "Bob"))
    rows_list = "" if rows is None else '<div class="lsf-choices rows">' + "".join(
        f'<label class="ant-checkbox-wrapper"><input type="checkbox" name="{r} \u00b7 Ann: words"'
        f'{tick(f"{r} · Ann: words")}><span>{r} \u00b7 Ann: words</span></label>' for r in rows) + f"</div>{accept}"
    return (f'<div id="unit_{i}" style="height: 700px"><h6>Row {i}</h6><div class="lsf-choices people">{people}</div>'
            f'{accept}{rows_list}<div class="lsf-text-area"><div class="lsf-textarea__region">kept text'
            f'<div class="lsf-textarea__actions" style="opacity: 0"><button aria-label="Edit Region">Edit</button>'
            f'</div></div></div></div>')


# Label Studio's hooks, as its page has them: the task (window.Htx.task), each list's model on React's
# fiber, the Submit button. ``hooks``: which of them the page has.
def _page(forms: str, hooks: tuple[str, ...] = ("task", "fiber", "submit"), task_id: int = 1) -> str:
    script = f"""
      window.HOOKS = {json.dumps(list(hooks))};
      function fibers() {{
        if (HOOKS.indexOf("fiber") < 0) return;
        document.querySelectorAll(".lsf-choices").forEach(function (g, i) {{
          g.__reactFiber$test = {{memoizedProps: {{item: {{name: "list_" + i, choice: "multiple"}}}}}};
          var p = g.nextElementSibling;
          if (p && p.classList.contains("proposal")) p.id = "proposal-list_" + i;
        }});
      }}
      if (HOOKS.indexOf("task") >= 0) window.Htx = {{task: {{id: {task_id}, dataObj: {{units: []}}}}}};
      fibers();
    """
    submit = '<button aria-label="Submit current annotation">Submit</button>' if "submit" in hooks else ""
    return f"<!doctype html><html><head></head><body>{submit}<div id='forms'>{forms}</div><script>{script}</script></body></html>"


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.set_default_timeout(20_000)
    return page


def _add_keys(page) -> None:
    """The keys scripts, in the order the front's pages load them."""
    for f in KEYS_FILES:
        page.add_script_tag(content=f.read_text())


def _load(page, html: str) -> None:
    page.set_content(html)
    _add_keys(page)
    page.evaluate("() => document.body.appendChild(document.createElement('i'))")  # a change: the script looks


def _ticked(page) -> dict:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('[id^=unit_]')].map(f =>
      [f.id, [...f.querySelectorAll('input')].filter(i => i.checked).map(i => i.name)]))""")


def _focus(page) -> dict:
    return page.evaluate("""() => { const a = document.activeElement, f = a && a.closest('[id^=unit_]');
      const g = a && a.closest('.lsf-choices');
      return {form: f ? f.id : null, list: g ? g.className : null, name: a ? a.getAttribute('name') : null}; }""")


def test_a_missing_hook_shows_the_banner_and_the_keys_do_nothing(page):
    _load(page, _page(_form(0, _ROWS), hooks=("task", "submit")))  # no model on React's fiber
    banner = page.locator(".rescue-off")
    banner.wait_for(timeout=15_000)
    assert banner.inner_text().startswith("keyboard helpers are off: this Label Studio page changed")
    assert "React" in banner.inner_text()
    page.locator("#unit_0 .people input").first.focus()
    for key in ("2", "Enter", "-"):
        page.keyboard.press(key)
    time.sleep(0.3)
    assert _ticked(page) == {"unit_0": []}
    # nothing else of the script: no tab stops changed, no key marks, no focus ring of its own
    assert page.locator("[data-rescue-key]").count() == 0
    assert page.evaluate("() => document.querySelectorAll('style').length") == 0


def test_with_every_hook_there_is_no_banner(page):
    _load(page, _page(_form(0, _ROWS)))
    page.wait_for_selector("label[data-rescue-key]")
    time.sleep(0.5)
    assert page.locator(".rescue-off").count() == 0


def test_row_numbers_pick_rows_and_every_choice_shows_its_key(page):
    _load(page, _page(_form(0, _ROWS) + _form(1, [1, 2, 12, 13])))
    page.wait_for_selector("label[data-rescue-key]")
    marks = page.evaluate("() => [...document.querySelectorAll('#unit_0 label')].map(l => l.getAttribute('data-rescue-key'))")
    assert marks[:3] == ["1", "2", "3"]  # the people list: positions
    assert all(m is None for m in marks[3:3 + len(_ROWS)])  # the rows: their printed row number is the key
    page.locator("#unit_0 .rows input").first.focus()
    page.keyboard.press("7")  # row 7, not the 7th choice (row 9)
    page.wait_for_function("() => document.querySelector('#unit_0 .rows input[name^=\"7 \"]').checked")
    page.keyboard.press("1")
    page.keyboard.press("2")  # row 12
    page.wait_for_function("() => document.querySelector('#unit_0 .rows input[name^=\"12 \"]').checked")
    time.sleep(1.0)
    assert sorted(n.split(" ")[0] for n in _ticked(page)["unit_0"]) == ["12", "7"]
    # a row number that a longer one starts with: taken once no digit follows
    page.locator("#unit_1 .rows input").first.focus()
    page.keyboard.press("1")
    page.wait_for_function("() => document.querySelector('#unit_1 .rows input[name^=\"1 \"]').checked", timeout=3000)
    page.keyboard.press("1")
    page.keyboard.press("3")
    page.wait_for_function("() => document.querySelector('#unit_1 .rows input[name^=\"13 \"]').checked", timeout=3000)
    time.sleep(1.0)
    assert sorted(n.split(" ")[0] for n in _ticked(page)["unit_1"]) == ["1", "13"]
    # a number that is no row of the list changes nothing
    page.keyboard.press("9")
    time.sleep(1.0)
    assert sorted(n.split(" ")[0] for n in _ticked(page)["unit_1"]) == ["1", "13"]


def test_key_state_belongs_to_the_window_on_screen(page):
    forms = "".join(_form(i, prefilled=True) for i in range(5))
    _load(page, _page(forms))
    time.sleep(0.5)
    # window 1: the last form is the outlined one (its list in focus)
    page.locator("#unit_4 .people input").first.focus()
    page.keyboard.press("2")  # an edit of the list: its proposal accepted
    assert _ticked(page)["unit_4"] == ["Ann", "Bob", "accept"]
    next_window = """(a) => { window.Htx.task = {id: a.id, dataObj: {units: []}};
      document.getElementById('forms').innerHTML = a.html; fibers(); window.scrollTo(0, 0);
      document.activeElement && document.activeElement.blur(); }"""
    # the next window: Label Studio draws new forms with the same ids, the page stays
    page.evaluate(next_window, {"id": 2, "html": forms})
    time.sleep(0.3)
    time.sleep(0.3)
    assert _ticked(page) == {f"unit_{i}": ["Bob"] for i in range(5)}
    # Enter: to the window's first form; the previous window's last form (off screen) is not touched
    page.keyboard.press("Enter")
    time.sleep(0.3)
    assert _focus(page)["form"] == "unit_0"
    assert _ticked(page) == {f"unit_{i}": ["Bob"] for i in range(5)}, "Enter changed a form"
    # the window after: a number key with no list in focus moves the focus to the first list of the
    # form in view, and changes nothing
    page.evaluate(next_window, {"id": 3, "html": forms})
    time.sleep(0.3)
    time.sleep(0.3)
    page.keyboard.press("2")
    time.sleep(0.3)
    assert _ticked(page) == {f"unit_{i}": ["Bob"] for i in range(5)}, "a number key changed a form"
    assert _focus(page)["form"] == "unit_0" and "people" in _focus(page)["list"]
    page.keyboard.press("Enter")  # on to form 1; form 0's proposal is not accepted by it
    time.sleep(0.3)
    assert _focus(page)["form"] == "unit_1"
    assert _ticked(page)["unit_0"] == ["Bob"] and _ticked(page)["unit_4"] == ["Bob"]


_PROPOSED = "() => [...document.querySelectorAll('[data-rescue-proposed]')].map(f => f.className)"


def test_a_proposal_is_accepted_by_a_or_by_an_edit_of_that_field_only(page):
    _load(page, _page(_form(0, [1, 2, 3], prefilled=True)))
    page.wait_for_function("() => document.querySelectorAll('[data-rescue-proposed]').length === 2")
    # the proposed lists look proposed: the word before them
    assert page.evaluate("() => getComputedStyle(document.querySelector('[data-rescue-proposed]'), '::before')"
                         ".content") == '"proposed"'
    # the accept boxes are no Tab stops
    assert page.evaluate("() => [...document.querySelectorAll('.proposal input')].map(b => b.tabIndex)") == [-1, -1]
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press("Enter")  # to the form: its first field still to do (the proposed people)
    page.wait_for_function("() => document.activeElement.closest('.people')")
    page.keyboard.press("a")  # the people's proposal accepted as it is, nothing else; on to the rows
    page.wait_for_function("() => document.activeElement.closest('.rows')")
    assert _ticked(page)["unit_0"] == ["Bob", "accept", "1 \u00b7 Ann: words"]
    page.wait_for_function(f"() => JSON.stringify(({_PROPOSED})()) === '[\"lsf-choices rows\"]'")
    page.keyboard.press("2")  # an edit of the rows: their proposal accepted too
    page.wait_for_function("() => document.querySelectorAll('.proposal input:checked').length === 2")
    assert _ticked(page)["unit_0"] == ["Bob", "accept", "1 \u00b7 Ann: words", "2 \u00b7 Ann: words", "accept"]
    page.wait_for_function(f"() => ({_PROPOSED})().length === 0")


def test_an_edit_accepts_its_own_field_only(page):
    _load(page, _page(_form(0, [1, 2, 3], prefilled=True)))
    page.wait_for_function("() => document.querySelectorAll('[data-rescue-proposed]').length === 2")
    page.locator("#unit_0 .rows input").nth(2).click()  # a row ticked by mouse: the rows accepted, not the people
    page.wait_for_function("() => document.querySelectorAll('.proposal input:checked').length === 1")
    assert page.evaluate("() => [...document.querySelectorAll('.proposal input')].map(b => b.checked)") == [False, True]
    # a on a field without a proposal (or none in focus): to the form's first proposal, nothing accepted
    page.locator("#unit_0 button[aria-label='Edit Region']").focus()
    page.keyboard.press("a")
    page.wait_for_function("() => document.activeElement.closest('.people')")
    assert page.evaluate("() => [...document.querySelectorAll('.proposal input')].map(b => b.checked)") == [False, True]
    # the people's box ticked by mouse: accepted, and it no longer looks proposed
    page.locator("#unit_0 .proposal input").first.click()
    page.wait_for_function(f"() => ({_PROPOSED})().length === 0")


def test_a_kept_texts_edit_action_shows_when_focused(page):
    _load(page, _page(_form(0)))
    page.wait_for_selector("label[data-rescue-key]")
    page.locator("#unit_0 button[aria-label='Edit Region']").focus()
    opacity = page.evaluate("() => getComputedStyle(document.querySelector('#unit_0 .lsf-textarea__actions')).opacity")
    assert opacity == "1"


def test_enter_starts_at_who_is_each_voice(page):
    voices = "".join(f'<div id="voice_{v}" style="height: 300px"><div class="lsf-choices people">'
                     f'<label><input type="checkbox" name="Ann"><span>Ann</span></label>'
                     f'<label><input type="checkbox" name="Bob"><span>Bob</span></label></div></div>' for v in range(2))
    _load(page, _page(voices + _form(0) + _form(1)))
    time.sleep(0.5)
    page.evaluate("() => document.getElementById('unit_0').scrollIntoView()")  # a row on screen, not the voices
    walk = []
    for _ in range(3):
        page.keyboard.press("Enter")
        time.sleep(0.2)
        walk.append(page.evaluate("() => document.activeElement.closest('[id^=unit_], [id^=voice_]').id"))
    assert walk == ["voice_0", "voice_1", "unit_0"]


_VOICE_REFUSED = ("The proposed name of a voice under 'Who is each voice?' is not accepted yet (the first such voice "
                  "from the top): listen, then accept it (key a) or pick who it is.")


def _voice(v: int, proposed: str) -> str:
    """A voice of "Who is each voice?" whose name ``proposed`` came pre-filled, with its "accept" box
    (a list of its own, as Label Studio draws it, in the view "proposal-voice_<v>_is")."""
    people = "".join(f'<label class="ant-radio-wrapper"><input type="radio" name="{p}"{" checked" if p == proposed else ""}>'
                     f'<span>{p}</span></label>' for p in ("Ann", "Bob", "Therapist"))
    return (f'<div id="voice_{v}" style="height: 250px"><div class="lsf-choices people v{v}">{people}</div>'
            f'<div id="proposal-voice_{v}_is"><div class="lsf-choices accept"><label class="ant-checkbox-wrapper">'
            f'<input type="checkbox" name="accept"><span>proposed: accept it</span></label></div></div></div>')


# the voices' lists as Label Studio's models name them (the page's own names are list_<i>), the "accept"
# boxes with the block's message, and the task's voices
_VOICE_MODELS = """(msg) => {
  document.querySelectorAll('[id^=voice_]').forEach((f, v) => {
    f.querySelector('.people').__reactFiber$test = {memoizedProps: {item: {name: `voice_${v}_is`, choice: 'single'}}};
    f.querySelector('.accept').__reactFiber$test = {memoizedProps: {item: {name: `accept-voice_${v}_is`,
      choice: 'multiple', requiredmessage: msg}}};
  });
  Htx.task.dataObj.voices = [{voice: 'Speaker 2'}, {voice: 'Therapist'}];
}"""
# Label Studio's refusal dialog: its one sentence and its OK button (which closes it)
_DIALOG = """(msg) => { const d = document.createElement('div');
  d.className = 'ant-modal-wrap'; d.innerHTML = '<div class="ant-modal-confirm-warning"><div class="ant-modal-confirm-content">'
    + msg + '</div><div class="ant-modal-confirm-btns"><button>OK</button></div></div>';
  d.querySelector('button').onclick = () => d.remove(); document.body.appendChild(d); }"""
_VOICE_TICKS = "() => [...document.querySelectorAll('[id^=voice_] .accept input')].map(b => b.checked)"


def test_a_voice_name_proposed_is_refused_naming_the_voice_and_accepted_by_a_or_a_pick(page):
    page.set_content(_page(_voice(0, "Bob") + _voice(1, "Therapist") + _form(0)))
    page.evaluate(_VOICE_MODELS, _VOICE_REFUSED)
    _add_keys(page)
    page.evaluate("() => document.body.appendChild(document.createElement('i'))")
    # both names look proposed
    page.wait_for_function("() => document.querySelectorAll('[id^=voice_] [data-rescue-proposed]').length === 2")
    # the refusal: beside the first voice not accepted, naming it (Label Studio's sentence cannot)
    page.evaluate(_DIALOG, _VOICE_REFUSED)
    why = page.locator(".rescue-why")
    why.wait_for()
    assert why.inner_text() == ("The proposed name of voice 'Speaker 2' is not accepted yet: listen, then accept it "
                                "(key a) or pick who it is.")
    assert why.evaluate("w => w.closest('[id^=voice_]').id") == "voice_0"
    page.wait_for_function("() => document.activeElement.closest('.v0')")
    page.keyboard.press("a")  # that voice's name accepted, and no other
    page.wait_for_function(f"() => JSON.stringify(({_VOICE_TICKS})()) === '[true,false]'")
    page.keyboard.press("Enter")  # to the next voice: nothing accepted
    page.wait_for_function("() => document.activeElement.closest('.v1')")
    time.sleep(0.3)
    assert page.evaluate(_VOICE_TICKS) == [True, False]
    page.keyboard.press("1")  # another person picked for that voice: accepted, that voice only
    page.wait_for_function(f"() => JSON.stringify(({_VOICE_TICKS})()) === '[true,true]'")
    assert page.evaluate("() => document.querySelector('.v1 input[name=Ann]').checked")
    page.wait_for_function("() => !document.querySelector('[id^=voice_] [data-rescue-proposed]')")
