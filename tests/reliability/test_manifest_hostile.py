"""Hostile manifests: encodings, empty and malformed ones, wrong YAML types, a missing batch
folder. Each ends with a message naming the file, line/item or field; the rest of the batch goes on."""
from __future__ import annotations

import pytest

from media_util import HEADER, batch_with, cli
from pipeline.catalog import read_catalog
from pipeline.media.ingest import ingest_batch
from pipeline.media.manifest import ManifestError, read_manifest
from pipeline.paths import DataRoot


def test_utf16_with_bom_is_read(tmp_path):
    text = HEADER + "g/a,couple,a.mp4,Zoë;Mark,\n"
    (tmp_path / "manifest.csv").write_bytes(text.encode("utf-16"))  # BOM + UTF-16LE
    [entry] = read_manifest(tmp_path / "manifest.csv")
    assert entry.sample_id == "g/a" and entry.participants == ("Zoë", "Mark") and entry.refused is None


def test_utf16_without_bom_names_file_and_encoding(tmp_path):
    (tmp_path / "manifest.csv").write_bytes((HEADER + "g/a,couple,a.mp4,A;B,\n").encode("utf-16-le"))
    with pytest.raises(ManifestError, match=r"manifest.csv: looks like UTF-16 without a byte-order mark.*UTF-8"):
        read_manifest(tmp_path / "manifest.csv")


def test_latin1_names_file_byte_line_and_encoding(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "manifest.csv").write_bytes((HEADER + "g/a,couple,a.mp4,Zoë;Mark,\n").encode("latin-1"))
    with pytest.raises(ManifestError, match=r"manifest.csv: not UTF-8 text \(byte 0xeb on line 2.*save the manifest as UTF-8"):
        read_manifest(batch / "manifest.csv")
    result = cli("ingest", str(batch), "--data-root", str(tmp_path / "data"))
    assert result.exit_code == 2 and "manifest.csv: not UTF-8 text" in result.output


def test_header_only_manifest_is_an_error(tmp_path):
    batch = batch_with(tmp_path, [])
    with pytest.raises(ManifestError, match=r"manifest.csv: no entries \(only a header\)"):
        ingest_batch(batch, DataRoot(tmp_path / "data"))
    result = cli("ingest", str(batch), "--data-root", str(tmp_path / "data"))
    assert result.exit_code == 2 and "no entries (only a header)" in result.output


def test_empty_yaml_manifest_is_an_error(tmp_path):
    (tmp_path / "manifest.yaml").write_text("samples: []\n")
    with pytest.raises(ManifestError, match=r"manifest.yaml: no entries"):
        read_manifest(tmp_path / "manifest.yaml")


def test_unknown_columns_are_named_in_a_warning(tmp_path):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,,secret note,x"], {"a.mp4": 6.0},
                       header="sample_id,scenario,video,participants,subtitles,notes,Particpants\n")
    warnings: list[str] = []
    read_manifest(batch / "manifest.csv", warnings)
    assert warnings == ["manifest.csv: unknown column(s) 'notes', 'particpants' ignored (known: sample_id, "
                        "scenario, video, participants, subtitles, speaking_order, synthetic)"]
    result = cli("ingest", str(batch), "--data-root", str(tmp_path / "data"))
    assert result.exit_code == 0 and "warning: manifest.csv: unknown column(s) 'notes', 'particpants'" in result.output
    assert "done 1," in result.output


def test_empty_participants_are_refused_and_the_batch_goes_on(tmp_path):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,", "g/b,couple,a.mp4,,", "g/c,couple,a.mp4,A;;B,"],
                       {"a.mp4": 6.0})
    report = ingest_batch(batch, DataRoot(tmp_path / "data"))
    assert report.done == ["g/a"] and set(report.quarantined) == {"g/b", "g/c"}
    assert "manifest.csv, line 3: participants '' has an empty name" in report.quarantined["g/b"]
    assert "manifest.csv, line 4: participants 'A;;B' has an empty name" in report.quarantined["g/c"]


def test_quoted_name_with_a_comma_stays_one_name(tmp_path):
    batch = batch_with(tmp_path, ['g/a,couple,a.mp4,"Smith, Dana;Mark",'])
    [entry] = read_manifest(batch / "manifest.csv")
    assert entry.participants == ("Smith, Dana", "Mark") and entry.refused is None


def test_unquoted_comma_gives_extra_fields_and_is_refused(tmp_path):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,Smith, Dana;Mark,", "g/b,couple,a.mp4,A;B,"], {"a.mp4": 6.0})
    report = ingest_batch(batch, DataRoot(tmp_path / "data"))
    assert report.done == ["g/b"]
    assert "line 2: 1 more field(s) than the header's 5 columns (a value holding a comma must be in double quotes)" \
        in report.quarantined["g/a"]


def test_yaml_wrong_types_name_the_entry_and_field(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    from media_util import tone_video
    tone_video(batch / "v.mp4", 6.0)
    (batch / "manifest.yaml").write_text(
        "- {sample_id: g/ok, scenario: couple, video: v.mp4, participants: [A, B]}\n"
        "- {sample_id: g/nums, scenario: couple, video: v.mp4, participants: [1, 2]}\n"
        "- {sample_id: 7, scenario: couple, video: v.mp4, participants: [A, B]}\n"
        "- {sample_id: g/vid, scenario: couple, video: [v.mp4], participants: [A, B]}\n")
    root = tmp_path / "data"
    result = cli("ingest", str(batch), "--data-root", str(root))
    assert result.exit_code == 0, result.output
    report = ingest_batch(batch, DataRoot(root))
    assert report.cached == ["g/ok"]
    q = report.quarantined
    assert "manifest.yaml, item 2: participants must be a list of names (text), got list [1, 2]" in q["g/nums"]
    assert "manifest.yaml, item 3: sample_id must be text, got int 7 (put it in quotes)" in q["7"]
    assert "manifest.yaml, item 4: video must be text, got list ['v.mp4']" in q["g/vid"]
    assert [r["sample_id"] for r in read_catalog(DataRoot(root)).to_pylist()] == ["g/ok"]


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "manifest.yaml").write_text("- {sample_id: a/b, scenario: couple\n- oops: [\n")
    with pytest.raises(ManifestError, match=r"manifest.yaml line \d+: not valid YAML"):
        read_manifest(tmp_path / "manifest.yaml")


def test_missing_batch_folder_says_so(tmp_path):
    with pytest.raises(ManifestError, match=r"batch folder .*nowhere does not exist"):
        ingest_batch(tmp_path / "nowhere", DataRoot(tmp_path / "data"))
    result = cli("ingest", str(tmp_path / "nowhere"), "--data-root", str(tmp_path / "data"))
    assert result.exit_code == 2 and "does not exist" in result.output
