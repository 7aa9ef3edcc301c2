"""Audio with ffprobe and ffmpeg: probe a media file, extract its audio as 16 kHz mono 16-bit PCM
WAV (atomically), read such a WAV back. Failures raise :class:`MediaError`, naming the file and why.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import threading
import wave
from pathlib import Path

import ffmpeg
import numpy as np

from pipeline.config import Settings
from pipeline.store import private_dir

SAMPLE_RATE = 16000


class MediaError(Exception):
    """A media file that cannot be used; the message says which file and why."""



def check_regular_file(path: str | Path, what: str = "file") -> os.stat_result:
    """``path`` must be a regular file (a symlink to one is fine): a FIFO, device, socket or
    folder is refused at once (reading a FIFO would hang), a symlink loop is named as one."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MediaError(f"{path.name}: symlink loop ({what} {path} points back at itself)") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise MediaError(f"{path.name}: {'file' if what == 'file' else what + ' file'} not found") from None
        raise MediaError(f"{path.name}: cannot read the {what} ({exc.strerror or exc})") from None
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
            else "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a folder" if stat.S_ISDIR(st.st_mode) else None)
    if kind:
        raise MediaError(f"{path.name}: is {kind}, not a regular {what} file; refused")
    return st


def _timeouts() -> tuple[float, float]:
    settings = Settings.from_env()
    return settings.ffprobe_timeout_s, settings.ffmpeg_timeout_s


def probe(path: str | Path, timeout_s: float | None = None) -> dict:
    """ffprobe metadata: duration, audio stream facts. Raises MediaError with the reason
    (ffprobe gets ``timeout_s``, default ``Settings.ffprobe_timeout_s``)."""
    path = Path(path)
    if check_regular_file(path).st_size == 0:
        raise MediaError(f"{path.name}: empty file (0 bytes)")
    timeout_s = timeout_s or _timeouts()[0]
    cmd = ["ffprobe", "-v", "error", "-show_format", "-show_streams", "-of", "json", str(path)]
    try:
        done = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise MediaError(f"{path.name}: timeout: ffprobe did not finish within {timeout_s:g} s "
                         "(RESCUE_FFPROBE_TIMEOUT_S)") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise MediaError(f"{path.name}: unreadable or corrupt media ({detail[-1] if detail else 'ffprobe failed'})")
    try:
        info = json.loads(done.stdout or b"{}")
    except ValueError:
        raise MediaError(f"{path.name}: unreadable or corrupt media (ffprobe gave no readable answer)") from None
    audio = [s for s in info.get("streams", []) if s.get("codec_type") == "audio"]
    if not audio:
        raise MediaError(f"{path.name}: no audio stream")
    fmt = info.get("format", {})
    duration = _float(fmt.get("duration")) or _float(audio[0].get("duration"))
    if not duration:
        raise MediaError(f"{path.name}: unknown duration (truncated or corrupt file)")
    return {
        "duration_s": duration,
        "audio_duration_s": _float(audio[0].get("duration")) or duration,
        "format": fmt.get("format_name"),
        "audio_codec": audio[0].get("codec_name"),
        "sample_rate": int(audio[0].get("sample_rate") or 0),
        "channels": int(audio[0].get("channels") or 0),
        "has_video": any(s.get("codec_type") == "video" for s in info.get("streams", [])),
    }


def _float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def extraction_command(src: str | Path, dst: str | Path) -> list[str]:
    """The ffmpeg command that writes 16 kHz mono 16-bit PCM WAV (built with ffmpeg-python)."""
    stream = ffmpeg.input(str(src)).output(str(dst), vn=None, ac=1, ar=SAMPLE_RATE, acodec="pcm_s16le",
                                           f="wav", map_metadata=-1, fflags="+bitexact")
    return ffmpeg.compile(stream.global_args("-nostdin", "-v", "error"), overwrite_output=True)


class Extraction:
    """A running ffmpeg extraction into a temp file; ``finish`` renames it into place (atomic)."""

    def __init__(self, src: str | Path, dst: str | Path):
        self.src, self.dst = Path(src), Path(dst)
        self.dst.parent.mkdir(parents=True, exist_ok=True)
        # a name of its own per process and thread: two commands extracting the same content at
        # once each write their own file; both renames put identical bytes in place
        self.tmp = self.dst.with_name(f".{self.dst.name}.{os.getpid()}.{threading.get_ident()}.tmp.wav")
        self.proc = subprocess.Popen(extraction_command(self.src, self.tmp), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)

    def finish(self, timeout_s: float | None = None) -> Path:
        timeout_s = timeout_s or _timeouts()[1]
        try:
            _, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.cancel()
            raise MediaError(f"{self.src.name}: timeout: ffmpeg did not finish the audio extraction within "
                             f"{timeout_s:g} s (RESCUE_FFMPEG_TIMEOUT_S)") from None
        if self.proc.returncode != 0 or not self.tmp.exists() or self.tmp.stat().st_size <= 44:
            self.tmp.unlink(missing_ok=True)
            last = (err.strip().splitlines() or ["no audio samples decoded"])[-1]
            raise MediaError(f"{self.src.name}: audio extraction failed ({last})")
        if private_dir(self.dst.parent):
            os.chmod(self.tmp, 0o600)
        self.tmp.replace(self.dst)
        return self.dst

    def cancel(self) -> None:
        self.proc.kill()
        self.proc.communicate()
        self.tmp.unlink(missing_ok=True)


def extract_wav(src: str | Path, dst: str | Path) -> Path:
    """Extract the audio to ``dst`` atomically (temp file + rename)."""
    return Extraction(src, dst).finish()


def load_wav(path: str | Path) -> np.ndarray:
    """A 16 kHz mono 16-bit WAV as float32 in [-1, 1]."""
    with wave.open(str(path), "rb") as w:
        if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise MediaError(f"{path}: expected 16 kHz mono 16-bit PCM WAV")
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def wav_duration(path: str | Path) -> float:
    with wave.open(str(path), "rb") as w:
        return w.getnframes() / w.getframerate()

