"""Who spoke when: pyannote diarization, RTTM files, and speaker assignment.

The pipeline comes from a local directory (the offline default built by
``rescue models prepare-offline``, or any downloaded pyannote pipeline) or from a hub id
(production; the token is read from ``HF_TOKEN`` only and the hub must be switched on with
``HF_HUB_OFFLINE=0``). Telemetry is off (``pipeline/__init__.py``). pyannote's output is then
refined (silences cut out of turns, pieces re-clustered by voice print; ``refine_turns``).

``assign_speakers`` gives each word/cue the speaker with the largest total overlap (whisperx's
rule) with a sort + searchsorted sweep: O((W + T) log T) instead of one scan per word.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.config import Settings

MAX_WORD_S = 1.5  # aligners stretch the word before a silence over the whole pause


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: str


class DiarizationError(RuntimeError):
    pass


def default_pipeline_dir(settings: Settings | None = None) -> Path:
    from pipeline.media.models import OFFLINE_DIARIZATION
    return (settings or Settings.from_env()).models_dir / OFFLINE_DIARIZATION


_PIPELINES: dict[tuple[str, str], object] = {}


def load_pipeline(source: str | Path | None = None, device: str = "cpu", settings: Settings | None = None):
    """A pyannote ``SpeakerDiarization`` pipeline, loaded once per process.

    ``source``: None (the offline default under ``Settings.models_dir``), a local pipeline
    directory or ``config.yaml``, or a hub id such as ``pyannote/speaker-diarization-community-1``.
    """
    source = str(source) if source is not None else str(default_pipeline_dir(settings))
    key = (source, device)
    if key in _PIPELINES:
        return _PIPELINES[key]
    import torch
    from pyannote.audio import Pipeline

    path = Path(source)
    if path.exists() or not _looks_like_hub_id(source):
        if not path.exists():
            raise DiarizationError(
                f"diarization pipeline directory {path} does not exist; build the offline default with "
                "`rescue models prepare-offline` (or set RESCUE_MODELS_DIR)")
        pipeline = Pipeline.from_pretrained(path)
    else:
        token = os.environ.get("HF_TOKEN") or None
        if os.environ.get("HF_HUB_OFFLINE", "1") != "0":
            raise DiarizationError(
                f"{source!r} is no local directory, and as a hub id it needs the hub, which is off "
                "(HF_HUB_OFFLINE=1): set HF_HUB_OFFLINE=0 and HF_TOKEN in the environment, or pass a local "
                "pipeline directory (`rescue models prepare-offline` builds the offline default)")
        pipeline = Pipeline.from_pretrained(source, token=token)
    if pipeline is None:
        raise DiarizationError(f"could not load the diarization pipeline {source!r} (gated model without HF_TOKEN?)")
    pipeline.to(torch.device(device))
    _PIPELINES[key] = pipeline
    return pipeline


def _looks_like_hub_id(source: str) -> bool:
    return source.count("/") == 1 and not source.startswith((".", "/"))


def diarize_audio(
    audio_path: str | Path,
    num_speakers: int | None = None,
    min_speakers: int | None = None,
    max_speakers: int | None = None,
    pipeline=None,
    source: str | Path | None = None,
    device: str = "cpu",
    refine: bool = True,
) -> list[Turn]:
    """Diarize one 16 kHz mono WAV; returns turns sorted by (start, end, speaker).
    ``refine``: the silence cut + re-clustering below (on by default)."""
    import torch
    from pipeline.media.ingest import load_wav

    pipeline = pipeline or load_pipeline(source, device)
    samples = load_wav(audio_path)  # decode ourselves: no torchcodec dependency at run time
    file = {"waveform": torch.from_numpy(samples[None, :]), "sample_rate": 16000, "uri": Path(audio_path).stem}
    output = pipeline(file, num_speakers=num_speakers, min_speakers=min_speakers, max_speakers=max_speakers)
    annotation = getattr(output, "speaker_diarization", output)
    turns = sort_turns([Turn(round(s.start, 3), round(s.end, 3), str(label))
                     for s, _, label in annotation.itertracks(yield_label=True)])
    if refine and turns:
        turns = refine_turns(samples, turns, lambda spans: embed_segments(pipeline, samples, spans),
                             num_speakers or len({t.speaker for t in turns}))
    return turns


def sort_turns(turns: Sequence[Turn]) -> list[Turn]:
    """The one order of turns everywhere (RTTM files, refinement, naming): start, end, speaker."""
    return sorted(turns, key=lambda t: (t.start, t.end, t.speaker))


# --- refinement: cut silences out of turns, re-cluster single-speaker pieces ---------------
#
# pyannote works on 10-s chunks with a segmentation model that smears over short pauses and,
# on voices it finds similar, splits one voice between local speakers. Three cheap passes fix
# most of that: (1) stretches an energy detector finds silent are cut out of every turn,
# (2) every remaining piece long enough for a voice print is embedded with the pipeline's own
# embedding model and the pieces are clustered again (duration-weighted spherical k-means,
# seeded restarts: deterministic), and (3) long pieces are scanned with sliding windows for a
# voice change without a pause. Measured (tests/media/test_diarize.py): synthetic couple
# interview DER 0.34 -> 0.01-0.02, family 0.33-0.41 -> 0.02-0.04, pyannote's sample.wav 0.063 -> 0.061.

FRAME_S = 0.01
SILENCE_ABOVE_FLOOR_DB = 10.0  # silent: quieter than noise floor + 10 dB ...
SILENCE_BELOW_PEAK_DB = 50.0   # ... or than the loud speech level - 50 dB, whichever is higher
MIN_SILENCE_S = 0.25           # shorter gaps are pauses inside speech (commas, stops)
MIN_PIECE_S = 0.3              # shortest piece that gets a voice print of its own
MIN_SPLIT_PIECE_S = 3.0        # pieces this long are scanned for a voice change ...
WINDOW_S, WINDOW_HOP_S = 1.5, 0.5  # ... with windows this long, this far apart
KMEANS_RESTARTS = 50


def speech_frames(samples: np.ndarray, rate: int = 16000) -> np.ndarray:
    """Per 10-ms frame: True where there is sound above the recording's own noise floor."""
    hop = int(rate * FRAME_S)
    n = len(samples) // hop
    if n == 0:
        return np.zeros(0, dtype=bool)
    db = 10 * np.log10((samples[: n * hop].reshape(n, hop).astype(np.float64) ** 2).mean(1) + 1e-12)
    floor, peak = np.percentile(db, 5), np.percentile(db, 99)
    return db > max(floor + SILENCE_ABOVE_FLOOR_DB, peak - SILENCE_BELOW_PEAK_DB)


