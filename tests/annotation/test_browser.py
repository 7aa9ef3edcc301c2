"""An annotator logs in with a real browser (headless Debian Chromium driven by Playwright)
through the front of their own desk (``pipeline.labelstudio.front.FrontServer`` in front of a real desk, as
annotators work), fills in a task of every round, submits, and the saved annotation is read back
through the API and validated. Screenshots of each round go to test-output/screenshots/."""
from __future__ import annotations

import json
import secrets
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

import pytest
from ls_samples import make_sample
from playwright.sync_api import Error as PlaywrightError
from typer.testing import CliRunner

from pipeline.labelstudio.front import FrontServer
from pipeline.labelstudio.front.comfort import KEYS_PATH
from pipeline.annotation import ls_config, naming, pull, push
from pipeline.annotation.rounds import load_round, round_names
from pipeline.cli import app
from tests.helpers import SCREENSHOTS, accept_by_mouse, browser_login, tone_wav, wait_saved
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow


def _fill(page, rnd, data, values) -> None:
    """Fill every control of every unit with ``values`` ({row_index: {field: value}}) by mouse.

    Within a unit the Choices groups appear in config order (field by field, slot by slot; a
    record slot after the first appears once the slot before it has its first choice), so the
    k-th group is the k-th choice control. Short lists are buttons in a line; evidence rows a
    dropdown whose options show "row · speaker: first words"."""
    k = 0
    groups = None

    def control(f, name, value):
        nonlocal k
        if f.type == "const":
            return
        if f.type in ("choice", "multichoice", "rows"):
            items = value if isinstance(value, list) else [value]
            if f.type == "rows":
                items = [str(v + 1) for v in items]
            if f.type == "choice" and value == "" and f.empty_choice:
                items = [f.empty_choice]
            items = [v for v in items if v not in ("", None)]
            group = groups.nth(k)
            if items or group.count():
                # set the group exactly (defaults may be pre-filled): each choice's input is named by
                # its value; an evidence row's value starts with its row number ("12 · Ann: ...")
                for box in group.locator("input").all():
                    label = _STORED.get(box.get_attribute("name") or "", box.get_attribute("name") or "")
                    want = (label.split(" · ")[0] in items) if f.type == "rows" else label in items
                    if box.is_checked() != want:
                        box.click()
            k += 1
        elif f.type == "text" and value:
            box = page.locator(f"textarea[name='{name}']")
            box.fill(value)
            box.press("Shift+Enter")  # TextArea results are added on Shift+Enter
        elif f.type == "number" and value is not None:
            page.locator(f"input[type=number][name='{name}']").fill(str(value))
            page.keyboard.press("Tab")

    for i, u in enumerate(data["units"]):
        unit = page.locator(f"#unit_{i}")  # the Repeater renders lazily: bring each unit into view
        for attempt in range(5):  # the form may still re-render right after it appears (detached node)
            try:
                unit.scroll_into_view_if_needed(timeout=10_000)
                break
            except PlaywrightError:
                if attempt == 4:
                    raise
                time.sleep(0.5)
        groups, k = unit.locator(_LISTS), 0
        row = values.get(u["row_index"], {})
        for f in rnd.fields:
            if f.type != "records":
                control(f, naming.control_name(f.name, i), row.get(f.name))
                continue
            records = row.get(f.name) or []
            for slot in range(1, f.max_items + 1):
                rec = records[slot - 1] if slot <= len(records) else {}
                if f.required and slot == 1 and not records:  # an explicit "none" decision
                    rec = {s.name: "" for s in f.subfields if s.empty_choice}
                for sub in f.subfields:
                    control(sub, naming.control_name(f.name, i, slot, sub.name), rec.get(sub.name))


# a choice's shown words -> the taxonomy name it stores (the configs' alias)
_STORED = {c.get("value"): c.get("alias") for name in round_names() for sc in ("couple", "family")
           for c in ET.fromstring(ls_config.render_config(load_round(name), sc)).iter("Choice") if c.get("alias")}
KEYBOARD_ROUND = "strategy"  # filled and submitted with the keyboard alone
# a form's choice lists, its fields' own (a proposal's "accept" box left out)
_LISTS = "xpath=.//div[contains(concat(' ', @class, ' '), ' lsf-choices ') and not(ancestor::*[starts-with(@id, 'proposal-')])]"
_ACTIVE = """() => { const el = document.activeElement; const unit = el && el.closest('[id^=unit_]');
  const group = el && el.closest('.lsf-choices');
  return {unit: unit ? unit.id : null, tag: el ? el.tagName : null, name: el ? el.getAttribute('name') : null,
          group: unit && group ? [...unit.querySelectorAll('.lsf-choices')].filter(g => !g.closest('[id^=proposal-]'))
            .indexOf(group) : -1}; }"""
_CHECKED = ("u => [...document.querySelectorAll(`#${u} .lsf-choices`)].filter(g => !g.closest('[id^=proposal-]'))"
            ".map(g => [...g.querySelectorAll('input')].filter(i => i.checked).map(i => i.name))")


