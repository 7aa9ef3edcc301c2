"""The CLI path without Prefect, end to end, gives the same release as the flows.

One synthetic couple interview goes two ways, answered by the same simulated annotators:
- the CLI alone (``rescue ingest | transcribe | diarize | segment``, ``rescue annotate push``
  after ``rescue segment`` with no table given, ``annotate pull``, ``agreement``,
  ``adjudicate push|pull``, ``gold build``, ``release build``) against the desks of its data root;
- the deployments through the real stack (``ops.demo.run_flows``: ingest-batch fanned out to an
  ingest-interview child run on a worker,
  annotation-round per round, build-release) against the desks of another data root.
Each data root has the same three people (two annotators, one adjudicator), each with a desk of
their own: three Label Studios per side, one side after the other (the CLI side's desks are
stopped before the flows side's start). Both releases must hold the same bytes. The one difference allowed is the time an agreement
override was recorded (``recorded_at``), which the manifest and card carry.

The CLI side's machine stages (ingest, transcribe, diarize, segment) and a voice enrolment after
the release run as the installed ``rescue`` script in processes of their own with an empty HOME
and nothing else inherited: private data stays private (WAVs, subtitle copies, transcripts, RTTM,
drafts and voice prints owner-only, 0600 files in 0700 folders), nothing is written into the
user's home, and onnxruntime's telemetry (a device id and an event queue under
~/.cache/Microsoft/) stays off (the rest of tests/reliability/test_privacy_files.py checks the
store's modes and the switch alone).
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.benchmark.release_files import comparable_files
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow

ANNOTATORS = ["e2e-a@example.org", "e2e-b@example.org"]
ADJUDICATOR = "e2e-adjudicator@example.org"
SEED = 0


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    from pipeline.synthetic import interviews as synth

    path = tmp_path_factory.mktemp("e2e-batch")
    synth.make_batch(path, [{"name": "e2e01", "scenario": "couple", "seed": 11, "n_rows": 8, "group": "e2e_couple"}])
    return path


def _ok(result, *expect: str):
    assert result.exit_code == 0, result.output[-3000:]
    for text in expect:
        assert text in " ".join(result.output.split()), result.output[-3000:]
    return result


PEOPLE = [*((a, "annotator") for a in ANNOTATORS), (ADJUDICATOR, "adjudicator")]


RESCUE = Path(sys.executable).with_name("rescue")
SID = "e2e_couple/e2e01"


def _bare_env(home: Path) -> dict:
    """No inherited caches or settings: only PATH, the empty HOME and the models directory."""
    from pipeline.config import Settings

    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
            "RESCUE_MODELS_DIR": str(Settings.from_env().models_dir)}


def _rescue_process(root: Path, home: Path, *args: str) -> None:
    """The installed ``rescue`` script in a process of its own with an empty HOME."""
    run = subprocess.run([str(RESCUE), *args, "--data-root", str(root)], env=_bare_env(home), capture_output=True,
                         text=True, cwd=home.parent, timeout=600)
    assert run.returncode == 0, (args, run.stdout[-3000:], run.stderr[-3000:])
    assert "Traceback" not in run.stderr, (args, run.stderr[-3000:])


@pytest.fixture(scope="module")
def cli_run(batch, open_desks, tmp_path_factory):
    """The CLI path, on the desks of its own data root (stopped once the release is built), then a
    therapist's voice enrolled; returns the data root, the empty HOME its processes had, and the
    release."""
    base = tmp_path_factory.mktemp("e2e-cli")
    root, home = base / "data", base / "home"
    home.mkdir()
    with open_desks(root, PEOPLE) as desks:
        release = _cli_path(root, batch, desks, home)
    from pipeline.synthetic import interviews as synth

    voice = synth.speak_lines(base / "therapist.wav", 0, ["Hello, thank you for coming in today.",
                                                          "Tell me what happened on Sunday."] * 2)
    _rescue_process(root, home, "voices", "enroll", "Therapist", str(voice))
    return root, home, release


@pytest.fixture(scope="module")
def cli_release(cli_run):
    return cli_run[2]


def _cli_path(root: Path, batch: Path, desks, home: Path) -> Path:
    from ops import demo
    from ops.cli import app
    from pipeline import corpus
    from pipeline.annotation.rounds import round_names

    runner = CliRunner(env={"COLUMNS": "200"})

    def rescue(*args: str):
        return runner.invoke(app, [*args, "--data-root", str(root)])

    for args in (["ingest", str(batch)], ["transcribe", "--all"], ["diarize", "--all"], ["segment", "--all"]):
        _rescue_process(root, home, *args)
    who = [x for a in ANNOTATORS for x in ("-a", a)]
    # Segment, then push the first round with no table given.
    pushed = _ok(rescue("annotate", "push", "transcript", *who), "1 segmented interviews admitted")
    assert re.search(r"\b2 tasks created", " ".join(pushed.output.split())), pushed.output
    assert [s["sample_id"] for s in corpus.load_work(DataRoot(root))] == [SID]
    assert corpus.load_corpus(DataRoot(root)) == [], "drafts never enter the corpus"

    truth = demo.demo_truth(corpus.load_work(DataRoot(root)), SEED)
    names = list(round_names())
    for i, name in enumerate(names):
        assert demo.annotate_round(desks, name, truth, SEED, ANNOTATORS) == len(ANNOTATORS), name
        _ok(rescue("annotate", "pull", name, *who))
        gate = rescue("agreement", name)
        assert gate.exit_code in (0, 3), gate.output[-3000:]
        _ok(rescue("adjudicate", "push", name))
        demo.adjudicate_round(desks, name, truth, ADJUDICATOR)
        _ok(rescue("adjudicate", "pull", name))
        _ok(rescue("gold", "build"))
        if gate.exit_code == 3:  # below threshold: the same override the demo records
            _ok(rescue("agreement", name, "--override", demo.DEMO_OVERRIDE_REASON, "--by", demo.DEMO_OVERRIDE_BY))
        if i + 1 < len(names):
            _ok(rescue("annotate", "push", names[i + 1], *who))
        finished = [s["sample_id"] for s in corpus.load_corpus(DataRoot(root))]
        assert finished == ([SID] if i + 1 == len(names) else []), (name, finished)
    _ok(rescue("release", "build", "--version", demo.DEMO_RELEASE))
    return DataRoot(root).release(demo.DEMO_RELEASE)


@pytest.fixture(scope="module")
def flow_release(batch, stack, open_desks, cli_release):  # after the CLI side: its desks are stopped by then
    """The deployments, on the desks of their own data root (stopped once the release is built)."""
    from ops import demo

    root = stack.root / "e2e-flows"
    with open_desks(root, PEOPLE) as desks, stack.prefect_settings():
        # fanned out (one ingest-interview child run on a worker; fan_out=True fails without
        # that deployment): the CLI's in-process stages and the fan-out give the same bytes
        _, path = demo.run_flows(desks, root, batch, ANNOTATORS, ADJUDICATOR, SEED, fan_out=True)
    return path


def test_cli_path_gives_the_flows_release_bytes(cli_release, flow_release):
    cli, flows = comparable_files(cli_release), comparable_files(flow_release)
    assert sorted(cli) == sorted(flows)
    assert any(name.endswith(".parquet") for name in cli)
    differ = [name for name in cli if cli[name] != flows[name]]
    if "manifest.json" in differ:  # say where, not just that
        a, b = (json.loads((path / "manifest.json").read_text()) for path in (cli_release, flow_release))
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        differ.append({k: (a.get(k), b.get(k)) for k in keys})
    assert not differ, f"release files that differ (CLI, flows): {differ}"
    manifest = json.loads((cli_release / "manifest.json").read_text())
    assert manifest["counts"], manifest


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_cli_processes_leave_home_empty_and_private_data_owner_only(cli_run):
    root, home, _ = cli_run
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
    private_files = [*(root / "media").glob("*.wav"), *(root / "subtitles").rglob("*.srt"),
                     root / "transcripts" / f"{SID}.json", root / "diarization" / f"{SID}.rttm",
                     root / "drafts" / f"{SID}.parquet", *(root / "voices").glob("*.json")]
    assert len(private_files) == 6 and all(p.is_file() for p in private_files), private_files
    assert {str(p.relative_to(root)): oct(_mode(p)) for p in private_files} == {
        str(p.relative_to(root)): "0o600" for p in private_files}
    folders = [root / area for area in ("media", "subtitles", "transcripts", "diarization", "drafts", "voices")]
    folders += [p for area in folders for p in area.rglob("*") if p.is_dir()]
    assert {str(p.relative_to(root)): oct(_mode(p)) for p in folders} == {
        str(p.relative_to(root)): "0o700" for p in folders}
