"""Project-wide test fixtures. Each area keeps its own fixtures in tests/<area>/conftest.py;
the Label Studio server is here so that every area shares one per session. Plain helpers (a free
port, the browser, the shared-data location) are in tests/helpers.py."""
from __future__ import annotations

import os
import secrets
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import (OneServerDesks, benchmark_head, free_port, launch_chromium, require_label_studio,
                           skip_without_chromium)
from pipeline.paths import DataRoot

# Fixtures that start a server, a desk, a browser or Prefect: a test that uses one
# (directly or through another fixture) is marked ``slow``, so `scripts/test.sh --fast` (-m "not
# slow") leaves it out without each test having to say so.
SLOW_FIXTURES = frozenset({
    "ls_server",      # the session's Label Studio (~15-60 s to start)
    "desk_factory",   # real desks, one Label Studio each
    "open_desks",     # tests/flows: real desks for a flow's data root
    "stack",          # tests/flows: Prefect server + worker
    "prefect_harness",  # a temporary Prefect server per module (~50 s to start on a busy host)
    "world",          # tests/security, test_desks, test_noop_sync: desks started for the package or module
    "chromium", "browser",
})


# The longest test file (6-10 minutes, most of it its module's set-up) runs first, so that with
# scripts/test.sh's two processes (pytest-xdist, a file at a time) the other process works through
# the rest meanwhile instead of waiting for it at the end. (test_cli_path, the next longest, put
# second made the two heaviest set-ups share the cores at once: the suite took 21 min, not 19.)
LONGEST_FIRST = ("tests/test_bench_rehearsal.py",)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marks
def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


SLOW_S = 20  # a test that takes longer (set-up, call and teardown) is to be marked slow
_took: dict[str, float] = {}   # node id -> seconds, of the tests not marked slow


def pytest_runtest_logreport(report):
    if "slow" not in report.keywords:
        _took[report.nodeid] = _took.get(report.nodeid, 0.0) + report.duration


_attacks: Counter = Counter()  # tests/security's requests by attack class, from every xdist worker


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a worker finished
def pytest_testnodedown(node, error):
    _attacks.update(getattr(node, "workeroutput", {}).get("attack_counts", {}))


def pytest_terminal_summary(terminalreporter):
    """Names the tests not marked slow that took over SLOW_S here: each makes --fast slower.
    Then the requests tests/security sent, by attack class (what its attacks tried)."""
    over = sorted(((s, n) for n, s in _took.items() if s > SLOW_S), reverse=True)
    if over:
        terminalreporter.write_sep("-", f"over {SLOW_S} s here but not marked slow")
        for seconds, nodeid in over:
            terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")
    kit = sys.modules.get("attack_kit")  # run in this process (no xdist)
    attacks = _attacks + (kit.COUNTS if kit else Counter())
    if attacks:
        terminalreporter.write_sep("-", "tests/security: requests sent, by attack class")
        for label, n in sorted(attacks.items()):
            terminalreporter.write_line(f"{label:>24}: {n}")
        terminalreporter.write_line(f"{'all':>24}: {sum(attacks.values())}")


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch):
    """Messages name files under pytest's temporary folders, whose paths are longer in some runs
    (pytest-xdist adds popen-gwN/): rich would wrap them at its default 80 columns, splitting the
    words a test looks for. Wide while a test runs (pytest's own lines keep the terminal's width);
    a test that wants a width sets its own (CliRunner(env=...), monkeypatch)."""
    if "COLUMNS" not in os.environ:
        monkeypatch.setenv("COLUMNS", "400")


# --- real data ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def benchmark_head_path() -> Path:
    """The first three samples of the published release (read from ../shared, never copied);
    skips, saying why, where ../shared is absent."""
    return benchmark_head()


# --- the browser --------------------------------------------------------------------------------

@pytest.fixture
def chromium():
    """``launch_chromium`` (tests/helpers.py): ``with chromium(player=False) as browser``; skips,
    saying why, where Chromium is missing, before the test sets anything up."""
    skip_without_chromium()
    return launch_chromium


@pytest.fixture
def browser(chromium):
    """A headless Chromium (a Playwright ``Browser``) for the test, closed after it."""
    with chromium() as b:
        yield b


# --- Prefect in-process ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def prefect_harness():
    """Prefect's test harness (a temporary server and database) for the module's flow runs in
    this process; per module, since it sets this process's Prefect settings while it runs."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):  # ~1 s less per flow call
            yield


# --- one real Label Studio server for the whole session ----------------------------------
# (first start ~15 s from the template database; tests keep apart by their own annotators,
# since projects are per annotator and round)

@pytest.fixture(scope="session")
def ls_credentials():
    creds = {
        "LABEL_STUDIO_USERNAME": "admin@rescue.test",
        "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(16),
        "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20),
    }
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    yield creds
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def ls_data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ls-data")


@pytest.fixture(scope="session")
def ls_server(ls_credentials, ls_data_root):
    from pipeline.labelstudio.server import LabelStudioServer
    require_label_studio()
    server = LabelStudioServer(ls_data_root / "label-studio", port=free_port(), media_root=ls_data_root,
                               credentials=ls_credentials)  # its own: not whatever a test left in os.environ
    server.start(timeout=400)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ls_client(ls_server, ls_credentials):
    from pipeline.labelstudio.client import LabelStudioClient
    client = LabelStudioClient(ls_server.url, ls_credentials["LABEL_STUDIO_USER_TOKEN"])
    yield client
    client.close()


# --- desks -------------------------------------------------------------------------------------

@pytest.fixture
def ls_desks(ls_server, ls_client):
    """Per test: people on the session server (:class:`OneServerDesks`); ``ls_desks.add(email, role)``."""
    return OneServerDesks(ls_server, ls_client)


@pytest.fixture
def desk_factory(tmp_path, monkeypatch):
    """Real desks (one Label Studio per person) under a fresh data root: ``make(email, role)``
    -> ``(desks, desk)`` with the person's password in ``desks.passwords[email]``; every desk
    started is stopped at the end."""
    from pipeline.labelstudio.desks import Desks
    require_label_studio()
    root = tmp_path / "data"
    monkeypatch.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
    desks = Desks(DataRoot(root))
    desks.passwords = {}

    def make(email: str, role: str = "annotator"):
        password = secrets.token_urlsafe(12)
        desks.passwords[email] = password
        return desks, desks.add(email, role, password, timeout=400)

    make.desks = desks
    yield make
    desks.down()
    desks.close()
