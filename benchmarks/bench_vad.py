"""The no-speech check before diarization (pipeline.media.vad): seconds per audio minute.

Builds M minutes of (a) synthetic speech (espeak-ng lines, repeated), (b) music-like audio
(two tones + hiss), (c) digital silence, and times ``vad.check_speech`` on each: the check the
diarization stage runs (stops early once 10 s of speech are found), plus a full scan of the
speech (``enough_s`` infinite: the worst case for real speech). Prints one JSON line per case
and the load average (a busy shared machine slows every figure).

    .venv/bin/python benchmarks/bench_vad.py [--minutes 30]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30.0)
    args = ap.parse_args()
    from pipeline.media.audio import extract_wav, load_wav
    from pipeline.media import vad
    from pipeline.synthetic import interviews as synth

    n = int(args.minutes * 60 * vad.SAMPLE_RATE)
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        wav = synth.speak_lines(tmp / "speech.wav", 0, ["Hello, thank you for coming in today.",
                                                        "How have things been at home since we last met?",
                                                        "I think we should talk about what happened on Sunday."])
        speech = load_wav(extract_wav(wav, tmp / "speech16.wav"))
    speech = np.resize(speech, n)
    t = np.arange(n, dtype=np.float32) / vad.SAMPLE_RATE
    rng = np.random.default_rng(0)
    music = (0.2 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 330 * t)
             + 0.02 * rng.standard_normal(n)).astype(np.float32)
    silence = np.zeros(n, dtype=np.float32)

    started = time.perf_counter()
    vad._session()
    print(json.dumps({"case": "model load", "seconds": round(time.perf_counter() - started, 2)}))
    for case, audio, enough in (("speech (stage check)", speech, 10.0), ("speech (full scan)", speech, float("inf")),
                                ("music", music, 10.0), ("silence", silence, 10.0)):
        started = time.perf_counter()
        found = vad.check_speech(audio, enough_s=enough)
        seconds = time.perf_counter() - started
        print(json.dumps({"case": case, "audio_min": args.minutes, "seconds": round(seconds, 2),
                          "s_per_audio_min": round(seconds / args.minutes, 3), "speech_s": found.speech_s,
                          "scanned_s": found.scanned_s, "has_speech": found.has_speech}))
    print(json.dumps({"loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