def frame_runs(mask: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) in seconds of every run of True frames."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return [(s * FRAME_S, e * FRAME_S) for s, e in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0])]


def cut_silences(turns: Sequence[Turn], speech: np.ndarray, min_silence_s: float = MIN_SILENCE_S) -> list[Turn]:
    """Turns with every silent stretch of at least ``min_silence_s`` removed (pieces < 50 ms dropped)."""
    silences = [(s, e) for s, e in frame_runs(~speech) if e - s >= min_silence_s]
    silence_ends = np.array([e for _, e in silences])
    out = []
    for t in turns:
        pieces, cursor = [], t.start
        for s, e in silences[np.searchsorted(silence_ends, t.start, side="right"):]:
            if s >= t.end:
                break
            if s > cursor:
                pieces.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < t.end:
            pieces.append((cursor, t.end))
        out += [Turn(round(float(a), 3), round(float(b), 3), t.speaker) for a, b in pieces if b - a >= 0.05]
    return sort_turns(out)


def embed_segments(pipeline, samples: np.ndarray, spans: Sequence[tuple[float, float]],
                   rate: int = 16000, batch: int = 16) -> np.ndarray:
    """Unit-length voice prints of ``spans`` (seconds) with the pipeline's embedding model;
    rows of NaN where a span holds too little speech. Spans of similar length are padded into
    one batch with a mask (one model call per batch; 31 spans on a busy CPU: 11.0 s one by one, 3.9 s batched)."""
    import torch
    out = np.full((len(spans), 0), np.nan)
    order = sorted(range(len(spans)), key=lambda i: spans[i][1] - spans[i][0])
    for first in range(0, len(order), batch):
        group = order[first: first + batch]
        clips = [samples[int(spans[i][0] * rate): int(spans[i][1] * rate)] for i in group]
        n = max(len(c) for c in clips)
        waves = torch.zeros(len(clips), 1, n)
        masks = torch.zeros(len(clips), n)
        for j, c in enumerate(clips):
            waves[j, 0, : len(c)] = torch.from_numpy(np.ascontiguousarray(c))
            masks[j, : len(c)] = 1.0
        prints = np.asarray(pipeline._embedding(waves, masks=masks), dtype=np.float64)
        if out.shape[1] == 0:
            out = np.full((len(spans), prints.shape[1]), np.nan)
        out[group] = prints
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


