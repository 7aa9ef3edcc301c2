"""What an annotator meets in the browser: page readiness, key echo and the work per turn.

Works as annotators do, through the desks (``pipeline.annotation.desks``): under a throw-away
data root it makes one real desk (a Label Studio of its own, from the template database, on
127.0.0.1) per simulated annotator with ``Desks.add`` (the person's login set by the desk's own
signup form, as ``rescue annotators add`` does), and puts the desk's front
(``desk_front.FrontServer``: what annotators are given, ``rescue annotate front``) in front of
that annotator's desk, in a process of its own. It pushes a generated family interview of 111
and of 250 rows for every round to the annotator's desk (with a noise WAV as long as the
interview as its audio, placed in the desk's file root by the push; transcript with the
segmenter's draft as pre-annotation, the later rounds as for a new interview: without gold from
earlier rounds, with the rounds' defaults; both interviews go to the annotator's one project per
round, as a batch's samples do, so the 250-row interview's middle window follows the 111-row
one's windows: for transcript, emotion and viewpoints past the data manager's first page of 30
tasks, as a page reloaded or a task link opened late in a batch is), and in headless Debian
Chromium (Playwright) logs in through the front's login form with the person's password and
opens the annotator's task, ``--repeat`` times (default 3: single page loads on a shared 2-core
machine vary by +-0.3 s). Prints one line per round and size, each page figure the median of
the repeats (``first_form_runs``: each run's first form, the first on the project's first
visit, when the data manager saves the annotator's tab; the others later visits, as most of an
annotator's pages are):

    ROUND ROWS first_form_s=X key_echo_ms=Y clicks_per_turn=Z keys_per_turn=W cold_s=X warm_s=V cold_typed_s=T ...

* ``first_form_s`` (= ``cold_s``): in a fresh browser (empty cache) that has just logged in,
  from navigation to a task (a window from the middle of the sample) to its first form being
  on the page, scrolled into view, with its first control visible.
* ``cold_typed_s``: the same as ``first_form_s`` in another fresh browser whose login page was
  left open until the front's service worker had cached Label Studio's build (``typed_wait_s``,
  from the login page's load to the worker being active), as it is while a person types their
  e-mail and password; ``first_form_s`` logs in at once (the worker still installing, or not
  there yet when the page opens). Before the first figure the front has served one task page
  (it learns the build's scripts from the pages it serves, as it has after its person's first
  page since it started).
* ``warm_s``: the same for the next task in the same browser (Label Studio's code cached):
  what an annotator waits from one task or part to the next.
* ``cold_cpu_s`` / ``warm_cpu_s``: the CPU seconds all of Chromium's processes used meanwhile
  (on 2 cores it can exceed the wall time). The page is CPU-bound (Label Studio's app and editor
  build every form in the renderer's main thread): on the shared machine, where other work
  stretches the wall time, compare these between runs at different load.
* ``key_echo_ms``: median over 5 key presses in the first text control of that form (an empty
  one, else a pre-filled one opened with its edit button) of the time from the key press to the
  character being in the control (measured with Playwright round trips, which add a few ms).
* ``clicks_per_turn`` / ``keys_per_turn``: the clicks and key presses (not counting the
  characters of free text) that enter the benchmark's answers into the forms of every task of
  the sample exactly as the pipeline pushes them (its labeling config and pre-filled values),
  averaged over the rows that have controls; ``text_fields_per_turn``: free-text fields typed
  per turn. Counting rules are in :func:`work_per_turn` (a choice of a form's first list: its
  number key, and one Enter to come to the form; other buttons and boxes: 1 click each; a
  dropdown: 2 clicks; a text: 1 click + Shift+Enter; a number: 1 click + digits + Tab).
  ``--work-only``: these figures alone, no server, no browser.
* ``desk_rss_mb``: the resident memory of the annotator's desk (the RSS of its Label Studio's
  process group, :func:`desk_rss_mb`) once that round's pages were opened (at 250 rows: after a
  250-row window was opened).
* The desks themselves (``--desks N``, default 4; 0: only the annotator's desk): ``DESKS`` lines
  with the seconds ``Desks.add`` takes for N new people one after the other (each a desk started
  from the template database and a login made: ``rescue annotators add`` run N times), the
  seconds ``Desks.up`` takes to start those N registered desks from cold (stopped, side by side
  as ``rescue annotate desks up`` does), and each desk's resident memory idle (after ``up``).
  The other desks are stopped again before the pages are measured.
* Before figures: ``RESCUE_NO_SW=1`` (no service worker from the front), ``RESCUE_NO_SLIM_COLUMNS=1``
  (Label Studio's default task-list columns) or ``RESCUE_NO_BUNDLE_PATCHES=1`` (Label Studio's
  editor as built) in the environment reaches the front the benchmark starts (a separate run,
  not interleaved: on the shared machine compare only runs under similar load). ``--direct``:
  the desk itself, no front.
* ``--keyboard`` (instead of the page figures): one whole window of every round by keyboard alone
  through the front, at the first ``--rows`` (default 111), in a fresh browser per round: from the
  project list (arrow keys, Enter; "Label All Tasks", Enter) into the label stream (Escape closes
  the round's instructions, which open on the first entry), each form
  filled as the front's keys lead (:func:`keyboard_window`: a proposal kept is accepted with `a`), Enter to the next, Ctrl+Enter to
  submit; the desk is then asked whether the window's annotation was saved. Prints per round
  ``ROUND keyboard_keys_per_row=K clicks_per_row=C tabs_per_row=T submitted=yes|no`` and extras
  (keys: every press but free text's characters, the route included; about 5 minutes). With
  ``--screenshots DIR`` each round's page, filled, before its submit: ``DIR/ROUND.png`` (the
  README's pictures: ``--keyboard --screenshots docs/annotator``).
* ``--keyboard --whole``: a whole interview as one annotator lives it, in ONE browser tab by keys
  alone through the front: every window of every round (in annotation order) of one family
  interview of the first ``--rows``. The login is typed (e-mail, Tab, password, Enter); it
  lands on the person's rounds (the front's landing: the first round focused); each round is
  entered from there (arrow keys to its card, Enter, Enter on "Label All Tasks"; a later round
  opens the list by its address first, counted as one key), its instructions closed with Escape,
  then per window: Enter to the first form, each form filled as the page's keys and the choices'
  printed keys say (:func:`keyboard_form`: a proposal kept is accepted with `a`), Enter to the next, Ctrl+Enter to submit. The bench
  keeps an oracle (the answer meant for each field of each row, :func:`answers`) and at the end
  reads back what the desk stored (its export). Per round::

      ROUND windows=N keyboard_keys_per_row=K tabs_per_row=T clicks_per_row=C wrong_answers=W unseen_changes=U submitted=yes|no submit_to_next_s_median=S ...

  ``wrong_answers``: stored values that differ from the oracle (a field meant but stored
  otherwise or not at all, or a row field stored that the oracle leaves empty), over the windows
  stored; ``unseen_changes``: choices ticked or unticked while their row's form was off screen
  (outside the viewport or its scrolled box), seen by a page observer (``_UNSEEN_WATCH``) from
  a window's first key to its submit; ``submitted``: every window of the round stored, none
  refused (a refused submit ends the round there and its sentence is printed);
  ``submit_to_next_s_median``: from Ctrl+Enter to the next window's first usable form (new task,
  first control visible). The last line::

      whole interview: windows=N wrong_answers=W machine_wait_share=P%

  where the share is the machine's wait (every submit to next) over that wait plus 8 s per row
  decision (each row with a form, every round). ``--port-base P``: the desk on port P and its
  front on P + 100 (default: free ports). With ``--screenshots DIR``: the login page, the rounds
  after logging in and each round's first form filled (``DIR/login.png``, ``DIR/rounds.png``,
  ``DIR/ROUND.png``: the pictures of docs/annotator/README.md, ``--screenshots docs/annotator``).
  Last figures (``--rows 111``, a quiet 2-core machine at load 1.3-1.9, ``uptime`` during the run)::

      TRANSCRIPT windows=23 keyboard_keys_per_row=5.00 tabs_per_row=0.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=0.86
      EMOTION windows=15 keyboard_keys_per_row=8.49 tabs_per_row=1.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=1.40
      VIEWPOINTS windows=15 keyboard_keys_per_row=4.47 tabs_per_row=0.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=1.13
      RELATION windows=8 keyboard_keys_per_row=7.68 tabs_per_row=0.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=0.76
      STRATEGY windows=8 keyboard_keys_per_row=4.14 tabs_per_row=0.49 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=0.63
      whole interview: windows=69 wrong_answers=0 machine_wait_share=2.4% machine_wait_s=64.2 row_decisions=333

  About 6 minutes at that load (each key waits 0.08 s, a person's pace, and the page's answer).
* Extras: page height, DOM nodes, JS heap, tasks (windows) per sample, the front's start report
  (the desk's release and the bundle patches applied) and the load average (the machine is
  shared: compare figures taken under similar load).

    .venv/bin/python benchmarks/bench_annotator_ui.py [--rows 111 250] [--rounds emotion ...]
        [--repeat N] [--desks N] [--direct] [--no-media] [--work-only] [--keyboard [--whole] [--port-base P]]
        [--window N] [--screenshots DIR] [--json FILE]

About 6-15 minutes for every round at both sizes on a 2-core machine, by its speed (``--repeat 1``:
about half), plus a few minutes for the desks' figures.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402

from desk_front.app import SW_REGISTER_PATH  # noqa: E402
from pipeline import schemas  # noqa: E402
from pipeline.annotation import ls_config, naming, push, voice_naming  # noqa: E402
from pipeline.annotation.desks import Desks  # noqa: E402
from pipeline.annotation.rounds import load_round, round_names  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.paths import DataRoot  # noqa: E402
from pipeline.store import write_parquet  # noqa: E402

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


def voice_table(sample: dict) -> list[dict]:
    """The sample's voice table (``schemas.DRAFT_VOICES``) as the segmenter writes it when the
    manifest's speaking-order hint named every voice: each voice labelled with its person's name,
    so "Who is each voice?" comes with every name pre-filled (a proposal to accept)."""
    out = []
    for r in sample["rows"]:
        voice = r["primary_speaker"]
        if any(v["voice"] == voice for v in out):
            continue
        own = [x for x in sample["rows"] if x["primary_speaker"] == voice]
        out.append({"sample_id": sample["sample_id"], "voice": voice, "diarization_speaker": f"SPEAKER_{len(out):02d}",
                    "named_by": "role" if voice == "Therapist" else "order",
                    "first_rows": [x["row_index"] for x in own[:3]], "sample_start": own[0]["start_time"],
                    "sample_end": own[0]["end_time"], "n_rows": len(own),
                    "speech_s": round(sum(x["end_time"] - x["start_time"] for x in own), 2)})
    return out


def voice_names(sample: dict, truth: dict[int, dict]) -> dict[str, str]:
    """Who each voice of the sample's draft is by the oracle: the speaker most of its rows have
    (the rule of ``voice_naming.name_background``)."""
    votes: dict[str, dict[str, int]] = {}
    for r in sample["rows"]:
        name = (truth.get(r["row_index"]) or {}).get("primary_speaker")
        if name:
            count = votes.setdefault(r["primary_speaker"], {})
            count[name] = count.get(name, 0) + 1
    return {v: max(c, key=lambda n: c[n]) for v, c in votes.items()}


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


def _first_list(label_config: str) -> str | None:
    """The template name of a form's first choice list: the one the front's number keys act on
    when no list has the focus (``desk_front.comfort.KEYS_JS``)."""
    repeater = ET.fromstring(label_config).find(".//Repeater")
    first = next((el for el in repeater.iter("Choices")), None) if repeater is not None else None
    return first.get("name") if first is not None else None


def work_per_turn(rnd, label_config: str, data: dict, prediction: list[dict], truth: dict[int, dict],
                  keys: bool = True) -> dict:
    """Clicks, key presses and typed text fields needed to turn the pre-filled form into the
    answers, per unit (row with controls). Reads the pushed config (which controls exist and how
    they are shown) and the pre-filled results; a control already holding the answer costs
    nothing, unless it holds a proposal (``ls_config.mark_prefilled``), which is accepted: the
    key ``a`` (a form whose work starts so costs one Enter to come to it), or a click on its
    "accept" box without the front's keys. With ``keys`` (the desk front's keys, ``desk_front.comfort.KEYS_JS``): a choice of a form's
    first list costs its number key (no click), and a form where that is used, or where nothing
    needs changing, costs one Enter to come to it."""
    controls = _controls(label_config)
    first = _first_list(label_config) if keys else None
    want = ls_config.values_to_results(rnd, data, truth)
    have = {r["from_name"]: ls_config.result_value(r) for r in prediction}
    proposed = {f"{key}_{r['from_name'].rsplit('_', 1)[1]}" for r in prediction
                if r["from_name"].startswith(f"{ls_config.PROPOSED_MARK}_") for key in ls_config.result_value(r)}
    clicks = key_presses = texts = 0
    acted: dict[int, str] = {}  # unit -> "key" / "click": how its first needed action is done
    kept = proposed - {r["from_name"] for r in want if have.get(r["from_name"]) != ls_config.result_value(r)}
    for name in sorted(kept):  # a proposal kept as it is: accepted
        unit = naming.parse_control_name(name)[3]
        if keys:
            key_presses += 1
        else:
            clicks += 1
        acted.setdefault(unit, "key" if keys else "click")
    for r in want:
        name = r["from_name"]
        value = ls_config.result_value(r)
        parsed = naming.parse_control_name(name)
        if have.get(name) == value:
            continue
        template = naming.control_name(parsed[0], "{{idx}}", parsed[1], parsed[2]) if parsed else name
        el = controls.get(template)
        if el is None:  # (an Element without children is falsy: no `or` here)
            el = controls.get(name)
        tag = el.tag if el is not None else r["type"]
        unit = parsed[3] if parsed else -1
        by_key = False
        if tag in ("Choices", "choices"):
            items = value if isinstance(value, list) else [value]
            options = [c.get("alias") or c.get("value") for c in el.findall("Choice")] if el is not None else []
            if not options and el is not None and el.get("value", "").startswith("$"):  # a list from the task data
                options = [o["value"] for o in data.get(el.get("value")[1:], [])]
            keyed = [v for v in items if v in options[:10] or (options and v == options[-1])]
            if template == first and len(keyed) == len(items):  # the front's keys: 1-9, 0, - (last)
                key_presses += len(items)
                by_key = True
            elif el is not None and el.get("layout") != "select":
                clicks += len(items)  # buttons / boxes in a line: one click each
            elif el is not None and el.get("choice") == "multiple":
                clicks += 1 + len(items)
                key_presses += 1
            else:
                clicks += 2
        elif tag in ("TextArea", "textarea"):
            clicks, key_presses, texts = clicks + 1, key_presses + 1, texts + 1
        elif tag in ("Number", "number"):
            clicks, key_presses = clicks + 1, key_presses + len(str(value)) + 1
        acted.setdefault(unit, "key" if by_key else "click")
    if keys:  # Enter to come to each form whose work starts with a key or needs nothing
        key_presses += sum(1 for i in range(len(data["units"])) if acted.get(i, "key") == "key")
    return {"clicks": clicks, "keys": key_presses, "texts": texts, "units": len(data["units"])}


def work_for_sample(rnd, sample: dict, truth: dict[int, dict], keys: bool = True, window: int | None = None) -> dict:
    """:func:`work_per_turn` over every task of the sample exactly as the pipeline pushes it
    (``push._prepare``: windows, the round's defaults, the transcript round pre-filled with the
    draft, the later rounds without gold from earlier rounds), per unit."""
    config = ls_config.render_config(rnd, sample["scenario"])
    prelabel = push.input_values if rnd.name == "transcript" else None
    total = {"clicks": 0, "keys": 0, "texts": 0, "units": 0}
    for prepared in push._prepare(rnd, sample, prelabel, None, window):
        for k, v in work_per_turn(rnd, config, prepared.data, prepared.prediction, truth, keys).items():
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


_BROWSER_CPU: dict[tuple[int, str], float] = {}  # (pid, name) -> CPU seconds last seen


def browser_cpu_s() -> float:
    """CPU seconds (user + system) used so far by this process's Chromium processes (renderers,
    GPU, network...), counting those that have exited at what they had when last seen: the work
    a page costs the browser, which the shared machine's load does not inflate as much as the
    wall time."""
    clk = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, fields = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        stats[int(entry)] = (name, (int(fields[11]) + int(fields[12])) / clk)
    todo = [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            if "chrom" in stats[pid][0]:
                _BROWSER_CPU[(pid, stats[pid][0])] = stats[pid][1]
    return sum(_BROWSER_CPU.values())


def first_form(page, url: str) -> tuple[float, float]:
    """Seconds from navigation to the first form being usable (see the module doc), and the
    browser's CPU seconds meanwhile."""
    c0 = browser_cpu_s()
    t0 = time.perf_counter()
    page.goto(url)
    _form_ready(page)
    return time.perf_counter() - t0, browser_cpu_s() - c0


