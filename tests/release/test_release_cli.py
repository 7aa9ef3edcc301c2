"""`rescue release build` / `rescue release diff` end to end through the real CLI."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from pipeline.cli import app


def test_build_synthetic_then_reuse_or_refuse_then_diff(tmp_path, benchmark_head_path):
    runner = CliRunner()
    res = runner.invoke(app, ["release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                              "--data-root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "ITP" in res.output and "written:" in res.output
    manifest = json.loads((tmp_path / "releases" / "0.1.0" / "manifest.json").read_text())
    assert manifest["source"]["kind"] == "synthetic" and manifest["validation"]["problems"] == 0

    before = {p: p.read_bytes() for p in (tmp_path / "releases").rglob("*") if p.is_file()}
    # the same version from the same input: a no-op that says so (docs/OPERATIONS.md)
    again = runner.invoke(app, ["release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                                "--data-root", str(tmp_path)])
    assert again.exit_code == 0 and "already exists" in again.output and "reused" in again.output, again.output
    # the same version from another input: refused, naming the version
    other = runner.invoke(app, ["release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                                "--seed", "1", "--data-root", str(tmp_path)])
    assert other.exit_code == 1 and "0.1.0 already exists" in other.output and "different input" in other.output
    assert {p: p.read_bytes() for p in (tmp_path / "releases").rglob("*") if p.is_file()} == before

    res2 = runner.invoke(app, ["release", "build", "--version", "0.2.0", "--input", str(benchmark_head_path),
                               "--data-root", str(tmp_path)])
    assert res2.exit_code == 0, res2.output
    diff = runner.invoke(app, ["release", "diff", "0.1.0", "0.2.0", "--data-root", str(tmp_path), "--json"])
    assert diff.exit_code == 0, diff.output
    report = json.loads(diff.output)
    assert report["samples"]["added"] == 3 and report["samples"]["removed"] == manifest["statistics"]["all"]["samples"]

    both = runner.invoke(app, ["release", "build", "--version", "0.3.0", "--synthetic", "--input", str(benchmark_head_path),
                               "--data-root", str(tmp_path)])
    assert both.exit_code == 2 and "at most one of" in both.output
    # no input given: the corpus is the default, and an empty data root has none yet
    empty = runner.invoke(app, ["release", "build", "--version", "0.3.0", "--data-root", str(tmp_path)])
    assert empty.exit_code == 1 and "no corpus yet" in empty.output


def test_bad_versions_are_refused_before_any_file_is_written(tmp_path):
    runner = CliRunner()
    for version in ("../../x", "/tmp/x", "1.0", "1.0.0/../../y"):
        res = runner.invoke(app, ["release", "build", "--version", version, "--synthetic", "--scale", "0.05",
                                  "--data-root", str(tmp_path / "data")])
        assert res.exit_code == 1 and "X.Y.Z" in res.output, (version, res.output)
    assert not (tmp_path / "data" / "releases").exists() and not (tmp_path / "x").exists()


def test_build_sets_the_card_licence_and_citation(tmp_path):
    bib = tmp_path / "paper.bib"
    bib.write_text("@article{hu2026, title={RESCUE-BENCH}, author={Hu, T. and Others, A.}}\n")
    runner = CliRunner()
    res = runner.invoke(app, ["release", "build", "--version", "0.2.0", "--synthetic", "--scale", "0.05",
                              "--license", "cc-by-nc-4.0", "--citation", str(bib), "--data-root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "SYNTHETIC / DEMO" in res.output and "paper shapes:" in res.output
    card = (tmp_path / "releases" / "0.2.0" / "README.md").read_text()
    assert "license: cc-by-nc-4.0" in card and "author={Hu, T. and Others, A.}" in card and "PLACEHOLDER" not in card
    manifest = json.loads((tmp_path / "releases" / "0.2.0" / "manifest.json").read_text())
    assert manifest["card"]["license"] == "cc-by-nc-4.0"
    missing = runner.invoke(app, ["release", "build", "--version", "0.3.0", "--synthetic", "--citation",
                                  str(tmp_path / "nope.bib"), "--data-root", str(tmp_path)])
    said = " ".join(missing.output.split())  # the console wraps long paths at any width
    assert missing.exit_code == 2 and "no such" in said and "nope.bib" in missing.output.replace("\n", "")
