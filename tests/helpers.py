"""What several test areas need, written once (one section each below): where the real data lies
(``../shared`` beside the checkout), examples of what a release must never carry, a free local
port, Label Studio's presence, short WAVs for media a desk serves, the headless Chromium the
browser tests drive and the steps they take on Label Studio's task page, and every person's
"desk" on one Label Studio (:class:`OneServerDesks`).

Imported as ``tests.helpers``: pyproject's ``[tool.pytest.ini_options] pythonpath = ["."]`` puts
the repository root on ``sys.path``, where ``tests`` is a namespace package. Fixtures built on
these (``chromium``, ``browser``, ``benchmark_head_path``) are in tests/conftest.py."""
from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import stat
import subprocess
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT
from pipeline.paths import DataRoot

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


# --- what a release must never carry ----------------------------------------------------------

# One example per private pattern of pipeline.validate (private_scan._PRIVATE): the validation
# tests and the release scan's tests check each by name.
PRIVATE_EXAMPLES = {
    "posix_path": "/home/ann/videos/001.wav",
    "home_path": "~ann/notes.txt",
    "drive_path_backslash": "C:\\Users\\ann\\x.wav",
    "drive_path_slash": "d:/media/x.wav",
    "unc_share": "\\\\server\\share\\x.wav",
    "url": "https://intranet.example/clip?id=3",
    "file_url": "file:relative/x.wav",
    "www": "www.example.org/clip",
}


# --- ports --------------------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now, with the 7 after it (a desk base port: desks take
    the ports from it up), below the ephemeral range (:func:`ops.processes.free_server_port`: a
    server stopped and started again finds its port still free)."""
    from ops.processes import free_server_port

    return free_server_port(8)


# --- Label Studio ----------------------------------------------------------------------------

def package_copy_with(base: Path, module: str, old: str, new: str) -> Path:
    """A scratch copy of the package under ``base`` (put it first on ``PYTHONPATH``) with one
    change to ``module`` (a path below the repository, e.g. ``pipeline/media/turns.py``): ``old``
    replaced by ``new`` once. The package reads its schemas beside itself, so they come along."""
    shutil.copytree(REPO_ROOT / "pipeline", base / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "annotation_schemas", base / "annotation_schemas")
    path = base / module
    text = path.read_text()
    assert old in text, f"{module} no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))
    return base


def mode(path: Path) -> int:
    """The permission bits of ``path`` itself (a link's own, not its target's)."""
    return stat.S_IMODE(path.lstat().st_mode)


def open_to_others(root: Path, skip: Path | None = None, names_from: Path | None = None) -> dict[str, str]:
    """Every entry under ``root`` (and ``root``) with a group or other bit, but ``skip``'s tree:
    ``{path relative to names_from (default root): octal mode}``."""
    base = names_from or root
    found = {}
    for p in [root, *root.rglob("*")]:
        if skip is not None and (p == skip or skip in p.parents):
            continue
        if not p.is_symlink() and mode(p) & 0o077:
            found[str(p.relative_to(base))] = oct(mode(p))
    return found


@contextlib.contextmanager
def annotator_desks(root: Path, people: tuple[str, ...]):
    """A real desk (one Label Studio each) per annotator under ``root``, ports from a free base,
    each person's login made; stopped and closed on the way out."""
    import dataclasses

    from pipeline.labelstudio.desks import Desks
    from pipeline.config import Settings

    require_label_studio()
    desks = Desks(DataRoot(root), dataclasses.replace(Settings.from_env(root), desk_base_port=free_port()))
    for who in people:
        desks.register(who, "annotator")
    desks.up(timeout=400, log=lambda *_: None)
    try:
        for who in people:
            desks.client(who).create_user(who)
        yield desks
    finally:
        desks.down()
        desks.close()


@contextlib.contextmanager
def desk_hooks(desks, people, **hooks):
    """httpx event hooks (``request=fn``, ``response=fn``) on each person's desk client while
    inside: what the tests see of the requests a push or pull sends."""
    clients = [desks.client(who)._http for who in people]
    for http in clients:
        for event, fn in hooks.items():
            http.event_hooks[event].append(fn)
    try:
        yield
    finally:
        for http in clients:
            for event, fn in hooks.items():
                http.event_hooks[event].remove(fn)


class ThroughTheApi:
    """The same desks, but a pull may not read their databases (as a desk reached through another
    address, ``RESCUE_DESK_URL``): every project is exported through Label Studio's API."""

    def __init__(self, desks):
        self._desks = desks

    def __getattr__(self, name):
        return getattr(self._desks, name)

    def database(self, email):
        return None


