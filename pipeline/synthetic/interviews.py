"""Synthetic interviews for tests and the demo: real speech (espeak-ng), real MP4 (ffmpeg).

A script is a list of rows (speaker, sentences, optional backchannels by other speakers). The
generator speaks every sentence with a distinct voice per speaker, lays them on a timeline
with realistic pauses, puts a backchannel in a pause inside the other speaker's row, lets
one turn start before the previous one ends (an overlap), optionally speaks further
backchannels *over* a client's sentence (``overlapping_backchannels``: the therapist's
"Mm-hmm." inside the client's cue, about 0.4-0.7 s of two voices at once;
``partner_backchannels``: the same by another client), and writes:

    <name>.mp4      still frame + AAC audio
    <name>.srt      one cue per sentence (the subtitle truth; "NAME:" prefixes only when asked)
    <name>.rttm     who spoke when (the diarization truth)
    <name>.rows.json  the expected draft rows (speaker, text, start, end, background_dialogue)

A 1-2 minute interview takes a few seconds.
"""
from __future__ import annotations

import functools
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
    # (sentence index, speaker, text): spoken over that sentence of this row, inside its cue
    overlapped: list[tuple[int, str, str]] = field(default_factory=list)


def make_script(scenario: str = "couple", participants: list[str] | None = None, n_rows: int = 16,
                seed: int = 0, overlapping_backchannels: int = 0,
                partner_backchannels: int = 0) -> tuple[list[str], list[ScriptRow]]:
    """A deterministic therapy-interview script: therapist + 2 (couple) or 3-4 (family) clients.
    ``overlapping_backchannels``: that many client rows get the therapist's backchannel spoken
    over one of their long sentences; ``partner_backchannels``: that many more get one by another
    client (interleaved). 0 and 0 leave the script exactly as before."""
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
    a = next((i for i, r in enumerate(rows) if i > 4 and r.speaker != "Therapist"), None)
    if a is None:
        raise ValueError(f"make_script: n_rows={n_rows} is too short for the script's client exchange "
                         "(it needs a client row after row 5: use more rows)")
    other = next(p for p in participants if p != rows[a].speaker)
    rows.insert(a + 1, ScriptRow(other, [rng.choice(CLIENT_LINES)], [rows[a].speaker], overlap_s=0.4))
    if overlapping_backchannels or partner_backchannels:
        _add_overlapped(rows, participants, overlapping_backchannels, partner_backchannels, random.Random(seed + 7))
    return participants, rows


def _add_overlapped(rows: list[ScriptRow], participants: list[str], n: int, m: int, rng: random.Random) -> None:
    """Put ``n`` therapist and ``m`` partner backchannels over long client sentences (one per row,
    spread over the interview, never in the row the interruption cuts into; partner ones at every
    second place while both remain)."""
    kinds, left_t, left_p = [], n, m if len(participants) > 1 else 0
    while left_t or left_p:
        if left_p and (len(kinds) % 2 == 1 or not left_t):
            kinds.append("partner")
            left_p -= 1
        else:
            kinds.append("Therapist")
            left_t -= 1
    interrupted = {id(rows[i - 1]) for i, r in enumerate(rows) if r.overlap_s}  # its end is overlapped already
    hosts = [r for r in rows if r.speaker != "Therapist" and not r.overlap_s and id(r) not in interrupted
             and any(len(s.split()) >= 7 for s in r.sentences)]
    step = max(1, len(hosts) // len(kinds)) if hosts and kinds else 1
    for kind, row in zip(kinds, hosts[::step]):
        j = next(i for i, s in enumerate(row.sentences) if len(s.split()) >= 7)
        who = kind if kind == "Therapist" else next(p for p in participants if p != row.speaker)
        row.overlapped.append((j, who, rng.choice(BACKCHANNELS)))


def _speak(text: str, voice: str, pitch: int, tmp: Path | None = None) -> np.ndarray:
    """``text`` spoken by espeak-ng, leading/trailing silence trimmed (read-only array). Cached per
    (text, voice, pitch): a RESCUE-sized batch reuses a few dozen lines thousands of times, and
    speaking each once keeps generation bound by mixing and encoding. ``tmp`` is unused (kept
    for callers)."""
    return _speech(text, voice, pitch)


@functools.lru_cache(maxsize=4096)
def _speech(text: str, voice: str, pitch: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmpd:
        out = Path(tmpd) / "u.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", "170", "-w", str(out), text],
                       check=True, capture_output=True)
        with wave.open(str(out), "rb") as w:
            assert w.getframerate() == RATE
            x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    active = np.nonzero(np.abs(x) > 0.01)[0]  # trim espeak's leading/trailing silence
    x = x[active[0]: active[-1] + 1] if len(active) else x
    x.flags.writeable = False  # shared by every caller
    return x


