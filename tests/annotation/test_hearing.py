"""Hearing a turn, through the desk's front: each play control plays exactly its row and stops
within 0.1 s of its end, checked from the media element's ``currentTime``: a form's own player,
the dialogue line's play button (Label Studio's Paragraphs audio, which by itself plays on into
the next lines), and a click on the line itself (which also outlines the row's form)."""
from __future__ import annotations

import secrets
import time

import pytest
from ls_samples import make_sample

# the dialogue's own audio (Label Studio's Paragraphs), not a form's player
_LINE_AUDIO = "[...document.querySelectorAll('audio')].find(a => !a.closest('[id^=unit_], [id^=voice_]'))"

from pipeline.labelstudio.front import FrontServer
from pipeline.annotation import push
from tests.helpers import SCREENSHOTS, browser_login, play_until_stopped, tone_wav

pytestmark = pytest.mark.slow


def test_a_line_play_control_plays_that_line_and_stops_at_its_end(ls_server, ls_client, ls_desks, ls_data_root,
                                                                  chromium):
    email, password = f"hear-{secrets.token_hex(3)}@rescue.test", secrets.token_urlsafe(12)
    ls_desks.add(email)
    ls_server.set_password(email, password)
    tone_wav(ls_data_root / "media" / "hear.wav", seconds=30)
    sample = make_sample("synthetic/hear_001", "couple", 6)
    report = push.push_round(ls_desks, "relation", [sample], [email], k=1, prelabel=None,
                             media_url=lambda s: "/data/local-files/?d=media/hear.wav")
    pid = report.projects[push.project_key("relation", "couple", email)]
    task = ls_client.find_tasks(pid, "sample_id", sample["sample_id"])[0]
    turn = next(t for t in task["data"]["turns"] if t["row_index"] == task["data"]["units"][1]["row_index"])
    front = FrontServer(ls_server.url).start()
    with chromium(player=True) as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.set_default_timeout(120_000)
            browser_login(page, front.url, email, password)
            page.goto(f"{front.url}/projects/{pid}/data?task={task['id']}")
            page.locator("#unit_0").wait_for(state="attached")
            page.wait_for_load_state("networkidle")
            # the second therapist row (row 6) has its own player
            seen = play_until_stopped(page, "#unit_1 audio", (turn["start"], turn["end"]))
            playing = [t for t, paused in seen if not paused and t > 0]
            assert playing and turn["start"] - 0.05 <= playing[0] <= turn["start"] + 1.0, (turn, seen)
            end, paused = seen[-1]
            assert paused and turn["end"] - 0.05 <= end <= turn["end"] + 0.1, (turn, seen)  # stopped at its end
            assert max(t for t, _ in seen) <= turn["end"] + 0.1

            # the dialogue line's play button, then a click on the line: that line, stopped at its end
            line = task["data"]["turns"].index(turn)
            for how in ("button", "line"):
                phrase = page.locator(f'[data-testid="phrase:{line}"]')
                phrase.scroll_into_view_if_needed()
                if how == "button":
                    phrase.locator("xpath=..").locator("button[aria-label=play]").click()
                else:
                    phrase.click(position={"x": 200, "y": 8})
                page.wait_for_function(f"() => {{ const m = {_LINE_AUDIO}; return m && !m.paused }}", timeout=10_000)
                seen = []
                t0 = time.monotonic()
                while time.monotonic() - t0 < (turn["end"] - turn["start"]) + 4:
                    seen.append(page.evaluate(f"() => {{ const m = {_LINE_AUDIO}; return [m.currentTime, m.paused] }}"))
                    if seen[-1][1]:
                        break
                    time.sleep(0.1)
                end, paused = seen[-1]
                assert paused and turn["end"] - 0.05 <= end <= turn["end"] + 0.1, (how, turn, seen)
                assert min(t for t, _ in seen) >= turn["start"] - 0.05, (how, turn, seen)
                if how == "line":  # the row's form is the outlined one: the keys act on it
                    assert page.evaluate("() => document.getElementById('unit_1').style.outlineStyle") == "solid"
            page.screenshot(path=str(SCREENSHOTS / "hearing.png"))
        finally:
            front.stop()
