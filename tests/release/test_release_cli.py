"""`rescue release build` / `rescue release diff` end to end through the real CLI."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from pipeline.cli import app


def test_build_synthetic_then_refuse_then_diff(tmp_path, head_path):
    runner = CliRunner()
    res = runner.invoke(app, ["release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                              "--data-root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "ITP" in res.output and "written:" in res.output
    manifest = json.loads((tmp_path / "releases" / "0.1.0" / "manifest.json").read_text())
    assert manifest["source"]["kind"] == "synthetic" and manifest["validation"]["problems"] == 0

    again = runner.invoke(app, ["release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                                "--data-root", str(tmp_path)])
    assert again.exit_code == 1 and "already exists" in again.output

    res2 = runner.invoke(app, ["release", "build", "--version", "0.2.0", "--input", str(head_path),
                               "--data-root", str(tmp_path)])
    assert res2.exit_code == 0, res2.output
    diff = runner.invoke(app, ["release", "diff", "0.1.0", "0.2.0", "--data-root", str(tmp_path), "--json"])
    assert diff.exit_code == 0, diff.output
    report = json.loads(diff.output)
    assert report["samples"]["added"] == 3 and report["samples"]["removed"] == manifest["statistics"]["all"]["samples"]

    both = runner.invoke(app, ["release", "build", "--version", "0.3.0", "--synthetic", "--input", str(head_path),
                               "--data-root", str(tmp_path)])
    assert both.exit_code == 2 and "at most one of" in both.output
    # no input given: the corpus is the default, and an empty data root has none yet
    empty = runner.invoke(app, ["release", "build", "--version", "0.3.0", "--data-root", str(tmp_path)])
    assert empty.exit_code == 1 and "no corpus yet" in empty.output
