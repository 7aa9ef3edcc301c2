"""Private by default: whatever the operator's umask (022 here, an ordinary login's), what the
pipeline's entry points write under the data root - the ``rescue`` command in processes of its
own, and a flow run in a process of its own - is owner-only, releases included; only
``rescue release publish VERSION`` makes one release readable by others (0644/0755), and the
folders above it passable (``--x``), nothing more.

The labels the rounds' pulls would have written are seeded by the test (owner-only, as a pull
writes them); everything else comes from the entry points: the agreement reports and gate
records (``annotation/``), the gold build (``work/``, ``corpus/``), releases from the CLI and
from the ``build-release`` flow."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline import corpus, schemas, store
from pipeline.annotation.rounds import load_round, round_names
from pipeline.cli import app
from pipeline.paths import DataRoot
from pipeline.synthetic import corpus as synth_corpus
from pipeline.synthetic.annotators import SimulatedAnnotator
from tests.helpers import mode, open_to_others

pytestmark = pytest.mark.slow

RESCUE = Path(sys.executable).with_name("rescue")
LOGIN_UMASK = 0o022


def _rescue(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RESCUE), *args], capture_output=True, text=True, timeout=600, umask=LOGIN_UMASK,
                          env={**os.environ, "COLUMNS": "200"})


def _ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


DRAFT = ("row_index", "start_time", "end_time", "primary_speaker", "target", "dialogue_cleaned", "background_dialogue")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("private") / "data"
    samples = synth_corpus.generate(scale=0.1, seed=5)[:3]
    drafts = [{**{k: v for k, v in s.items() if k != "rows"}, "rows": [{k: r[k] for k in DRAFT} for r in s["rows"]]}
              for s in samples]
    old = os.umask(store.PRIVATE_UMASK)  # what the pulls (entry points too) would have left
    try:
        corpus.merge_into_work(DataRoot(root), drafts)
        for name in round_names():
            rnd = load_round(name)
            lines = [x for a in range(2) for x in SimulatedAnnotator(f"a{a}", {"*": 0.0}, seed=a).label_rows(rnd, samples)]
            store.write_parquet(pa.Table.from_pylist(lines, schema=schemas.LABELS), DataRoot(root).labels(name))
    finally:
        os.umask(old)
    return root


def test_entry_points_write_owner_only_and_publish_shares_one_release(root):
    assert open_to_others(root, names_from=root.parent) == {}
    for name in round_names():
        _rescue("agreement", name, "--data-root", str(root))  # a gate may fail: the report is written either way
        assert (DataRoot(root).agreement_report_dir(name) / "report.md").is_file()
    _ok(_rescue("gold", "build", "--data-root", str(root)))
    assert corpus.load_corpus(DataRoot(root)), "the gold build finished no sample: nothing reached corpus/"
    _ok(_rescue("release", "build", "--version", "0.1.0", "--data-root", str(root)))
    _ok(_rescue("release", "build", "--version", "0.2.0", "--synthetic", "--scale", "0.05", "--data-root", str(root)))
    flow = ("from prefect.testing.utilities import prefect_test_harness\n"
            "with prefect_test_harness(server_startup_timeout=300):\n"
            "    from flows.build_release import build_release_flow\n"
            f"    build_release_flow(version='0.3.0', source='synthetic:0.05', data_root={str(root)!r})\n")
    run = subprocess.run([sys.executable, "-c", flow], capture_output=True, text=True, timeout=600, umask=LOGIN_UMASK)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    releases = DataRoot(root).releases_dir()
    assert sorted(p.name for p in releases.iterdir()) == ["0.1.0", "0.2.0", "0.3.0"]
    for area in ("annotation", "work", "corpus", "releases"):
        assert (root / area).is_dir(), area
    assert open_to_others(root, names_from=root.parent) == {}, "readable by group or others before any publish"

    out = _ok(_rescue("release", "publish", "0.1.0", "--data-root", str(root)))
    assert "published:" in out and "0644" in out
    shared = releases / "0.1.0"
    tree = [shared, *shared.rglob("*")]
    assert any(p.name == "manifest.json" for p in tree) and any(p.suffix == ".parquet" for p in tree)
    assert {str(p.relative_to(shared)): oct(mode(p)) for p in tree} == {
        str(p.relative_to(shared)): "0o755" if p.is_dir() else "0o644" for p in tree}
    # the way there: passable, not listable
    assert {p.name: oct(mode(p)) for p in (root, releases)} == {root.name: "0o711", "releases": "0o711"}
    rest = open_to_others(root, skip=shared, names_from=root.parent)
    assert rest == {root.name: "0o711", "data/releases": "0o711"}, rest

    again = _ok(_rescue("release", "publish", "0.1.0", "--data-root", str(root)))  # idempotent
    assert "pass through" not in again
    missing = _rescue("release", "publish", "9.9.9", "--data-root", str(root))
    assert missing.returncode == 1 and "no release '9.9.9'" in missing.stdout


def test_publish_names_what_an_older_root_left_readable(tmp_path):
    """A data root written before it was private: publish opens the way to the release and names
    the entries others could read already (it changes nothing of theirs)."""
    root = tmp_path / "data"
    res = CliRunner().invoke(app, ["release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                              "--data-root", str(root)])
    assert res.exit_code == 0, res.output
    old = root / "annotation"
    old.mkdir(mode=0o755)
    old.chmod(0o755)
    out = _ok(_rescue("release", "publish", "0.1.0", "--data-root", str(root)))
    assert f"{old}" in out and "chmod -R go-rwx" in out
    assert mode(old) == 0o755
