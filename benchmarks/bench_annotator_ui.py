"""What an annotator meets in the browser: page readiness, key echo and the work per turn.

Starts its own Label Studio (template database, 127.0.0.1, a temporary data root) and the
annotators' gate in front of it (``pipeline.annotation.proxy``: what annotators are given),
registers one annotator, pushes a generated family interview of 111 and of 250 rows for every
round (with a noise WAV as long as the interview as its audio; transcript with the segmenter's
draft as pre-annotation, the later rounds as for a new interview: without gold from earlier
rounds, with the rounds' defaults; both interviews go to the annotator's one project per round,
as a batch's samples do, so the 250-row interview's middle window follows the 111-row one's
windows: for transcript, emotion and viewpoints past the data manager's first page of 30 tasks,
as a page reloaded or a task link opened late in a batch is), and in headless Debian Chromium
(Playwright) logs in through the real login form and opens the annotator's task, ``--repeat``
times (default 3: single page loads on a shared 2-core machine vary by +-0.3 s). Prints one line
per round and size, each page figure the median of the repeats (``first_form_runs``: each run's
first form, the first on the project's first visit, when the data manager saves the annotator's
tab; the others later visits, as most of an annotator's pages are):

    ROUND ROWS first_form_s=X key_echo_ms=Y clicks_per_turn=Z keys_per_turn=W cold_s=X warm_s=V cold_typed_s=T ...

* ``first_form_s`` (= ``cold_s``): in a fresh browser (empty cache) that has just logged in,
  from navigation to a task (a window from the middle of the sample) to its first form being
  on the page, scrolled into view, with its first control visible.
* ``cold_typed_s``: the same as ``first_form_s`` in another fresh browser whose login page was
  left open until the gate's service worker had cached Label Studio's build (``typed_wait_s``,
  from the login page's load to the worker being active), as it is while a person types their
  e-mail and password; ``first_form_s`` logs in at once (the worker still installing, or not
  there yet when the page opens). Before the first figure the gate has served one task page
  (it learns the build's scripts from the pages it serves, as it has after any annotator's first
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
* Before figures: ``RESCUE_NO_SW=1`` (no service worker from the gate), ``RESCUE_NO_SLIM_COLUMNS=1``
  (Label Studio's default task-list columns), ``RESCUE_NO_BUNDLE_PATCHES=1`` (Label Studio's
  editor and data manager as built) or ``RESCUE_NO_PREFETCH=1`` in the environment reaches the gate the benchmark
  starts (a separate run, not interleaved: on the shared machine compare only runs under similar
  load).
* Extras: page height, DOM nodes, JS heap, tasks (windows) per sample, and the load average
  (the machine is shared: compare figures taken under similar load).

    .venv/bin/python benchmarks/bench_annotator_ui.py [--rows 111 250] [--rounds emotion ...]
        [--repeat N] [--direct] [--no-media] [--work-only] [--window N] [--screenshots DIR] [--json FILE]

About 6-15 minutes for every round at both sizes on a 2-core machine, by its speed (``--repeat 1``: about half).
"""
from __future__ import annotations

import argparse
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

from pipeline.annotation import ls_config, naming, push  # noqa: E402
from pipeline.annotation.client import LabelStudioClient  # noqa: E402
from pipeline.annotation.proxy import SW_REGISTER_PATH  # noqa: E402
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


def _first_list(label_config: str) -> str | None:
    """The template name of a form's first choice list: the one the gate's number keys act on
    when no list has the focus (``proxy.KEYS_JS``)."""
    repeater = ET.fromstring(label_config).find(".//Repeater")
    first = next((el for el in repeater.iter("Choices")), None) if repeater is not None else None
    return first.get("name") if first is not None else None


def work_per_turn(rnd, label_config: str, data: dict, prediction: list[dict], truth: dict[int, dict],
                  keys: bool = True) -> dict:
    """Clicks, key presses and typed text fields needed to turn the pre-filled form into the
    answers, per unit (row with controls). Reads the pushed config (which controls exist and how
    they are shown) and the pre-filled results; a control already holding the answer costs
    nothing. With ``keys`` (the annotators' gate's keys, ``proxy.KEYS_JS``): a choice of a form's
    first list costs its number key (no click), and a form where that is used, or where nothing
    needs changing, costs one Enter to come to it."""
    controls = _controls(label_config)
    first = _first_list(label_config) if keys else None
    want = ls_config.values_to_results(rnd, data, truth)
    have = {r["from_name"]: ls_config.result_value(r) for r in prediction}
    clicks = key_presses = texts = 0
    acted: dict[int, str] = {}  # unit -> "key" / "click": how its first needed action is done
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
            options = [c.get("value") for c in el.findall("Choice")] if el is not None else []
            if not options and el is not None and el.get("value", "").startswith("$"):  # a list from the task data
                options = [o["value"] for o in data.get(el.get("value")[1:], [])]
            keyed = [v for v in items if v in options[:10] or (options and v == options[-1])]
            if template == first and len(keyed) == len(items):  # the gate's keys: 1-9, 0, - (last)
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
    gate's service worker (registered by the login page) is active, its cache filled. Returns the
    seconds waited."""
    page = context.new_page()
    page.goto(f"{base}/user/login/")
    t0 = time.perf_counter()
    if typing:  # (a gate with RESCUE_NO_SW=1 registers no worker there)
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
        figures["key_echo_ms"] = key_echo(page)
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


def make_media(sample: dict, folder: Path) -> str:
    """A WAV as long as the sample (noise), under the media root: what the players and the
    dialogue's line buttons load. Returns its path relative to the media root."""
    path = folder / f"{sample['sample_id'].replace('/', '_')}.wav"
    seconds = max(r["end_time"] for r in sample["rows"]) + 1
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"anoisesrc=d={seconds:.2f}:a=0.05",
                    "-ar", "16000", "-ac", "1", str(path)], check=True)
    return f"{folder.name}/{path.name}"


