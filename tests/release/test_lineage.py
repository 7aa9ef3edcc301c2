"""Lineage in every release: ``lineage.parquet`` (one row per sample) and ``manifest.lineage`` (code,
packages, models, settings); annotators only as opaque ids; the code's commit, or the source
digest where git is missing; ``rescue release explain`` with one-line errors; an older layout is
not taken for the same release. The demo's path end to end: test_lineage_demo.py."""
from __future__ import annotations

import dataclasses
import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import lineage, store
from pipeline.benchmark import release, release_lineage
from pipeline.cli import app
from pipeline.paths import DataRoot

PEOPLE = ["zed@example.org", "Amy@Example.org", "bob@example.org"]


def _gate(root, name):
    fields = [{"field": "utterance_type", "metric": "nominal", "alpha": 0.9, "ci_low": 0.8, "ci_high": 0.95,
               "threshold": 0.667, "n_units": 60, "n_annotators": 2}]
    store.atomic_write_text(DataRoot(root).gate(name), store.canonical_json(
        {"round": name, "passed": True, "labels_sha256": "ab" * 32, "failing": [], "fields": fields}))


def _table(path, **columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


@pytest.fixture()
def rounds_root(small_input, tmp_path):
    """A data root whose two rounds labelled the first two samples (e-mails in any case) and
    adjudicated two rows of the first."""
    root = tmp_path / "root"
    s1, s2 = sorted(s["sample_id"] for s in small_input.samples)[:2]
    for name in ("emotion", "relation"):
        _gate(root, name)
    _table(DataRoot(root).labels("emotion"), annotator=[PEOPLE[0], PEOPLE[1], "amy@example.org", PEOPLE[2]],
           sample_id=[s1, s1, s2, s2], row_index=[1, 1, 2, 2])
    _table(DataRoot(root).labels("relation"), annotator=[PEOPLE[2], PEOPLE[0]], sample_id=[s1, s1],
           row_index=[3, 3])
    _table(DataRoot(root).adjudications("relation"), annotator=["adj@example.org"] * 2, sample_id=[s1, s1],
           row_index=[5, 3])
    return root, s1, s2


def test_rounds_name_annotators_by_opaque_ids_only(small_input, rounds_root):
    root, s1, s2 = rounds_root
    res = release.build_release(dataclasses.replace(small_input, from_data_root=True), "1.0.0", DataRoot(root))
    rows = {r["sample_id"]: r for r in pq.read_table(res.path / "lineage.parquet").to_pylist()}
    assert sorted(rows) == sorted(s["sample_id"] for s in small_input.samples)
    # numbered over the release's rounds in address order, one id per person whatever the case
    amy, bob, zed = "annotator-1", "annotator-2", "annotator-3"
    assert rows[s1]["rounds"] == [
        {"round": "emotion", "annotators": [amy, zed], "adjudicated": False, "adjudicated_rows": []},
        {"round": "relation", "annotators": [bob, zed], "adjudicated": True, "adjudicated_rows": [3, 5]}]
    assert rows[s2]["rounds"] == [{"round": "emotion", "annotators": [amy, bob], "adjudicated": False,
                                   "adjudicated_rows": []}]
    assert all(not r["rounds"] for sid, r in rows.items() if sid not in (s1, s2))
    raw = (res.path / "lineage.parquet").read_bytes()
    text = json.dumps(pq.read_table(res.path / "lineage.parquet").to_pylist())
    assert "@" not in text and "example" not in text.lower()
    assert res.manifest["files"]["lineage.parquet"] == {"sha256": hashlib.sha256(raw).hexdigest(),
                                                        "rows": len(rows), "bytes": len(raw)}
    # the row's story
    out = CliRunner().invoke(app, ["release", "explain", "1.0.0", s1, "5", "--data-root", str(root)])
    assert out.exit_code == 0, out.output
    assert "round relation: annotators annotator-2, annotator-3; adjudicated (an adjudicator settled this row)" \
        in out.output
    assert "round emotion: annotators annotator-1, annotator-3; not adjudicated" in out.output
    assert "@" not in out.output


def test_a_file_release_has_a_row_per_sample_and_says_what_is_not_recorded(small_input, tmp_path):
    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    table = pq.read_table(res.path / "lineage.parquet")
    assert table.schema.equals(release_lineage.LINEAGE)
    assert table["sample_id"].to_pylist() == sorted(s["sample_id"] for s in small_input.samples)
    assert table["video_sha256"].null_count == table.num_rows
    lin = res.manifest["lineage"]
    assert set(lin) == {"code", "packages", "models", "settings"} and lin["models"] == {} == lin["settings"]
    assert lin["packages"]["pyarrow"] == pa.__version__
    sid = table["sample_id"][0].as_py()
    row = pq.read_table(res.path / "data" / "rows" / "test.parquet").to_pylist()
    first = next(r for r in row if r["sample_id"] == sid)
    out = CliRunner().invoke(app, ["release", "explain", "1.0.0", sid, str(first["row_index"]),
                                   "--data-root", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert f"video span: {first['start_time']:.2f}-{first['end_time']:.2f} s" in out.output
    for what in ("transcript: not recorded", "diarizer: not recorded", "segmenter: not recorded"):
        assert what in out.output
    # errors: one line naming what is missing
    for args, says in ((["nope/1"], "no sample 'nope/1' in lineage.parquet"),
                       ([sid, "9999"], f"sample {sid!r} has no row 9999 (rows 1-"),
                       ([sid], None)):
        got = CliRunner().invoke(app, ["release", "explain", "1.0.0", *args, "--data-root", str(tmp_path)])
        if says is None:
            assert got.exit_code == 0 and "row" not in got.output.splitlines()[0], got.output
            continue
        assert got.exit_code == 1 and says in got.output and len(got.output.strip().splitlines()) == 1, got.output
    bad = CliRunner().invoke(app, ["release", "explain", "9.9.9", sid, "--data-root", str(tmp_path)])
    assert bad.exit_code == 1 and "no release '9.9.9'" in bad.output


def test_code_is_the_checkout_commit_or_the_source_digest_without_git(small_input, tmp_path, monkeypatch):
    import subprocess

    head = subprocess.run(["git", "-C", str(lineage.SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    release_lineage.code_lineage.cache_clear()
    assert release_lineage.code_lineage()["git_commit"] == head
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))  # git is not there: never a failed release
    release_lineage.code_lineage.cache_clear()
    try:
        res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path / "root"))
        assert res.manifest["lineage"]["code"] == {"source_sha256": lineage.package_digest()}
        assert "not a git checkout" in (res.path / "README.md").read_text()
        doc = json.loads((res.path / "croissant.json").read_text())
        assert doc["rai:dataPreprocessingProtocol"][0].startswith(
            f"Built by the rescue pipeline, source sha256 {lineage.package_digest()}")
    finally:
        release_lineage.code_lineage.cache_clear()


def test_a_release_without_lineage_is_not_the_same_release(small_input, tmp_path):
    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    manifest = dict(res.manifest, layout=2)
    (res.path / "manifest.json").chmod(0o600)
    (res.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(store.AlreadyExists, match="layout 2, now 3: without lineage.parquet"):
        release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path))
    # a release built before lineage cannot be explained: said in one line
    (res.path / "lineage.parquet").unlink()
    got = CliRunner().invoke(app, ["release", "explain", "1.0.0", small_input.samples[0]["sample_id"],
                                   "--data-root", str(tmp_path)])
    assert got.exit_code == 1 and "has no lineage.parquet (built before releases recorded their lineage)" in got.output


def test_diff_and_reuse_take_the_new_file(small_input, tmp_path):
    a = release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path))
    again = release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path))
    assert again.reused
    b = release.build_release(small_input, "1.0.1", DataRoot(tmp_path))
    assert (a.path / "lineage.parquet").read_bytes() == (b.path / "lineage.parquet").read_bytes()
    out = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["release", "diff", "1.0.0", "1.0.1", "--data-root",
                                                        str(tmp_path)])
    assert out.exit_code == 0, out.output