def _fill_by_keyboard(page, rnd, data, values) -> int:
    """Fill every unit with the keyboard alone, through the front's keys (pipeline/labelstudio/front/static/keys.js): Enter
    comes to the first form; in each form the first list's choice is its number key (with the
    focus elsewhere in that form, the key first moves it to that list and changes nothing; it must
    land there, not on form 0 as Label Studio's own automatic hotkeys do); the other lists: Tab to the list, arrows to the choice, Space; text is typed
    and added with Shift+Enter; Ctrl+Enter submits. Returns the key presses used."""
    keys = 0

    def press(key):
        nonlocal keys
        page.keyboard.press(key)
        keys += 1

    def tab_to(want, limit=400):
        for _ in range(limit):
            if want(page.evaluate(_ACTIVE)):
                return
            press("Tab")
        raise AssertionError(f"Tab never reached the control ({page.evaluate(_ACTIVE)})")

    press("Enter")  # to the first form
    assert page.evaluate(_ACTIVE)["unit"] == "unit_0", page.evaluate(_ACTIVE)
    for i, u in enumerate(data["units"]):
        row = values.get(u["row_index"], {})
        tab_to(lambda a, i=i: a["unit"] == f"unit_{i}")
        before_0 = page.evaluate(_CHECKED, "unit_0")
        k = 0
        for f in rnd.fields:
            subs = [(sub, (row.get(f.name) or [{}])[0].get(sub.name) if f.type == "records" else None)
                    for sub in f.subfields] if f.type == "records" else [(f, row.get(f.name))]
            if f.type == "records" and f.required and not row.get(f.name):
                subs = [(sub, "" if sub.empty_choice else None) for sub in f.subfields]
            for sub, value in subs:
                if sub.type == "const":
                    continue
                if sub.type in ("choice", "multichoice"):
                    items = value if isinstance(value, list) else [value]
                    items = [sub.empty_choice if v == "" and sub.empty_choice else v for v in items]
                    options = list(sub.options(data["scenario"], data.get("participants"), len(data["turns"])))
                    for v in [v for v in items if v not in ("", None)]:
                        if k == 0:  # the first list: its number key, the focus anywhere in this form
                            at = options.index(v)
                            key = "-" if at == len(options) - 1 else str((at + 1) % 10)
                            if page.evaluate(_ACTIVE)["group"] != 0:
                                # no list in focus: the key moves the focus to the form's first list, and changes nothing
                                before_i = page.evaluate(_CHECKED, f"unit_{i}")
                                press(key)
                                assert page.evaluate(_ACTIVE)["group"] == 0, page.evaluate(_ACTIVE)
                                assert page.evaluate(_CHECKED, f"unit_{i}") == before_i
                            press(key)
                            assert v in page.evaluate(_CHECKED, f"unit_{i}")[0], (i, v)
                            if i:  # not on form 0 (Label Studio's own hotkeys would go there)
                                assert page.evaluate(_CHECKED, "unit_0") == before_0
                            continue
                        # a list is one Tab stop (the front's roving tabindex): Tab to it, arrows to the choice
                        tab_to(lambda a, k=k: a["unit"] == f"unit_{i}" and a["group"] == k)
                        for _ in range(len(options)):
                            if _STORED.get(page.evaluate(_ACTIVE)["name"], page.evaluate(_ACTIVE)["name"]) == v:
                                break
                            press("ArrowRight")
                        if not page.evaluate("() => document.activeElement.checked"):
                            press("Space")
                    k += 1
                elif sub.type == "text" and value:
                    name = naming.control_name(f.name, i, 1, sub.name) if f.type == "records" \
                        else naming.control_name(f.name, i)
                    tab_to(lambda a, name=name: a["tag"] == "TEXTAREA" and a["name"] == name)
                    page.keyboard.type(value)
                    keys += len(value)
                    press("Shift+Enter")
    press("Control+Enter")  # Label Studio's submit key
    return keys


def _truth(rnd, sample) -> dict[int, dict]:
    values = push.input_values(rnd, sample)
    for ri, row in values.items():
        if "dialogue_cleaned" in row:
            row["dialogue_cleaned"] = f"corrected line {ri}"
    return values


# what the page itself reads of its desk's projects (with the person's session, through the front)
_PROJECTS = """() => fetch('/api/projects?page_size=1000').then(r => r.json())
  .then(j => (j.results || j).map(p => ({id: p.id, description: p.description || ''})))"""


