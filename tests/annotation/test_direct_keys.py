"""Straight to Label Studio (no desk front), headless Chromium: Label Studio's automatic choice keys
(1-9, 0, q, w, ...) are off in the generated configs, so a number key never ticks a choice of
form 0; and emotion's pre-filled "who feels it" is a proposal: accepted as it is (one click on its
"accept" box) on rows with no feeling, Submit takes the form and the pull finds no entry and no problem."""
from __future__ import annotations

import json
import secrets
import time

import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, pull, push
from pipeline.annotation.rounds import load_round
from tests.helpers import SCREENSHOTS, accept_by_mouse, browser_login, open_task, wait_saved
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow
# the choices ticked in a form's fields (a proposal's "accept" box and the hidden mark of proposals left out)
_CHECKED = ("u => [...document.querySelectorAll(`#${u} .lsf-choices input`)].filter(i => i.checked"
            " && !i.closest('[id^=proposal-], [id^=proposed-fields_]')).map(i => i.name)")


def _press_outside_fields(page, key: str) -> None:
    page.locator("#unit_0 .lsf-choices").first.scroll_into_view_if_needed()
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press(key)
    time.sleep(0.5)


def test_no_automatic_keys_and_an_untouched_default_costs_nothing(ls_server, ls_client, ls_desks, new_annotators,
                                                                   tmp_path, chromium):
    rnd = load_round("emotion")
    [email] = new_annotators(1)
    password = secrets.token_urlsafe(12)
    ls_server.set_password(email, password)
    sample = make_sample("synthetic/direct_keys_001", "couple", 6)  # client rows 1, 2, 4, 5
    # no pre-annotation: the round's defaults alone are pre-filled ("who feels it" = the speaker)
    report = push.push_round(ls_desks, "emotion", [sample], [email], k=1, prelabel=None)
    pid = report.projects[push.project_key("emotion", "couple", email)]
    task = ls_client.find_tasks(pid, "sample_id", sample["sample_id"])[0]
    units = task["data"]["units"]
    # The control: the same task in a project whose config lacks the hidden key holder. Label
    # Studio then gives form 0's first choice the key 1 (what the generated configs prevent).
    bare = ls_config.render_config(rnd, "couple").replace("\n".join(ls_config.hotkey_sink()) + "\n", "")
    assert 'hotkey="' not in bare
    control = ls_client.ensure_project(f"rescue-test:direct-keys-control:{secrets.token_hex(3)}",
                                       "direct keys control", bare)
    ls_client.import_tasks(control.id, [{"data": task["data"]}])
    control_task = ls_client.tasks(control.id)[0]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    with chromium() as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            browser_login(page, ls_server.url, email, password, timeout_ms=60_000)

            open_task(page, f"{ls_server.url}/projects/{control.id}/data?task={control_task['id']}")
            assert page.evaluate(_CHECKED, "unit_0") == []
            _press_outside_fields(page, "1")
            ticked = page.evaluate(_CHECKED, "unit_0")
            assert ticked, "control: Label Studio's automatic key 1 ticked nothing (the check below would prove nothing)"

            open_task(page, f"{ls_server.url}/projects/{pid}/data?task={task['id']}", prefilled=True)
            # the default is pre-filled; no automatic key marks ([1], [q]) on any form
            assert page.evaluate(_CHECKED, "unit_0") == [units[0]["speaker"]]
            assert page.locator("[id^=unit_] sup").count() == 0
            for key in ("1", "2", "q"):
                _press_outside_fields(page, key)
            assert page.evaluate(_CHECKED, "unit_0") == [units[0]["speaker"]], "a key ticked a choice of form 0"

            # Each form: its function and tone; "who feels it" left as pre-filled (no feeling read).
            for i in range(len(units)):
                unit = page.locator(f"#unit_{i}")
                unit.scroll_into_view_if_needed(timeout=10_000)
                unit.locator(".lsf-choices").first.locator("input").first.click()
                box = page.locator(f"textarea[name='tone_of_voice_{i}']")
                box.fill("flat")
                box.press("Shift+Enter")
            # "who feels it" came proposed: each accepted by its own box (a click each, on the desk itself)
            assert accept_by_mouse(page) == len(units)
            page.screenshot(path=str(SCREENSHOTS / "direct_keys_emotion.png"), full_page=True)
            page.get_by_role("button", name="Submit").click()
            wait_saved(ls_client, pid, sample["sample_id"], page)
        finally:
            # the control project is no round's: off the shared server again
            ls_client.request("DELETE", f"/api/projects/{control.id}/", "delete the control project")

    result = pull.pull_round(ls_desks, "emotion", DataRoot(tmp_path), annotators=[email], write=False)
    assert [(p["field"], p["problem"], p["value"]) for p in result.problems.to_pylist()] == []
    got = {(r["row_index"], r["field"]): json.loads(r["value"]) for r in result.labels.to_pylist()}
    first = json.loads(ls_client.export_tasks(pid))[0]["annotations"][0]["result"]
    assert not any(r["from_name"] == ls_config.HOTKEY_SINK for r in first)  # the key holder never answers
    for u in units:
        assert got[(u["row_index"], "internal_emotion")] == []  # the untouched default: no entry
        assert got[(u["row_index"], "tone_of_voice")] == "flat"
