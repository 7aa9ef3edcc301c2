"""What test areas share, written once: a free local port, the headless Chromium the browser
tests drive, and where the real data lies (``../shared`` beside the checkout).

Imported as ``tests.helpers``: pyproject's ``[tool.pytest.ini_options] pythonpath = ["."]`` puts
the repository root on ``sys.path``, where ``tests`` is a namespace package. Fixtures built on
these (``chromium``, ``browser``, ``benchmark_head_path``) are in tests/conftest.py."""
from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT

# --- real data: read in place from ../shared, never copied into the repository ------------------
SHARED_DATA = REPO_ROOT.parent / "shared" / "data" / "rescue"
BENCHMARK_HEAD = SHARED_DATA / "benchmark_head.jsonl"  # the published release's first three samples


def benchmark_head() -> Path:
    """The path of the release's head; skips the calling test, saying why, where it is absent."""
    if not BENCHMARK_HEAD.is_file():
        pytest.skip(f"real-data test: {BENCHMARK_HEAD} is not present on this machine "
                    "(the published release's head is only available beside the project checkout, in ../shared)")
    return BENCHMARK_HEAD


def benchmark_head_records() -> list[dict]:
    """The release head's samples as published (JSON lines, not converted); skips where absent."""
    text = benchmark_head().read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# --- ports --------------------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now (the OS's pick; a server started next takes it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the browser --------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"  # Debian's (scripts/setup.sh installs it)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# for pages whose players are tested (the flag only spares a user-gesture check; the play button is clicked)
PLAYER_ARGS = [*CHROMIUM_ARGS, "--autoplay-policy=no-user-gesture-required"]
SCREENSHOTS = REPO_ROOT / "test-output" / "screenshots"  # what a browser test saw, kept for a failure


def skip_without_chromium() -> None:
    """Skips the calling test, saying why, where Playwright or Debian's Chromium is missing."""
    pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip(f"Debian chromium is not installed at {CHROMIUM} (scripts/setup.sh installs it)")


@contextmanager
def launch_chromium(player: bool = False) -> Iterator:
    """A headless Chromium (a Playwright ``Browser``), closed at exit. ``player``: media may play
    without a user gesture. Skips where Chromium is missing."""
    skip_without_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=PLAYER_ARGS if player else CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def browser_login(page, base: str, email: str, password: str, timeout_ms: float | None = None) -> None:
    """Log ``page`` (a Playwright page) in through Label Studio's login form at ``base`` (the
    desk or its front), as an annotator does; ``timeout_ms`` None: the page's default."""
    page.goto(f"{base}/user/login/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/user/login" not in url, timeout=timeout_ms)
