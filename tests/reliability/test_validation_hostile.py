"""Hostile samples and releases: evidence rows out of range, samples without rows, absolute
paths and URLs in any string field. Each is a violation naming the sample, row and field; a
built release holds no absolute path or URL in any file."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.validate import private_strings, scan_release, validate_sample
from pipeline.paths import DataRoot


def _row(i, speaker, target, **extra):
    row = {
        "start_time": float(i), "end_time": i + 0.9, "primary_speaker": speaker, "target": target,
        "dialogue_cleaned": "Some words here.", "utterance_type": "" if speaker == "Therapist" else "disclosure",
        "background_dialogue": [], "tone_of_voice": "calm", "body_posture": [], "facial_expressions": [],
        "self_directed_behavior": [], "interaction_behavior": [], "internal_emotion": [],
        "viewpoints_attitudes": [], "support_strategy": [], "row_index": i,
        "relation_cycle_state": "" if speaker == "Therapist" else None,
        "relation_cycle_reason": "no clear pattern" if speaker == "Therapist" else None,
        "relation_cycle_evidence_rows": [0, 1] if speaker == "Therapist" else None,
    }
    row.update(extra)
    return row


@pytest.fixture
def sample():
    return {"sample_id": "ann_and_bo/001", "scenario": "couple", "participants": ["Ann", "Bo"], "duration_s": 10.0,
            "source_file": "data/therapy_merged_all/ann_and_bo/001.json",
            "rows": [_row(1, "Ann", ["Therapist"]), _row(2, "Therapist", ["Ann"]), _row(3, "Bo", ["Ann"])]}


def _found(sample):
    return [(v.rule, v.row_index, v.message) for v in validate_sample(sample)]


def test_the_fixture_is_valid(sample):
    assert _found(sample) == []


def test_evidence_rows_out_of_range_are_violations_naming_each_value(sample):
    sample["rows"][1]["relation_cycle_evidence_rows"] = [999, -3]
    found = _found(sample)
    assert [(r, ri) for r, ri, _ in found] == [("V14", 2), ("V14", 2)], found
    text = " ".join(m for *_, m in found)
    assert "999" in text and "-3" in text and "relation_cycle_evidence_rows" in text and "0-2" in text


def test_evidence_rows_that_are_not_whole_numbers_or_repeat_are_violations(sample):
    sample["rows"][1]["relation_cycle_evidence_rows"] = [True, 1, 1]
    found = _found(sample)
    assert {r for r, *_ in found} == {"V14"} and len(found) == 2, found
    assert any("True" in m for *_, m in found) and any("more than once" in m for *_, m in found)


def test_evidence_on_a_client_row_is_a_violation(sample):
    sample["rows"][0]["relation_cycle_evidence_rows"] = [0]
    assert [(r, ri) for r, ri, _ in _found(sample)] == [("V14", 1)]


def test_evidence_may_name_later_rows_as_the_spec_allows(sample):
    # spec §1.6: relation evidence windows include future rows; only the range is checked
    sample["rows"][1]["relation_cycle_evidence_rows"] = [0, 1, 2]
    assert _found(sample) == []


@pytest.mark.parametrize("rows", [[], None])
def test_a_sample_without_rows_is_a_violation(sample, rows):
    sample["rows"] = rows
    found = _found(sample)
    assert [(r, ri) for r, ri, _ in found] == [("V15", None)] and "no rows" in found[0][2]


@pytest.mark.parametrize("value", ["/home/ann/videos/001.json", "file:///srv/x.json", "C:\\Users\\ann\\x.json",
                                   "https://example.org/x.json", "../../etc/passwd", "~/x.json"])
def test_source_file_must_be_a_plain_relative_path(sample, value):
    sample["source_file"] = value
    found = _found(sample)
    assert [(r, ri) for r, ri, _ in found] == [("V16", None)], found
    assert "source_file" in found[0][2] and repr(value) in found[0][2]


@pytest.mark.parametrize("field,value", [
    ("dialogue_cleaned", "see /Users/ann/Desktop/session1.mp4 for the clip"),
    ("tone_of_voice", "calm (http://10.0.0.5:8080/data/local-files/?d=media/a.wav)"),
    ("relation_cycle_reason", "clip at /data/local-files/?d=media/abc.wav"),
])
def test_absolute_paths_and_urls_in_any_string_field_are_violations(sample, field, value):
    sample["rows"][1][field] = value
    found = _found(sample)
    assert [(r, ri) for r, ri, _ in found] == [("V16", 2)], found
    assert field in found[0][2]


def test_nested_strings_are_checked_and_named_by_their_path(sample):
    sample["rows"][2]["body_posture"] = [{"person": "Bo", "description": "leans in, see www.example.org/clip"}]
    found = _found(sample)
    assert [(r, ri) for r, ri, _ in found] == [("V16", 3)] and "body_posture[0].description" in found[0][2]


@pytest.mark.parametrize("text", ["and/or", "24/7 on call", "he said yes/no", "km/h", "a 50/50 split", "w/ her"])
def test_ordinary_slashes_are_not_paths(text):
    assert private_strings(text) == []


def test_a_built_release_holds_no_absolute_path_or_url_in_any_file(tmp_path):
    from pipeline.benchmark import release
    from pipeline.synthetic.corpus import load_synthetic

    inp = load_synthetic(scale=0.05, seed=3)
    release.validate(inp)
    res = release.build_release(inp, "1.0.0", DataRoot(tmp_path))
    files = [p for p in res.path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any(p.name == "manifest.json" for p in files)
    assert scan_release(res.path) == []


def test_the_release_scan_finds_a_path_in_a_parquet_cell_and_a_text_file(tmp_path):
    import pyarrow as pa

    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"x": ["fine", "/home/ann/secret.wav"]}), tmp_path / "data" / "t.parquet")
    (tmp_path / "README.md").write_text("see https://intranet.example/x\n")
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {"a": "data/t.parquet"}}))
    found = scan_release(tmp_path)
    assert any("data/t.parquet" in f and "/home/ann/secret.wav" in f for f in found), found
    assert any("README.md" in f and "https://intranet.example" in f for f in found), found
    assert not any("manifest.json" in f for f in found)


def test_the_release_scan_lets_through_only_the_public_urls_it_is_told(tmp_path):
    (tmp_path / "README.md").write_text("license: https://creativecommons.org/licenses/by-nc/4.0/\n"
                                        "clip: https://intranet.example/a.wav\n")
    found = scan_release(tmp_path, allow=["https://creativecommons.org/licenses/"])
    assert len(found) == 1 and "intranet.example" in found[0]


def test_a_release_is_refused_when_a_path_or_url_would_reach_it(tmp_path):
    """V16 problems refuse the build even without --strict; nothing is published."""
    from pipeline.benchmark import release
    from pipeline.paths import DataRoot
    from pipeline.synthetic.corpus import load_synthetic

    inp = load_synthetic(scale=0.02, seed=4)
    inp.samples[0]["rows"][0]["dialogue_cleaned"] = "as filed in /home/ann/interviews/raw.wav"
    release.validate(inp)
    with pytest.raises(release.ReleaseError, match="V16") as err:
        release.build_release(inp, "1.0.0", DataRoot(tmp_path))
    assert "/home/ann/interviews/raw.wav" in str(err.value)
    assert not DataRoot(tmp_path).release("1.0.0").exists()


def test_the_built_release_is_scanned_before_it_appears(tmp_path):
    """A URL in a card field that is not one of the allowed links is caught by the last scan."""
    from pipeline.benchmark import release
    from pipeline.benchmark.card import CardOptions
    from pipeline.paths import DataRoot
    from pipeline.synthetic.corpus import load_synthetic

    inp = load_synthetic(scale=0.02, seed=4)
    release.validate(inp)
    card = CardOptions(license_name="terms at https://intranet.example/terms")
    with pytest.raises(release.ReleaseError, match="intranet.example"):
        release.build_release(inp, "1.0.0", DataRoot(tmp_path), card=card)
    assert not DataRoot(tmp_path).release("1.0.0").exists()
    allowed = CardOptions(license_link="https://creativecommons.org/licenses/by-nc/4.0/")
    assert release.build_release(inp, "1.0.0", DataRoot(tmp_path), card=allowed).path.is_dir()
