"""Hostile media: files outside the batch folder, FIFOs, devices, sockets, symlink loops, hanging
ffprobe/ffmpeg, truncated files, an unusable data root, bad numeric options. Each is quarantined
or refused with a message naming the file and what is wrong; the rest of the batch goes on."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from media_util import batch_with, cli, tone_video
from pipeline.config import DataRootError
from pipeline.catalog import read_catalog
from pipeline.media.ingest import ingest_batch
from pipeline.store import prepare_data_root, sha256_file
from pipeline.paths import DataRoot


@pytest.fixture()
def outside(tmp_path) -> Path:
    """A real video outside the batch folder."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    return tone_video(other / "private.mp4", 6.0, freq=880)


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_video_outside_the_batch_is_refused_unless_allowed(tmp_path, outside, how):
    batch = batch_with(tmp_path, [], {"good.mp4": 6.0})
    name = {"absolute": str(outside), "dotdot": "../elsewhere/private.mp4", "symlink": "link.mp4"}[how]
    if how == "symlink":
        (batch / "link.mp4").symlink_to(outside)
    (batch / "manifest.csv").write_text(f"sample_id,scenario,video,participants,subtitles\n"
                                        f"g/good,couple,good.mp4,A;B,\ng/out,couple,{name},A;B,\n")
    root = tmp_path / "data"
    result = cli("ingest", str(batch), "--data-root", str(root))
    assert result.exit_code == 0 and "done 1, cached 0, quarantined 1" in result.output
    report = ingest_batch(batch, DataRoot(root))
    reason = report.quarantined["g/out"]
    assert f"manifest entry 3: video {name!r}" in reason and "outside the batch folder" in reason
    assert "--allow-outside-batch" in reason and report.cached == ["g/good"]
    assert not any(sha256_file(outside) in p.name for p in (root / "media").iterdir())  # never read
    allowed = cli("ingest", str(batch), "--data-root", str(root), "--allow-outside-batch")
    assert allowed.exit_code == 0 and "done 1, cached 1, quarantined 0" in allowed.output


def test_subtitles_outside_the_batch_are_refused_and_never_echoed(tmp_path):
    secret = tmp_path / "hostname"
    secret.write_text("top-secret-host-name-4711\n")
    batch = batch_with(tmp_path, [f"g/a,couple,a.mp4,A;B,{secret}"], {"a.mp4": 6.0})
    root = tmp_path / "data"
    result = cli("ingest", str(batch), "--data-root", str(root))
    assert result.exit_code == 0 and "quarantined 1" in result.output
    assert "top-secret-host-name" not in result.output
    report = ingest_batch(batch, DataRoot(root))
    assert f"subtitles {str(secret)!r} is an absolute path, outside the batch folder" in report.quarantined["g/a"]
    assert not (root / "subtitles").exists() or not any((root / "subtitles").rglob("*hostname*"))
    result = cli("transcribe", "--all", "--data-root", str(root))
    assert "top-secret-host-name" not in result.output


@pytest.mark.timeout(60)
def test_fifo_as_video_is_refused_at_once(tmp_path):
    batch = batch_with(tmp_path, ["g/fifo,couple,pipe.mp4,A;B,", "g/a,couple,a.mp4,A;B,"], {"a.mp4": 6.0})
    os.mkfifo(batch / "pipe.mp4")
    started = time.monotonic()
    report = ingest_batch(batch, DataRoot(tmp_path / "data"))
    assert time.monotonic() - started < 30
    assert report.quarantined == {"g/fifo": "pipe.mp4: is a FIFO (named pipe), not a regular file file; refused"} \
        or report.quarantined["g/fifo"].startswith("pipe.mp4: is a FIFO (named pipe)")
    assert report.done == ["g/a"]


@pytest.mark.timeout(60)
def test_fifo_as_subtitles_is_refused_at_once(tmp_path):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,subs.srt"], {"a.mp4": 6.0})
    os.mkfifo(batch / "subs.srt")
    report = ingest_batch(batch, DataRoot(tmp_path / "data"))
    assert report.quarantined["g/a"].startswith("subs.srt: is a FIFO (named pipe), not a regular subtitle file")


@pytest.mark.timeout(60)
def test_device_as_video_is_refused(tmp_path):
    batch = batch_with(tmp_path, ["g/dev,couple,/dev/zero,A;B,"])
    report = ingest_batch(batch, DataRoot(tmp_path / "data"), allow_outside_batch=True)
    assert report.quarantined["g/dev"].startswith("zero: is a character device, not a regular file")


@pytest.mark.timeout(60)
def test_socket_as_video_is_refused(tmp_path):
    batch = batch_with(tmp_path, ["g/sock,couple,s.mp4,A;B,"])
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(batch / "s.mp4"))
        report = ingest_batch(batch, DataRoot(tmp_path / "data"))
    finally:
        sock.close()
    assert report.quarantined["g/sock"].startswith("s.mp4: is a socket")


def test_symlink_loop_is_named_as_a_loop(tmp_path):
    batch = batch_with(tmp_path, ["g/loop,couple,loop.mp4,A;B,"])
    (batch / "loop.mp4").symlink_to(batch / "loop2.mp4")
    (batch / "loop2.mp4").symlink_to(batch / "loop.mp4")
    result = cli("ingest", str(batch), "--data-root", str(tmp_path / "data"))
    assert result.exit_code == 0 and "symlink loop" in result.output
    report = ingest_batch(batch, DataRoot(tmp_path / "data"))
    assert report.quarantined["g/loop"].startswith("loop.mp4: symlink loop")


