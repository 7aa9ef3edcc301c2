"""`rescue doctor` on a real stack (`rescue stack up` on a fresh data root: the Prefect server, a
worker, the sweeper, one Label Studio and one pipeline.labelstudio.front per person): healthy, it exits 0 with
every section and each acceleration on as its guard decides; with RESCUE_LS_STOCK_SETTINGS=1 the
desk settings are off with that reason (still 0), as is the pull's reading of the desks'
databases with RESCUE_PULL_VIA_API=1; a file under the data root that others may read is BROKEN
and named (a published release is not); a stopped desk is BROKEN, named, with how to start it
(exit 1). The `rescue` commands run as processes, as an operator runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from ops.doctor import SECTIONS
from pipeline.config import REPO_ROOT
from tests.helpers import free_port, require_label_studio
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow

ANN, ADJ = "doc-ann@example.org", "doc-adj@example.org"
RESCUE = str(Path(sys.executable).with_name("rescue"))
SWITCHES = ("RESCUE_LS_STOCK_SETTINGS", "RESCUE_PULL_VIA_API", "RESCUE_NO_BUNDLE_PATCHES", "RESCUE_NO_SLIM_COLUMNS",
            "RESCUE_NO_SW", "RESCUE_DESK_URL", "RESCUE_DESK_PUBLIC_URL")


def _run(env: dict, *argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([RESCUE, *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Two people registered (owner-only, as `rescue` writes), then `rescue stack up`; down at the end."""
    require_label_studio()
    from pipeline.labelstudio.desks import Desks
    from pipeline.config import Settings
    from pipeline.store import private_by_default

    root = tmp_path_factory.mktemp("doctor-data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k not in SWITCHES}
    env.update(RESCUE_DATA_ROOT=str(root), RESCUE_PREFECT_PORT=str(free_port()),
               RESCUE_DESK_BASE_PORT=str(free_port()), RESCUE_FRONT_BASE_PORT=str(free_port()))
    with mock.patch.dict(os.environ, {k: env[k] for k in ("RESCUE_DESK_BASE_PORT", "RESCUE_FRONT_BASE_PORT")}):
        umask = private_by_default()
        try:
            desks = Desks(DataRoot(root), Settings.from_env(root))
            for email, role in ((ANN, "annotator"), (ADJ, "adjudicator")):
                desks.register(email, role)
        finally:
            os.umask(umask)
    try:
        up = _run(env, "stack", "up", "--data-root", str(root))
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield root, env, desks
    finally:
        down = _run(env, "stack", "down", "--data-root", str(root))
        assert down.returncode == 0, down.stdout + down.stderr


def _doctor(env: dict, **switches: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`rescue doctor` as text and as --json: (the text run, {(section, name): check})."""
    env = {**env, **switches}
    text = _run(env, "doctor", timeout=300)
    as_json = _run(env, "doctor", "--json", timeout=300)
    assert as_json.returncode == text.returncode, as_json.stderr
    checks = json.loads(as_json.stdout)
    assert checks["ok"] is (text.returncode == 0)
    return text, {(c["section"], c["name"]): c for c in checks["checks"]}


def test_a_healthy_stack_is_ok_in_every_section(stack):
    _, env, desks = stack
    run, checks = _doctor(env)
    assert run.returncode == 0, run.stdout + run.stderr
    for section in SECTIONS:
        assert f"{section}:\n" in run.stdout, run.stdout
    assert run.stdout.rstrip().endswith("nothing broken")
    assert "BROKEN" not in run.stdout
    assert checks[("label studio", "version")]["why"] == "Label Studio 1.23.2 (the pinned version)"
    settings = checks[("accelerations", "desk settings")]
    assert settings["state"] == "ok" and settings["why"].startswith("on (Label Studio 1.23.2 = written for 1.23.2)")
    assert settings["why"].endswith(", in 2 of 2 running desks") and not settings["todo"]
    assert checks[("accelerations", "pull from desk databases")]["state"] == "ok"
    patches = checks[("accelerations", "bundle patches")]
    assert patches["state"] == "ok" and "editor-1.23.2" in patches["why"], patches
    for name in ("slim columns", "service worker", "keys script", "migration"):
        assert checks[("accelerations", name)]["state"] == "ok", checks[("accelerations", name)]
    for email in (ANN, ADJ):
        desk = desks.get(email)
        assert checks[("desks", f"{email}'s desk")]["why"].startswith(f"up at {desks.url(desk)}")
        assert checks[("fronts", f"{email}'s front")]["why"].startswith(f"up at http://127.0.0.1:{desk.front_port}")
        assert f"  ok     {email}'s desk: up at " in run.stdout
    assert checks[("prefect", "server")]["why"].endswith(", auth string required")
    for name in ("auth string", "prefect-worker", "sweeper"):
        assert checks[("prefect", name)]["state"] == "ok", checks[("prefect", name)]
    starter = checks[("prefect", "flow-run-starter")]  # on by default (RESCUE_WARM_START=0: off, no fault)
    assert starter["state"] == "ok" and starter["why"].startswith("running (pid "), starter
    diarization = checks[("models", "diarization-offline")]
    assert diarization["state"] == "ok" and diarization["why"].startswith("sha256 ")
    assert checks[("data root", "modes")]["state"] == "ok"


def test_stock_settings_are_off_with_that_reason_and_nothing_broken(stack):
    _, env, _ = stack
    run, checks = _doctor(env, RESCUE_LS_STOCK_SETTINGS="1", RESCUE_NO_SW="1", RESCUE_PULL_VIA_API="1")
    assert run.returncode == 0, run.stdout + run.stderr
    settings = checks[("accelerations", "desk settings")]
    assert settings["state"] == "off" and settings["why"].startswith("off: RESCUE_LS_STOCK_SETTINGS=1"), settings
    assert "rescue label-studio down" in settings["todo"]  # the running desks still have them
    pull = checks[("accelerations", "pull from desk databases")]
    assert (pull["state"], pull["why"]) == ("off", "off: RESCUE_PULL_VIA_API=1; pulls ask the desks' API"), pull
    assert "  off    desk settings: off: RESCUE_LS_STOCK_SETTINGS=1" in run.stdout
    assert checks[("accelerations", "service worker")] == {  # the running fronts were started without it
        "section": "accelerations", "name": "service worker", "state": "off", "why": "off: RESCUE_NO_SW=1",
        "todo": "2 of 2 running fronts differ: restart them (rescue label-studio down, then rescue label-studio up)"}
    assert not checks[("accelerations", "slim columns")]["todo"]


def test_a_file_others_may_read_is_broken_and_named_but_a_published_release_is_not(stack):
    root, env, _ = stack
    from pipeline.store import make_private_dir, publish_tree

    leak = make_private_dir(root / "transcripts") / "leak.json"
    leak.write_text("{}")
    os.chmod(leak, 0o644)
    release = make_private_dir(root / "releases" / "9.9.9")
    (release / "manifest.json").write_text("{}")
    publish_tree(release, root)
    try:
        run, checks = _doctor(env)
        assert run.returncode == 1, run.stdout + run.stderr
        modes = checks[("data root", "modes")]
        assert modes["state"] == "BROKEN" and f"1 path(s) readable by group or others: {leak}" == modes["why"], modes
        assert f"BROKEN modes: 1 path(s) readable by group or others: {leak}\n" in run.stdout
        assert "chmod go-rwx" in modes["todo"]
    finally:
        leak.unlink()


def test_a_stopped_desk_is_broken_named_with_how_to_start_it(stack):
    root, env, desks = stack
    assert desks.server(ANN).stop()
    run, checks = _doctor(env)
    assert run.returncode == 1, run.stdout + run.stderr
    desk = checks[("desks", f"{ANN}'s desk")]
    assert desk["state"] == "BROKEN" and desk["why"] == f"down ({desks.url(ANN)})", desk
    assert desk["todo"] == f"start it: rescue label-studio up --annotator {ANN} (or rescue stack up)"
    assert f"  BROKEN {ANN}'s desk: down ({desks.url(ANN)})\n" in run.stdout
    assert f"-> start it: rescue label-studio up --annotator {ANN} (or rescue stack up)" in run.stdout
    assert checks[("fronts", f"{ANN}'s front")]["state"] == "BROKEN"  # it answers, its desk does not
    assert checks[("desks", f"{ADJ}'s desk")]["state"] == "ok"
    assert run.stdout.rstrip().endswith("2 broken")
