"""The parts of a media stage result's key (pipeline.lineage, pipeline.media.keys): the code
each stage is keyed on, read from source, found the same way a full parse would; a changed line
in a scratch copy of the package changes only the keys of the stages that import it, and names
the file; model digests follow content, not place; the record's reasons; and the cost of the
source digests in a fresh process."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import lineage
from pipeline.config import REPO_ROOT
from pipeline.media import keys


def _module_name(path: Path) -> str:
    parts = path.relative_to(lineage.SOURCE_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_import_scan_finds_what_a_full_parse_finds_in_every_module():
    """The scan reads only the import statements (parsing whole files costs too much per
    process); in every module of the package it must find the same pipeline modules as ``ast``
    over the whole file (function-level imports, parenthesised lists and comments included)."""
    files = sorted(lineage.PACKAGE_DIR.rglob("*.py"))
    assert len(files) > 50
    for path in files:
        module = _module_name(path)
        full = lineage._imports(module, path, ast.parse(path.read_bytes()))
        assert set(lineage._parse(module)[1]) == full, module


def test_each_stage_is_keyed_on_its_module_and_what_it_imports():
    files = {stage: lineage.code_files(module) for stage, module in keys.MODULES.items()}
    assert "pipeline/media/turns.py" in files["segment"]
    for stage in ("ingest", "transcribe", "diarize"):
        assert "pipeline/media/turns.py" not in files[stage], stage
    # transitively: segment -> turns -> voice_labels; diarize -> refine, its lazily imported models
    assert {"pipeline/media/voice_labels.py", "pipeline/media/assign.py", "pipeline/__init__.py",
            "pipeline/media/__init__.py"} <= set(files["segment"])
    assert {"pipeline/media/refine.py", "pipeline/media/models.py", "pipeline/media/dvector.py"} <= set(files["diarize"])
    assert not any(f.startswith("pipeline/cli/") for fs in files.values() for f in fs)


def test_the_offline_pipeline_folder_is_the_one_the_builder_names():
    """keys cannot import pipeline.media.models (torch) for the folder's name: read it from source."""
    tree = ast.parse((REPO_ROOT / "pipeline/media/models.py").read_text())
    value = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", "") == "OFFLINE_DIARIZATION" for t in node.targets))
    assert value == keys.OFFLINE_DIARIZATION


_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from pipeline import lineage
t1, c1 = time.perf_counter(), time.process_time()
files = {stage: lineage.code_files(module) for stage, module in json.loads(sys.argv[1]).items()}
t2, c2 = time.perf_counter(), time.process_time()
lineage.package_digest()
t3, c3 = time.perf_counter(), time.process_time()
print(json.dumps({"files": files, "import_ms": (t1 - t0) * 1e3, "stages_ms": (t2 - t1) * 1e3,
                  "package_ms": (t3 - t2) * 1e3, "stages_cpu_ms": (c2 - c1) * 1e3, "package_cpu_ms": (c3 - c2) * 1e3}))