def key_echo(page) -> float:
    """Median milliseconds from a key press to the character being in the first text control."""
    unit = page.locator("#unit_0")
    # a text control to type in: an empty one, else a pre-filled one opened for editing; in a
    # form whose text fields appear once a first choice is made, that choice is made first
    box = unit.locator("textarea:visible")
    edit = unit.locator("[data-testid=htx-textbox-edit-button]:visible")
    if not box.count() and not edit.count():
        unit.locator(".lsf-choices input").first.click()
        box.first.wait_for(state="visible")
    if box.count():
        box.first.click()
    else:
        edit.first.click()
        page.wait_for_function("() => ['TEXTAREA', 'INPUT'].includes(document.activeElement?.tagName)")
    page.keyboard.press("End")
    echoes = []
    for ch in "abcde":
        t = time.perf_counter()
        page.keyboard.press(ch)
        page.wait_for_function("ch => (document.activeElement?.value || '').endsWith(ch)", arg=ch, polling="raf")
        echoes.append((time.perf_counter() - t) * 1000)
    return statistics.median(echoes)


def page_stats(page) -> dict:
    return page.evaluate("""() => ({height: Math.max(...[...document.querySelectorAll('*')].map(e => e.scrollHeight)),
        nodes: document.getElementsByTagName('*').length,
        heap: (performance.memory ? performance.memory.usedJSHeapSize : 0)})""")


