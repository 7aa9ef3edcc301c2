"""No speech: a silent or music-only interview is refused by voice activity detection before
diarization, within seconds, as "no speech" (the CLI counts it as quarantined, exit 1); real
speech passes the check cheaply."""
from __future__ import annotations

import time

import pytest

from media_util import cli, ffmpeg
from pipeline.catalog import Catalog
from pipeline.media import diarize, vad
from pipeline.media.audio import extract_wav, load_wav
from pipeline.media.ingest import ingest_batch
from pipeline.paths import DataRoot
from pipeline.synthetic import interviews as synth


def _audio_batch(tmp_path, files: dict[str, str]):
    """name -> ffmpeg lavfi audio graph, each an M4A in the batch (ingest reads audio-only files too)."""
    batch = tmp_path / "batch"
    batch.mkdir()
    lines = ["sample_id,scenario,video,participants,subtitles"]
    for name, graph in files.items():
        ffmpeg("-f", "lavfi", "-i", graph, "-ac", "1", "-ar", "16000", "-c:a", "aac", "-b:a", "24k",
               str(batch / f"{name}.m4a"))
        lines.append(f"g/{name},couple,{name}.m4a,A;B,")
    (batch / "manifest.csv").write_text("\n".join(lines) + "\n")
    return batch


@pytest.fixture(scope="module")
def no_speech_root(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nospeech")
    batch = _audio_batch(tmp, {
        "silent": "anullsrc=r=16000:cl=mono:d=600",                          # 10 minutes of silence
        "music": "sine=f=220:d=120,volume=0.3[a];sine=f=330:d=120[b];"
                 "anoisesrc=d=120:a=0.02[c];[a][b][c]amix=inputs=3",          # two minutes of tones + hiss
    })
    root = tmp / "data"
    report = ingest_batch(batch, DataRoot(root))
    assert report.done == ["g/silent", "g/music"], report.quarantined
    return root


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sid", ["g/silent", "g/music"])
def test_library_refuses_audio_without_speech_before_diarizing(no_speech_root, sid):
    root = DataRoot(no_speech_root)
    ingested = Catalog.read(root).ingested(sid)
    started = time.monotonic()
    with pytest.raises(diarize.NoSpeech, match=rf"{sid}: no speech: voice activity detection found 0.0 s of speech"):
        diarize.diarize_stage(ingested, root, pipeline=object())  # the pipeline is never called
    assert time.monotonic() - started < 30
    assert not (no_speech_root / "diarization" / f"{sid}.rttm").exists()


@pytest.mark.slow  # about 20 s: a real ffmpeg ingest and the CLI in a subprocess
@pytest.mark.timeout(300)
def test_cli_reports_no_speech_as_quarantined(no_speech_root):
    started = time.monotonic()
    result = cli("diarize", "--all", "--data-root", str(no_speech_root))
    assert time.monotonic() - started < 120  # pipeline load + two VAD scans; diarizing would take minutes
    assert result.exit_code == 1
    assert "g/silent: quarantined: g/silent: no speech" in result.output
    assert "g/music: quarantined: g/music: no speech" in result.output
    assert "diarized 0, failed 2" in result.output


def test_speech_passes_the_check_and_stops_early(tmp_path):
    wav = synth.speak_lines(tmp_path / "s.wav", 0, ["Hello, thank you for coming in today.",
                                                    "How have things been at home since we last met?"] * 3)
    samples = load_wav(extract_wav(wav, tmp_path / "s16.wav"))
    found = vad.check_speech(samples, enough_s=3.0)
    assert found.has_speech and found.speech_s >= 3.0
    assert not found.complete and found.scanned_s < found.duration_s  # stopped once speech was certain
