"""The keyboard driver: an annotator played through the desk's front by keys alone. It reads
what has the focus and what each form holds (Label Studio's controls, through the page), and
presses the keys the front's keys script offers (``pipeline.labelstudio.front``'s keys: number keys and the keys
each choice shows, ``a`` to accept a proposal, Enter to the next form, Ctrl+Enter to submit),
counting them (``KeyCounter``). ``keyboard_form`` fills one form, ``keyboard_window`` one window
from the project list, ``whole_round`` every window of a round in one tab (watched by
``UNSEEN_WATCH``). The bench and the tests both drive pages with it."""
from __future__ import annotations

import functools
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from pipeline.annotation import ls_config, naming, voice_naming
from pipeline.annotation.rounds import load_round, round_names

from .browser import browser_cpu_s, form_ready
from .oracle import stored_same

# what has the focus: its form, its field (a list, a text, a number) and Label Studio's control name
_FOCUS = """() => {
  const a = document.activeElement;
  const form = a && a.closest ? a.closest('[id^="unit_"], [id^="voice_"]') : null;
  const f = a && a.closest ? a.closest('.lsf-choices, .lsf-text-area, .lsf-number') : null;
  const out = {form: form ? form.id : null, tag: a ? a.tagName : null, kind: null};
  if (!f) return out;
  const key = Object.keys(f).find(k => k.startsWith('__reactFiber'));
  let name = null, choice = null;
  for (let x = key && f[key], i = 0; x && i < 25; x = x.return, i++) {
    const it = x.memoizedProps && x.memoizedProps.item;
    if (it && it.name) { name = it.name; choice = it.choice || null; break; }
  }
  out.name = name; out.choice = choice;
  if (f.classList.contains('lsf-choices')) {
    const boxes = [...f.querySelectorAll('input[type=checkbox], input[type=radio]')];
    out.kind = 'choices'; out.options = boxes.map(b => b.name); out.checked = boxes.filter(b => b.checked).map(b => b.name);
    // the key each choice shows: the front's mark, else the row number a list of rows is labelled with
    out.keys = boxes.map(b => { const l = b.closest('label'); if (!l) return null;
      const m = /^(\\d+) \u00b7 /.exec(l.textContent.trim());
      return l.getAttribute('data-rescue-key') || (m ? m[1] : null); });
    out.at = boxes.indexOf(a);
  } else if (f.classList.contains('lsf-number')) {
    out.kind = 'number'; out.value = a.value;
  } else {
    const region = f.querySelector('[id^="TextAreaRegion"]');
    out.kind = 'text'; out.editing = a.tagName === 'TEXTAREA';
    out.value = a.tagName === 'TEXTAREA' ? a.value : (region ? region.textContent : null);
  }
  return out;
}"""
# the values a form's controls hold now (name -> checked choices / kept text / number)
_FORM_VALUES = """(id) => {
  const form = document.getElementById(id), out = {};
  for (const f of form.querySelectorAll('.lsf-choices, .lsf-text-area, .lsf-number')) {
    if (!f.getClientRects().length) continue;
    const key = Object.keys(f).find(k => k.startsWith('__reactFiber'));
    let name = null;
    for (let x = key && f[key], i = 0; x && i < 25; x = x.return, i++) {
      const it = x.memoizedProps && x.memoizedProps.item; if (it && it.name) { name = it.name; break; } }
    if (!name) continue;
    if (f.classList.contains('lsf-choices')) out[name] = [...f.querySelectorAll('input')].filter(b => b.checked).map(b => b.name);
    else if (f.classList.contains('lsf-number')) { const v = f.querySelector('input').value; if (v !== '') out[name] = Number(v); }
    else { const r = f.querySelector('[id^="TextAreaRegion"]'); if (r) out[name] = r.textContent; }
  }
  return out;
}"""

# the fields of a form holding a proposal nobody accepted yet (their "accept" box shown, not ticked)
_PENDING = """(id) => {
  const form = document.getElementById(id);
  return [...form.querySelectorAll('[id^="proposal-"]')].filter(v => v.getClientRects().length
    && !v.querySelector('input').checked).map(v => v.id.slice('proposal-'.length));
}"""