class GateProcess:
    """The annotators' gate in its own process, as `rescue annotate gate` runs it (in this
    process it would share the interpreter with Playwright's client and slow both)."""

    def __init__(self, upstream: str, token: str):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        code = ("import os, uvicorn; from pipeline.annotation.proxy import make_app; "
                f"uvicorn.run(make_app({upstream!r}, os.environ['LABEL_STUDIO_USER_TOKEN']), host='127.0.0.1', "
                f"port={self.port}, log_level='warning')")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                                     env={**os.environ, "LABEL_STUDIO_USER_TOKEN": token})
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the annotators' gate did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


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
                    help="open Label Studio directly instead of through the annotators' gate (no asset cache, "
                         "no compression, no keys: the work figures are then counted without the gate's keys)")
    ap.add_argument("--no-media", action="store_true", help="push without audio (no players load anything)")
    ap.add_argument("--page-timeout", type=float, default=240, help="seconds a page may take (default 240)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="measure each page this many times and print the medians (default 3)")
    ap.add_argument("--screenshots", type=Path, help="save a screenshot of each page here (e.g. test-output/bench)")
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
    from playwright.sync_api import sync_playwright

    if not shutil.which(CHROMIUM):
        sys.exit("Debian chromium is not installed (scripts/setup.sh installs it)")
    # stopped (e.g. by `timeout`): still stop the Label Studio and the gate it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.update({"LABEL_STUDIO_USERNAME": "bench-admin@rescue.test",
                       "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(16),
                       "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20)})
    email, password = "bench-annotator@rescue.test", secrets.token_urlsafe(12)
    out = []
    print(f"start {_load()} via={'label-studio' if args.direct else 'gate'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        root = Path(tmp)
        media = root / "media"
        media.mkdir()
        server = LabelStudioServer(root / "label-studio", port=_free_port(), media_root=root)
        server.start(timeout=600)
        client = LabelStudioClient(server.url, os.environ["LABEL_STUDIO_USER_TOKEN"])
        gate = None if args.direct else GateProcess(server.url, os.environ["LABEL_STUDIO_USER_TOKEN"])
        base = server.url if args.direct else gate.url
        try:
            client.create_user(email)
            server.set_password(email, password)
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
                        report = push.push_round(client, name, [sample], [email], k=1,
                                                 prelabel=push.input_values if name == "transcript" else None,
                                                 prelabel_source="input" if name == "transcript" else "none",
                                                 media_url=(lambda s, a=audio: push.local_media_url(a)) if audio else None,
                                                 media_dir=media if audio else None,
                                                 **({"window": args.window} if args.window else {}))
                        pid = report.projects[push.project_key(name, "family", email)]
                        tasks = sorted(client.find_tasks(pid, "sample_id", sample["sample_id"]),
                                       key=lambda t: (t["data"].get("window") or {}).get("index", 0))
                        task = tasks[len(tasks) // 2]  # a window from the middle when windowed
                        following = tasks[len(tasks) // 2 + 1] if len(tasks) > 1 else task
                        work = work_for_sample(rnd, sample, answers(rnd, sample), keys, args.window)
                        if not primed:  # the gate has served a task page (see the module doc)
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
                        line = {"round": name, "rows": n_rows, **figures, **work, "tasks": len(tasks),
                                "via": "label-studio" if args.direct else "gate", "load": os.getloadavg()}
                        out.append(line)
                        print(f"{name.upper()} {n_rows} first_form_s={line['first_form_s']:.1f} "
                              f"key_echo_ms={line['key_echo_ms']:.0f} clicks_per_turn={work['clicks']:.2f} "
                              f"keys_per_turn={work['keys']:.2f} cold_s={line['first_form_s']:.1f} "
                              f"warm_s={line['warm_s']:.1f} cold_typed_s={line['cold_typed_s']:.1f} "
                              f"typed_wait_s={line['typed_wait_s']:.1f} cold_cpu_s={line['cold_cpu_s']:.1f} "
                              f"warm_cpu_s={line['warm_cpu_s']:.1f} text_fields_per_turn={work['texts']:.2f} "
                              f"tasks={len(tasks)} page_px={line['height']:.0f} dom_nodes={line['nodes']:.0f} "
                              f"first_form_runs={line['first_form_runs']} "
                              f"heap_mb={line['heap'] / 2**20:.0f} {_load()}", flush=True)
                browser.close()
        finally:
            client.close()
            if gate:
                gate.stop()
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
