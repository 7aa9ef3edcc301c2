"""Voice activity detection: is there any speech in an interview's audio? (silero-vad)

The diarization stage asks :func:`check_speech` before it runs pyannote: a silent or music-only
file is refused as "no speech" within seconds instead of costing minutes of diarization and
ending in "0 turns".

The model is silero-vad's ONNX export, which ships inside the ``silero-vad`` wheel
(``silero_vad/data/silero_vad.onnx``): no hub, no download. It runs with onnxruntime directly
(numpy in, numpy out), without silero's torch helpers, whose import sets torch's global thread
count to 1 (that would slow pyannote down in the same process).

Speed: the audio is cut into ``streams`` contiguous parts that run side by side as one batch
(each with its own recurrent state), so a 30-minute file costs ~220 batched model calls instead of
56,000 single ones (parts of at least 8 s, at most 256 of them). Frames quieter than -60 dBFS are not speech and are never given
to the model, so digital silence costs nothing. On real speech the scan stops as soon as
``enough_s`` seconds of speech are found (``benchmarks/bench_vad.py`` prints seconds per audio
minute for both).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import resources

import numpy as np

SAMPLE_RATE = 16000
FRAME = 512            # samples per model step at 16 kHz (32 ms)
CONTEXT = 64           # samples of the previous frame the model sees (silero's wrapper does the same)
THRESHOLD = 0.5        # speech probability above which a frame is speech (silero's default)
MIN_SPEECH_S = 1.0     # less speech than this in a whole file: "no speech"
SILENCE_DBFS = -60.0   # frames quieter than this are silence without asking the model


class VadError(RuntimeError):
    """The VAD model could not be loaded (silero-vad missing from the environment)."""


@dataclass(frozen=True)
class SpeechCheck:
    speech_s: float          # seconds of frames judged speech (a lower bound when the scan stopped early)
    scanned_s: float         # seconds of audio looked at
    duration_s: float
    complete: bool           # False when the scan stopped early after finding enough speech

    @property
    def has_speech(self) -> bool:
        return self.speech_s >= MIN_SPEECH_S


_SESSION = None
_SESSION_LOCK = threading.Lock()


def model_path() -> str:
    try:
        return str(resources.files("silero_vad.data").joinpath("silero_vad.onnx"))
    except ModuleNotFoundError as exc:
        raise VadError("voice activity detection needs the silero-vad package (pyproject.toml dependencies; "
                       "scripts/setup.sh installs it)") from exc


def _session():
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            import onnxruntime as ort  # after `import pipeline`: its telemetry is off (ORT_DISABLE_TELEMETRY)

            opts = ort.SessionOptions()
            opts.inter_op_num_threads = 1
            opts.intra_op_num_threads = 1
            opts.log_severity_level = 3
            _SESSION = ort.InferenceSession(model_path(), sess_options=opts, providers=["CPUExecutionProvider"])
        return _SESSION


def speech_probabilities(samples: np.ndarray, streams: int | None = None) -> np.ndarray:
    """Speech probability of every 32 ms frame of 16 kHz mono float audio (frames quieter than
    -60 dBFS get 0 without running the model)."""
    probs, _ = _scan(samples, streams, enough_s=None)
    return probs


def _scan(samples: np.ndarray, streams: int | None, enough_s: float | None) -> tuple[np.ndarray, int]:
    """(probability per frame, frames scanned). The audio runs as ``streams`` contiguous parts side
    by side; the scan stops once ``enough_s`` seconds of speech are seen (frames not scanned: 0)."""
    audio = np.asarray(samples, dtype=np.float32)
    n_frames = max(1, -(-len(audio) // FRAME))
    audio = np.pad(audio, (0, n_frames * FRAME - len(audio)))
    frames = audio.reshape(n_frames, FRAME)
    loud = np.sqrt(np.mean(frames ** 2, axis=1) + 1e-12) > 10 ** (SILENCE_DBFS / 20)
    if not loud.any():
        return np.zeros(n_frames, dtype=np.float32), n_frames
    session = _session()
    if streams is None:  # parts of >= 8 s (250 frames), at most 256 of them
        streams = min(256, n_frames // 250)
    streams = max(1, min(streams, n_frames))
    per = -(-n_frames // streams)
    pad = per * streams - n_frames
    grid = np.pad(frames, ((0, pad), (0, 0))).reshape(streams, per, FRAME)
    loud_grid = np.pad(loud, (0, pad)).reshape(streams, per)
    state = np.zeros((2, streams, 128), dtype=np.float32)
    context = np.zeros((streams, CONTEXT), dtype=np.float32)
    sr = np.array(SAMPLE_RATE, dtype=np.int64)
    out = np.zeros((streams, per), dtype=np.float32)
    speech_frames, done = 0, per
    for j in range(per):
        x = grid[:, j, :]
        if loud_grid[:, j].any():
            prob, state = session.run(None, {"input": np.concatenate([context, x], axis=1), "state": state, "sr": sr})
            out[:, j] = np.where(loud_grid[:, j], prob[:, 0], 0.0)
            speech_frames += int((out[:, j] >= THRESHOLD).sum())
        else:  # every stream silent here: the recurrent state starts afresh after it
            state = np.zeros_like(state)
        context = x[:, -CONTEXT:]
        if enough_s is not None and speech_frames * FRAME / SAMPLE_RATE >= enough_s:
            done = j + 1
            break
    return out.reshape(-1)[:n_frames], min(n_frames, done * streams)


def check_speech(samples: np.ndarray, enough_s: float = 10.0, streams: int | None = None) -> SpeechCheck:
    """How much speech ``samples`` (16 kHz mono float) hold; stops early once ``enough_s`` seconds
    of speech are found (real interviews: a fraction of the file is scanned)."""
    probs, scanned = _scan(samples, streams, enough_s)
    n_frames = len(probs)
    speech_s = float((probs >= THRESHOLD).sum()) * FRAME / SAMPLE_RATE
    duration = len(samples) / SAMPLE_RATE
    return SpeechCheck(round(speech_s, 2), round(min(duration, scanned * FRAME / SAMPLE_RATE), 2),
                       round(duration, 2), scanned >= n_frames)