def login(context, base: str, email: str, password: str, typing: bool = False) -> float:
    """Log in through the login form; ``typing``: first wait, as a person typing would, until the
    front's service worker (registered by the login page) is active, its cache filled. Returns the
    seconds waited."""
    page = context.new_page()
    page.goto(f"{base}/user/login/")
    t0 = time.perf_counter()
    if typing:  # (a front with RESCUE_NO_SW=1 registers no worker there)
        page.evaluate("async (src) => { if (document.querySelector(`script[src='${src}']`)) await navigator.serviceWorker.ready; }",
                      SW_REGISTER_PATH)
    waited = time.perf_counter() - t0
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/user/login" not in url, timeout=120_000)
    page.close()  # the session cookie stays with the context
    return waited


def _median(values: list) -> float:
    finite = [v for v in values if v == v]  # a timed-out run's NaN figures do not count
    return statistics.median(finite) if finite else float("nan")


def measure(fresh_context, base: str, email: str, password: str, pid: int, task: dict, following: dict, args,
            name: str, n_rows: int, screenshots: Path | None = None) -> dict:
    """One of each page figure (module doc): cold and warm in one fresh browser, then cold after a
    typed login in another. A page past ``--page-timeout`` gives ``inf`` (and NaN for the rest)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # cold: a fresh browser (empty cache) that has just logged in; warm: the next task in the
    # same browser (Label Studio's code in the browser's cache)
    context = fresh_context()
    figures = {"first_form_s": float("inf"), "warm_s": float("inf"), "key_echo_ms": float("nan"),
               "cold_cpu_s": float("nan"), "warm_cpu_s": float("nan"),
               "cold_typed_s": float("nan"), "typed_wait_s": float("nan"),
               "height": float("nan"), "nodes": float("nan"), "heap": float("nan")}
    try:
        login(context, base, email, password)
        page = context.new_page()
        figures["first_form_s"], figures["cold_cpu_s"] = first_form(page, f"{base}/projects/{pid}/data?task={task['id']}")
        page.close()
        page = context.new_page()
        figures["warm_s"], figures["warm_cpu_s"] = first_form(page, f"{base}/projects/{pid}/data?task={following['id']}")
        try:
            figures["key_echo_ms"] = key_echo(page)
        except PlaywrightTimeout:  # the page's figures stand; only this echo is missing
            print(f"{name.upper()} {n_rows}: no text box took the focus for the key echo within "
                  f"{args.page_timeout:.0f} s (this run's echo left out)", flush=True)
        figures.update(page_stats(page))
        if screenshots:
            screenshots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshots / f"{name}_{n_rows}.png"))
    except PlaywrightTimeout:
        print(f"{name.upper()} {n_rows}: no usable form within {args.page_timeout:.0f} s", flush=True)
    finally:
        context.close()
    if not args.direct:  # the same cold page after a login page left open (typing)
        context = fresh_context()
        try:
            figures["typed_wait_s"] = login(context, base, email, password, typing=True)
            figures["cold_typed_s"], _ = first_form(context.new_page(), f"{base}/projects/{pid}/data?task={task['id']}")
        except PlaywrightTimeout:
            print(f"{name.upper()} {n_rows}: no usable form within {args.page_timeout:.0f} s after a typed login",
                  flush=True)
        finally:
            context.close()
    return figures


# --- keyboard only (--keyboard) ---------------------------------------------------------------

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
    if isinstance(want, list):
        return sorted(_alias(h) for h in have or []) == sorted(want)
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(have) == float(want)
        except (TypeError, ValueError):
            return False
    return (have or "") == (want or "")


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


def _appears(locator, seconds: float) -> bool:
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
    _form_ready(page)
    page.wait_for_load_state("networkidle")
    close = page.locator('button[aria-label="Close modal"]')  # the round's instructions, on its first entry
    if close.count() or _appears(close, 3):
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


# --- a whole interview by keyboard (--keyboard --whole) -----------------------------------------

# The page observer of --whole, on every page of the tab before Label Studio's own scripts: each
# tick or untick of a choice (Label Studio's antd wrappers change their "-checked" class) made while
# its row's form is off screen (outside the viewport or a scrolled box around it), counted while the
# bench watches (a window open and drawn, until its submit).
_UNSEEN_WATCH = r"""
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