class KeyCounter:
    """Presses keys (never clicks) and counts them: every key press, the Tabs among them, and the
    characters of typed text apart (``typed``)."""

    def __init__(self, page, pause_s: float = 0.08):
        self.page, self.pause_s = page, pause_s
        self.keys = self.tabs = self.typed = 0

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)
        self.keys += 1
        self.tabs += key == "Tab"
        time.sleep(self.pause_s)  # a person's pace: the page's own moves (the next field) come first

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)
        self.typed += len(text)


@functools.lru_cache(maxsize=1)
def _stored_names() -> dict[str, str]:
    """The words a choice button shows -> the taxonomy name stored (the configs' ``alias``)."""
    out = {}
    for name in round_names():
        for scenario in ("couple", "family"):
            for c in ET.fromstring(ls_config.render_config(load_round(name), scenario)).iter("Choice"):
                if c.get("alias"):
                    out[c.get("value")] = c.get("alias")
    return out


def _alias(option: str) -> str:
    """A choice as stored: an evidence row's shown value "12 · Ann: ..." is stored as its alias "12",
    a label shown in words ("Escalating conflict") as its taxonomy name."""
    head, sep, _ = option.partition(" · ")
    return head if sep and head.isdigit() else _stored_names().get(option, option)


def _same(have, want) -> bool:
    """A form's value equals the wanted one: a list's options read as their stored names."""
    if isinstance(want, list):
        return sorted(_alias(h) for h in have or []) == sorted(want)
    return stored_same(have, want)


def _choose(k: KeyCounter, focus: dict, want: list) -> None:
    """Set the list in focus to ``want`` by keys: a choice by the key it shows (the front's mark
    beside it; in a list of rows, its row number, typed digit by digit, with a pause where another
    row's number starts with it), else among the first ten its number key (the last one ``-``),
    else by the arrow keys (and Space in a multiple-choice list)."""
    options, checked = [_alias(o) for o in focus["options"]], {_alias(o) for o in focus["checked"]}
    shown = focus.get("keys") or [None] * len(options)
    single = focus["choice"] == "single"
    flips = [o for o in options if (o in want) != (o in checked)]
    if single:
        flips = [o for o in want if o not in checked]
    at = focus["at"] if focus["at"] >= 0 else 0
    for o in flips:
        i = options.index(o)
        if shown[i]:
            for ch in shown[i]:
                k.press(ch)
            if any(x and x != shown[i] and x.startswith(shown[i]) for x in shown):
                time.sleep(1.0)  # the page waits for a next digit, then takes the number as typed
        elif not any(shown) and i == len(options) - 1:  # a page that marks no key: the keys by position
            k.press("-")
        elif not any(shown) and i < 10:
            k.press(str((i + 1) % 10))
        else:  # a choice that shows no key
            for _ in range(abs(i - at)):
                k.press("ArrowRight" if i > at else "ArrowLeft")
            if not single:
                k.press("Space")
        at = i


def keyboard_form(k: KeyCounter, form_id: str, want: dict, limit: int = 40) -> list[str]:
    """Fill one form (its Enter already pressed) with the keyboard alone, as the desk front's keys
    lead: act on the field in focus when its value is not the wanted one (an edit accepts that
    field's proposal), accept it with ``a`` when it holds a proposal that is the wanted value (or
    one meant empty: the lone pre-filled "who feels it", which the pull takes for no entry), Tab
    past it when neither and some field of the form is still to do. Returns the names still not
    as wanted, and ``accept:<name>`` for each proposal left not accepted."""
    page = k.page
    for _ in range(limit):
        values = page.evaluate(_FORM_VALUES, form_id)
        todo = [n for n, v in want.items() if not _same(values.get(n), v)]
        pending = set(page.evaluate(_PENDING, form_id)) - set(todo)
        if not todo and not pending:
            return []
        focus = page.evaluate(_FOCUS)
        name = focus.get("name")
        if focus["form"] == form_id and name in pending:
            k.press("a")  # the proposal as it is: accepted; the focus goes on to what is left
            continue
        if focus["form"] == form_id and name in todo:
            if focus["kind"] == "choices":
                _choose(k, focus, want[name])
            elif focus["kind"] == "number":
                for digit in str(want[name]):  # digits are keys, not free text
                    k.press(digit)
                k.press("Shift+Enter")
            elif focus["kind"] == "text":
                text, have = want[name], focus["value"] or ""
                if not focus["editing"]:  # a kept text: its Edit button opens it
                    k.press("Space")
                if have and text.startswith(have):
                    k.press("Control+End")
                    k.type(text[len(have):])
                else:
                    if have:
                        k.press("Control+a")
                    k.type(text)
                k.press("Shift+Enter")
            continue
        k.press("Tab")
    values = page.evaluate(_FORM_VALUES, form_id)
    return [n for n, v in want.items() if not _same(values.get(n), v)] + [
        f"accept:{n}" for n in page.evaluate(_PENDING, form_id)]


