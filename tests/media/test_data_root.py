"""The media stages against the data root: bad sample ids are refused at the manifest and the CLI
and nothing lands outside the root; the catalog keeps every line when several processes and
threads record at once; stage entry points return typed, content-addressed records; RTTM labels
and voice names with spaces survive; the media modules import only downward."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline import schemas
from pipeline.cli import app
from pipeline.config import REPO_ROOT
from pipeline.catalog import Catalog, Ingested, catalog_entry, read_catalog, record_catalog
from pipeline.media.ingest import ingest_batch, ingest_entry
from pipeline.media.manifest import read_manifest
from pipeline.media import transcribe, turns, voices
from pipeline.media.rttm import Turn, read_rttm, write_rttm
from pipeline.paths import DataRoot
from pipeline.store import sha256_file
from pipeline.synthetic import interviews as synth

BAD_IDS = ["../../x", "/tmp/x", "a/../../b", "a\x00b", "a\\b"]


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture()
def bad_batch(tmp_path, make_video):
    """One good video and one manifest line per bad id, all pointing at real files."""
    batch = tmp_path / "batch"
    batch.mkdir()
    make_video(batch / "good.mp4", 6.0)
    (batch / "good.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nHello.\n")
    lines = ["sample_id,scenario,video,participants,subtitles", "grp/good,couple,good.mp4,A;B,good.srt"]
    lines += [f'"{sid}",couple,good.mp4,A;B,good.srt' for sid in BAD_IDS]
    (batch / "manifest.csv").write_text("\n".join(lines) + "\n")
    return batch


def test_manifest_refuses_bad_ids_naming_file_line_and_id(bad_batch):
    entries = read_manifest(bad_batch / "manifest.csv")
    assert [e.sample_id for e in entries] == ["grp/good", *BAD_IDS]
    assert entries[0].refused is None
    for line, (entry, sid) in enumerate(zip(entries[1:], BAD_IDS), start=3):
        assert entry.refused.startswith(f"{bad_batch / 'manifest.csv'}, line {line}: sample id {sid!r}")
        assert "is not allowed" in entry.refused


def test_yaml_manifest_refuses_a_nul_in_an_id(tmp_path):
    (tmp_path / "manifest.yaml").write_text('- {sample_id: "a\\0b", scenario: couple, video: v.mp4}\n'
                                            '- {sample_id: ok/1, scenario: couple, video: v.mp4}\n')
    bad, good = read_manifest(tmp_path / "manifest.yaml")
    assert "item 1: sample id 'a\\x00b' is not allowed" in bad.refused and good.refused is None


def test_ingest_refuses_bad_ids_and_writes_nothing_outside_the_root(bad_batch, tmp_path):
    root = tmp_path / "data"
    batch_before = {p: sha256_file(bad_batch / p) for p in tree(bad_batch) if (bad_batch / p).is_file()}
    result = CliRunner().invoke(app, ["ingest", str(bad_batch), "--data-root", str(root)])
    assert result.exit_code == 0, result.output
    assert "done 1, cached 0, quarantined 5" in result.output
    report = ingest_batch(bad_batch, DataRoot(root))  # the library call says the same, per id
    assert report.cached == ["grp/good"] and set(report.quarantined) == set(BAD_IDS)
    assert all("is not allowed" in reason for reason in report.quarantined.values())
    # refused entries never reach the catalog; everything written is under the root
    assert [r["sample_id"] for r in read_catalog(DataRoot(root)).to_pylist()] == ["grp/good"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch", "data"]
    assert {p: sha256_file(bad_batch / p) for p in tree(bad_batch) if (bad_batch / p).is_file()} == batch_before
    for sid in BAD_IDS:
        for cmd in (["transcribe", sid], ["segment", sid], ["diarize", sid]):
            out = CliRunner().invoke(app, [*cmd, "--data-root", str(root)])
            assert out.exit_code == 2, (cmd, out.output)
            assert "is not allowed" in out.output and "Traceback" not in out.output
            assert isinstance(out.exception, SystemExit)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch", "data"]
    # keys/: what made the one good sample's ingest result (pipeline.lineage)
    assert sorted(p.name for p in root.iterdir()) == ["catalog.lock", "catalog.parquet", "keys", "media", "subtitles"]


def test_library_entry_points_refuse_bad_ids(tmp_path):
    root = DataRoot(tmp_path)
    for sid in BAD_IDS:
        with pytest.raises(ValueError, match="is not allowed"):
            catalog_entry(DataRoot(tmp_path), sid)
        with pytest.raises(ValueError, match="is not allowed"):
            Catalog.read(root).ingested(sid)
        forged = Ingested(sid, "couple", ("A", "B"), "0" * 64, "media/x.wav", None, 6.0)  # not from the catalog
        with pytest.raises(ValueError, match="is not allowed"):
            turns.segment_stage(forged, root)
    assert list(tmp_path.iterdir()) == []


_RECORDER = """
import sys
from pipeline.catalog import record_catalog
from pipeline.paths import DataRoot
from pipeline import schemas
from concurrent.futures import ThreadPoolExecutor
root, tag, n = DataRoot(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def row(i):
    r = {name: None for name in schemas.CATALOG.names}
    r.update(sample_id=f"{tag}/{i:03d}", scenario="couple", source_name="x.mp4", sha256="0" * 64,
             status="quarantined", reason="test", participants=[])
    return r
with ThreadPoolExecutor(4) as pool:
    list(pool.map(lambda i: record_catalog(root, row(i)), range(n)))
"""


def test_catalog_keeps_every_line_under_concurrent_processes_and_threads(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _RECORDER, str(tmp_path), f"p{k}", "25"], cwd=REPO_ROOT)
             for k in range(3)]

    def row(i):
        r = {name: None for name in schemas.CATALOG.names}
        r.update(sample_id=f"main/{i:03d}", scenario="family", source_name="y.mp4", sha256="1" * 64,
                 status="quarantined", reason="test", participants=[])
        return r

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: record_catalog(DataRoot(tmp_path), row(i)), range(25)))
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    ids = [r["sample_id"] for r in read_catalog(DataRoot(tmp_path)).to_pylist()]
    assert len(ids) == 100 == len(set(ids))


def test_stage_entry_points_return_typed_content_addressed_records(tmp_path):
    batch = synth.make_batch(tmp_path / "batch", [{"name": "s3", "scenario": "couple", "seed": 3, "n_rows": 6}])
    root, sid = DataRoot(tmp_path / "data"), "synthetic_couple/s3"
    [result] = ingest_batch(batch, root).results
    assert result.outcome == "done" and result.ingested.sample_id == sid
    assert result.ingested.audio_path == f"media/{result.ingested.sha256}.wav"
    assert root.resolve(result.ingested.audio_path).is_file() and root.resolve(result.ingested.subtitle_path).is_file()
    assert ingest_entry(read_manifest(batch / "manifest.csv")[0], root, batch).outcome == "cached"

    assert transcribe.resolve_backend("auto", result.ingested.subtitle_path) == "subtitles"
    assert transcribe.resolve_backend("auto", None) == "whisperx"
    with pytest.raises(ValueError, match="unknown transcript backend"):
        transcribe.resolve_backend("magic", None)
    done = transcribe.transcribe_stage(result.ingested, root)
    assert (done.backend, done.kind) == ("subtitles", "cue") and done.sha256 == sha256_file(root.transcript(sid))

    root.rttm(sid).parent.mkdir(parents=True)
    shutil.copy(batch / "s3.rttm", root.rttm(sid))
    seg = turns.segment_stage(result.ingested, root)
    assert seg == turns.Segmented(sid, "couple", result.ingested.participants, result.ingested.duration_s,
                                  seg.rows, sha256_file(root.drafts(sid)))
    assert seg.rows == len(json.loads((batch / "s3.rows.json").read_text())["rows"])


def test_rttm_labels_with_spaces_round_trip(tmp_path):
    turns_ = [Turn(0.0, 1.0, "Ann Lee"), Turn(1.0, 2.0, "100%"), Turn(2.0, 3.0, "SPEAKER_00")]
    path = write_rttm(turns_, tmp_path / "x.rttm")
    assert all(len(line.split()) == 10 for line in path.read_text().splitlines())
    assert read_rttm(path) == turns_


def test_a_voice_name_with_a_space_is_stored_under_a_safe_file_name(tmp_path):
    path = DataRoot(tmp_path).voice("Ann Lee")
    assert path.parent == DataRoot(tmp_path).voices_dir() and path.name.startswith("Ann_Lee-")
    assert DataRoot(tmp_path).voice("Ann") == DataRoot(tmp_path).voices_dir() / "Ann.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"name": "Ann Lee", "model": "m", "seconds": 4.0, "sources": [], "vector": [1.0, 0.0]}')
    root = DataRoot(tmp_path)
    [voice] = voices.load_voices(root)
    assert voice.name == "Ann Lee" and np.allclose(voice.vector, [1.0, 0.0]) and voices.has_voices(root)
    assert not voices.remove("../Ann Lee", root)
    assert voices.remove("Ann Lee", root) and not voices.has_voices(root)


# Imports inside functions are only for heavy, lazily loaded packages, never to hide a cycle.
LAZY_OK = ("torch", "whisperx", "pyannote", "nltk", "transformers", "ctranslate2", "lightning", "onnxruntime",
           "pipeline.media.models", "pipeline.media.speedups", "pipeline.media.dvector")


def test_media_modules_import_heavy_packages_only_inside_functions():
    found = []
    for path in sorted((REPO_ROOT / "pipeline" / "media").glob("*.py")):
        module = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                found += [f"{path.name}:{node.lineno} {n}" for n in names
                          if not any(n == ok or n.startswith(ok + ".") for ok in LAZY_OK)]
    assert not found, found
