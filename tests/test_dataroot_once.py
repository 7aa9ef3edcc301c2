"""The data root is built once per command or flow run and passed down: a real 3-video
``rescue ingest`` builds :class:`pipeline.paths.DataRoot` at most twice and probes the root's
writability once, one ``ingest-interview`` flow run builds it once, and no library module
builds one (only the entry points: ``pipeline/cli/``, ``flows/``, ``ops/``)."""
from __future__ import annotations

import ast
import collections
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import store
from pipeline.cli import app
from pipeline.config import REPO_ROOT
from pipeline.paths import DataRoot
from pipeline.synthetic import interviews as synth


@pytest.fixture
def counted(monkeypatch):
    """``{"roots": Counter(where -> DataRoot constructions), "probes": [where, ...]}`` while the test runs."""
    seen = {"roots": collections.Counter(), "probes": []}
    build, probe = DataRoot.__init__, store.check_data_root

    def where() -> str:
        frame = traceback.extract_stack()[-3]
        return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"

    def counting_init(self, root):
        seen["roots"][where()] += 1
        build(self, root)

    def counting_probe(root):
        seen["probes"].append(where())
        return probe(root)

    monkeypatch.setattr(DataRoot, "__init__", counting_init)
    monkeypatch.setattr(store, "check_data_root", counting_probe)
    return seen


def test_a_three_video_ingest_builds_the_data_root_at_most_twice_and_probes_it_once(tmp_path, counted):
    batch = synth.make_batch(tmp_path / "batch", [{"name": f"v{i}", "scenario": "couple", "seed": i, "n_rows": 8}
                                                  for i in range(3)])
    counted["roots"].clear()
    result = CliRunner().invoke(app, ["ingest", str(batch), "--data-root", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    assert "done 3, cached 0, quarantined 0" in result.output
    assert sum(counted["roots"].values()) <= 2, counted["roots"]
    assert len(counted["probes"]) == 1, counted["probes"]
    # the same batch again: every video up to date, the root still built once and probed once
    counted["roots"].clear()
    counted["probes"].clear()
    again = CliRunner().invoke(app, ["ingest", str(batch), "--data-root", str(tmp_path / "data")])
    assert "done 0, cached 3, quarantined 0" in again.output, again.output
    assert sum(counted["roots"].values()) <= 2 and len(counted["probes"]) == 1, counted


# Where a DataRoot may be built: the paths module itself and the entry points (a command, a flow
# run, an ops command); everything they call takes the one they built.
ENTRY_POINTS = ("pipeline/paths.py", "pipeline/cli/", "flows/", "ops/")


def test_no_library_module_builds_a_data_root():
    found = []
    for path in sorted([*(REPO_ROOT / "pipeline").rglob("*.py")]):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel.startswith(ENTRY_POINTS):
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        aliases = {"DataRoot"} | {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                                  for a in n.names if a.name == "DataRoot" and a.asname}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in aliases or name.split(".")[0] in aliases and name.endswith(".from_env"):
                    found.append(f"{rel}:{node.lineno} {name}(...)")
    assert not found, "library code builds a DataRoot (take the caller's instead): " + "; ".join(found)


@pytest.mark.slow
def test_one_interview_flow_run_builds_the_data_root_once(prefect_harness, tmp_path, counted):
    import dataclasses

    from flows.ingest_interview import ingest_interview_flow
    from pipeline.media.manifest import read_manifest

    batch = synth.make_batch(tmp_path / "batch", [{"name": "f1", "scenario": "couple", "seed": 5, "n_rows": 8}])
    [entry] = read_manifest(batch / "manifest.csv")
    counted["roots"].clear()
    out = ingest_interview_flow(entry=dataclasses.asdict(entry), batch_dir=str(batch), data_root=str(tmp_path / "data"))
    assert [i["status"] for i in out["items"]] == ["done"], out
    assert sum(counted["roots"].values()) == 1, counted["roots"]
    assert len(counted["probes"]) == 1, counted["probes"]
