"""Small real media files and batches for the media reliability tests (no conftest: other
areas add their own reliability tests beside these)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from typer.testing import CliRunner

from ops.cli import app

HEADER = "sample_id,scenario,video,participants,subtitles\n"
SRT = "1\n00:00:01,000 --> 00:00:03,000\nHello there.\n\n2\n00:00:03,500 --> 00:00:05,000\nHi.\n"


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *args], check=True, capture_output=True)


def tone_video(path: Path, seconds: float = 6.0, freq: int = 440, faststart: bool = False) -> Path:
    """A small real MP4: a blue frame and a sine tone."""
    extra = ["-movflags", "+faststart"] if faststart else []
    ffmpeg("-f", "lavfi", "-i", f"color=c=blue:s=64x48:r=5:d={seconds}",
           "-f", "lavfi", "-i", f"sine=frequency={freq}:sample_rate=16000:duration={seconds}",
           "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest",
           *extra, str(path))
    return path


def batch_with(tmp: Path, rows: list[str], videos: dict[str, float] | None = None, header: str = HEADER) -> Path:
    """A batch folder: ``videos`` (name -> seconds) made real, the manifest holding ``rows``."""
    batch = tmp / "batch"
    batch.mkdir(exist_ok=True)
    for name, seconds in (videos or {}).items():
        tone_video(batch / name, seconds)
    (batch / "manifest.csv").write_text(header + "".join(r + "\n" for r in rows))
    return batch


def cli(*args: str, env: dict | None = None):
    """``rescue ARGS`` through typer's runner; the result never hides a traceback."""
    result = CliRunner().invoke(app, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    return result