def _ts(t: float, sep: str = ",") -> str:
    ms = int(round(t * 1000))
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"


def render(out_dir: str | Path, name: str, participants: list[str], script: list[ScriptRow], seed: int = 0,
           prefix_speakers: bool = False, make_video: bool = True,
           target_duration_s: float | None = None, fast_audio: bool = False) -> dict[str, Path]:
    """Speak the script and write <name>.mp4/.wav/.srt/.rttm/.rows.json into ``out_dir``.
    ``target_duration_s``: stretch the pauses between rows (never the speech) so the recording
    lasts that long; when the speech alone is longer, the natural length stays. ``fast_audio``:
    AAC's fast coder at 16 kHz (ingest's rate), about 3x cheaper to encode than the default:
    for hours of audio (``pipeline.synthetic.batch``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    speakers = ["Therapist"] + list(participants)
    voice = {s: VOICES[i % len(VOICES)] for i, s in enumerate(speakers)}
    pieces, cues, rows, t = _layout(script, voice, seed, 0.0)
    gaps = sum(1 for i, row in enumerate(script) if i and not row.overlap_s)
    if target_duration_s and gaps and target_duration_s - 0.8 > t:
        pieces, cues, rows, t = _layout(script, voice, seed, (target_duration_s - 0.8 - t) / gaps)
    duration = t + 0.8
    mix = np.zeros(int(duration * RATE) + 1, dtype=np.float32)
    for start, audio in pieces:
        k = int(round(start * RATE))
        mix[k: k + len(audio)] += audio
    files = {"wav": out_dir / f"{name}.wav"}
    _write_wav(files["wav"], mix)
    if make_video:
        files["mp4"] = out_dir / f"{name}.mp4"
        # bitexact + no metadata: the same script gives the same bytes (no encoder version/date)
        subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                        # the frame source lasts as long as the audio: -shortest alone overshoots by seconds
                        f"color=c=gray:s=160x120:r=1:d={duration:.3f}", "-i", str(files["wav"]), "-shortest",
                        "-c:v", "libx264", "-preset", "ultrafast", "-tune", "stillimage",
                        "-pix_fmt", "yuv420p", "-c:a", "aac",
                        *(["-aac_coder", "fast", "-b:a", "48k", "-ar", "16000"] if fast_audio else ["-b:a", "64k"]),
                        "-map_metadata", "-1",
                        "-fflags", "+bitexact", "-flags:v", "+bitexact", "-flags:a", "+bitexact",
                        str(files["mp4"])],
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


def _layout(script: list[ScriptRow], voice: dict, seed: int, extra_gap_s: float):
    """The script on a timeline: (audio pieces, cues, expected rows, end of the last speech).
    ``extra_gap_s`` more silence before every row that does not interrupt the previous one."""
    rng = random.Random(seed + 1)
    pieces: list[tuple[float, np.ndarray]] = []
    cues: list[tuple[float, float, str, str]] = []  # start, end, speaker, text
    rows = []
    t = 0.5
    for i, row in enumerate(script):
        if i:
            same = script[i - 1].speaker == row.speaker
            if row.overlap_s:
                t -= row.overlap_s  # an interruption: starts before the previous row ends
            else:
                t += (2.2 if same else rng.uniform(0.35, 0.8)) + extra_gap_s  # same speaker again: a long pause splits rows
        start = t
        background = []
        for j, sentence in enumerate(row.sentences):
            if j:
                t += rng.uniform(0.25, 0.5)
                if row.backchannel and j == 1:  # the listener's backchannel sits in this pause
                    t += 0.25
                    who, text = row.backchannel
                    audio = _speak(text, *voice[who])
                    pieces.append((t, audio))
                    cues.append((t, t + len(audio) / RATE, who, text))
                    background.append({"speaker": who, "target": [row.speaker], "content": text})
                    t += len(audio) / RATE + 0.3
            audio = _speak(sentence, *voice[row.speaker])
            pieces.append((t, audio))
            cues.append((t, t + len(audio) / RATE, row.speaker, sentence))
            for k, who, text in row.overlapped:  # spoken over this sentence, inside its cue
                if k == j:
                    over = _speak(text, *voice[who])
                    at = t + 0.45 * len(audio) / RATE
                    if at + len(over) / RATE < t + len(audio) / RATE - 0.2:
                        pieces.append((at, over))
                        cues.append((at, at + len(over) / RATE, who, text))
                        background.append({"speaker": who, "target": [row.speaker], "content": text})
            t += len(audio) / RATE
        rows.append({"row_index": i + 1, "start_time": round(start, 3), "end_time": round(t, 3),
                     "primary_speaker": row.speaker, "target": row.target,
                     "dialogue_cleaned": " ".join(row.sentences), "background_dialogue": background})
    return pieces, cues, rows, t


def speak_lines(path: str | Path, voice_index: int, sentences: list[str], pause_s: float = 0.4) -> Path:
    """A WAV of the ``voice_index``-th speaker's voice of every interview (0 = the therapist)
    reading ``sentences``: enrolment recordings (``rescue voices enroll``) for tests and the demo."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    gap = np.zeros(int(pause_s * RATE), dtype=np.float32)
    parts = [p for text in sentences for p in (_speak(text, *VOICES[voice_index % len(VOICES)]), gap)]
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
                   make_video: bool = True, overlapping_backchannels: int = 0,
                   partner_backchannels: int = 0) -> dict[str, Path]:
    people, script = make_script(scenario, participants, n_rows, seed, overlapping_backchannels, partner_backchannels)
    return render(out_dir, name, people, script, seed, prefix_speakers, make_video)


