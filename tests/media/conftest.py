"""Shared fixtures for media / transcription / diarization / turn tests.

Models are built once into the models dir (Settings.models_dir, normally ./models, prepared by
scripts/setup.d/20-models.sh) and reused; heavy objects are session-scoped."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.config import Settings


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *args], check=True, capture_output=True)


def tone_video(path: Path, seconds: float, freq: int = 440, audio: bool = True) -> Path:
    """A small real MP4: a coloured frame, optionally a sine tone."""
    args = ["-f", "lavfi", "-i", f"color=c=blue:s=64x48:r=5:d={seconds}"]
    if audio:
        args += ["-f", "lavfi", "-i", f"sine=frequency={freq}:sample_rate=44100:duration={seconds}", "-c:a", "aac"]
    ffmpeg(*args, "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-shortest", str(path))
    return path


@pytest.fixture(scope="session")
def make_video():
    return tone_video


@pytest.fixture(scope="session")
def models_dir() -> Path:
    from pipeline.synthetic.test_models import prepare_test_models
    target = Settings.from_env().models_dir
    prepare_test_models(target)  # no-op when scripts/setup.d/20-models.sh already ran
    return target


@pytest.fixture(scope="session")
def diar_pipeline(models_dir):
    from pipeline.media.diarize import load_pipeline
    from pipeline.media.models import OFFLINE_DIARIZATION
    return load_pipeline(models_dir / OFFLINE_DIARIZATION)


def _interview(out: Path, scenario: str, seed: int) -> dict:
    import json
    from pipeline.media.audio import extract_wav
    from pipeline.synthetic import interviews as synth
    files = synth.make_interview(out, scenario, scenario, seed=seed)
    files["wav16"] = extract_wav(files["mp4"], out / f"{scenario}.16k.wav")
    files["truth"] = json.loads(files["rows"].read_text())
    return files


@pytest.fixture(scope="session")
def couple(tmp_path_factory):
    """A generated couple interview (therapist + 2) with its truth files, and its 16 kHz WAV."""
    return _interview(tmp_path_factory.mktemp("couple"), "couple", seed=0)


@pytest.fixture(scope="session")
def family(tmp_path_factory):
    """A generated family interview (therapist + 3) with its truth files, and its 16 kHz WAV."""
    return _interview(tmp_path_factory.mktemp("family"), "family", seed=0)


@pytest.fixture(scope="session")
def row_match():
    """Share of the script's rows found, in order, with the same speaker and text (difflib
    alignment: a repeated line counts once per occurrence, a merged row counts as missed)."""
    import difflib

    def share(rows: list[dict], truth_rows: list[dict]) -> float:
        key = lambda rs: [(r["primary_speaker"], r["dialogue_cleaned"]) for r in rs]
        blocks = difflib.SequenceMatcher(a=key(truth_rows), b=key(rows), autojunk=False).get_matching_blocks()
        return sum(b.size for b in blocks) / len(truth_rows)
    return share