def spherical_kmeans(points: np.ndarray, weights: np.ndarray, k: int, restarts: int = KMEANS_RESTARTS,
                     seed: int = 0) -> np.ndarray:
    """Cluster unit vectors by cosine (k-means++ seeding, best of ``restarts``); labels 0..k-1."""
    rng = np.random.default_rng(seed)
    p = weights / weights.sum()
    best_cost, best = np.inf, np.zeros(len(points), dtype=int)
    for _ in range(restarts):
        chosen = [rng.choice(len(points), p=p)]
        for _ in range(k - 1):
            far = weights * np.maximum(1 - (points @ points[chosen].T).max(1), 0) ** 2
            chosen.append(rng.choice(len(points), p=far / far.sum()) if far.sum() > 0 else rng.choice(len(points)))
        centres = points[chosen]
        for _ in range(100):
            labels = (points @ centres.T).argmax(1)
            new = np.array([(points[labels == c] * weights[labels == c, None]).sum(0) if (labels == c).any()
                            else centres[c] for c in range(k)])
            new /= np.linalg.norm(new, axis=1, keepdims=True)
            if np.allclose(new, centres):
                break
            centres = new
        cost = float((weights * (1 - (points @ centres.T).max(1))).sum())
        if cost < best_cost - 1e-9:
            best_cost, best = cost, labels.copy()
    return best


def refine_turns(samples: np.ndarray, turns: Sequence[Turn], embed, num_speakers: int) -> list[Turn]:
    """Silence-trimmed turns whose pieces are re-clustered into ``num_speakers`` voices, long
    pieces split where the voice changes.

    ``embed(spans)`` returns unit voice prints (NaN rows for too little speech). Clusters take
    the pyannote label they overlap most (so names stay stable); pieces too short for a voice
    print keep pyannote's label."""
    from scipy.optimize import linear_sum_assignment

    pieces = cut_silences(turns, speech_frames(samples))
    idx = [i for i, t in enumerate(pieces) if t.end - t.start >= MIN_PIECE_S]
    prints = embed([(pieces[i].start, pieces[i].end) for i in idx]) if idx else np.zeros((0, 1))
    ok = ~np.isnan(prints).any(axis=1)
    idx, prints = [i for i, good in zip(idx, ok) if good], prints[ok]
    if num_speakers < 2 or len(idx) <= num_speakers:
        return pieces
    weights = np.array([pieces[i].end - pieces[i].start for i in idx])
    clusters = spherical_kmeans(prints, weights, num_speakers)
    labels = sorted({t.speaker for t in pieces})
    overlap = np.zeros((num_speakers, len(labels)))
    for i, c, w in zip(idx, clusters, weights):
        overlap[c, labels.index(pieces[i].speaker)] += w
    rows, cols = linear_sum_assignment(-overlap)
    name = {int(r): labels[c] for r, c in zip(rows, cols)}
    spare = (f"SPEAKER_{n:02d}" for n in range(100) if f"SPEAKER_{n:02d}" not in labels)
    for c in range(num_speakers):
        name.setdefault(c, next(spare))
    relabelled = list(pieces)
    for i, c in zip(idx, clusters):
        relabelled[i] = Turn(pieces[i].start, pieces[i].end, name[int(c)])
    centres = {name[c]: mean_print(prints[clusters == c], weights[clusters == c]) for c in set(clusters.tolist())}
    return split_voice_changes(relabelled, embed, centres)


def mean_print(prints: np.ndarray, weights: np.ndarray) -> np.ndarray | None:
    """Duration-weighted mean of unit voice prints (NaN rows skipped), unit length; None if none."""
    ok = ~np.isnan(prints).any(axis=1)
    if not ok.any():
        return None
    mean = (prints[ok] * weights[ok, None]).sum(0)
    return mean / np.linalg.norm(mean)