def sample_media(root: Path, samples: list[dict]):
    """A 10 ms WAV per sample under ``root/media/`` (as `rescue annotate push` links them); the
    push's ``media_url`` function for those samples."""
    import hashlib

    from pipeline.annotation import push

    media = {}
    for s in samples:
        rel = f"media/{hashlib.sha256(s['sample_id'].encode()).hexdigest()}.wav"
        noise_wav(root / rel, seconds=0.01, rate=16000)
        media[s["sample_id"]] = push.local_media_url(rel)
    return lambda s: media[s["sample_id"]]


def require_label_studio() -> None:
    """Fails the calling test where Label Studio's own virtual environment is missing: a broken
    set-up, not a machine without it (scripts/setup.sh always installs it)."""
    from pipeline.labelstudio.server import DEFAULT_VENV

    if not (DEFAULT_VENV / "bin" / "label-studio").exists():
        pytest.fail("Label Studio is not installed: run scripts/setup.sh (scripts/setup.d/30-label-studio.sh)")


# --- media ---------------------------------------------------------------------------------------

def noise_wav(path: Path, seconds: float = 0.2, rate: int = 8000) -> Path:
    """A short mono 16-bit WAV of random noise at ``path`` (its folders made): media to serve, not to hear."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(secrets.token_bytes(int(seconds * rate) * 2))
    return path


def tone_wav(path: Path, seconds: float) -> Path:
    """A 16 kHz mono WAV of a steady 330 Hz tone (ffmpeg): media a player can play through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"sine=frequency=330:duration={seconds}",
                    "-ar", "16000", "-ac", "1", str(path)], check=True)
    return path


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


# --- Label Studio's task page -------------------------------------------------------------------

# the selected annotation's results, once it has any (a pre-fill shown)
PREFILL_SHOWN = """() => { const selected = window.Htx && window.Htx.annotationStore.selected;
  return !!selected && selected.serializeAnnotation().length > 0; }"""
# what the editor holds, for a failure's message (a pre-fill not shown: was there a prediction? what was selected?)
EDITOR_STORE = """() => { const s = window.Htx && window.Htx.annotationStore; if (!s) return null;
  const d = a => a && {type: a.type, pk: a.pk, userGenerate: a.userGenerate, results: a.serializeAnnotation().length};
  return {annotations: s.annotations.map(d), predictions: s.predictions.map(d), selected: d(s.selected)}; }"""


