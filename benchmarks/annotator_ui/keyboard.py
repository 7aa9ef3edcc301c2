"""The keyboard runs: ``--keyboard`` (one window of every round by keys alone, a fresh browser
per round) and ``--keyboard --whole`` (every window of every round of one interview in ONE tab,
the desk's stored answers read back against the oracle), their lines and screenshots."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from pipeline import schemas
from pipeline.annotation.rounds import load_round, round_names
from pipeline.store import write_parquet

from .stack import FrontProcess, bench_desks, load_avg, make_media, push_sample, stop
from .oracle import answers, family_sample, voice_names, voice_table, wrong_answers
from .browser import CpuProfile, launch, login, new_context
from .driver import UNSEEN_WATCH, keyboard_window, whole_round

PROFILE_ENV = "BENCH_UI_PROFILE"


def _desk_calls(calls: list[tuple[str, float]]) -> str:
    """The desk's API calls during the submits: per call (method and path) how many and their
    median seconds, as ``desk_calls=POST /api/tasks/N/annotations:14x0.25s|...``."""
    by: dict[str, list[float]] = {}
    for call, s in calls:
        by.setdefault(call, []).append(s)
    return "desk_calls=" + "|".join(f"{c.replace(' ', '_')}:{len(v)}x{statistics.median(v):.2f}s"
                                    for c, v in sorted(by.items(), key=lambda cv: -sum(cv[1])))


def whole_main(args) -> None:
    """``--keyboard --whole``: one annotator's desk and its front; every round of one family
    interview of ``--rows`` pushed, then done window by window in ONE browser tab by keys alone
    (``driver.whole_round``), the rounds in annotation order; at the end every desk's stored answers
    are read back and compared with the oracle (``oracle.wrong_answers``). Prints one ``ROUND`` line
    per round and the ``whole interview`` line (``benchmarks/bench_annotator_ui.py``'s doc)."""
    from playwright.sync_api import sync_playwright

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    email, password = "bench-whole@rescue.test", secrets.token_urlsafe(12)
    n_rows = args.rows[0]
    rounds = [n for n in round_names() if n in args.rounds]
    print(f"start rows={n_rows} rounds={','.join(rounds)} {load_avg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-ui-whole-") as tmp:
        root = Path(tmp) / "data"
        desks = bench_desks(root, args.port_base)
        front = None
        try:
            desks.add(email, "annotator", password, timeout=600)
            client = desks.client(email)
            front = FrontProcess(desks.url(email), port=(args.port_base + 100) if args.port_base else None)
            sample = family_sample(n_rows)
            audio = None if args.no_media else make_media(sample, root / "media")
            pids, windows = {}, {}
            # the voice table the segmenter writes (every voice named by the speaking-order hint): the
            # transcript round opens with "Who is each voice?", each name a proposal to accept
            write_parquet(pa.Table.from_pylist(voice_table(sample), schema=schemas.DRAFT_VOICES),
                          desks.root.draft_voices(sample["sample_id"]))
            voices = voice_names(sample, answers(load_round("transcript"), sample))
            for name in rounds:
                pids[name] = push_sample(desks, name, sample, email, audio, args.window)
                windows[name] = len(client.tasks(pids[name]))
            results = {}
            with sync_playwright() as pw:
                browser = launch(pw)
                context = new_context(browser, args.page_timeout)
                context.add_init_script(UNSEEN_WATCH)
                page = context.new_page()  # the one tab
                # BENCH_UI_PROFILE=DIR: a CPU profile of the page over every submit to next, DIR/ROUND-wN.cpuprofile
                profile = CpuProfile(page, Path(os.environ[PROFILE_ENV])) if os.environ.get(PROFILE_ENV) else None
                page.goto(f"{front.url}/user/login/")  # the login by keys: its form has the focus
                page.wait_for_function("() => document.activeElement && document.activeElement.name === 'email'")
                page.keyboard.type(email)
                page.keyboard.press("Tab")
                page.keyboard.type(password)
                if args.screenshots:
                    args.screenshots.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(args.screenshots / "login.png"))
                page.keyboard.press("Enter")
                page.wait_for_url(lambda url: "/user/login" not in url, timeout=120_000)
                for i, name in enumerate(rounds):
                    if args.screenshots and i == 0:
                        page.wait_for_function("() => document.activeElement && document.activeElement"
                                               ".getAttribute('data-rescue-round')")
                        page.screenshot(path=str(args.screenshots / "rounds.png"))
                    rnd = load_round(name)
                    shot = args.screenshots / f"{name}.png" if args.screenshots else None
                    try:
                        got = whole_round(page, front.url, pids[name], rnd, answers(rnd, sample), windows[name],
                                          client, first=i == 0, shot=shot, voices=voices, profile=profile)
                    except Exception as exc:  # noqa: BLE001 (say where the round stopped; the next round goes on)
                        got = {"keys": 0, "tabs": 0, "typed": 0, "units": 0, "waits": [], "cpus": [], "desk": [],
                               "left": [], "tasks": [],
                               "refused": f"stopped: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                               "unseen": []}
                        with contextlib.suppress(Exception):
                            got["unseen"] = page.evaluate("() => window.__rescueUnseen.splice(0)")
                    results[name] = got
                    print(f"{name.upper()} windows_done={len(got['tasks'])}/{windows[name]} "
                          f"refused={got['refused']!r} {load_avg()}", flush=True)
                browser.close()
            total_windows = total_wrong = 0
            wait_s = decisions = 0.0
            for name in rounds:
                rnd, got = load_round(name), results[name]
                exported = json.loads(client.export_tasks(pids[name]))
                wrong, done, examples = wrong_answers(rnd, exported, answers(rnd, sample), voices)
                units = max(1, got["units"])
                submitted = done == windows[name] and not got["refused"]
                total_windows += windows[name]
                total_wrong += wrong
                wait_s += sum(got["waits"])
                decisions += got["units"]
                median = statistics.median(got["waits"]) if got["waits"] else float("nan")
                print(f"{name.upper()} windows={windows[name]} keyboard_keys_per_row={got['keys'] / units:.2f} "
                      f"tabs_per_row={got['tabs'] / units:.2f} clicks_per_row=0.00 wrong_answers={wrong} "
                      f"unseen_changes={len(got['unseen'])} submitted={'yes' if submitted else 'no'} "
                      f"submit_to_next_s_median={median:.2f} windows_stored={done} rows_done={got['units']} "
                      f"submit_to_next_s_range={min(got['waits'], default=float('nan')):.2f}-"
                      f"{max(got['waits'], default=float('nan')):.2f} not_as_wanted={len(got['left'])} "
                      f"typed_chars_per_row={got['typed'] / units:.1f} "
                      f"submit_cpu_s_median={statistics.median(got['cpus']) if got['cpus'] else float('nan'):.2f} "
                      f"submit_s_all={','.join(f'{x:.2f}' for x in got['waits'])} "
                      f"submit_cpu_s_all={','.join(f'{x:.2f}' for x in got['cpus'])} "
                      + _desk_calls(got.get("desk", []))
                      + (f" refused={got['refused']!r}" if got["refused"] else "")
                      + (f" wrong_examples={examples!r}" if examples else "")
                      + (f" unseen_examples={got['unseen'][:3]!r}" if got["unseen"] else ""), flush=True)
            share = wait_s / (wait_s + 8 * decisions) if decisions else float("nan")
            print(f"whole interview: windows={total_windows} wrong_answers={total_wrong} "
                  f"machine_wait_share={100 * share:.1f}% machine_wait_s={wait_s:.1f} row_decisions={decisions:.0f} "
                  f"{load_avg()}", flush=True)
        finally:
            stop(front, desks)


def keyboard_main(args) -> None:
    """``--keyboard``: one annotator's desk and its front; for every round a family interview of
    ``--rows`` (first size) pushed as in the page figures, and one whole window of it done by
    keyboard alone in a fresh headless Chromium (``driver.keyboard_window``); then the desk is asked
    whether the window's annotation was saved. Prints per round
    ``ROUND keyboard_keys_per_row=K clicks_per_row=C tabs_per_row=T submitted=yes|no`` (keys: every
    key press but the characters of free text, the route from the project list included)."""
    from playwright.sync_api import sync_playwright

    email, password = "bench-keyboard@rescue.test", secrets.token_urlsafe(12)
    n_rows = args.rows[0]
    with tempfile.TemporaryDirectory(prefix="bench-ui-keys-") as tmp:
        root = Path(tmp) / "data"
        desks = bench_desks(root)
        front = None
        try:
            desks.add(email, "annotator", password, timeout=600)
            client = desks.client(email)
            front = FrontProcess(desks.url(email))
            sample = family_sample(n_rows)
            audio = None if args.no_media else make_media(sample, root / "media")
            pids = {}
            for name in args.rounds:
                pids[name] = push_sample(desks, name, sample, email, audio, args.window)
            with sync_playwright() as pw:
                browser = launch(pw)
                for name in args.rounds:
                    rnd = load_round(name)
                    context = new_context(browser, args.page_timeout)
                    try:
                        login(context, front.url, email, password)
                        page = context.new_page()

                        def shoot(stage, page=page, name=name):  # the page of this round, filled, before the submit
                            if args.screenshots and stage == "filled":
                                args.screenshots.mkdir(parents=True, exist_ok=True)
                                page.screenshot(path=str(args.screenshots / f"{name}.png"))
                        got = keyboard_window(page, front.url, pids[name], rnd, answers(rnd, sample), hook=shoot)
                        deadline = time.monotonic() + 60
                        saved = False
                        while not saved and time.monotonic() < deadline:
                            task = client.request("GET", f"/api/tasks/{got['task']}/", "read the task").json()
                            saved = bool(task.get("total_annotations"))
                            time.sleep(0.5)
                        why = page.evaluate("() => [...document.querySelectorAll('.rescue-why')].map(w => w.textContent)")
                    finally:
                        context.close()
                    units = max(1, got["units"])
                    print(f"{name.upper()} keyboard_keys_per_row={got['keys'] / units:.2f} clicks_per_row=0.00 "
                          f"tabs_per_row={got['tabs'] / units:.2f} submitted={'yes' if saved else 'no'} rows={n_rows} "
                          f"window_units={got['units']} typed_chars_per_row={got['typed'] / units:.1f} "
                          f"not_as_wanted={','.join(got['left']) or '-'}"
                          + (f" refused={why[0]!r}" if why else "") + f" {load_avg()}", flush=True)
                browser.close()
        finally:
            stop(front, desks)