# why a submit was refused: the keys script's sentence above the field, else Label Studio's own dialog
_REFUSED = """() => [...document.querySelectorAll('.rescue-why, .ant-modal-confirm-content')]
  .filter(w => w.getClientRects().length).map(w => w.textContent.trim())"""


def _stored_same(have, want) -> bool:
    """A stored value (Label Studio's result value) equals the oracle's."""
    if isinstance(want, list) or isinstance(have, list):
        return sorted(map(str, have or [])) == sorted(map(str, want or []))
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(have) == float(want)
        except (TypeError, ValueError):
            return False
    return (have or "") == (want or "")


def wrong_answers(rnd, exported: list[dict], truth: dict[int, dict],
                  voices: dict[str, str] | None = None) -> tuple[int, int, list[str]]:
    """What the desk stored against the oracle: every field the oracle means for a submitted
    window that the window's newest annotation holds otherwise (or not at all), every row
    field stored that the oracle leaves empty, and every voice of "Who is each voice?" named
    otherwise than ``voices`` (the oracle's names, :func:`voice_names`). A row left on its voice
    (``voice:<label>``) holds the name that voice got in its sample's block (part 1). Returns
    (wrong, windows with an annotation, a few examples "task field: stored != meant")."""
    wrong, done, examples = 0, 0, []
    newest: list[tuple[dict, dict]] = []
    named: dict[str, dict[str, str]] = {}  # sample -> voice -> the name its block stored
    for task in exported:
        kept = [a for a in task.get("annotations") or [] if not a.get("was_cancelled")]
        if not kept:
            continue
        done += 1
        stored = {r["from_name"]: ls_config.result_value(r) for r in max(kept, key=lambda a: a["id"])["result"]
                  if r.get("from_name")}
        newest.append((task, stored))
        for i, v in enumerate(task["data"].get(voice_naming.VOICES_KEY) or []):
            have, want = stored.get(voice_naming.CHOICE_NAME.format(v=i)), (voices or {}).get(v["voice"])
            if isinstance(have, list) and len(have) == 1:
                named.setdefault(task["data"].get("sample_id"), {})[v["voice"]] = have[0]
            if want is not None and have != [want]:
                wrong += 1
                if len(examples) < 5:
                    examples.append(f"task {task['id']} voice {v['voice']!r}: {have!r} != {[want]!r}")
    for task, stored in newest:
        names_of = named.get(task["data"].get("sample_id")) or {}

        def named_as(value):  # a row left on its voice: that voice's name
            if not isinstance(value, list):
                return value
            out = [names_of.get(x[len(voice_naming.TOKEN):], x) if isinstance(x, str) and x.startswith(voice_naming.TOKEN)
                   else x for x in value]
            return [x for i, x in enumerate(out) if x not in out[:i]]

        meant = {r["from_name"]: ls_config.result_value(r) for r in ls_config.values_to_results(rnd, task["data"], truth)}
        names = set(meant) | {n for n in stored if naming.parse_control_name(n) and not ls_config.is_prefill_control(n)}
        for name in sorted(names):
            have, want = named_as(stored.get(name)), meant.get(name)
            if want is None and have in (None, "", []):
                continue
            if not _stored_same(have, want):
                wrong += 1
                if len(examples) < 5:
                    examples.append(f"task {task['id']} {name}: {have!r} != {want!r}")
    return wrong, done, examples


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
                pause_s: float = 0.08, shot: Path | None = None, voices: dict[str, str] | None = None) -> dict:
    """Every window of one round in the tab, by keys alone: into the round's stream
    (:func:`_enter_round`), then per window Enter to the first form, each form filled
    (:func:`keyboard_form`; the voices of "Who is each voice?" first, named as ``voices`` says:
    :func:`voice_names`), Enter to the next, Ctrl+Enter to submit; the time from that
    Ctrl+Enter to the next window's first usable form is kept. A refused submit (the window stays)
    ends the round there."""
    k = KeyCounter(page, pause_s)
    _enter_round(k, page, base, pid, first)
    waits, units, left, tasks, refused = [], 0, [], [], None
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
        t0 = time.perf_counter()
        k.press("Control+Enter")
        if w < n_windows - 1:
            try:
                page.wait_for_function(_NEXT_WINDOW, arg=task_id, timeout=60_000)
            except Exception:  # noqa: BLE001 (Playwright's timeout: the submit was refused or never came)
                why = page.evaluate(_REFUSED)
                refused = f"window {w + 1}: " + (why[0] if why else "no next window within 60 s")
                break
            waits.append(time.perf_counter() - t0)
            time.sleep(pause_s)
    deadline = time.monotonic() + 60  # the last window's annotation saved, or its submit refused
    while not refused:
        if client.request("GET", f"/api/tasks/{tasks[-1]}/", "read the task").json().get("total_annotations"):
            break
        why = page.evaluate(_REFUSED)
        if why or time.monotonic() > deadline:
            refused = f"window {len(tasks)}: " + (why[0] if why else "not saved within 60 s")
        time.sleep(0.5)
    unseen = page.evaluate("() => window.__rescueUnseen.splice(0)")
    return {"keys": k.keys, "tabs": k.tabs, "typed": k.typed, "units": units, "waits": waits, "left": left,
            "tasks": tasks, "refused": refused, "unseen": unseen}