def open_task(page, url: str, prefilled: bool = False) -> None:
    """Open a task page and wait until its first form's choices are drawn and its requests have
    settled (Label Studio re-renders once they do); ``prefilled``: also until the task's pre-fill
    is shown.

    On a loaded machine Label Studio has taken over 30 s to apply a pre-fill, and has once, with
    its own unpatched bundle, opened an empty, unsaved annotation beside the task's prediction
    instead (why is inside Label Studio's data manager). A person would reload the page; so does
    this, once."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    for attempt in (1, 2):
        page.goto(url)
        page.wait_for_selector("#unit_0 .lsf-choices >> visible=true", timeout=120_000)  # (a field, not a hidden "accept" box)
        if not prefilled:
            break
        try:
            page.wait_for_function(PREFILL_SHOWN, timeout=60_000)
            break
        except PlaywrightTimeoutError:
            if attempt == 2:
                raise AssertionError(f"the pre-fill was not shown in 60 s, twice: {page.evaluate(EDITOR_STORE)}") from None
    page.wait_for_load_state("networkidle")
    page.locator("#unit_0 .lsf-choices >> visible=true").first.wait_for()


# the fields of the page holding a proposal nobody accepted yet ([form id, field key], the form's
# order), and each field's "accept" box as [form id, field key, shown, ticked]
PENDING = """() => [...document.querySelectorAll('[id^="proposal-"]')].filter(v => v.getClientRects().length
  && !v.querySelector('input').checked).map(v => [v.closest('[id^=unit_], [id^=voice_]').id,
  v.id.slice(9).replace(/_\\d+$/, '')])"""
ACCEPT_BOXES = """() => [...document.querySelectorAll('[id^="proposal-"]')].map(v => [
  v.closest('[id^=unit_], [id^=voice_]').id,
  v.id.slice(9).replace(/_\\d+$/, ''), v.getClientRects().length > 0, v.querySelector('input').checked])"""


def wait_saved(client, pid: int, sid: str, page=None, what: str = "the annotation") -> None:
    """Wait (60 s at most) until the desk holds an annotation of sample ``sid``'s first task in
    project ``pid``; a refused submit on ``page`` (Label Studio's dialog, or the front's sentence
    beside a field) fails at once with its text."""
    deadline = time.monotonic() + 60
    while not client.find_tasks(pid, "sample_id", sid)[0]["total_annotations"]:
        if page is not None:
            for refusal in (page.get_by_role("dialog"), page.locator(".rescue-why")):
                if refusal.count():
                    raise AssertionError(f"Submit refused: {refusal.first.inner_text()!r}")
        assert time.monotonic() < deadline, f"{what} was not saved"
        time.sleep(0.5)


def accept_by_mouse(page) -> int:
    """Tick every shown "accept" box that is not ticked (as a person without the desk's front does
    it, each by a click); returns how many."""
    for n in range(500):
        box = page.locator('[id^="proposal-"]:visible input:not(:checked)').first
        if not box.count():
            return n
        box.scroll_into_view_if_needed()
        box.click()
    raise AssertionError("500 clicks on 'accept' boxes and one still not ticked")


def play_until_stopped(page, sel: str, span: tuple[float, float]) -> list[tuple[float, bool]]:
    """Click the play button of the media element ``sel``, which should play ``span`` (s); its
    (currentTime, paused), read every 0.2 s until it stops past the span's start (or 4 s after
    the span's length)."""
    from playwright.sync_api import Error as PlaywrightError

    for _ in range(5):  # the form may still re-render right after it appears
        try:
            # to the middle of the view: at its top edge, the editor's sticky bar may lie over the button
            page.locator(sel).evaluate("m => m.scrollIntoView({block: 'center'})", timeout=10_000)
            box = page.locator(sel).bounding_box(timeout=10_000)
            page.mouse.click(box["x"] + 16, box["y"] + box["height"] / 2)  # its play button
            page.wait_for_function(f"() => {{ const m = document.querySelector('{sel}'); "
                                   "return m && !m.paused && m.currentTime > 0 }", timeout=5_000)
            break
        except PlaywrightError:
            continue
    seen, t0 = [], time.monotonic()
    while time.monotonic() - t0 < (span[1] - span[0]) + 4:
        seen.append(tuple(page.evaluate(f"() => {{ const m = document.querySelector('{sel}'); "
                                        "return [m.currentTime, m.paused] }")))
        if seen[-1][1] and seen[-1][0] > span[0]:
            break
        time.sleep(0.2)
    return seen


# --- desks on one server -----------------------------------------------------------------------

class _DeskView:
    """One person's "desk" on the shared test server: the session client, except that round
    projects named for other people (other tests' annotators) are not listed, as they would not
    be on a real desk (a pull reports such a project as foreign)."""

    def __init__(self, client, email):
        self._client, self._email = client, email

    def __getattr__(self, name):
        return getattr(self._client, name)

    def projects(self):
        from pipeline.annotation.push import parse_project_key
        return [p for p in self._client.projects()
                if (parsed := parse_project_key(p.key)) is None or parsed[2] == self._email]


class OneServerDesks:
    """A TEST ARRANGEMENT, not a desk set: every person's "desk" is the one session server (so
    tests of push/pull/status semantics, which isolation does not change, need no server per
    person). It implements :class:`pipeline.labelstudio.desks.DeskAccess`; tests of isolation
    itself use real :class:`pipeline.labelstudio.desks.Desks` (``desk_factory``)."""

    def __init__(self, server, client):
        self.server, self._client = server, client
        self.roles: dict[str, str] = {}

    def add(self, email: str, role: str = "annotator") -> str:
        self._client.create_user(email)
        self.roles[email] = role
        return email

    def people(self, role=None):
        return sorted(e for e, r in self.roles.items() if role is None or r == role)

    def client(self, email):
        if email not in self.roles:
            from pipeline.labelstudio.desks import DeskError
            raise DeskError(f"{email} has no desk")
        return _DeskView(self._client, email)

    def owner_id(self, email):
        user = self._client.find_user(email)
        return user and user["id"]

    def stage_media(self, email, urls):
        from pipeline.labelstudio.desks import media_path
        return sorted({(self.server.media_root / p).parent for u in urls if (p := media_path(u))})

    def where(self, email):
        return f"{email}'s desk (the shared test server)"

    def public_url(self, email):
        return self._client.url

    def database(self, email):
        """The session server's database, as :meth:`Desks.database` gives a desk's (its projects are
        read by id, so only this person's)."""
        from pipeline.labelstudio import desk_db
        return desk_db.readable(self.server)
