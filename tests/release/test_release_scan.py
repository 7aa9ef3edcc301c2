"""V16 over a built release: one private pattern at a time in every file type a release holds
(Parquet, JSON Lines, JSON, Markdown) is found and named by its file; a path that slips past
validation is caught in every file that carries it, from what the build holds in memory."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.benchmark import release
from pipeline.benchmark.paper_export import sample_file
from pipeline.synthetic.corpus import load_synthetic
from pipeline.validate import private_strings, scan_release
from tests.helpers import PRIVATE_EXAMPLES
from pipeline.paths import DataRoot

@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    inp = load_synthetic(scale=0.02, seed=5)
    release.validate(inp)
    res = release.build_release(inp, "1.0.0", DataRoot(tmp_path_factory.mktemp("scan_release")))
    assert scan_release(res.path) == []  # the untouched release is clean
    return res.path


def _parquet(root: Path, text: str) -> str:
    """A nested string: rows.internal_emotion[0].emotion_description of the first row."""
    rel = "data/rows/test.parquet"
    table = pq.read_table(root / rel)
    records = table.to_pylist()
    records[0]["internal_emotion"] = [{"person": records[0]["primary_speaker"], "intensity": 3,
                                       "emotion_description": f"tense, see {text} now"}]
    pq.write_table(pa.Table.from_pylist(records, schema=table.schema), root / rel)
    return rel


def _jsonl(root: Path, text: str) -> str:
    rel = "paper/er.jsonl"
    lines = (root / rel).read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[1])
    rec["note"] = {"seen": [f"see {text} now"]}
    lines[1] = json.dumps(rec, ensure_ascii=False)  # as the paper files are written: escapes and all
    (root / rel).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rel


def _json(root: Path, text: str) -> str:
    path = sorted((root / "paper" / "data").rglob("*.json"))[0]
    data = json.loads(path.read_text(encoding="utf-8"))
    data["rows"][0]["dialogue_cleaned"] = f"see {text} now"
    path.write_text(json.dumps(data, ensure_ascii=True), encoding="utf-8")  # \uXXXX escapes too
    return path.relative_to(root).as_posix()


def _markdown(root: Path, text: str) -> str:
    with open(root / "README.md", "a", encoding="utf-8") as fh:
        fh.write(f"\nThe raw clip is at {text} for now.\n")
    return "README.md"


@pytest.mark.parametrize("put", [_parquet, _jsonl, _json, _markdown], ids=["parquet", "jsonl", "json", "markdown"])
@pytest.mark.parametrize("name", sorted(PRIVATE_EXAMPLES))
def test_each_private_pattern_is_found_in_each_file_type(built, tmp_path, put, name):
    example = PRIVATE_EXAMPLES[name]
    root = tmp_path / "r"
    shutil.copytree(built, root)
    rel = put(root, example)
    found = scan_release(root)
    assert found, f"{name} in {rel} was not found"
    assert all(f.startswith(f"{rel}: ") for f in found), found
    assert any(hit in example for f in found for hit in private_strings(example) if f.endswith(hit)), found


def test_a_path_that_slips_past_validation_is_caught_in_every_file_that_carries_it(tmp_path):
    """build_release scans the Parquet tables as it writes them, the manifest and card from
    memory and paper/ from disk; a path in a row (validation skipped here on purpose) is named
    in each file that carries it, and nothing is published."""
    inp = load_synthetic(scale=0.02, seed=6)
    sid = sorted(s["sample_id"] for s in inp.samples)[0]
    sample = next(s for s in inp.samples if s["sample_id"] == sid)
    sample["rows"][0]["dialogue_cleaned"] += " (raw take at /mnt/raw/interviews/take1.wav)"
    with pytest.raises(release.ReleaseError) as err:
        release.build_release(inp, "1.0.0", DataRoot(tmp_path))
    message = str(err.value)
    files = message.split(", in ", 1)[1].split(":\n", 1)[0].split(", ")
    assert {"data/rows/test.parquet", "data/itp/test.parquet", "paper/benchmark.jsonl", sample_file(sid)} <= set(files)
    assert "data/rows/test.parquet: dialogue_cleaned[0]: /mnt/raw/interviews/take1.wav" in message
    assert not list(tmp_path.rglob("manifest.json"))  # nothing was published