def whole_main(args) -> None:
    """``--keyboard --whole``: one annotator's desk and its front; every round of one family
    interview of ``--rows`` pushed, then done window by window in ONE browser tab by keys alone
    (:func:`whole_round`), the rounds in annotation order; at the end every desk's stored answers
    are read back and compared with the oracle (:func:`wrong_answers`). Prints one ``ROUND`` line
    per round and the ``whole interview`` line (module doc)."""
    from playwright.sync_api import sync_playwright

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    email, password = "bench-whole@rescue.test", secrets.token_urlsafe(12)
    n_rows = args.rows[0]
    rounds = [n for n in round_names() if n in args.rounds]
    print(f"start rows={n_rows} rounds={','.join(rounds)} {_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-ui-whole-") as tmp:
        root = Path(tmp) / "data"
        base_port = args.port_base or _free_port()
        settings = dataclasses.replace(Settings.from_env(root), desk_base_port=base_port,
                                       desk_url="http://127.0.0.1:{port}", desk_public_url="")
        desks = Desks(root, settings)
        media = root / "media"
        media.mkdir(parents=True)
        front = None
        try:
            desks.add(email, "annotator", password, timeout=600)
            client = desks.client(email)
            front = FrontProcess(desks.url(email), port=(base_port + 100) if args.port_base else None)
            sample = family_sample(n_rows)
            audio = None if args.no_media else make_media(sample, media)
            pids, windows = {}, {}
            # the voice table the segmenter writes (every voice named by the speaking-order hint): the
            # transcript round opens with "Who is each voice?", each name a proposal to accept
            write_parquet(pa.Table.from_pylist(voice_table(sample), schema=schemas.DRAFT_VOICES),
                          DataRoot(root).draft_voices(sample["sample_id"]))
            voices = voice_names(sample, answers(load_round("transcript"), sample))
            for name in rounds:
                report = push.push_round(desks, name, [sample], [email], k=1, data_root=root,
                                         prelabel=push.input_values if name == "transcript" else None,
                                         prelabel_source="input" if name == "transcript" else "none",
                                         media_url=(lambda s, a=audio: push.local_media_url(a)) if audio else None,
                                         **({"window": args.window} if args.window else {}))
                pids[name] = report.projects[push.project_key(name, "family", email)]
                windows[name] = len(client.tasks(pids[name]))
            results = {}
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.set_default_timeout(args.page_timeout * 1000)
                context.add_init_script(_UNSEEN_WATCH)
                page = context.new_page()  # the one tab
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
                                          client, first=i == 0, shot=shot, voices=voices)
                    except Exception as exc:  # noqa: BLE001 (say where the round stopped; the next round goes on)
                        got = {"keys": 0, "tabs": 0, "typed": 0, "units": 0, "waits": [], "left": [], "tasks": [],
                               "refused": f"stopped: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                               "unseen": []}
                        with contextlib.suppress(Exception):
                            got["unseen"] = page.evaluate("() => window.__rescueUnseen.splice(0)")
                    results[name] = got
                    print(f"{name.upper()} windows_done={len(got['tasks'])}/{windows[name]} "
                          f"refused={got['refused']!r} {_load()}", flush=True)
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
                      f"typed_chars_per_row={got['typed'] / units:.1f}"
                      + (f" refused={got['refused']!r}" if got["refused"] else "")
                      + (f" wrong_examples={examples!r}" if examples else "")
                      + (f" unseen_examples={got['unseen'][:3]!r}" if got["unseen"] else ""), flush=True)
            share = wait_s / (wait_s + 8 * decisions) if decisions else float("nan")
            print(f"whole interview: windows={total_windows} wrong_answers={total_wrong} "
                  f"machine_wait_share={100 * share:.1f}% machine_wait_s={wait_s:.1f} row_decisions={decisions:.0f} "
                  f"{_load()}", flush=True)
        finally:
            if front:
                front.stop()
            desks.down()
            desks.close()


