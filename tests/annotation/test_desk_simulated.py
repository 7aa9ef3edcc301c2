"""A desk registered as simulated (``rescue annotators add --simulated``) says so in the registry,
once and for good; a registry from before the flag gets it at the next registration. The release
counts simulated answers from this record (tests/release/test_paper_and_card.py)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pipeline.labelstudio.desks import DeskError, Desks
from pipeline.paths import DataRoot


def test_simulated_is_recorded_once(tmp_path):
    desks = Desks(DataRoot(tmp_path))
    desks.register("bot@example.org", "annotator", simulated=True)
    desks.register("ann@example.org", "annotator")
    assert desks.simulated() == {"bot@example.org"}
    assert desks.register("bot@example.org", "annotator", simulated=True).simulated is True
    with pytest.raises(DeskError, match="registered as a simulated annotator; that is never changed"):
        desks.register("bot@example.org", "annotator")
    with pytest.raises(DeskError, match="registered as a person"):
        desks.register("ann@example.org", "annotator", simulated=True)


def test_a_registry_from_before_the_flag_gets_it_at_the_next_registration(tmp_path):
    desks = Desks(DataRoot(tmp_path))
    desks.register("bot@example.org", "annotator", simulated=True)
    path = desks.root.desks_registry()
    old = json.loads(path.read_text())
    for entry in old["desks"]:
        del entry["simulated"]
    path.write_text(json.dumps(old))
    assert desks.get("bot@example.org").simulated is None and desks.simulated() == set()
    desks.register("bot@example.org", "annotator", simulated=True)
    assert desks.simulated() == {"bot@example.org"}
    assert json.loads(path.read_text())["desks"][0]["simulated"] is True


def test_the_cli_takes_simulated():
    from pipeline.cli.app import app

    out = CliRunner().invoke(app, ["annotators", "add", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0 and "--simulated" in out.output
