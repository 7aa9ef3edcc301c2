"""The pipeline proven on stock Label Studio: a small relation round (push, two simulated
annotators answering through their desks' API, pull, agreement, gold) run with every
acceleration off and with every one on gives the same labels, problems, ledger, agreement and
gold; and the same round on the previous minor release, Label Studio 1.22.0, where the
version guards switch the accelerations off by themselves (there every other round is pushed
too: each round's config and tasks are taken).

Off means: desks run Label Studio's own settings (``RESCUE_LS_STOCK_SETTINGS=1``: no SQL task
counters, no request-log removal, none of our login guards) and the pull exports every project
through the desk's API (``RESCUE_PULL_VIA_API=1``: no read of the desk's database). The answers
go through the desk's HTTP API as a simulated annotator's do, so no browser runs here: the
front's page patches (``RESCUE_NO_BUNDLE_PATCHES``, ``RESCUE_NO_SLIM_COLUMNS``, ``RESCUE_NO_SW``)
and the keys script act only in a browser and are neither on nor off in this test (the browser
tests under tests/desk_front/ and tests/annotation/test_browser.py cover them).

What is compared, and what is left out because it is not the same from one run to the next:
- labels: every column but ``created_at`` and ``updated_at`` (the moment the desk saved the answer);
- problems, the agreement report's JSON figures and the gold provenance: byte for byte;
- the ledger: its entries without the ``created_at`` part of the key (the same moment).

The 1.22.0 run installs Label Studio 1.22.0 (``uv``, about a minute) into
``.label-studio/venv-1.22.0`` (git-ignored; never the default venv) and its desks run Label
Studio's ~200 migrations on first start (the template database is migrated by 1.23.2 and is not
copied into another version's desk): minutes on a busy machine. So it is marked ``upgrade`` and
runs only when asked: ``.venv/bin/python -m pytest -m upgrade tests/annotation/test_stock_equality.py``.
Where the install fails (no network), it is skipped with the reason.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.annotation import ls_config, pull, push

from pipeline.labelstudio import desk_db
from pipeline.labelstudio.desks import Desks
from pipeline.annotation.rounds import load_round, round_names
from pipeline.labelstudio.server import (DB_NAME, DEFAULT_VENV, DESK_SETTINGS, TEMPLATE_DB, LabelStudioServer,
                                        desk_settings_choice, installed_version)
from pipeline.config import REPO_ROOT, Settings
from pipeline.paths import DataRoot
from pipeline.quality import agreement, gold
from pipeline.synthetic import corpus as synth_corpus
from pipeline.synthetic.annotators import SimulatedAnnotator
from tests.helpers import desk_hooks, free_port, require_label_studio, sample_media

ROUND = "relation"
A, B = "stock-a@rescue.test", "stock-b@rescue.test"
PREVIOUS = "1.22.0"  # the previous minor release
PREVIOUS_VENV = REPO_ROOT / ".label-studio" / f"venv-{PREVIOUS}"
SWITCHES = ("RESCUE_LS_STOCK_SETTINGS", desk_db.VIA_API_VAR)
LABEL_TIMES = ("created_at", "updated_at")  # when the desk saved the answer


def _samples() -> list[dict]:
    """Three couple interviews and a family one of the synthetic corpus (143 rows)."""
    every = synth_corpus.generate(scale=0.05, seed=3)
    return [s for s in every if s["scenario"] == "couple"][:3] + [s for s in every if s["scenario"] == "family"][:2]


def _desk_settings_module(desks: Desks, who: str) -> str | None:
    """The Django settings module the running desk was started with (its process environment)."""
    pid = desks.server(who)._pid()
    assert pid is not None, f"{who}'s desk is not running"
    env = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
    return env.get("DJANGO_SETTINGS_MODULE")


def _push_all(desks: Desks, name: str, samples: list[dict], root: Path, media) -> tuple[int, int]:
    """Round ``name`` pushed to both desks: (projects, tasks created), each project's tasks counted on its desk."""
    report = push.push_round(desks, name, samples, [A, B], root=DataRoot(root), media_url=media, prelabel=None)
    on_desks = sum(len(desks.client(push.parse_project_key(key)[2]).tasks(pid)) for key, pid in report.projects.items())
    assert on_desks == report.created, (name, on_desks, report.summary())
    return len(report.projects), report.created