def _fake_tool(bin_dir: Path, name: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text("#!/bin/sh\nexec sleep 60\n")
    tool.chmod(0o755)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tool, variable", [("ffprobe", "RESCUE_FFPROBE_TIMEOUT_S"),
                                            ("ffmpeg", "RESCUE_FFMPEG_TIMEOUT_S")])
def test_hanging_ffprobe_or_ffmpeg_is_a_timeout_quarantine(tmp_path, monkeypatch, tool, variable):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,"], {"a.mp4": 6.0})
    _fake_tool(tmp_path / "bin", tool)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(variable, "2")
    started = time.monotonic()
    result = cli("ingest", str(batch), "--data-root", str(tmp_path / "data"))
    assert time.monotonic() - started < 30
    assert result.exit_code == 0 and "quarantined 1" in result.output
    [row] = read_catalog(DataRoot(tmp_path / "data")).to_pylist()
    assert row["status"] == "quarantined"
    assert row["reason"].startswith(f"a.mp4: timeout: {tool} did not finish") and variable in row["reason"]
    assert list((tmp_path / "data" / "media").glob("*")) == []  # the killed extraction left nothing


def test_truncated_file_with_its_index_in_front_is_quarantined(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    whole = tone_video(tmp_path / "whole.mp4", 15.0, faststart=True)
    data = whole.read_bytes()
    (batch / "cut.mp4").write_bytes(data[: len(data) // 2])
    tone_video(batch / "ok.mp4", 6.0)
    (batch / "manifest.csv").write_text("sample_id,scenario,video,participants,subtitles\n"
                                        "g/cut,couple,cut.mp4,A;B,\ng/ok,couple,ok.mp4,A;B,\n")
    root = tmp_path / "data"
    result = cli("ingest", str(batch), "--data-root", str(root))
    assert result.exit_code == 0 and "done 1, cached 0, quarantined 1" in result.output
    assert "truncated" in result.output
    report = ingest_batch(batch, DataRoot(root))
    reason = report.quarantined["g/cut"]
    assert reason.startswith("cut.mp4: truncated: ") and "the file declares 15.0 s" in reason
    assert report.cached == ["g/ok"]


def test_data_root_that_is_a_file_is_a_clear_error(tmp_path):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,"], {"a.mp4": 6.0})
    root = tmp_path / "root-file"
    root.write_text("not a folder")
    with pytest.raises(DataRootError, match=r"data root .*root-file is a file, not a folder"):
        prepare_data_root(DataRoot(root))  # the entry point's one check, before any stage
    for args in (["ingest", str(batch)], ["transcribe", "--all"], ["diarize", "--all"], ["segment", "--all"],
                 ["voices", "list"]):
        result = cli(*args, "--data-root", str(root))
        assert result.exit_code == 2, (args, result.output)
        assert "is a file, not a folder" in result.output, (args, result.output)
    assert root.read_text() == "not a folder"


def test_data_root_that_cannot_be_written_is_a_clear_error(tmp_path):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,"], {"a.mp4": 6.0})
    root = Path("/proc/rescue-not-writable")  # even root cannot create folders in /proc
    with pytest.raises(DataRootError, match=r"data root /proc/rescue-not-writable cannot be created"):
        prepare_data_root(DataRoot(root))
    result = cli("ingest", str(batch), "--data-root", str(root))
    assert result.exit_code == 2 and "data root /proc/rescue-not-writable cannot be created" in result.output
    if os.geteuid() != 0:  # permission bits only bind other users
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        result = cli("ingest", str(batch), "--data-root", str(ro))
        assert result.exit_code == 2 and "is not writable" in result.output


@pytest.mark.parametrize("args, option", [
    (["ingest", "BATCH", "--min-duration", "-5"], "--min-duration"),
    (["ingest", "BATCH", "--jobs", "0"], "--jobs"),
    (["segment", "--all", "--max-pause", "-1"], "--max-pause"),
    (["segment", "--all", "--max-row", "0"], "--max-row"),
    (["diarize", "--all", "--num-speakers", "0"], "--num-speakers"),
    (["diarize", "--all", "--min-speakers", "3", "--max-speakers", "2"], "--min-speakers"),
    (["transcribe", "--all", "--batch-size", "0"], "--batch-size"),
])
def test_numeric_options_are_validated(tmp_path, args, option):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,"])
    args = [str(batch) if a == "BATCH" else a for a in args]
    result = cli(*args, "--data-root", str(tmp_path / "data"), env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert option in result.output


def test_library_refuses_bad_numbers(tmp_path):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,"])
    with pytest.raises(ValueError, match="jobs must be at least 1, got 0"):
        ingest_batch(batch, DataRoot(tmp_path / "data"), jobs=0)
    with pytest.raises(ValueError, match="min_duration_s must be >= 0 seconds, got -5"):
        ingest_batch(batch, DataRoot(tmp_path / "data"), min_duration_s=-5)


def test_bad_timeout_setting_is_named(tmp_path, monkeypatch):
    batch = batch_with(tmp_path, ["g/a,couple,a.mp4,A;B,"], {"a.mp4": 6.0})
    monkeypatch.setenv("RESCUE_FFPROBE_TIMEOUT_S", "-3")
    result = cli("ingest", str(batch), "--data-root", str(tmp_path / "data"))
    assert result.exit_code == 2 and "RESCUE_FFPROBE_TIMEOUT_S='-3': a time limit must be a positive number" \
        in result.output