def make_media(sample: dict, folder: Path) -> str:
    """A WAV as long as the sample (noise), under the media root: what the players and the
    dialogue's line buttons load. Returns its path relative to the media root."""
    path = folder / f"{sample['sample_id'].replace('/', '_')}.wav"
    seconds = max(r["end_time"] for r in sample["rows"]) + 1
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"anoisesrc=d={seconds:.2f}:a=0.05",
                    "-ar", "16000", "-ac", "1", str(path)], check=True)
    return f"{folder.name}/{path.name}"


class FrontProcess:
    """The desk's front (``desk_front.FrontServer``) in front of one desk, in its own process as
    ``rescue annotate front`` runs it (in this process it would share the interpreter with
    Playwright's client and slow both). The ``RESCUE_NO_*`` switches of the environment reach it."""

    def __init__(self, upstream: str, port: int | None = None):
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        code = ("import json, sys, threading; from desk_front import FrontServer; "
                f"f = FrontServer({upstream!r}, port={self.port}).start(); r = f.report; "
                "print(json.dumps({'release': r.release, 'version_ok': r.version_ok, 'applied': r.applied(), "
                "'not_applied': [o.group + ': ' + o.reason for o in r.outcomes if not o.applied]}), flush=True); "
                "sys.stdin.read(); f.stop()")  # until the benchmark closes its stdin (or ends)
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # the start report, once the front serves
        if not line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"the desk's front did not start (exit {self.proc.returncode})")
        self.report = json.loads(line)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def desk_rss_mb(desks: Desks, email: str) -> float:
    """The resident memory (MiB) of a desk's Label Studio: the RSS of every process of its process
    group (the server runs in its own session; its pid is the group's), with psutil when it is
    installed, else from /proc/<pid>/status (VmRSS). Pages shared between the processes count
    once per process. NaN when the desk is not running."""
    pgid = desks.server(email)._pid()
    if pgid is None:
        return float("nan")
    try:
        import psutil
    except ImportError:
        psutil = None
    total = 0
    if psutil is not None:
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == pgid:
                    total += proc.memory_info().rss
        return total / 2**20
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        found = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")), None)
        total += int(found) * 1024 if found else 0  # kB
    return total / 2**20


def _rss_list(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values)


