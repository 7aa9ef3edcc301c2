"""Speaker assignment: each word or cue gets the diarization speaker it overlaps most.

``assign_speakers`` applies whisperx's rule (largest total overlap; ties to the speaker whose
overlapping turn starts first) with a sort + searchsorted sweep: O((W + T) log T) instead of
one scan of every turn per word (``benchmarks/bench_assign.py``). ``speaker_overlaps`` gives
the whole picture (seconds of every speaker during every interval): the turn segmenter uses it
to attribute speech that overlaps someone else's (``pipeline.media.turns``, rule 1).
``fill_word_times`` gives ASR words the aligner could not place a time first.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from pipeline.media.rttm import Turn

MAX_WORD_S = 1.5  # aligners stretch the word before a silence over the whole pause


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


def speaker_overlaps(starts: np.ndarray, ends: np.ndarray,
                     turns: Sequence[Turn]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Who is active during each interval: (speakers sorted, seconds of overlap per interval and
    speaker, start of the first overlapping turn per interval and speaker (inf: none)).
    A speaker's overlapping turns count once where they overlap each other."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    all_s = np.fromiter((t.start for t in turns), np.float64, len(turns))
    all_e = np.fromiter((t.end for t in turns), np.float64, len(turns))
    labels = [t.speaker for t in turns]
    speakers = sorted(set(labels))
    label_k = np.searchsorted(np.array(speakers), np.array(labels)) if labels else np.zeros(0, int)
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
    return speakers, overlap, first_turn


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
    speakers, overlap, first_turn = speaker_overlaps(starts, ends, turns)
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