def test_annotator_fills_and_submits_every_round_in_the_browser(desk_factory, monkeypatch, chromium):
    """Through the front of the annotator's own (real) desk, as annotators work: its keys, its
    cached assets; their page shows their own projects only (another annotator's, pushed to
    their own desk, is not there)."""
    desks = desk_factory.desks
    root = desks.root.root
    email, password = f"browser-{secrets.token_hex(3)}@rescue.test", secrets.token_urlsafe(12)
    other = f"browser-other-{secrets.token_hex(3)}@rescue.test"
    monkeypatch.setenv("RESCUE_ANNOTATOR_PASSWORD", password)
    with ThreadPoolExecutor(1) as pool:  # another annotator with a desk of their own, made meanwhile
        made = pool.submit(desk_factory, other)
        added = CliRunner().invoke(app, ["annotators", "add", email, "--data-root", str(root)])
        made.result()
    assert added.exit_code == 0, added.output
    assert password not in added.output

    tone_wav(desks.root.media_dir() / "browser.wav", seconds=20)
    media_url = lambda s: "/data/local-files/?d=media/browser.wav"  # noqa: E731
    sample = make_sample("synthetic/browser_001", "couple", 6)  # therapist rows 3 (no strategy), 6 (a strategy)
    # the other annotator's work: on their desk, never on this annotator's page
    push.push_round(desks, "emotion", [make_sample("synthetic/browser_other_001", "couple", 3)], [other], k=1,
                    prelabel=None, root=DataRoot(root), media_url=media_url)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    client = desks.client(email)

    front = FrontServer(desks.url(email)).start()
    assert front.report.version_ok, front.report
    with chromium() as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            browser_login(page, front.url, email, password, timeout_ms=60_000)  # the person's own password
            pushed = {}  # project key -> id: this annotator's projects so far
            for name in round_names():
                rnd = load_round(name)
                report = push.push_round(desks, name, [sample], [email], k=1, prelabel=None, root=DataRoot(root),
                                         media_url=media_url)
                key = push.project_key(name, "couple", email)
                pid = pushed[key] = report.projects[key]
                task = client.find_tasks(pid, "sample_id", sample["sample_id"])[0]
                page.goto(f"{front.url}/projects/{pid}/data?task={task['id']}")
                try:
                    page.wait_for_selector("#unit_0 .lsf-choices >> visible=true", timeout=120_000)
                except PlaywrightError:  # say which round and keep what the annotator saw
                    page.screenshot(path=str(SCREENSHOTS / f"{name}_no_form.png"), full_page=True)
                    raise AssertionError(f"round {name}: no form within 120 s at {page.url}; "
                                         f"page text: {page.inner_text('body')[:500]!r}") from None
                page.wait_for_load_state("networkidle")  # Label Studio re-renders once its requests settle
                assert page.locator(f"script[src='{KEYS_PATH}']").count() == 1  # the front's keys came with it
                # Label Studio's automatic hotkey marks (keys acting on the first forms only) are hidden
                marks = page.locator("#unit_0 sup.lsf-hint")
                assert marks.count() == 0 or not marks.first.is_visible()
                # the page's projects: this annotator's own, as pushed so far (the other's are on their desk)
                listed = page.evaluate(_PROJECTS)
                assert sorted(p["id"] for p in listed) == sorted(pushed.values()), (name, listed)
                assert {push.parse_project_key(p["description"].splitlines()[-1])[2] for p in listed} == {email}
                truth = _truth(rnd, sample)
                if name == KEYBOARD_ROUND:
                    page.locator("#unit_0 .lsf-choices >> visible=true").first.wait_for()
                    page.screenshot(path=str(SCREENSHOTS / f"{name}_keyboard_before.png"), full_page=True)
                    keys = _fill_by_keyboard(page, rnd, task["data"], truth)
                    assert keys > 0
                else:
                    if name == "emotion":  # submitting an empty form names the field and the form in words
                        page.locator("#unit_0 .lsf-choices >> visible=true").first.wait_for()
                        # the round's default is pre-filled: "who feels it" is the row's speaker
                        assert page.evaluate(_CHECKED, "unit_0")[1] == [task["data"]["units"][0]["speaker"]]
                        page.get_by_role("button", name="Submit").click()
                        dialog = page.get_by_role("dialog")
                        dialog.get_by_text("Function of the row is missing").wait_for()
                        assert "utterance_type_0" not in dialog.inner_text()
                        page.keyboard.press("Escape")
                        dialog.wait_for(state="hidden")
                    _fill(page, rnd, task["data"], truth)
                    accept_by_mouse(page)  # what the fill left as proposed (emotion's "who feels it"): accepted
                    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
                    page.get_by_role("button", name="Submit").click()
                wait_saved(client, pid, sample["sample_id"], page, what=f"round {name}: the annotation")

                # read back through the API: validated, by this annotator, equal to what was typed
                result = pull.pull_round(desks, name, DataRoot(root), annotators=[email], write=False)
                assert result.problems.to_pylist() == [], name
                got = {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()}
                assert {r["annotator"] for r in result.labels.to_pylist()} == {email}
                for u in task["data"]["units"]:
                    for f in rnd.fields:
                        want = truth[u["row_index"]].get(f.name)
                        if f.type == "records":
                            want = [dict(r, provider="Therapist") if f.name == "support_strategy" else r
                                    for r in want[: f.max_items]]
                            assert sorted(map(json.dumps, map(lambda r: dict(sorted(r.items())), got[(u["row_index"], f.name)]))) \
                                == sorted(map(json.dumps, map(lambda r: dict(sorted(r.items())), want))), (name, u)
                        else:
                            assert got[(u["row_index"], f.name)] == want, (name, u, f.name)
        finally:
            front.stop()
