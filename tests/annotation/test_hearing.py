"""Hearing a turn: each line's play control plays exactly that line and stops at its end
(Paragraphs with the audio URL, synced with the Audio player), checked from the media element."""
from __future__ import annotations

import secrets
import shutil
import subprocess
import time

import pytest
from ls_samples import CHROMIUM, PLAYER_ARGS, SCREENSHOTS, browser_login, make_sample

from pipeline.annotation import push

pytestmark = pytest.mark.slow


def test_a_line_play_control_plays_that_line_and_stops_at_its_end(ls_server, ls_client, ls_desks, ls_data_root):
    playwright = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian chromium is not installed (scripts/setup.sh installs it)")
    email, password = f"hear-{secrets.token_hex(3)}@rescue.test", secrets.token_urlsafe(12)
    ls_desks.add(email)
    ls_server.set_password(email, password)
    media = ls_data_root / "media"
    media.mkdir(exist_ok=True)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=330:duration=30",
                    "-ar", "16000", "-ac", "1", str(media / "hear.wav")], check=True)
    sample = make_sample("synthetic/hear_001", "couple", 6)
    report = push.push_round(ls_desks, "relation", [sample], [email], k=1, prelabel=None,
                             media_url=lambda s: "/data/local-files/?d=media/hear.wav")
    pid = report.projects[push.project_key("relation", "couple", email)]
    task = ls_client.find_tasks(pid, "sample_id", sample["sample_id"])[0]
    turn = next(t for t in task["data"]["turns"] if t["row_index"] == task["data"]["units"][1]["row_index"])
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=PLAYER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.set_default_timeout(120_000)
            browser_login(page, ls_server.url, email, password)
            page.goto(f"{ls_server.url}/projects/{pid}/data?task={task['id']}")
            page.locator("#unit_0").wait_for(state="attached")
            page.wait_for_load_state("networkidle")
            sel = "#unit_1 audio"  # the second therapist row (row 6) has its own player
            for _ in range(5):  # the form may still re-render right after it appears
                try:
                    page.locator("#unit_1").scroll_into_view_if_needed(timeout=10_000)
                    box = page.locator(sel).bounding_box(timeout=10_000)
                    page.mouse.click(box["x"] + 16, box["y"] + box["height"] / 2)  # its play button
                    page.wait_for_function(f"() => {{ const m = document.querySelector('{sel}'); "
                                           "return m && !m.paused && m.currentTime > 0 }", timeout=5_000)
                    break
                except playwright.Error:
                    continue
            seen = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < (turn["end"] - turn["start"]) + 4:
                seen.append(page.evaluate(f"() => {{ const m = document.querySelector('{sel}'); "
                                          "return [m.currentTime, m.paused] }"))
                if seen[-1][1] and seen[-1][0] > turn["start"]:
                    break
                time.sleep(0.2)
            playing = [t for t, paused in seen if not paused and t > 0]
            assert playing and turn["start"] - 0.05 <= playing[0] <= turn["start"] + 1.0, (turn, seen)
            end, paused = seen[-1]
            assert paused and turn["end"] - 0.05 <= end <= turn["end"] + 0.35, (turn, seen)  # stopped at its end
            assert max(t for t, _ in seen) <= turn["end"] + 0.35
            # the dialogue's line play buttons are live (Paragraphs carries the audio URL)
            assert page.locator("button[aria-label=play]").first.is_enabled()
            page.screenshot(path=str(SCREENSHOTS / "hearing.png"))
        finally:
            browser.close()