def _run_round(root: Path, venv: Path, every_round: bool = False) -> dict:
    """Push, answer, pull, agreement and gold of the small round on two new desks of ``venv``'s
    Label Studio under ``root``; what the run gave, in comparable form, and how it ran. With
    ``every_round``, every other round is pushed too (``ran["pushed"]``: its projects and tasks)."""
    samples = _samples()
    by_id = {s["sample_id"]: s for s in samples}
    rnd = load_round(ROUND)
    desks = Desks(DataRoot(root), dataclasses.replace(Settings.from_env(root), desk_base_port=free_port()), venv=venv)
    for who in (A, B):
        desks.register(who, "annotator")
    desks.up(timeout=900, log=lambda *_: None)
    try:
        for who in (A, B):
            desks.client(who).create_user(who)
        ran = {"settings": {who: _desk_settings_module(desks, who) for who in (A, B)},
               "database": {who: desks.database(who) for who in (A, B)}}
        media = sample_media(root, samples)
        report = push.push_round(desks, ROUND, samples, [A, B], root=DataRoot(root), media_url=media, prelabel=None)
        sims = {A: SimulatedAnnotator("stock-a", {"*": 0.2}, seed=1), B: SimulatedAnnotator("stock-b", {"*": 0.3}, seed=2)}
        skipped = samples[1]["sample_id"]  # B skips it: a problem line
        for who, sim in sims.items():
            client, owner = desks.client(who), desks.owner_id(who)
            for key, pid in sorted(report.projects.items()):
                if not key.endswith(who):
                    continue
                for task in client.tasks(pid):
                    sid = task["data"]["sample_id"]
                    if who == B and sid == skipped:  # what the Skip button sends
                        client.create_annotation(task["id"], [], completed_by=owner, was_cancelled=True)
                        continue
                    answers = sim.answer_sample(rnd, by_id[sid])
                    client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], answers),
                                             completed_by=owner, lead_time=sim.lead_time_s)
        asked: list[str] = []
        with desk_hooks(desks, (A, B), request=lambda r: asked.append(r.url.path)):
            pulled = pull.pull_round(desks, ROUND, DataRoot(root))
        ran["exports_asked"] = len([p for p in asked if p.endswith("/export")])
        measured = agreement.measure_round(DataRoot(root), ROUND)
        built = gold.build_and_store(DataRoot(root), base_samples=samples, round_names=[ROUND], strict=False)
        if every_round:  # every other round's configs and tasks, as that Label Studio takes them
            ran["pushed"] = {name: _push_all(desks, name, samples, root, media) for name in round_names() if name != ROUND}
    finally:
        desks.down()
        desks.close()
    data = DataRoot(root)
    labels = pq.read_table(data.labels(ROUND)).drop_columns(list(LABEL_TIMES))
    ledger = json.loads(data.annotation_ledger(ROUND).read_text())
    return {
        "ran": ran,
        "counts": (pulled.labels.num_rows, pulled.problems.num_rows),
        "labels": sorted(map(json.dumps, labels.to_pylist())),
        "problems": data.label_problems(ROUND).read_bytes(),
        "ledger": sorted(json.dumps([key.rsplit("|", 1)[0], value]) for key, value in ledger.items()),
        "agreement": measured.paths["json"].read_bytes(),
        "gate_passed": measured.gate["passed"],
        "gold": built.provenance_path.read_bytes(),
        "gold_summary": (built.dir / "summary.json").read_bytes(),
        "gold_samples": json.dumps(built.result.samples, sort_keys=True),
    }


@pytest.fixture(scope="module")
def accelerated(tmp_path_factory):
    """The round with every acceleration on (the pinned Label Studio, no switch set)."""
    require_label_studio()
    with pytest.MonkeyPatch.context() as mp:
        for var in SWITCHES:
            mp.delenv(var, raising=False)
        return _run_round(tmp_path_factory.mktemp("accelerated") / "data", DEFAULT_VENV)


def _same_outputs(ours: dict, theirs: dict) -> None:
    assert ours["counts"] == theirs["counts"]
    for key in ("labels", "problems", "ledger", "agreement", "gate_passed", "gold", "gold_summary", "gold_samples"):
        assert ours[key] == theirs[key], f"{key} differ"


@pytest.mark.slow
def test_accelerations_off_give_the_same_round(accelerated, tmp_path, monkeypatch):
    # the accelerated run was accelerated: our settings on each desk, the databases read, no export asked
    assert set(accelerated["ran"]["settings"].values()) == {DESK_SETTINGS.stem}
    assert all(accelerated["ran"]["database"].values())
    assert accelerated["ran"]["exports_asked"] == 0
    assert accelerated["counts"][0] > 100 and accelerated["counts"][1] > 0  # labels, and skips among the problems

    for var in SWITCHES:
        monkeypatch.setenv(var, "1")
    assert desk_settings_choice(DEFAULT_VENV) == (False, "RESCUE_LS_STOCK_SETTINGS=1")
    assert desk_db.off(DEFAULT_VENV) == f"{desk_db.VIA_API_VAR}=1"
    stock = _run_round(tmp_path / "data", DEFAULT_VENV)
    assert set(stock["ran"]["settings"].values()) == {None}  # Label Studio's own settings
    assert stock["ran"]["database"] == {A: None, B: None}
    assert stock["ran"]["exports_asked"] == 4  # each annotator's couple and family projects, through the API
    _same_outputs(stock, accelerated)


