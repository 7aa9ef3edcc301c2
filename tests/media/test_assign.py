"""Interval speaker assignment against whisperx's own assign_word_speakers, word time repair, RTTM."""
from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.media.assign import assign_speakers, fill_word_times
from pipeline.media.rttm import Turn, read_rttm, write_rttm


def random_case(rng, n_words=600, n_turns=80, n_speakers=3, duration=600.0):
    turns = []
    for k in range(n_speakers):
        cuts = np.sort(rng.uniform(0, duration, 2 * (n_turns // n_speakers)))
        turns += [Turn(float(a), float(b), f"SPEAKER_{k:02d}") for a, b in cuts.reshape(-1, 2)]
    starts = np.sort(rng.uniform(0, duration, n_words))
    ends = starts + rng.uniform(0.0, 1.2, n_words)
    return turns, starts, ends


def test_matches_whisperx_wherever_whisperx_assigns():
    import whisperx.diarize

    rng = np.random.default_rng(7)
    for _ in range(3):
        turns, starts, ends = random_case(rng)
        ours = assign_speakers(starts, ends, turns, fill_nearest=False)
        df = pd.DataFrame({"start": [t.start for t in turns], "end": [t.end for t in turns],
                           "speaker": [t.speaker for t in turns]})
        words = [{"word": "w", "start": float(s), "end": float(e)} for s, e in zip(starts, ends)]
        result = whisperx.diarize.assign_word_speakers(df, {"segments": [{"start": 0, "end": 1, "words": words}]})
        theirs = [w.get("speaker") for w in result["segments"][0]["words"]]
        defined = [i for i, t in enumerate(theirs) if t is not None]
        assert len(defined) > 400
        assert [ours[i] for i in defined] == [theirs[i] for i in defined]
        # where whisperx has no answer (no overlap), ours is None too unless a turn contains the instant
        for i, t in enumerate(theirs):
            if t is None and ours[i] is not None:
                assert starts[i] == ends[i] or any(x.start <= starts[i] <= x.end for x in turns)


def test_max_overlap_and_fill_nearest():
    turns = [Turn(0.0, 2.0, "A"), Turn(1.5, 4.0, "B"), Turn(10.0, 11.0, "A")]
    got = assign_speakers(np.array([0.1, 1.6, 1.8, 6.0, 9.0]), np.array([0.5, 3.0, 2.1, 6.5, 9.1]), turns)
    # 1.8-2.1 overlaps A for 0.2 s and B for 0.3 s; 6.0-6.5 and 9.0-9.1 touch no turn: nearest turn
    assert got == ["A", "B", "B", "B", "A"]
    assert assign_speakers(np.array([6.0]), np.array([6.5]), turns, fill_nearest=False) == [None]
    assert assign_speakers(np.array([1.0]), np.array([1.0]), turns) == ["A"]  # an instant inside a turn


def test_words_without_times_are_interpolated_and_durations_capped():
    starts, ends = fill_word_times([0.0, None, None, 3.0, 5.0], [1.0, None, None, 3.5, 12.0])
    assert np.allclose(starts, [0.0, 1.0, 2.0, 3.0, 5.0])
    assert np.allclose(ends, [1.0, 2.0, 3.0, 3.5, 6.5])  # 7 s word before a silence capped at 1.5 s


def test_rttm_round_trip(tmp_path):
    turns = [Turn(0.5, 2.25, "SPEAKER_00"), Turn(2.0, 3.0, "SPEAKER_01")]
    path = write_rttm(turns, tmp_path / "x.rttm", uri="interview")
    assert path.read_text().splitlines()[0] == "SPEAKER interview 1 0.500 1.750 <NA> <NA> SPEAKER_00 <NA> <NA>"
    assert read_rttm(path) == turns