def split_voice_changes(pieces: Sequence[Turn], embed, centres: dict[str, np.ndarray]) -> list[Turn]:
    """Split pieces in which the voice changes without a pause (an interruption that pyannote
    merged into the ongoing turn). Pieces of at least ``MIN_SPLIT_PIECE_S`` are scanned with
    overlapping windows; each window takes the nearest speaker centre, a window whose two
    neighbours agree takes theirs (one odd window is noise), and each run of one speaker
    becomes its own piece."""
    names = sorted(centres)
    centre = np.array([centres[n] for n in names])
    windows, owner = [], []
    for i, t in enumerate(pieces):
        if t.end - t.start >= MIN_SPLIT_PIECE_S:
            for a in np.arange(t.start, t.end - WINDOW_S + 1e-9, WINDOW_HOP_S):
                windows.append((float(a), float(a) + WINDOW_S))
                owner.append(i)
    if not windows:
        return sort_turns(pieces)
    prints = embed(windows)
    nearest = np.where(np.isnan(prints).any(axis=1), -1, (np.nan_to_num(prints) @ centre.T).argmax(axis=1))
    owner_a = np.array(owner)
    out = [t for i, t in enumerate(pieces) if i not in set(owner)]
    for i in sorted(set(owner)):
        t, mine = pieces[i], np.nonzero(owner_a == i)[0]
        votes = [names[v] if v >= 0 else t.speaker for v in nearest[mine]]
        for j in range(1, len(votes) - 1):
            if votes[j - 1] == votes[j + 1]:
                votes[j] = votes[j - 1]
        start = t.start
        for j in range(1, len(votes)):
            if votes[j] != votes[j - 1]:  # the change lies between the two windows' centres
                cut = round(windows[mine[j]][0] + WINDOW_S / 2 - WINDOW_HOP_S / 2, 3)
                out.append(Turn(start, cut, votes[j - 1]))
                start = cut
        out.append(Turn(start, t.end, votes[-1]))
    return sort_turns(out)


# --- RTTM -------------------------------------------------------------------------------

def rttm_lines(turns: Sequence[Turn], uri: str) -> list[str]:
    return [f"SPEAKER {uri} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> {t.speaker} <NA> <NA>"
            for t in turns]


def write_rttm(turns: Sequence[Turn], path: str | Path, uri: str | None = None) -> Path:
    from pipeline.store import atomic_write_text
    path = Path(path)
    return atomic_write_text(path, "".join(line + "\n" for line in rttm_lines(turns, uri or path.stem)))


def read_rttm(path: str | Path) -> list[Turn]:
    turns = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split()
        if not parts or parts[0] != "SPEAKER":
            continue
        try:
            start, dur = float(parts[3]), float(parts[4])
        except (IndexError, ValueError) as exc:
            raise DiarizationError(f"{path}:{n}: not an RTTM SPEAKER line: {line!r}") from exc
        turns.append(Turn(start, start + dur, parts[7]))
    return sort_turns(turns)


def to_annotation(turns: Sequence[Turn], uri: str = "audio"):
    from pyannote.core import Annotation, Segment
    ann = Annotation(uri=uri)
    for i, t in enumerate(turns):
        ann[Segment(t.start, t.end), i] = t.speaker
    return ann


def der(reference: Sequence[Turn], hypothesis: Sequence[Turn], collar: float = 0.0) -> float:
    """Diarization error rate (pyannote.metrics, optimal speaker mapping)."""
    from pyannote.metrics.diarization import DiarizationErrorRate
    return float(DiarizationErrorRate(collar=collar, skip_overlap=False)(
        to_annotation(reference), to_annotation(hypothesis)))


# --- speaker assignment -----------------------------------------------------------------

def fill_word_times(starts: Sequence[float | None], ends: Sequence[float | None],
                    max_word_s: float = MAX_WORD_S) -> tuple[np.ndarray, np.ndarray]:
    """Give every word a time: words without timestamps (numbers, symbols) are spread evenly
    between their timed neighbours; every word's duration is capped at ``max_word_s``."""
    s = np.array([np.nan if v is None else v for v in starts], dtype=np.float64)
    e = np.array([np.nan if v is None else v for v in ends], dtype=np.float64)
    n = len(s)
    if n == 0:
        return s, e
    e = np.where(np.isnan(e), s, e)
    known = ~np.isnan(s)
    if not known.any():
        raise ValueError("no word has a timestamp; cannot place the words in time")
    i = 0
    while i < n:
        if known[i]:
            i += 1
            continue
        j = i
        while j < n and not known[j]:
            j += 1
        left = e[i - 1] if i > 0 else s[j]
        right = s[j] if j < n else e[i - 1]
        right = max(right, left)
        step = (right - left) / (j - i)
        for k in range(i, j):
            s[k] = left + (k - i) * step
            e[k] = s[k] + step
        i = j
    e = np.minimum(np.maximum(e, s), s + max_word_s)
    return s, e