def appears(locator, seconds: float) -> bool:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        locator.first.wait_for(state="attached", timeout=seconds * 1000)
        return True
    except PlaywrightTimeout:
        return False


def _into_stream(page, k, pid: int) -> None:
    """From the focused project list into project ``pid``'s label stream by keys: the arrow keys to
    its card, Enter, Enter on "Label All Tasks"; the round's instructions (open on the first entry
    into a round's stream; the front keeps them closed later on) closed with Escape."""
    for _ in range(page.locator("a.lsf-projects-page__link").count()):
        if page.evaluate("() => document.activeElement.getAttribute('href')").rstrip("/").endswith(f"/projects/{pid}/data"):
            break
        k.press("ArrowDown")
    k.press("Enter")
    page.wait_for_url(f"**/projects/{pid}/**")  # this round's project, not one the focus moved to
    page.wait_for_function("() => document.activeElement && document.activeElement.textContent.trim() === 'Label All Tasks'")
    k.press("Enter")
    form_ready(page)
    page.wait_for_load_state("networkidle")
    close = page.locator('button[aria-label="Close modal"]')  # the round's instructions, on its first entry
    if close.count() or appears(close, 3):
        k.press("Escape")
        close.wait_for(state="detached", timeout=10_000)


def keyboard_window(page, base: str, pid: int, rnd, truth: dict[int, dict], pause_s: float = 0.08,
                    hook=None) -> dict:
    """One whole window by keyboard alone, through the front's keys: from the project list (the
    arrow keys to this round's project, Enter; the data manager's "Label All Tasks", Enter) into
    the label stream; there Enter comes to the first form, each form is filled (:func:`keyboard_form`)
    (its proposals accepted), Enter to the next, and Ctrl+Enter submits. Returns the task id, the
    counts, the units and the fields left not as wanted. ``hook(stage)`` (tests), if given, runs
    once the window is open (``"open"``) and once it is filled (``"filled"``); its keys are not counted."""
    k = KeyCounter(page, pause_s)
    page.goto(f"{base}/projects/")
    # the list settles first: the front's landing script orders the cards (and focuses the first) as
    # their descriptions arrive, so a focus read before that may move before Enter
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => document.activeElement && document.activeElement.matches('a.lsf-projects-page__link')")
    _into_stream(page, k, pid)
    task_id, data = page.evaluate("() => [Htx.task.id, Htx.task.dataObj]")  # the window the stream gave
    want_all = {r["from_name"]: ls_config.result_value(r) for r in ls_config.values_to_results(rnd, data, truth)}
    left: list[str] = []
    if hook:
        hook("open")
    k.press("Enter")  # to the first form
    for i in range(len(data["units"])):
        want = {n: v for n, v in want_all.items() if (naming.parse_control_name(n) or (0, 0, 0, -1))[3] == i}
        left += keyboard_form(k, f"unit_{i}", want)
        k.press("Enter")  # on to the next form
    if hook:
        hook("filled")
    k.press("Control+Enter")
    return {"task": task_id, "keys": k.keys, "tabs": k.tabs, "typed": k.typed, "units": len(data["units"]),
            "left": left}


