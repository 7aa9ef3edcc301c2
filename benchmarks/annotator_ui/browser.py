"""The browser: headless Debian Chromium (Playwright), a profile per fresh browser, the login
through the login form, a task's first form ready on the page, and what a page costs (seconds,
the browser's CPU, the key echo, its size)."""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from pipeline.labelstudio.front.app import SW_REGISTER_PATH

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def launch(pw):
    """Headless Debian Chromium, from a ``sync_playwright()``."""
    return pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def new_context(browser, page_timeout: float):
    """A browser profile of its own (empty cache, no service worker) with the bench's window
    size; every page action may take ``page_timeout`` seconds."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(page_timeout * 1000)
    return context


def form_ready(page, unit_text: str | None = None) -> None:
    """Wait for the task's first form (``unit_text``: the first form holding that text) to be on
    the page, scrolled into view, with its first control visible."""
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
    """Seconds from navigation to the first form being usable (``form_ready``; the figures are
    described in ``benchmarks/bench_annotator_ui.py``), and the browser's CPU seconds meanwhile."""
    c0 = browser_cpu_s()
    t0 = time.perf_counter()
    page.goto(url)
    form_ready(page)
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


class CpuProfile:
    """The page's JavaScript CPU profile (Chrome DevTools' profiler through a CDP session) over
    chosen spans; each span written to ``out_dir/NAME.cpuprofile`` (open it in DevTools'
    Performance panel)."""

    def __init__(self, page, out_dir: Path, interval_us: int = 200):
        self.cdp = page.context.new_cdp_session(page)
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.cdp.send("Profiler.enable")
        self.cdp.send("Profiler.setSamplingInterval", {"interval": interval_us})

    def start(self) -> None:
        self.cdp.send("Profiler.start")

    def stop(self, name: str) -> Path:
        import json

        got = self.cdp.send("Profiler.stop")["profile"]
        path = self.out_dir / f"{name}.cpuprofile"
        path.write_text(json.dumps(got))
        return path