def make_batch(batch_dir: str | Path, specs: list[dict]) -> Path:
    """A batch folder with videos, subtitles and manifest.csv. Each spec: name, scenario, seed,
    optional n_rows / participants / group (sample_id = group/name) / overlapping_backchannels /
    partner_backchannels /
    listed (the participants in the order the manifest lists them; default: speaking order) /
    speaking_order (the manifest's ``speaking_order`` column; default ``yes`` when the list is in
    speaking order, else empty)."""
    batch_dir = Path(batch_dir)
    lines = ["sample_id,scenario,video,participants,subtitles,speaking_order,synthetic"]
    for spec in specs:
        files = make_interview(batch_dir, spec["name"], spec.get("scenario", "couple"), spec.get("seed", 0),
                               spec.get("n_rows", 16), spec.get("participants"),
                               overlapping_backchannels=spec.get("overlapping_backchannels", 0),
                               partner_backchannels=spec.get("partner_backchannels", 0))
        files["wav"].unlink()
        people = json.loads(files["rows"].read_text())["participants"]
        listed = list(spec.get("listed") or people)
        in_order = spec.get("speaking_order", listed == people)
        group = spec.get("group", "synthetic_" + spec.get("scenario", "couple"))
        lines.append(f"{group}/{spec['name']},{spec.get('scenario', 'couple')},{files['mp4'].name},"
                     f"{';'.join(listed)},{files['srt'].name},{'yes' if in_order else ''},"
                     f"pipeline.synthetic.interviews seed={spec.get('seed', 0)}")
    atomic_write_text(batch_dir / "manifest.csv", "\n".join(lines) + "\n")
    return batch_dir


# --- scoring draft rows against the script (tests and benchmarks/bench_turns.py) ------------

def row_match(rows: list[dict], truth_rows: list[dict]) -> float:
    """Share of the script's rows found, in order, with the same speaker and text (difflib
    alignment: a repeated line counts once per occurrence, a merged row counts as missed)."""
    import difflib
    key = lambda rs: [(r["primary_speaker"], r["dialogue_cleaned"]) for r in rs]
    blocks = difflib.SequenceMatcher(a=key(truth_rows), b=key(rows), autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) / len(truth_rows) if truth_rows else 1.0


def backchannels_found(rows: list[dict], truth_rows: list[dict]) -> tuple[int, int]:
    """(found, total) over the script's backchannels: one counts as found when a draft row with the
    host row's speaker and text holds it in ``background_dialogue`` (same speaker and content)."""
    produced: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for r in rows:
        produced.setdefault((r["primary_speaker"], r["dialogue_cleaned"]), []).extend(
            (b["speaker"], b["content"]) for b in r["background_dialogue"])
    found = total = 0
    for r in truth_rows:
        have = list(produced.get((r["primary_speaker"], r["dialogue_cleaned"]), []))
        for b in r["background_dialogue"]:
            total += 1
            if (b["speaker"], b["content"]) in have:
                have.remove((b["speaker"], b["content"]))
                found += 1
    return found, total


def name_voices_from_truth(voices: list[dict], truth_rttm: str | Path) -> dict[str, str]:
    """A simulated annotator naming each voice once: listens to the voice's stretch in the voice
    table (``sample_start``-``sample_end``) and names the person who speaks most in it (the
    generator's RTTM is the truth). Returns {voice: name} for ``turns.apply_voice_names``."""
    spoken = []
    for line in Path(truth_rttm).read_text().splitlines():
        parts = line.split()
        spoken.append((float(parts[3]), float(parts[3]) + float(parts[4]), parts[7]))
    names = {}
    for v in voices:
        share: dict[str, float] = {}
        for s, e, who in spoken:
            share[who] = share.get(who, 0.0) + max(0.0, min(e, v["sample_end"]) - max(s, v["sample_start"]))
        if share and max(share.values()) > 0:
            names[v["voice"]] = max(share, key=share.get)
    return names