# The page observer of --whole, on every page of the tab before Label Studio's own scripts: each
# tick or untick of a choice (Label Studio's antd wrappers change their "-checked" class) made while
# its row's form is off screen (outside the viewport or a scrolled box around it), counted while the
# bench watches (a window open and drawn, until its submit).
UNSEEN_WATCH = r"""
(() => {
  if (window.__rescueUnseen) return;
  window.__rescueUnseen = []; window.__rescueWatch = false;
  function offScreen(form) {
    if (!form.getClientRects().length) return true;
    const r = form.getBoundingClientRect();
    let top = 0, bottom = innerHeight;
    for (let p = form.parentElement; p && p !== document.body; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (/(auto|scroll|hidden)/.test(s.overflowY)) { const q = p.getBoundingClientRect(); top = Math.max(top, q.top); bottom = Math.min(bottom, q.bottom); }
    }
    return r.bottom <= top || r.top >= bottom;
  }
  const CHECKED = /\bant-(checkbox|radio)-wrapper-checked\b/;
  new MutationObserver(records => {
    if (!window.__rescueWatch) return;
    for (const m of records) {
      const el = m.target;
      if (!el.classList || !/\bant-(checkbox|radio)-wrapper\b/.test(el.className)) continue;
      if (CHECKED.test(m.oldValue || "") === CHECKED.test(el.className)) continue;
      const form = el.closest('[id^="unit_"], [id^="voice_"]');
      if (form && offScreen(form))
        window.__rescueUnseen.push({form: form.id, task: window.Htx && Htx.task ? Htx.task.id : null,
                                    choice: el.textContent.trim().slice(0, 60), now: CHECKED.test(el.className)});
    }
  }).observe(document.documentElement, {attributes: true, attributeFilter: ["class"], attributeOldValue: true, subtree: true});
})();
"""
# the window on screen is a new one (another task than `old`) and its first form is usable
_NEXT_WINDOW = """(old) => {
  const t = window.Htx && Htx.task; if (!t || t.id === old) return false;
  const u = document.getElementById('unit_0'); if (!u) return false;
  const c = u.querySelector('.lsf-choices, textarea, input, [data-testid=htx-textbox-edit-button]');
  return !!(c && c.getClientRects().length);
}"""

# the desk's answers during a submit: its API calls by method and path, numbers as N
def _desk_call(method: str, url: str) -> str | None:
    path = url.split("?")[0].split("://", 1)[-1].partition("/")[2]
    return f"{method} /" + re.sub(r"/\d+", "/N", path) if path.startswith("api/") else None


# why a submit was refused: the keys script's sentence above the field, else Label Studio's own dialog
_REFUSED = """() => [...document.querySelectorAll('.rescue-why, .ant-modal-confirm-content')]
  .filter(w => w.getClientRects().length).map(w => w.textContent.trim())"""



def _enter_round(k: KeyCounter, page, base: str, pid: int, first: bool) -> None:
    """From the rounds (the project list the login lands on) into a round's task stream by keys:
    the arrow keys to its project (the first round is focused already), Enter, and Enter on the
    data manager's "Label All Tasks". A later round opens the list by its address first (one key:
    a person's bookmark or Alt+Home), a page load."""
    if not first:
        page.goto(f"{base}/projects/")
        k.keys += 1
    page.wait_for_function("() => document.activeElement && document.activeElement.matches('a.lsf-projects-page__link')")
    # the landing focuses the first round once the cards carry their rounds
    page.wait_for_function("() => !document.querySelector('a.lsf-projects-page__link:not([data-rescue-round])')")
    _into_stream(page, k, pid)