def assign_speakers(
    starts: np.ndarray, ends: np.ndarray, turns: Sequence[Turn], fill_nearest: bool = True
) -> list[str | None]:
    """Speaker of each interval [starts[i], ends[i]]: the one with the largest summed overlap.

    Ties go to the speaker whose overlapping turn starts first (whisperx's order). Intervals
    that touch no turn get the nearest turn's speaker when ``fill_nearest`` (else None); a
    zero-length interval gets the speaker of the turn containing it.
    """
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    if len(turns) == 0:
        return [None] * len(starts)
    all_s = np.fromiter((t.start for t in turns), np.float64, len(turns))
    all_e = np.fromiter((t.end for t in turns), np.float64, len(turns))
    labels = [t.speaker for t in turns]
    speakers = sorted(set(labels))
    label_k = np.searchsorted(np.array(speakers), np.array(labels))
    overlap = np.zeros((len(starts), len(speakers)))
    first_turn = np.full((len(starts), len(speakers)), np.inf)  # tie-break: earliest overlapping turn
    for k in range(len(speakers)):
        s_k, e_k = all_s[label_k == k], all_e[label_k == k]
        order = np.lexsort((e_k, s_k))
        seg_s, seg_e = _union(s_k[order], e_k[order])
        cum = np.concatenate([[0.0], np.cumsum(seg_e - seg_s)])
        overlap[:, k] = _covered(ends, seg_s, seg_e, cum) - _covered(starts, seg_s, seg_e, cum)
        # first turn of this speaker that overlaps the interval: the first with end > start
        j = np.searchsorted(seg_e, starts, side="right")
        hit = (j < len(seg_s)) & (seg_s[np.minimum(j, len(seg_s) - 1)] < ends)
        first_turn[hit, k] = seg_s[j[hit]]
    best = overlap.max(axis=1)
    defined = best > 1e-12
    tied = np.isclose(overlap, best[:, None], rtol=0, atol=1e-12) & defined[:, None]
    choice = np.argmin(np.where(tied, first_turn, np.inf), axis=1)
    names = np.array(speakers, dtype=object)[choice]
    names[~defined] = None
    out: list[str | None] = names.tolist()
    for i in np.nonzero(~defined)[0]:
        mid = (starts[i] + ends[i]) / 2
        inside = np.nonzero((all_s <= mid) & (mid <= all_e))[0]
        if len(inside):
            out[i] = labels[inside[0]]
        elif fill_nearest:
            dist = np.minimum(np.abs(all_s - mid), np.abs(all_e - mid))
            out[i] = labels[int(np.argmin(dist))]
    return out


def _union(seg_s: np.ndarray, seg_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge sorted intervals that overlap or touch (vectorised: running maximum of the ends)."""
    run_end = np.maximum.accumulate(seg_e)
    first = np.nonzero(np.concatenate([[True], seg_s[1:] > run_end[:-1]]))[0]
    return seg_s[first], np.maximum.reduceat(seg_e, first)


def _covered(t: np.ndarray, seg_s: np.ndarray, seg_e: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """Length of the speaker's (disjoint, sorted) turns before time t, vectorised over t."""
    j = np.searchsorted(seg_s, t, side="right")  # turns starting at or before t
    prev = np.maximum(j - 1, 0)
    partial = np.clip(t - seg_s[prev], 0.0, seg_e[prev] - seg_s[prev])
    return np.where(j > 0, cum[prev] + partial, 0.0)


def diarize_sample(sample_id: str, data_root: str | Path, num_speakers: int | None = None,
                   source: str | Path | None = None, device: str = "cpu", write: bool = True,
                   pipeline=None, min_speakers: int | None = None, max_speakers: int | None = None,
                   refine: bool = True) -> list[Turn]:
    """Diarize a catalogued sample; the speaker count defaults to therapist + manifest participants.
    Speakers whose voice is enrolled (``pipeline.media.voices``) get their names. Writes
    ``diarization/<sample_id>.rttm`` under the data root when ``write``."""
    from pipeline.media import voices
    from pipeline.media.ingest import catalog_entry, load_wav
    from pipeline.media.turns import THERAPIST, rttm_path

    root = Path(data_root)
    entry = catalog_entry(root, sample_id)
    if entry["status"] != "done":
        raise DiarizationError(f"{sample_id}: quarantined at ingest ({entry['reason']})")
    participants = list(entry.get("participants") or [])
    if num_speakers is None and min_speakers is None and max_speakers is None and participants:
        num_speakers = 1 + len(participants)
    pipeline = pipeline or load_pipeline(source, device)
    audio = root / entry["audio_path"]
    turns = diarize_audio(audio, num_speakers, min_speakers, max_speakers, pipeline=pipeline, device=device,
                          refine=refine)
    if voices.voices_dir(root).is_dir():
        candidates = [THERAPIST, *participants] if participants else None
        turns, _ = voices.name_speakers(load_wav(audio), turns, pipeline, root, candidates)
    if write:
        write_rttm(turns, rttm_path(root, sample_id), uri=Path(sample_id).name)
    return turns
