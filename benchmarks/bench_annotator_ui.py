"""What an annotator meets in the browser: page readiness, key echo and the work per turn.

Starts its own Label Studio (template database, 127.0.0.1, a temporary data root), registers
one annotator, pushes a generated family interview of 111 and of 250 rows for every round
(transcript with the segmenter's draft as pre-annotation, the later rounds as for a new
interview: without gold from earlier rounds), logs in through the real login form in headless
Debian Chromium (Playwright) and opens the annotator's task. Prints one line per round and size:

    ROUND ROWS first_form_s=X key_echo_ms=Y clicks_per_turn=Z keys_per_turn=W  (+ extras)

* ``first_form_s``: from navigation to the first row's form being on the page, scrolled into
  view (the page answering), with its first control visible.
* ``next_part_s``: for a windowed sample, from clicking the next part in the task list to its
  form being ready (no page load: what an annotator waits between parts); nan for one task.
* ``key_echo_ms``: median over 5 key presses in the first text control of that form (an empty
  one, else a pre-filled one opened with its edit button) of the time from the key press to the
  character being in the control (measured with Playwright round trips, which add
  a few ms).
* ``clicks_per_turn`` / ``keys_per_turn``: the clicks and key presses (not counting the
  characters of free text) that enter the benchmark's answers into the forms of every task of
  the sample as the pipeline pushes them (its labeling config and pre-filled values), averaged
  over the rows that have controls (``--work-only``: these figures alone, no browser); ``text_fields_per_turn``: free-text fields typed per turn. Counting rules
  are in :func:`work_per_turn` (a dropdown: 2 clicks; a choice with a hotkey: 1 key; a text:
  1 click + Shift+Enter; a number: 1 click + digits + Tab; a multi-select: 1 click, 1 per
  item, Escape).
* Extras: page height, DOM nodes, JS heap, tasks (windows) per sample, and the load average
  (the machine is shared: compare figures taken under similar load).

    .venv/bin/python benchmarks/bench_annotator_ui.py [--rows 111 250] [--rounds emotion ...]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import socket
import statistics
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.annotation import ls_config, push  # noqa: E402
from pipeline.annotation.client import LabelStudioClient  # noqa: E402
from pipeline.annotation.rounds import load_round, round_names  # noqa: E402
from pipeline.annotation.server import LabelStudioServer  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WORDS = ("the week was long and nobody listened when I tried to say how tired I am of the same "
         "argument about money school the kids and who calls whom first after work").split()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load() -> str:
    return "load=" + "/".join(f"{x:.2f}" for x in os.getloadavg())


def family_sample(n_rows: int, seed: int = 0) -> dict:
    """A generated family interview (``pipeline.rows`` shape) with plausible answers per row."""
    rng = random.Random(seed)
    people = ["Cara Miller", "Dan Miller", "Eli Miller"]
    rows, t = [], 0.0
    for i in range(1, n_rows + 1):
        speaker = "Therapist" if i % 3 == 0 else people[rng.randrange(3)]
        others = [p for p in people + ["Therapist"] if p != speaker]
        target = ["Family"] if speaker == "Therapist" and i % 2 else [rng.choice(others)]
        dur = round(rng.uniform(1.5, 6.0), 2)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24)))
        row = {"row_index": i, "start_time": round(t, 2), "end_time": round(t + dur, 2),
               "primary_speaker": speaker, "target": target, "dialogue_cleaned": text, "background_dialogue": []}
        if speaker != "Therapist":
            row["utterance_type"] = rng.choice(["disclosure", "accusation", "defense", "recollection", "request"])
            row["tone_of_voice"] = rng.choice(["flat", "warm", "tense and quick", "raised"])
            row["internal_emotion"] = [{"person": speaker, "emotion_description": "feels unheard",
                                        "intensity": rng.randint(2, 8)}]
            row["viewpoints_attitudes"] = [] if i % 4 == 1 else [
                {"source": speaker, "target": rng.choice([p for p in people if p != speaker]),
                 "viewpoint": "does not listen", "attitude": "frustrated"}]
        else:
            row["relation_cycle_state"] = rng.choice(["", "pursue_withdraw", "escalation_conflict"])
            row["relation_cycle_reason"] = f"the exchange before row {i} shows it"
            row["relation_cycle_evidence_rows"] = sorted({max(0, i - 3), i - 2})
            row["support_strategy"] = [] if i % 2 else [
                {"provider": "Therapist", "target": ["Family"], "strategy_type": rng.choice(["track", "reframe"]),
                 "strategy_content": "names the pattern"}]
        rows.append(row)
        t += dur + 0.3
    return {"sample_id": f"bench/family_{n_rows:03d}", "scenario": "family", "participants": people, "rows": rows}


def answers(rnd, sample: dict) -> dict[int, dict]:
    """The benchmark annotator's answers: the generated values; in the transcript round one
    line in four is corrected (the draft text differs from what is said)."""
    values = push.input_values(rnd, sample)
    if rnd.name == "transcript":
        for ri, row in values.items():
            if ri % 4 == 0:
                row["dialogue_cleaned"] = row["dialogue_cleaned"] + " really"
    return values


# --- the work per turn ---------------------------------------------------------------------

def _controls(label_config: str) -> dict[str, ET.Element]:
    root = ET.fromstring(label_config)
    return {el.get("name"): el for el in root.iter() if el.get("toName") and el.get("name")}


def work_per_turn(rnd, label_config: str, data: dict, prediction: list[dict], truth: dict[int, dict]) -> dict:
    """Clicks, key presses and typed text fields needed to turn the pre-filled form into the
    answers, per unit (row with controls). Reads the pushed config (hotkeys, which controls
    exist) and the pre-filled results; a control already holding the answer costs nothing."""
    controls = _controls(label_config)
    want = ls_config.values_to_results(rnd, data, truth)
    have = {r["from_name"]: ls_config.result_value(r) for r in prediction}
    clicks = keys = texts = 0
    for r in want:
        name = r["from_name"]
        value = ls_config.result_value(r)
        if have.get(name) == value:
            continue
        parsed = ls_config.parse_control_name(name)
        template = ls_config.control_name(parsed[0], "{{idx}}", parsed[1], parsed[2]) if parsed else name
        el = controls.get(template)
        if el is None:  # (an Element without children is falsy: no `or` here)
            el = controls.get(name)
        tag = el.tag if el is not None else r["type"]
        if tag in ("Choices", "choices"):
            items = value if isinstance(value, list) else [value]
            # only hotkeys the config sets count (Label Studio's automatic ones repeat in every row)
            marked = [c for c in (el.findall("Choice") if el is not None else [])
                      if c.get("value") in items or c.get("alias") in items]
            hotkeys = bool(marked) and all(c.get("hotkey") for c in marked)
            if el is not None and el.get("layout") != "select" and hotkeys:
                keys += len(items)
            elif el is not None and el.get("layout") != "select":
                clicks += len(items)
            elif el is not None and el.get("choice") == "multiple":
                clicks += 1 + len(items)
                keys += 1
            else:
                clicks += 2
        elif tag in ("TextArea", "textarea"):
            clicks, keys, texts = clicks + 1, keys + 1, texts + 1
        elif tag in ("Number", "number"):
            clicks, keys = clicks + 1, keys + len(str(value)) + 1
    return {"clicks": clicks, "keys": keys, "texts": texts, "units": len(data["units"])}


def work_for_sample(rnd, sample: dict, truth: dict[int, dict]) -> dict:
    """:func:`work_per_turn` over every task of the sample as the pipeline pushes it (the
    transcript round pre-filled with the draft, the later rounds empty), per unit."""
    build = getattr(ls_config, "build_tasks_data", None)  # absent before windowed tasks
    tasks = build(rnd, sample) if build else [ls_config.build_task_data(rnd, sample)]
    config = ls_config.render_config(rnd, sample["scenario"])
    total = {"clicks": 0, "keys": 0, "texts": 0, "units": 0}
    for data in tasks:
        pre = ls_config.values_to_results(rnd, data, push.input_values(rnd, sample)) if rnd.name == "transcript" else []
        for k, v in work_per_turn(rnd, config, data, pre, truth).items():
            total[k] += v
    units = max(1, total["units"])
    return {"clicks": total["clicks"] / units, "keys": total["keys"] / units, "texts": total["texts"] / units}


# --- the browser ---------------------------------------------------------------------------

def _form_ready(page, unit_text: str | None = None) -> None:
    from playwright.sync_api import Error as PlaywrightError

    unit = page.locator("#unit_0")  # the Repeater renders lazily: bring the first form into view
    if unit_text:
        unit = page.locator("#unit_0", has_text=unit_text)
    unit.wait_for(state="attached")
    for _ in range(20):  # the form may re-render right after it first appears
        try:
            unit.scroll_into_view_if_needed(timeout=15_000)
            break
        except PlaywrightError:
            time.sleep(0.2)
    unit.locator(".lsf-choices, textarea, input, [data-testid=htx-textbox-edit-button]").first.wait_for(state="visible")


def measure_page(page, url: str, next_part: tuple[str, str] | None = None) -> dict:
    """``next_part``: (text of the next task's row in the task list, text of its first form)."""
    t0 = time.perf_counter()
    page.goto(url)
    _form_ready(page)
    first_form = time.perf_counter() - t0
    next_form = float("nan")
    if next_part:  # the next part of the sample, opened from the task list (no page load)
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        t1 = time.perf_counter()
        try:
            page.locator(".lsf-table__row-wrapper", has_text=next_part[0]).first.click()
            _form_ready(page, next_part[1])
            next_form = time.perf_counter() - t1
        except PlaywrightTimeout:
            next_form = float("inf")
            page.screenshot(path="test-output/bench_next_part_failed.png")
            page.goto(url)  # back to a known state for the key echo
            _form_ready(page)
    unit = page.locator("#unit_0")
    # a text control to type in: an empty one, else a pre-filled one opened for editing
    box = unit.locator("textarea")
    if box.count():
        box.first.click()
    else:
        unit.locator("[data-testid=htx-textbox-edit-button]").first.click()
        page.wait_for_function("() => ['TEXTAREA', 'INPUT'].includes(document.activeElement?.tagName)")
    page.keyboard.press("End")
    echoes = []
    for ch in "abcde":
        t = time.perf_counter()
        page.keyboard.press(ch)
        page.wait_for_function("ch => (document.activeElement?.value || '').endsWith(ch)", arg=ch, polling="raf")
        echoes.append((time.perf_counter() - t) * 1000)
    stats = page.evaluate("""() => ({height: Math.max(...[...document.querySelectorAll('*')].map(e => e.scrollHeight)),
        nodes: document.getElementsByTagName('*').length,
        heap: (performance.memory ? performance.memory.usedJSHeapSize : 0)})""")
    return {"first_form_s": first_form, "next_form_s": next_form, "key_echo_ms": statistics.median(echoes), **stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[111, 250])
    ap.add_argument("--rounds", nargs="+", default=list(round_names()))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--work-only", action="store_true", help="only the clicks and keys per turn (no browser)")
    ap.add_argument("--window", type=int, help="units per task (default: the pipeline's)")
    ap.add_argument("--page-timeout", type=float, default=240, help="seconds a page may take (default 240)")
    ap.add_argument("--screenshots", type=Path, help="save a screenshot of each page here (e.g. test-output/bench)")
    args = ap.parse_args()
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    if args.work_only:  # no server, no browser: the clicks and keys per turn alone
        for n_rows in args.rows:
            sample = family_sample(n_rows)
            for name in args.rounds:
                rnd = load_round(name)
                w = work_for_sample(rnd, sample, answers(rnd, sample))
                print(f"{name.upper()} {n_rows} clicks_per_turn={w['clicks']:.2f} keys_per_turn={w['keys']:.2f} "
                      f"text_fields_per_turn={w['texts']:.2f}")
        return
    if not shutil.which(CHROMIUM):
        sys.exit("Debian chromium is not installed (scripts/setup.sh installs it)")
    os.environ.update({"LABEL_STUDIO_USERNAME": "bench-admin@rescue.test",
                       "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(16),
                       "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20)})
    email, password = "bench-annotator@rescue.test", secrets.token_urlsafe(12)
    out = []
    print(f"start {_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        root = Path(tmp)
        server = LabelStudioServer(root / "label-studio", port=_free_port(), media_root=root)
        server.start(timeout=600)
        client = LabelStudioClient(server.url, os.environ["LABEL_STUDIO_USER_TOKEN"])
        try:
            client.create_user(email)
            server.set_password(email, password)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.set_default_timeout(args.page_timeout * 1000)
                page = context.new_page()
                page.goto(f"{server.url}/user/login/")
                page.fill("input[name=email]", email)
                page.fill("input[name=password]", password)
                page.click("button[type=submit]")
                page.wait_for_url(lambda url: "/user/login" not in url, timeout=120_000)
                page.close()  # the session cookie stays with the context
                for n_rows in args.rows:
                    sample = family_sample(n_rows)
                    for name in args.rounds:
                        rnd = load_round(name)
                        report = push.push_round(client, name, [sample], [email], k=1,
                                                 prelabel=push.input_values if name == "transcript" else None,
                                                 prelabel_source="input" if name == "transcript" else "none",
                                                 **({"window": args.window} if args.window else {}))
                        pid = report.projects[push.project_key(name, "family", email)]
                        tasks = sorted(client.find_tasks(pid, "sample_id", sample["sample_id"]),
                                       key=lambda t: (t["data"].get("window") or {}).get("index", 0))
                        task = tasks[len(tasks) // 2]  # a window from the middle when windowed
                        work = work_for_sample(rnd, sample, answers(rnd, sample))
                        page = context.new_page()  # a fresh page: a hung one from before cannot slow this one
                        try:
                            following = tasks[len(tasks) // 2 + 1] if len(tasks) > 1 else None
                            nxt = (f"part {following['data']['window']['index'] + 1} of ",
                                   f"Row {following['data']['units'][0]['row_index']} ·") if following else None
                            page_figures = measure_page(page, f"{server.url}/projects/{pid}/data?task={task['id']}", nxt)
                        except PlaywrightTimeout:
                            page_figures = {"first_form_s": float("inf"), "next_form_s": float("nan"),
                                            "key_echo_ms": float("nan"),
                                            "height": 0, "nodes": 0, "heap": 0}
                            print(f"{name.upper()} {n_rows}: no usable form within {args.page_timeout:.0f} s",
                                  flush=True)
                        if args.screenshots and page_figures["nodes"]:
                            args.screenshots.mkdir(parents=True, exist_ok=True)
                            page.screenshot(path=str(args.screenshots / f"{name}_{n_rows}.png"))
                        page.close()
                        line = {"round": name, "rows": n_rows, **page_figures, **work, "tasks": len(tasks),
                                "load": os.getloadavg()}
                        out.append(line)
                        print(f"{name.upper()} {n_rows} first_form_s={line['first_form_s']:.1f} "
                              f"next_part_s={line['next_form_s']:.1f} "
                              f"key_echo_ms={line['key_echo_ms']:.0f} clicks_per_turn={work['clicks']:.2f} "
                              f"keys_per_turn={work['keys']:.2f} text_fields_per_turn={work['texts']:.2f} "
                              f"tasks={len(tasks)} page_px={line['height']} dom_nodes={line['nodes']} "
                              f"heap_mb={line['heap'] / 2**20:.0f} {_load()}", flush=True)
                browser.close()
        finally:
            client.close()
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
