"""Synthetic interviews for tests and the demo: real speech (espeak-ng), real MP4 (ffmpeg).

A script is a list of rows (speaker, sentences, optional backchannel by another speaker). The
generator speaks every sentence with a distinct voice per speaker, lays them on a timeline
with realistic pauses, puts each backchannel in a pause inside the other speaker's row, lets
one turn start before the previous one ends (an overlap), and writes:

    <name>.mp4      still frame + AAC audio
    <name>.srt      one cue per sentence (the subtitle truth; optional "NAME:" prefixes)
    <name>.rttm     who spoke when (the diarization truth)
    <name>.rows.json  the expected draft rows (speaker, text, start, end, background_dialogue)

A 1-2 minute interview takes a few seconds.
"""
from __future__ import annotations

import json
import random
import subprocess
import tempfile
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.store import atomic_write_text

RATE = 22050  # espeak-ng's output rate

# Distinct espeak-ng voices (variant + pitch); the therapist always gets the first. Chosen by the
# cosine similarity of their d-vectors (0.51-0.74 across voices vs 0.84-0.91 within): many espeak
# variants (m1 vs m3, f2 vs f5) sound alike to a speaker encoder.
VOICES = [("en-us+m3", 35), ("en-us+f2", 75), ("en-us+klatt3", 40), ("en-gb-x-rp+f4", 60),
          ("en-gb-scotland+m4", 55)]

THERAPIST_LINES = [
    "What brings you both here today?", "How did that feel for you?", "Can you say more about that?",
    "What do you notice when that happens?", "Let us slow down for a moment.", "What would you like from each other?",
    "I hear how hard this has been.", "Tell me about the last time this came up.", "What happens next at home?",
    "How do you usually respond when that happens?", "That sounds really painful.", "Where do you feel stuck?",
]
CLIENT_LINES = [
    "I feel like nobody listens to me at home.", "We argue about money almost every week.",
    "I try to explain, but it turns into a fight.", "Honestly, I just want some peace.",
    "I shut down when the voices get loud.", "I was hurt when you forgot the dinner.",
    "I do not think that is fair to say.", "Work has been crazy and I am tired.",
    "I want us to be closer again.", "Sometimes I feel alone in this family.",
    "It started after the move last year.", "I am scared we cannot fix this.",
    "You never ask me how my day was.", "I love you, but I am exhausted.",
    "We used to laugh together a lot.", "I need you to hear me without judging.",
]
BACKCHANNELS = ["Yeah, yeah.", "Mm-hmm.", "Right.", "Okay."]


@dataclass
class ScriptRow:
    speaker: str
    sentences: list[str]
    target: list[str] = field(default_factory=list)
    backchannel: tuple[str, str] | None = None  # (speaker, text) spoken in a pause of this row
    overlap_s: float = 0.0  # this row starts this long before the previous row ends


def make_script(scenario: str = "couple", participants: list[str] | None = None, n_rows: int = 16,
                seed: int = 0) -> tuple[list[str], list[ScriptRow]]:
    """A deterministic therapy-interview script: therapist + 2 (couple) or 3-4 (family) clients."""
    rng = random.Random(seed)
    if participants is None:
        participants = ["Alan", "Evelyn"] if scenario == "couple" else ["Dana", "Mark", "Lily", "Sam"][: 3 + seed % 2]
    group = "Couple" if scenario == "couple" else "Family"
    rows: list[ScriptRow] = []
    prev_client = participants[0]
    for i in range(n_rows):
        if i % 2 == 0:
            rows.append(ScriptRow("Therapist", [rng.choice(THERAPIST_LINES)],
                                  [group] if i == 0 else [prev_client]))
        else:
            # every client speaks early on, so the speaking order is the manifest order
            client = participants[(i // 2) % len(participants)] if i < 2 * len(participants) else rng.choice(participants)
            prev_client = client
            k = rng.choice([1, 2, 2, 3])
            rows.append(ScriptRow(client, rng.sample(CLIENT_LINES, k), ["Therapist"]))
    # a backchannel by the therapist inside a multi-sentence client row
    for row in rows:
        if row.speaker != "Therapist" and len(row.sentences) >= 2:
            row.backchannel = ("Therapist", rng.choice(BACKCHANNELS))
            break
    # one client-to-client exchange with an overlap (an interruption)
    a = next(i for i, r in enumerate(rows) if i > 4 and r.speaker != "Therapist")
    other = next(p for p in participants if p != rows[a].speaker)
    rows.insert(a + 1, ScriptRow(other, [rng.choice(CLIENT_LINES)], [rows[a].speaker], overlap_s=0.4))
    return participants, rows


def _speak(text: str, voice: str, pitch: int, tmp: Path) -> np.ndarray:
    out = tmp / "u.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", "170", "-w", str(out), text],
                   check=True, capture_output=True)
    with wave.open(str(out), "rb") as w:
        assert w.getframerate() == RATE
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    active = np.nonzero(np.abs(x) > 0.01)[0]  # trim espeak's leading/trailing silence
    return x[active[0]: active[-1] + 1] if len(active) else x


def _ts(t: float, sep: str = ",") -> str:
    ms = int(round(t * 1000))
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"