def desk_figures(desks: Desks, people: list[str], passwords: dict[str, str]) -> dict:
    """``Desks.add`` of ``people`` (new, one after the other), then ``Desks.up`` of them from cold
    (all stopped first), then each desk's idle resident memory. Prints the ``DESKS`` lines."""
    add_s = []
    t_all = time.perf_counter()
    for email in people:
        t = time.perf_counter()
        desks.add(email, "annotator", passwords[email], timeout=600)
        add_s.append(time.perf_counter() - t)
    add_total = time.perf_counter() - t_all
    print(f"DESKS add n={len(people)} add_s={add_total:.1f} per_desk_s={'/'.join(f'{x:.1f}' for x in add_s)} "
          f"{_load()}", flush=True)
    desks.down(people)
    t = time.perf_counter()
    desks.up(people, timeout=600, log=lambda _m: None)
    up_total = time.perf_counter() - t
    time.sleep(5)  # idle: the start's work done
    idle = [desk_rss_mb(desks, e) for e in people]
    print(f"DESKS up n={len(people)} up_s={up_total:.1f} rss_idle_mb={_rss_list(idle)} "
          f"rss_idle_total_mb={sum(idle):.0f} {_load()}", flush=True)
    return {"n": len(people), "add_s": add_total, "add_per_desk_s": add_s, "up_s": up_total, "rss_idle_mb": idle}