"""


def _probe(pythonpath: Path | None) -> dict:
    env = {**os.environ, **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    run = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(keys.MODULES)], env=env, capture_output=True,
                         text=True, timeout=300, cwd=str(pythonpath or REPO_ROOT))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def scratch_copy(target: Path) -> Path:
    """A copy of the package (no caches) to put first on PYTHONPATH."""
    shutil.copytree(lineage.PACKAGE_DIR, target / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    return target


@pytest.mark.slow  # three fresh interpreters
def test_a_changed_line_in_a_scratch_copy_changes_only_the_stages_that_import_it(tmp_path):
    here = _probe(None)
    scratch = scratch_copy(tmp_path / "scratch")
    same = _probe(scratch)
    assert same["files"] == here["files"], "a copy with the same bytes has the same code digests"
    turns = scratch / "pipeline/media/turns.py"
    turns.write_text(turns.read_text().replace("WORD_OTHER_SHARE = 0.5", "WORD_OTHER_SHARE = 0.6", 1))
    changed = _probe(scratch)
    for stage in ("ingest", "transcribe", "diarize"):
        assert changed["files"][stage] == here["files"][stage], stage
    assert changed["files"]["segment"] != here["files"]["segment"]
    old = keys.StageKey("segment", "g/s", here["files"]["segment"])
    new = keys.StageKey("segment", "g/s", changed["files"]["segment"])
    assert lineage.why_stale(old.as_record(), new) == ["pipeline/media/turns.py changed"]
    # the cost in a fresh process (every flow-run process pays it once), measured and shown
    print(f"source digests: the four stages {changed['stages_ms']:.1f} ms ({changed['stages_cpu_ms']:.1f} ms CPU), "
          f"the whole package {changed['package_ms']:.1f} ms ({changed['package_cpu_ms']:.1f} ms CPU)")
    assert changed["stages_ms"] + changed["package_ms"] < 1000, changed  # tens of ms; generous for a loaded host


def test_a_model_digest_follows_content_not_place(tmp_path):
    model = tmp_path / "a" / "diarization-offline"
    (model / "embedding").mkdir(parents=True)
    (model / "config.yaml").write_text("embedding_batch_size: 32\n")
    (model / "embedding" / "weights.bin").write_bytes(bytes(range(256)))
    before = lineage.model_digest(model)
    copy = tmp_path / "b" / "diarization-offline"
    shutil.copytree(model, copy)
    assert lineage.model_digest(copy) == before
    data = bytearray((copy / "embedding" / "weights.bin").read_bytes())
    data[7] ^= 1
    (copy / "embedding" / "weights.bin").write_bytes(bytes(data))
    assert lineage.model_digest(copy) != before
    assert lineage.model_digest(tmp_path / "nowhere") == "missing"


def test_a_key_never_reads_what_is_no_regular_file(tmp_path):
    """Keys are made before the stage checks its input: a FIFO would block a read for good."""
    fifo = tmp_path / "video.mp4"
    os.mkfifo(fifo)
    assert lineage.file_digest(fifo) == "not a regular file"
    loop = tmp_path / "loop.mp4"
    loop.symlink_to(loop)
    assert lineage.file_digest(loop) == "unreadable"
    assert lineage.file_digest(tmp_path / "none.mp4") == "missing"


def test_the_digest_cache_is_kept_under_the_data_root_and_read_by_the_next_process(tmp_path):
    from pipeline.paths import DataRoot

    root = DataRoot(tmp_path / "data")
    video = tmp_path / "v.bin"
    video.write_bytes(b"x" * 1000)
    cache = lineage.DigestCache(root)
    digest = cache.file(video)
    cache.save()
    stored = json.loads(root.digest_cache().read_text())
    st = video.stat()
    assert stored[str(video.absolute())] == [st.st_size, st.st_mtime_ns, digest]
    # a changed file (other size) is hashed again
    video.write_bytes(b"y" * 1001)
    assert lineage.DigestCache(root).file(video) != digest


def test_why_names_each_changed_part():
    base = keys.StageKey("diarize", "g/s", {"pipeline/media/diarize.py": "a", "pipeline/paths.py": "b"},
                         {"diarization-offline": {"path": "/m/diarization-offline", "sha256": "m1"}},
                         {"device": "cpu", "diarization_step": None}, {"ingested": "i1", "voices": "none"})
    assert lineage.why_stale(base.as_record(), base) == []
    assert lineage.why_stale(None, base) == [lineage.NO_RECORD]
    now = keys.StageKey("diarize", "g/s", {"pipeline/media/diarize.py": "a2", "pipeline/paths.py": "b",
                                           "pipeline/media/vad.py": "c"},
                        {"diarization-offline": {"path": "/n/diarization-offline", "sha256": "m2"}},
                        {"device": "cpu", "diarization_step": 0.2}, {"ingested": "i2", "voices": "none"})
    assert lineage.why_stale(base.as_record(), now) == [
        "pipeline/media/diarize.py changed", "pipeline/media/vad.py added", "model diarization-offline changed",
        "setting diarization_step changed (None -> 0.2)", "input changed (ingested)"]
    gone = keys.StageKey("diarize", "g/s", base.code, {"diarization-offline": {"path": "/x", "sha256": "missing"}},
                         base.settings, base.inputs)
    assert lineage.why_stale(base.as_record(), gone) == ["model diarization-offline missing at /x"]


def test_an_ingest_key_follows_the_video_and_a_removed_batch_folder_counts_as_unchanged(tmp_path):
    from pipeline.paths import DataRoot

    root = DataRoot(tmp_path / "data")
    video = tmp_path / "batch" / "v.mp4"
    video.parent.mkdir()
    video.write_bytes(b"video bytes")
    entry = {"scenario": "couple", "participants": ("Ann", "Bo"), "speaking_order": True, "synthetic": None}
    made = keys.ingest_key("g/s", entry, video, None).as_record()
    row = {"sample_id": "g/s"}
    assert keys.current_key("ingest", root, row, made).key == made["key"]
    video.write_bytes(b"other video bytes")
    assert lineage.why_stale(made, keys.current_key("ingest", root, row, made)) == ["input changed (video)"]
    # the operator removed the batch folder after ingest: nothing to read again, nothing stale
    video.unlink()
    assert keys.current_key("ingest", root, row, made).key == made["key"]


def test_a_transcript_is_keyed_on_models_and_device_only_when_a_model_makes_it(tmp_path):
    from pipeline.catalog import Ingested
    from pipeline.config import Settings

    settings = Settings(data_root=tmp_path / "data", models_dir=tmp_path / "models", label_studio_port=8080)
    asr = tmp_path / "models" / "my-asr"
    asr.mkdir(parents=True)
    (asr / "model.bin").write_bytes(b"weights")
    spoken = Ingested("g/s", "couple", ("Ann", "Bo"), "a" * 64, "media/a.wav", None, 40.0)
    cpu = keys.transcribe_key(spoken, "auto", asr, None, "cpu", settings=settings)
    assert cpu.settings["backend"] == "whisperx" and set(cpu.models) == {"my-asr", "alignment-default"}
    assert keys.transcribe_key(spoken, "auto", asr, None, "cuda", settings=settings).key != cpu.key
    (asr / "model.bin").write_bytes(b"new weights")
    assert lineage.why_stale(cpu.as_record(), keys.transcribe_key(spoken, "auto", asr, None, "cpu",
                                                                 settings=settings)) == ["model my-asr changed"]
    subtitled = Ingested("g/s", "couple", ("Ann", "Bo"), "a" * 64, "media/a.wav", "subtitles/b/s.srt", 40.0)
    subs = keys.transcribe_key(subtitled, "auto", asr, None, "cpu", settings=settings)
    assert subs.models == {} and subs.settings == {"backend": "subtitles"}
    assert keys.transcribe_key(subtitled, "auto", None, None, "cuda", settings=settings).key == subs.key