def render(out_dir: str | Path, name: str, participants: list[str], script: list[ScriptRow], seed: int = 0,
           prefix_speakers: bool = False, make_video: bool = True) -> dict[str, Path]:
    """Speak the script and write <name>.mp4/.wav/.srt/.rttm/.rows.json into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed + 1)
    speakers = ["Therapist"] + list(participants)
    voice = {s: VOICES[i % len(VOICES)] for i, s in enumerate(speakers)}
    pieces: list[tuple[float, np.ndarray]] = []
    cues: list[tuple[float, float, str, str]] = []  # start, end, speaker, text
    rows = []
    t = 0.5
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        for i, row in enumerate(script):
            if i:
                same = script[i - 1].speaker == row.speaker
                if row.overlap_s:
                    t -= row.overlap_s  # an interruption: starts before the previous row ends
                else:
                    t += 2.2 if same else rng.uniform(0.35, 0.8)  # same speaker again: a long pause splits rows
            start = t
            background = []
            for j, sentence in enumerate(row.sentences):
                if j:
                    t += rng.uniform(0.25, 0.5)
                    if row.backchannel and j == 1:  # the listener's backchannel sits in this pause
                        t += 0.25
                        who, text = row.backchannel
                        audio = _speak(text, *voice[who], tmp)
                        pieces.append((t, audio))
                        cues.append((t, t + len(audio) / RATE, who, text))
                        background.append({"speaker": who, "target": [row.speaker], "content": text})
                        t += len(audio) / RATE + 0.3
                audio = _speak(sentence, *voice[row.speaker], tmp)
                pieces.append((t, audio))
                cues.append((t, t + len(audio) / RATE, row.speaker, sentence))
                t += len(audio) / RATE
            rows.append({"row_index": i + 1, "start_time": round(start, 3), "end_time": round(t, 3),
                         "primary_speaker": row.speaker, "target": row.target,
                         "dialogue_cleaned": " ".join(row.sentences), "background_dialogue": background})
        duration = t + 0.8
        mix = np.zeros(int(duration * RATE) + 1, dtype=np.float32)
        for start, audio in pieces:
            k = int(round(start * RATE))
            mix[k: k + len(audio)] += audio
        files = {"wav": out_dir / f"{name}.wav"}
        _write_wav(files["wav"], mix)
        if make_video:
            files["mp4"] = out_dir / f"{name}.mp4"
            subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                            "color=c=gray:s=160x120:r=1", "-i", str(files["wav"]), "-shortest",
                            "-c:v", "libx264", "-preset", "ultrafast", "-tune", "stillimage",
                            "-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a", "64k", str(files["mp4"])],
                           check=True, capture_output=True)
    cues.sort(key=lambda c: c[0])
    srt = []
    for n, (s, e, who, text) in enumerate(cues, 1):
        label = f"{who.upper()}: " if prefix_speakers else ""
        srt.append(f"{n}\n{_ts(s)} --> {_ts(e)}\n{label}{text}\n")
    files["srt"] = atomic_write_text(out_dir / f"{name}.srt", "\n".join(srt))
    rttm = [f"SPEAKER {name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {who} <NA> <NA>\n" for s, e, who, _ in cues]
    files["rttm"] = atomic_write_text(out_dir / f"{name}.rttm", "".join(rttm))
    files["rows"] = atomic_write_text(out_dir / f"{name}.rows.json", json.dumps(
        {"participants": participants, "duration_s": round(duration, 3), "rows": rows}, indent=1))
    return files


def speak_lines(path: str | Path, voice_index: int, sentences: list[str], pause_s: float = 0.4) -> Path:
    """A WAV of the ``voice_index``-th speaker's voice of every interview (0 = the therapist)
    reading ``sentences``: enrolment recordings (``rescue voices enroll``) for tests and the demo."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    gap = np.zeros(int(pause_s * RATE), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmpd:
        parts = [p for text in sentences for p in (_speak(text, *VOICES[voice_index % len(VOICES)], Path(tmpd)), gap)]
    return _write_wav(path, np.concatenate([gap, *parts]))


def _write_wav(path: Path, audio: np.ndarray) -> Path:
    """Mono 16-bit PCM at espeak's rate; samples beyond [-1, 1] are clipped."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def make_interview(out_dir: str | Path, name: str, scenario: str = "couple", seed: int = 0, n_rows: int = 16,
                   participants: list[str] | None = None, prefix_speakers: bool = False,
                   make_video: bool = True) -> dict[str, Path]:
    people, script = make_script(scenario, participants, n_rows, seed)
    return render(out_dir, name, people, script, seed, prefix_speakers, make_video)


def make_batch(batch_dir: str | Path, specs: list[dict]) -> Path:
    """A batch folder with videos, subtitles and manifest.csv. Each spec: name, scenario, seed,
    optional n_rows / participants / group (sample_id = group/name)."""
    batch_dir = Path(batch_dir)
    lines = ["sample_id,scenario,video,participants,subtitles"]
    for spec in specs:
        files = make_interview(batch_dir, spec["name"], spec.get("scenario", "couple"), spec.get("seed", 0),
                               spec.get("n_rows", 16), spec.get("participants"))
        files["wav"].unlink()
        people = json.loads(files["rows"].read_text())["participants"]
        group = spec.get("group", "synthetic_" + spec.get("scenario", "couple"))
        lines.append(f"{group}/{spec['name']},{spec.get('scenario', 'couple')},{files['mp4'].name},"
                     f"{';'.join(people)},{files['srt'].name}")
    atomic_write_text(batch_dir / "manifest.csv", "\n".join(lines) + "\n")
    return batch_dir