def keyboard_main(args) -> None:
    """``--keyboard``: one annotator's desk and its front; for every round a family interview of
    ``--rows`` (first size) pushed as in the page figures, and one whole window of it done by
    keyboard alone in a fresh headless Chromium (:func:`keyboard_window`); then the desk is asked
    whether the window's annotation was saved. Prints per round
    ``ROUND keyboard_keys_per_row=K clicks_per_row=C tabs_per_row=T submitted=yes|no`` (keys: every
    key press but the characters of free text, the route from the project list included)."""
    from playwright.sync_api import sync_playwright

    email, password = "bench-keyboard@rescue.test", secrets.token_urlsafe(12)
    n_rows = args.rows[0]
    with tempfile.TemporaryDirectory(prefix="bench-ui-keys-") as tmp:
        root = Path(tmp) / "data"
        settings = dataclasses.replace(Settings.from_env(root), desk_base_port=_free_port(),
                                       desk_url="http://127.0.0.1:{port}", desk_public_url="")
        desks = Desks(root, settings)
        media = root / "media"
        media.mkdir(parents=True)
        front = None
        try:
            desks.add(email, "annotator", password, timeout=600)
            client = desks.client(email)
            front = FrontProcess(desks.url(email))
            sample = family_sample(n_rows)
            audio = None if args.no_media else make_media(sample, media)
            pids = {}
            for name in args.rounds:
                report = push.push_round(desks, name, [sample], [email], k=1, data_root=root,
                                         prelabel=push.input_values if name == "transcript" else None,
                                         prelabel_source="input" if name == "transcript" else "none",
                                         media_url=(lambda s, a=audio: push.local_media_url(a)) if audio else None,
                                         **({"window": args.window} if args.window else {}))
                pids[name] = report.projects[push.project_key(name, "family", email)]
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                for name in args.rounds:
                    rnd = load_round(name)
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    context.set_default_timeout(args.page_timeout * 1000)
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
                          + (f" refused={why[0]!r}" if why else "") + f" {_load()}", flush=True)
                browser.close()
        finally:
            if front:
                front.stop()
            desks.down()
            desks.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Example: .venv/bin/python benchmarks/bench_annotator_ui.py --rows 111 "
                                        "--rounds emotion relation --screenshots test-output/bench")
    ap.add_argument("--rows", type=int, nargs="+", default=[111, 250], help="sample sizes (default 111 250)")
    ap.add_argument("--rounds", nargs="+", default=list(round_names()), help="rounds (default: every round)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--work-only", action="store_true", help="only the clicks and keys per turn (no browser)")
    ap.add_argument("--window", type=int, help="units per task (default: the pipeline's)")
    ap.add_argument("--direct", action="store_true",
                    help="open the annotator's desk directly instead of through the desk's front (no asset cache, "
                         "no compression, no keys: the work figures are then counted without the front's keys)")
    ap.add_argument("--no-media", action="store_true", help="push without audio (no players load anything)")
    ap.add_argument("--page-timeout", type=float, default=240, help="seconds a page may take (default 240)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="measure each page this many times and print the medians (default 3)")
    ap.add_argument("--desks", type=int, default=4,
                    help="desks made (Desks.add) and started from cold (Desks.up) for the DESKS figures, the "
                         "annotator's among them (default 4; 0: only the annotator's desk, no DESKS figures)")
    ap.add_argument("--keyboard", action="store_true",
                    help="instead of the page figures: one whole window of every round by keyboard alone through the "
                         "front (keyboard_keys_per_row, clicks_per_row, tabs_per_row, submitted), at the first --rows")
    ap.add_argument("--whole", action="store_true",
                    help="with --keyboard: every window of every round of one interview of the first --rows in ONE "
                         "tab by keys alone, the stored answers read back against the oracle (module doc)")
    ap.add_argument("--port-base", type=int,
                    help="the desk's port (its front: this + 100); default: free ports")
    ap.add_argument("--screenshots", type=Path,
                    help="save a screenshot of each page here (e.g. test-output/bench); with --keyboard one page per "
                         "round, filled by keys, before its submit: ROUND.png (the README's are docs/annotator/)")
    args = ap.parse_args()
    keys = not args.direct

    if args.work_only:  # no server, no browser: the clicks and keys per turn alone
        for n_rows in args.rows:
            sample = family_sample(n_rows)
            for name in args.rounds:
                rnd = load_round(name)
                w = work_for_sample(rnd, sample, answers(rnd, sample), keys, args.window)
                print(f"{name.upper()} {n_rows} clicks_per_turn={w['clicks']:.2f} keys_per_turn={w['keys']:.2f} "
                      f"text_fields_per_turn={w['texts']:.2f}")
        return
    if not shutil.which(CHROMIUM):
        sys.exit("Debian chromium is not installed (scripts/setup.sh installs it)")
    if args.keyboard and args.whole:
        whole_main(args)
        return
    if args.keyboard:
        keyboard_main(args)
        return
    from playwright.sync_api import sync_playwright

    # stopped (e.g. by `timeout`): still stop the desks and the front it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    email = "bench-annotator@rescue.test"
    others = [f"bench-annotator-{i}@rescue.test" for i in range(2, max(args.desks, 1) + 1)]
    passwords = {e: secrets.token_urlsafe(12) for e in [email, *others]}
    password = passwords[email]
    out = []
    summary: dict = {}
    print(f"start {_load()} via={'desk' if args.direct else 'front'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        root = Path(tmp) / "data"
        settings = dataclasses.replace(Settings.from_env(root), desk_base_port=_free_port(),
                                       desk_url="http://127.0.0.1:{port}", desk_public_url="")
        desks = Desks(root, settings)
        media = root / "media"  # the data root's media: each push places its files in the desk's file root
        media.mkdir(parents=True)
        front = None
        try:
            if args.desks > 0:
                summary["desks"] = desk_figures(desks, [email, *others], passwords)
                desks.down(others)  # the pages are measured with the annotator's desk alone
            else:
                desks.add(email, "annotator", password, timeout=600)
            client = desks.client(email)
            if not args.direct:
                front = FrontProcess(desks.url(email))
                print(f"front release={front.report['release']} version_ok={front.report['version_ok']} "
                      f"patches={','.join(front.report['applied']) or '-'}"
                      + "".join(f" not_applied=[{x}]" for x in front.report["not_applied"]), flush=True)
            base = desks.url(email) if args.direct else front.url
            summary["rss_start_mb"] = desk_rss_mb(desks, email)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

                def fresh_context():  # a browser profile of its own: empty cache, no service worker
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    context.set_default_timeout(args.page_timeout * 1000)
                    return context

                primed = args.direct
                for n_rows in args.rows:
                    sample = family_sample(n_rows)
                    audio = None if args.no_media else make_media(sample, media)
                    for name in args.rounds:
                        rnd = load_round(name)
                        report = push.push_round(desks, name, [sample], [email], k=1, data_root=root,
                                                 prelabel=push.input_values if name == "transcript" else None,
                                                 prelabel_source="input" if name == "transcript" else "none",
                                                 media_url=(lambda s, a=audio: push.local_media_url(a)) if audio else None,
                                                 **({"window": args.window} if args.window else {}))
                        pid = report.projects[push.project_key(name, "family", email)]
                        tasks = sorted(client.find_tasks(pid, "sample_id", sample["sample_id"]),
                                       key=lambda t: (t["data"].get("window") or {}).get("index", 0))
                        task = tasks[len(tasks) // 2]  # a window from the middle when windowed
                        following = tasks[len(tasks) // 2 + 1] if len(tasks) > 1 else task
                        work = work_for_sample(rnd, sample, answers(rnd, sample), keys, args.window)
                        if not primed:  # the front has served a task page (see the module doc)
                            context = fresh_context()
                            login(context, base, email, password)
                            first_form(context.new_page(), f"{base}/projects/{pid}/data?task={tasks[0]['id']}")
                            context.close()
                            primed = True
                        runs = [measure(fresh_context, base, email, password, pid, task, following, args, name, n_rows,
                                        screenshots=args.screenshots if i == 0 else None)
                                for i in range(args.repeat)]
                        figures = {k: _median([r[k] for r in runs]) for k in runs[0]}
                        figures["first_form_runs"] = "/".join(f"{r['first_form_s']:.1f}" for r in runs)
                        rss = desk_rss_mb(desks, email)  # the desk once this round's pages were opened
                        line = {"round": name, "rows": n_rows, **figures, **work, "tasks": len(tasks),
                                "via": "desk" if args.direct else "front", "desk_rss_mb": rss,
                                "load": os.getloadavg()}
                        out.append(line)
                        print(f"{name.upper()} {n_rows} first_form_s={line['first_form_s']:.1f} "
                              f"key_echo_ms={line['key_echo_ms']:.0f} clicks_per_turn={work['clicks']:.2f} "
                              f"keys_per_turn={work['keys']:.2f} cold_s={line['first_form_s']:.1f} "
                              f"warm_s={line['warm_s']:.1f} cold_typed_s={line['cold_typed_s']:.1f} "
                              f"typed_wait_s={line['typed_wait_s']:.1f} cold_cpu_s={line['cold_cpu_s']:.1f} "
                              f"warm_cpu_s={line['warm_cpu_s']:.1f} text_fields_per_turn={work['texts']:.2f} "
                              f"tasks={len(tasks)} page_px={line['height']:.0f} dom_nodes={line['nodes']:.0f} "
                              f"first_form_runs={line['first_form_runs']} "
                              f"heap_mb={line['heap'] / 2**20:.0f} desk_rss_mb={rss:.0f} {_load()}", flush=True)
                browser.close()
            after = {n: max(x["desk_rss_mb"] for x in out if x["rows"] == n) for n in args.rows}
            summary["rss_after_mb"] = after
            print(f"DESKS rss annotator_desk_start_mb={summary['rss_start_mb']:.0f} "
                  + " ".join(f"after_{n}_rows_mb={v:.0f}" for n, v in after.items()) + f" {_load()}", flush=True)
        finally:
            if front:
                front.stop()
            desks.down()
            desks.close()
    if args.json:
        # one entry per round line, as before; the desks' figures (DESKS lines) with each
        args.json.write_text(json.dumps([{**line, "desk_summary": summary} for line in out], indent=2))


if __name__ == "__main__":
    main()
