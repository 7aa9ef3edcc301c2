"""Batch ingest with real ffmpeg/ffprobe: good files, every kind of bad file, caching, changes."""
from __future__ import annotations

import wave

import pytest

from pipeline.catalog import catalog_entry, read_catalog
from pipeline.media.audio import extraction_command
from pipeline.media.ingest import ingest_batch, remove_stale_media
from pipeline.media.manifest import ManifestError, find_manifest, read_manifest
from pipeline.paths import DataRoot
from pipeline.store import sha256_file

MANIFEST = """sample_id,scenario,video,participants,subtitles
grp_a/good,couple,good.mp4,Alan;Evelyn,
grp_a/empty,couple,empty.mp4,Alan;Evelyn,
grp_a/truncated,couple,truncated.mp4,Alan;Evelyn,
grp_b/silent_video,family,noaudio.mp4,Dana;Mark;Lily,
grp_b/short,family,short.mp4,Dana;Mark;Lily,
grp_b/missing,couple,not_there.mp4,Alan;Evelyn,
"""


@pytest.fixture()
def batch(tmp_path, make_video):
    tone_video = make_video
    b = tmp_path / "batch"
    b.mkdir()
    good = tone_video(b / "good.mp4", 6.0)
    (b / "empty.mp4").write_bytes(b"")
    data = good.read_bytes()
    (b / "truncated.mp4").write_bytes(data[: len(data) // 3])
    tone_video(b / "noaudio.mp4", 6.0, audio=False)
    tone_video(b / "short.mp4", 1.0)
    (b / "manifest.csv").write_text(MANIFEST)
    return b


def test_batch_quarantines_each_bad_file_and_keeps_going(batch, tmp_path):
    root = tmp_path / "data"
    report = ingest_batch(batch, DataRoot(root))
    assert report.done == ["grp_a/good"]
    reasons = report.quarantined
    assert set(reasons) == {"grp_a/empty", "grp_a/truncated", "grp_b/silent_video", "grp_b/short", "grp_b/missing"}
    assert "empty.mp4: empty file (0 bytes)" in reasons["grp_a/empty"]
    assert reasons["grp_a/truncated"].startswith("truncated.mp4: unreadable or corrupt media")
    assert reasons["grp_b/silent_video"] == "noaudio.mp4: no audio stream"
    assert reasons["grp_b/short"].startswith("short.mp4: too short (1.0")
    assert reasons["grp_b/missing"] == "not_there.mp4: file not found"

    catalog = {r["sample_id"]: r for r in read_catalog(DataRoot(root)).to_pylist()}
    assert len(catalog) == 6
    good = catalog["grp_a/good"]
    assert good["status"] == "done" and good["participants"] == ["Alan", "Evelyn"]
    assert good["sha256"] == sha256_file(batch / "good.mp4")
    assert good["audio_path"] == f"media/{good['sha256']}.wav"
    with wave.open(str(root / good["audio_path"])) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        assert abs(w.getnframes() / 16000 - 6.0) < 0.1
    assert abs(good["duration_s"] - 6.0) < 0.1
    # ffprobe's facts about the source (tone_video: AAC 44.1 kHz mono beside H.264)
    assert (good["audio_codec"], good["source_sample_rate"], good["source_channels"], good["has_video"]) == (
        "aac", 44100, 1, True)
    assert "mp4" in good["media_format"]
    assert all(catalog[k]["status"] == "quarantined" and catalog[k]["reason"] for k in reasons)
    assert "/" not in good["source_name"]  # no absolute paths in the catalog


def test_reingest_unchanged_is_cached_and_changed_file_is_redone(batch, tmp_path, make_video):
    root = tmp_path / "data"
    ingest_batch(batch, DataRoot(root))
    wav = root / catalog_entry(DataRoot(root), "grp_a/good")["audio_path"]
    mtime = wav.stat().st_mtime_ns

    again = ingest_batch(batch, DataRoot(root))
    assert again.cached == ["grp_a/good"] and again.done == []
    assert wav.stat().st_mtime_ns == mtime  # nothing rewritten

    make_video(batch / "good.mp4", 7.0, freq=660)  # the file changes
    third = ingest_batch(batch, DataRoot(root))
    assert third.done == ["grp_a/good"]
    entry = catalog_entry(DataRoot(root), "grp_a/good")
    assert entry["sha256"] == sha256_file(batch / "good.mp4") and abs(entry["duration_s"] - 7.0) < 0.1
    assert remove_stale_media(DataRoot(root)) == [wav]  # the old WAV is now unreferenced


def test_manifest_errors_name_file_and_line(tmp_path):
    (tmp_path / "manifest.csv").write_text("sample_id,scenario,video\na/b,triad,x.mp4\n")
    with pytest.raises(ManifestError, match=r"manifest.csv line 2: scenario 'triad'"):
        read_manifest(tmp_path / "manifest.csv")
    (tmp_path / "manifest.csv").write_text("sample_id,scenario,video\na/b,couple,\n")
    with pytest.raises(ManifestError, match=r"line 2: missing video"):
        read_manifest(tmp_path / "manifest.csv")


def test_yaml_manifest(tmp_path):
    (tmp_path / "manifest.yaml").write_text(
        "samples:\n  - {sample_id: f/1, scenario: family, video: v.mp4, participants: [A, B, C], subtitles: v.srt}\n")
    [entry] = read_manifest(find_manifest(tmp_path))
    assert entry.participants == ("A", "B", "C") and entry.subtitles == "v.srt" and entry.scenario == "family"


def test_extraction_command_is_16k_mono_pcm():
    cmd = extraction_command("in.mp4", "out.wav")
    assert cmd[0] == "ffmpeg" and "-vn" in cmd
    assert cmd[cmd.index("-ar") + 1] == "16000" and cmd[cmd.index("-ac") + 1] == "1"
    assert cmd[cmd.index("-acodec") + 1] == "pcm_s16le"


def test_parallel_ingest_extracts_shared_content_once(tmp_path, make_video):
    batch = tmp_path / "batch"
    batch.mkdir()
    make_video(batch / "a.mp4", 6.0)
    (batch / "copy.mp4").write_bytes((batch / "a.mp4").read_bytes())  # same content, second sample id
    make_video(batch / "b.mp4", 6.0, freq=660)
    (batch / "manifest.csv").write_text("sample_id,scenario,video,participants,subtitles\n"
                                        "g/a,couple,a.mp4,A;B,\ng/copy,couple,copy.mp4,A;B,\ng/b,couple,b.mp4,A;B,\n")
    root = tmp_path / "data"
    report = ingest_batch(batch, DataRoot(root), jobs=3)
    assert report.done == ["g/a", "g/copy", "g/b"] and not report.quarantined
    catalog = {r["sample_id"]: r for r in read_catalog(DataRoot(root)).to_pylist()}
    assert catalog["g/a"]["audio_path"] == catalog["g/copy"]["audio_path"] != catalog["g/b"]["audio_path"]
    assert sorted(p.name for p in (root / "media").iterdir()) == sorted(
        {catalog["g/a"]["audio_path"][6:], catalog["g/b"]["audio_path"][6:]})  # no temp files left


def test_longest_first_orders_by_video_size_and_reads_nothing_outside(tmp_path):
    """Workers take the largest videos first (so a batch's last child is a short one), manifest
    order among equals; a video outside the batch folder (not allowed) or missing counts as 0
    and goes last, unread."""
    from pipeline.media.manifest import ManifestEntry, longest_first
    batch = tmp_path / "batch"
    batch.mkdir()
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(b"x" * 5000)
    for name, size in {"a.mp4": 100, "b.mp4": 3000, "c.mp4": 100, "d.mp4": 2000}.items():
        (batch / name).write_bytes(b"x" * size)
    (batch / "link.mp4").symlink_to(outside)
    entries = [ManifestEntry(f"s{i}", "couple", video) for i, video in
               enumerate(["a.mp4", "b.mp4", "missing.mp4", "c.mp4", "../outside.mp4", "d.mp4", "link.mp4", "nul\0.mp4"])]
    order = [e.video for e in longest_first(entries, batch)]
    assert order == ["b.mp4", "d.mp4", "a.mp4", "c.mp4", "missing.mp4", "../outside.mp4", "link.mp4", "nul\0.mp4"]
    allowed = [e.video for e in longest_first(entries, batch, allow_outside_batch=True)]
    assert allowed[:2] == ["../outside.mp4", "link.mp4"] and allowed[2:4] == ["b.mp4", "d.mp4"]