def _install_previous() -> None:
    """Label Studio :data:`PREVIOUS` in a venv of its own (as scripts/setup.d/30-label-studio.sh
    installs the pinned one); skips the test where that fails (no network, no uv)."""
    if installed_version(PREVIOUS_VENV) == PREVIOUS and (PREVIOUS_VENV / "bin" / "label-studio").exists():
        return
    try:
        if not (PREVIOUS_VENV / "bin" / "python").exists():
            subprocess.run(["uv", "venv", "-q", "-p", "3.11", str(PREVIOUS_VENV)], check=True,
                           capture_output=True, text=True, timeout=300)
        subprocess.run(["uv", "pip", "install", "-q", "-p", str(PREVIOUS_VENV / "bin" / "python"),
                        f"label-studio=={PREVIOUS}"], check=True, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        pytest.skip(f"Label Studio {PREVIOUS} could not be installed into {PREVIOUS_VENV}: {str(detail).strip()[-300:]}")
    installed_version.cache_clear()


@pytest.mark.slow
@pytest.mark.upgrade
def test_the_previous_minor_release_switches_every_acceleration_off_and_gives_the_same_round(
        accelerated, tmp_path, monkeypatch, request):
    if "upgrade" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(f"installs Label Studio {PREVIOUS} (network, minutes): run with -m upgrade")
    _install_previous()
    assert installed_version(PREVIOUS_VENV) == PREVIOUS
    for var in SWITCHES:
        monkeypatch.delenv(var, raising=False)
    # every version-tied guard is off by itself, nothing switched off by hand
    assert desk_settings_choice(PREVIOUS_VENV) == (False, f"installed {PREVIOUS}, written for {desk_db.WRITTEN_FOR}")
    assert desk_db.off(PREVIOUS_VENV) == f"installed {PREVIOUS}, written for {desk_db.WRITTEN_FOR}"
    assert LabelStudioServer(tmp_path / "x", venv=PREVIOUS_VENV)._template() is None
    assert LabelStudioServer(tmp_path / "x", venv=DEFAULT_VENV)._template() == TEMPLATE_DB
    root = tmp_path / "data"
    previous = _run_round(root, PREVIOUS_VENV, every_round=True)
    # every round's config and tasks taken: a project per (scenario, annotator), every sample's tasks
    assert sorted(previous["ran"]["pushed"]) == sorted(set(round_names()) - {ROUND})
    assert all(projects == 4 and created >= 2 * len(_samples()) for projects, created in previous["ran"]["pushed"].values()), \
        previous["ran"]["pushed"]
    assert set(previous["ran"]["settings"].values()) == {None}
    assert previous["ran"]["database"] == {A: None, B: None}
    assert previous["ran"]["exports_asked"] == 4
    _same_outputs(previous, accelerated)
    # no desk of it got the template migrated by the pinned version: each ran its own migrations
    template = _migrations(TEMPLATE_DB)
    databases = sorted(root.glob(f"desks/*/label-studio/{DB_NAME}"))
    assert len(databases) == 2
    for database in databases:
        assert template - _migrations(database), f"{database} holds the {desk_db.WRITTEN_FOR} template's migrations"


def _migrations(database: Path) -> set[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as db:
        return set(db.execute("SELECT app, name FROM django_migrations"))


def test_the_pull_switch_and_the_template_follow_the_installed_version(tmp_path, monkeypatch):
    """Without servers: ``RESCUE_PULL_VIA_API=1`` turns the database reader off whatever the
    version; the template database (migrated by the default venv's Label Studio) goes only to a
    desk of that same version."""
    require_label_studio()
    other = tmp_path / "venv-other"
    (other / "lib" / "python3.11" / "site-packages" / f"label_studio-{PREVIOUS}.dist-info").mkdir(parents=True)
    installed_version.cache_clear()
    monkeypatch.delenv(desk_db.VIA_API_VAR, raising=False)
    assert desk_db.off(DEFAULT_VENV) is None
    assert desk_db.off(other) == f"installed {PREVIOUS}, written for {desk_db.WRITTEN_FOR}"
    monkeypatch.setenv(desk_db.VIA_API_VAR, "1")
    assert desk_db.off(DEFAULT_VENV) == f"{desk_db.VIA_API_VAR}=1"
    server = LabelStudioServer(tmp_path / "ls", venv=DEFAULT_VENV)
    (server.data_dir).mkdir()
    (server.database).write_bytes(b"")
    assert desk_db.readable(server) is None
    monkeypatch.setenv(desk_db.VIA_API_VAR, "0")
    assert desk_db.readable(server) == server.database
    assert server._template() == TEMPLATE_DB
    assert LabelStudioServer(tmp_path / "ls2", venv=other)._template() is None