def whole_round(page, base: str, pid: int, rnd, truth: dict[int, dict], n_windows: int, client, *, first: bool,
                pause_s: float = 0.08, shot: Path | None = None, voices: dict[str, str] | None = None,
                profile=None) -> dict:
    """Every window of one round in the tab, by keys alone: into the round's stream
    (:func:`_enter_round`), then per window Enter to the first form, each form filled
    (:func:`keyboard_form`; the voices of "Who is each voice?" first, named as ``voices`` says:
    :func:`voice_names`), Enter to the next, Ctrl+Enter to submit; the time from that
    Ctrl+Enter to the next window's first usable form is kept, with the browser's CPU seconds meanwhile
    (``cpus``) and how long each of the desk's API calls meanwhile took (``desk``); ``profile`` (a
    :class:`browser.CpuProfile`), if given, records each of those submits. A refused submit (the
    window stays) ends the round there."""
    k = KeyCounter(page, pause_s)
    _enter_round(k, page, base, pid, first)
    waits, cpus, units, left, tasks, refused = [], [], 0, [], [], None
    desk: list[tuple[str, float]] = []  # the desk's answers during the submits: (call, seconds)
    watching = [False]

    def answered(request) -> None:
        what = _desk_call(request.method, request.url)
        if watching[0] and what:
            t = request.timing  # ms from the request's start
            desk.append((what, (t["responseEnd"] - t["requestStart"]) / 1000))
    page.on("requestfinished", answered)
    for w in range(n_windows):
        task_id, data = page.evaluate("() => [Htx.task.id, Htx.task.dataObj]")
        tasks.append(task_id)
        want_all = {r["from_name"]: ls_config.result_value(r) for r in ls_config.values_to_results(rnd, data, truth)}
        page.evaluate("() => { window.__rescueWatch = true; }")
        k.press("Enter")  # to the first form: "Who is each voice?" where the window has it
        for v, voice in enumerate(data.get(voice_naming.VOICES_KEY) or []):
            # a name pre-filled as the oracle's is accepted with a, another one picked by its key
            want = {voice_naming.CHOICE_NAME.format(v=v): [(voices or {}).get(voice["voice"], voice["voice"])]}
            left += [f"w{w + 1}:{n}" for n in keyboard_form(k, f"voice_{v}", want)]
            k.press("Enter")  # on to the next voice, then the first row
        for i in range(len(data["units"])):
            want = {n: v for n, v in want_all.items() if (naming.parse_control_name(n) or (0, 0, 0, -1))[3] == i}
            left += [f"w{w + 1}:{n}" for n in keyboard_form(k, f"unit_{i}", want)]
            if shot and w == 0 and i == 0:  # the guide's picture: the window's first form, filled
                shot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shot))
            k.press("Enter")  # on to the next form
        units += len(data["units"])
        page.evaluate("() => { window.__rescueWatch = false; }")
        if profile and w < n_windows - 1:
            profile.start()
        c0 = browser_cpu_s()
        watching[0] = True
        t0 = time.perf_counter()
        k.press("Control+Enter")
        if w < n_windows - 1:
            try:
                page.wait_for_function(_NEXT_WINDOW, arg=task_id, timeout=60_000)
            except Exception:  # noqa: BLE001 (Playwright's timeout: the submit was refused or never came)
                why = page.evaluate(_REFUSED)
                refused = f"window {w + 1}: " + (why[0] if why else "no next window within 60 s")
                if profile:
                    profile.stop(f"{rnd.name}-w{w + 1}-refused")
                break
            waits.append(time.perf_counter() - t0)
            cpus.append(browser_cpu_s() - c0)
            watching[0] = False
            if profile:
                profile.stop(f"{rnd.name}-w{w + 1}")
            time.sleep(pause_s)
    deadline = time.monotonic() + 60  # the last window's annotation saved, or its submit refused
    while not refused:
        if client.request("GET", f"/api/tasks/{tasks[-1]}/", "read the task").json().get("total_annotations"):
            break
        why = page.evaluate(_REFUSED)
        if why or time.monotonic() > deadline:
            refused = f"window {len(tasks)}: " + (why[0] if why else "not saved within 60 s")
        time.sleep(0.5)
    page.remove_listener("requestfinished", answered)
    unseen = page.evaluate("() => window.__rescueUnseen.splice(0)")
    return {"keys": k.keys, "tabs": k.tabs, "typed": k.typed, "units": units, "waits": waits, "cpus": cpus,
            "desk": desk, "left": left, "tasks": tasks, "refused": refused, "unseen": unseen}
