"""The diarization refinement's parts on inputs whose answer is known (no model: the voice prints
are given, the audio is built from tones and digital silence)."""
from __future__ import annotations

import numpy as np

from pipeline.media.refine import (cluster_voices, cut_silences, merge_touching, refine_turns, speech_frames,
                                   spherical_kmeans, split_voice_changes)
from pipeline.media.rttm import Turn

RATE = 16000


def tone(seconds: float, freq: float = 220.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def hiss(seconds: float, amp: float = 1e-4, seed: int = 0) -> np.ndarray:
    return (amp * np.random.default_rng(seed).standard_normal(int(seconds * RATE))).astype(np.float32)


def test_speech_frames_follow_the_recording_not_an_absolute_level():
    # 1 s speech, 0.5 s room noise, 1 s quiet speech: the noise is silence, quiet speech is not
    audio = np.concatenate([tone(1.0), hiss(0.5), tone(1.0, amp=0.02)])
    frames = speech_frames(audio)
    assert frames[:95].all() and not frames[105:145].any() and frames[155:245].all()


def test_cut_silences_removes_long_gaps_only():
    speech = np.ones(400, dtype=bool)  # 4 s of 10-ms frames
    speech[100:110] = False  # 0.1 s: a pause inside speech, kept
    speech[200:260] = False  # 0.6 s: cut
    pieces = cut_silences([Turn(0.5, 3.5, "A")], speech)
    assert pieces == [Turn(0.5, 2.0, "A"), Turn(2.6, 3.5, "A")]
    # a silence covering a whole turn removes it; order and labels of the others are kept
    assert cut_silences([Turn(2.1, 2.5, "B"), Turn(0.0, 1.0, "A")], speech) == [Turn(0.0, 1.0, "A")]


def test_spherical_kmeans_finds_separated_voices_deterministically():
    rng = np.random.default_rng(1)
    centres = np.eye(8)[:3]
    points = np.repeat(centres, 10, axis=0) + 0.15 * rng.standard_normal((30, 8))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    labels = spherical_kmeans(points, np.ones(30), 3)
    # each true group is one cluster and the three clusters differ
    groups = [set(labels[i * 10:(i + 1) * 10]) for i in range(3)]
    assert all(len(g) == 1 for g in groups) and len(set.union(*groups)) == 3
    assert (spherical_kmeans(points, np.ones(30), 3) == labels).all()


def test_refine_turns_moves_a_mislabelled_piece_and_keeps_names():
    # pyannote said A for 0-4 s, but 2.5-4 s is voice B (a given voice print, no model involved)
    audio = np.concatenate([tone(2.0), hiss(0.5), tone(1.5, 330), hiss(0.5), tone(2.0, 330), hiss(0.5),
                            tone(1.5)])
    turns = [Turn(0.0, 4.0, "SPEAKER_00"), Turn(4.0, 6.5, "SPEAKER_01"), Turn(6.5, 8.5, "SPEAKER_00")]
    voice = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}

    def embed(spans):  # voice print by which tone the span holds (stands in for the model)
        return np.array([voice["a"] if (a < 2.0 or a >= 6.9) else voice["b"] for a, _ in spans])

    refined = refine_turns(audio, turns, embed, num_speakers=2)
    assert [(t.start, t.end, t.speaker) for t in refined] == [
        (0.0, 2.0, "SPEAKER_00"), (2.5, 4.0, "SPEAKER_01"), (4.5, 6.5, "SPEAKER_01"), (7.0, 8.5, "SPEAKER_00")]


def test_split_voice_changes_finds_an_interruption_without_a_pause():
    # 0-3 s voice A, 3-6 s voice B inside one piece labelled A; a 2-s piece is left alone
    voice = {"A": np.array([1.0, 0.0]), "B": np.array([0.0, 1.0])}

    def embed(spans):  # the window's print is the voice at its centre (stands in for the model)
        return np.array([voice["A"] if (a + b) / 2 < 3.0 or a >= 10 else voice["B"] for a, b in spans])

    pieces = [Turn(0.0, 6.0, "A"), Turn(10.0, 12.0, "B")]
    out = split_voice_changes(pieces, embed, voice)
    assert [t.speaker for t in out] == ["A", "B", "B"]
    assert abs(out[0].end - 3.0) <= 0.5 and out[1].start == out[0].end and out[1].end == 6.0
    assert out[2] == Turn(10.0, 12.0, "B")
    # one odd window in a long piece is noise, not a change
    odd = lambda spans: np.array([voice["B"] if abs(a - 2.0) < 1e-6 else voice["A"] for a, _ in spans])
    assert split_voice_changes([Turn(0.0, 6.0, "A")], odd, voice) == [Turn(0.0, 6.0, "A")]


def test_a_sliver_cut_off_by_a_speaker_change_joins_the_piece_it_touches():
    # pyannote gave the first 0.2 s of B's turn (2.5-2.7) to A, in two slivers too short for a
    # voice print: the one touching B's piece and the one touching only that sliver become B;
    # 4.5-4.7 is a short answer between silences: it keeps pyannote's label
    audio = np.concatenate([tone(2.0), hiss(0.5), tone(1.5, 330), hiss(0.5), tone(0.2, 440), hiss(0.5), tone(2.0)])
    turns = [Turn(0.0, 2.0, "SPEAKER_00"), Turn(2.5, 2.6, "SPEAKER_00"), Turn(2.6, 2.7, "SPEAKER_00"),
             Turn(2.7, 4.0, "SPEAKER_01"), Turn(4.5, 4.7, "SPEAKER_00"), Turn(5.2, 7.2, "SPEAKER_00")]
    voice = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}

    def embed(spans):  # voice print by which tone the span holds (stands in for the model)
        return np.array([voice["b"] if 2.5 <= a < 4.0 else voice["a"] for a, _ in spans])

    refined = refine_turns(audio, turns, embed, num_speakers=2)
    # (B's three touching pieces are then one turn again: merge_touching)
    assert [(t.start, t.end, t.speaker) for t in refined] == [
        (0.0, 2.0, "SPEAKER_00"), (2.5, 4.0, "SPEAKER_01"), (4.5, 4.7, "SPEAKER_00"), (5.2, 7.2, "SPEAKER_00")]


def test_merge_touching_joins_one_speakers_touching_or_overlapping_turns_only():
    turns = [Turn(0.0, 0.6, "A"), Turn(0.6, 1.5, "A"), Turn(1.2, 2.0, "B"), Turn(1.4, 1.8, "A"),
             Turn(2.0, 3.0, "B"), Turn(3.1, 4.0, "B"), Turn(3.5, 3.6, "A")]
    assert merge_touching(turns) == [Turn(0.0, 1.8, "A"), Turn(1.2, 3.0, "B"), Turn(3.1, 4.0, "B"),
                                     Turn(3.5, 3.6, "A")]


def _pair(first: int, second: int, alike: float, dims: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Two unit prints ``alike`` (cosine) to each other, on two axes of their own."""
    x = np.sqrt((1 - alike) / (1 + alike))
    a, b = np.zeros(dims), np.zeros(dims)
    a[first], a[second], b[first], b[second] = 1, x, 1, -x
    return a / np.linalg.norm(a), b / np.linalg.norm(b)


def _interview(partner_therapist_alike: float, therapist_s: tuple = (1.35, 1.35)):
    """A generated 6-row interview's shape (leo_and_lila_000/002 at scale 0.05): one partner
    speaks 16 s in pieces of two slightly different kinds (0.88 alike), the other partner 4.6 s
    and the therapist in two pieces of ``therapist_s``, those two ``partner_therapist_alike``."""
    long_a, long_b = _pair(0, 1, 0.88)
    partner, therapist = _pair(2, 3, partner_therapist_alike)
    points = np.array([long_a] * 4 + [long_b] * 4 + [partner] * 2 + [therapist] * 2)
    weights = np.array([2.0] * 8 + [2.3, 2.3] + list(therapist_s))
    truth = np.array([0] * 8 + [1, 1] + [2, 2])
    return points, weights, truth


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    return len(set(zip(a.tolist(), b.tolist()))) == len(set(a.tolist())) == len(set(b.tolist()))


def test_cluster_voices_keeps_two_short_voices_apart_rather_than_cutting_a_long_one_in_two():
    points, weights, truth = _interview(partner_therapist_alike=0.75)
    trap = spherical_kmeans(points, weights, 3)
    assert not _same_partition(trap, truth)  # the duration-weighted cost prefers the wrong answer
    assert set(zip(trap.tolist(), truth.tolist())) >= {(trap[8], 1), (trap[8], 2)}  # partner + therapist
    assert _same_partition(cluster_voices(points, weights, 3), truth)


def test_cluster_voices_keeps_the_kmeans_answer_where_a_swap_gains_little_or_splits_off_a_scrap():
    # the two short voices 0.82 alike: splitting them leaves the closest pair only 0.06 less alike
    points, weights, _ = _interview(partner_therapist_alike=0.82)
    assert (cluster_voices(points, weights, 3) == spherical_kmeans(points, weights, 3)).all()
    # the therapist's side would hold 1.0 s of speech (and a 0.4-s piece, too short to count):
    # too little to split a cluster for, so the therapist stays with the partner
    points, weights, _ = _interview(partner_therapist_alike=0.75, therapist_s=(1.0, 0.4))
    labels = cluster_voices(points, weights, 3)
    assert len(set(labels[8:].tolist())) == 1 and len(set(labels[:8].tolist())) == 2
    # two voices: nothing to swap, whatever k-means says
    two = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    two /= np.linalg.norm(two, axis=1, keepdims=True)
    assert (cluster_voices(two, np.ones(4), 2) == spherical_kmeans(two, np.ones(4), 2)).all()


def test_cluster_voices_gives_short_pieces_the_voice_the_longer_ones_found():
    """Prints of pieces under a second lean towards each other whoever speaks (a family interview
    at scale 1.0: the therapist's short pieces formed a voice of their own, two children 0.83
    alike shared one). Here 40 short pieces of voice A lean 0.78 from A's long ones, and B and C
    are 0.83 alike: k-means over every piece splits A and merges B and C; over the long pieces
    alone it finds A, B and C, and each short piece takes A."""
    a = np.eye(8)[0]
    short_a = a * 0.78 + np.sqrt(1 - 0.78 ** 2) * np.eye(8)[5]  # 0.78 from A, 0 from B and C
    b, c = _pair(1, 2, 0.83)
    points = np.array([a] * 10 + [b] * 8 + [c] * 8 + [short_a] * 40)
    weights = np.array([5.0] * 10 + [2.5] * 16 + [0.8] * 40)
    truth = np.array([0] * 10 + [1] * 8 + [2] * 8 + [0] * 40)
    assert not _same_partition(spherical_kmeans(points, weights, 3), truth)
    assert _same_partition(cluster_voices(points, weights, 3), truth)


def test_cluster_voices_keeps_a_two_piece_voice_apart_from_the_long_voice_it_was_merged_with():
    """A generated couple interview's shape (priya_and_rosa_007/008 at scale 1.0): one partner
    speaks twice (4.9 s), the therapist 36 s in pieces of two slightly different kinds. K-means
    puts the short voice with one kind of the therapist's pieces and makes the other kind a voice
    of its own, so no other cluster is worth splitting; the merged pair, cut anew by how alike its
    pieces are, gives the short voice back."""
    rosa = np.eye(8)[7]
    ta, tb = _pair(0, 1, 0.85)
    priya = 0.75 * ta + np.sqrt(1 - 0.75 ** 2) * np.eye(8)[2]  # 0.75 alike one kind, 0.64 the other
    points = np.array([rosa] * 10 + [ta] * 12 + [tb] * 6 + [priya] * 2)
    weights = np.array([5.0] * 10 + [2.0] * 18 + [2.7, 2.2])
    truth = np.array([0] * 10 + [1] * 18 + [2] * 2)
    trap = spherical_kmeans(points, weights, 3)
    assert not _same_partition(trap, truth)
    assert trap[-1] == trap[-2] and trap[-1] in trap[10:28]  # the short voice inside the therapist's
    assert _same_partition(cluster_voices(points, weights, 3), truth)


def test_split_voice_changes_scans_the_shortest_piece_that_holds_three_windows():
    """Another voice taking over in a piece's last 1.3 s (an overlapping start: a family interview
    at scale 1.0 gave the newcomer's first sentence a row of its own) is found in a 2.9-s piece;
    a shorter piece holds fewer than three windows and is left alone."""
    voice = {"A": np.array([1.0, 0.0]), "B": np.array([0.0, 1.0])}

    def embed(spans):
        return np.array([voice["A"] if (a + b) / 2 < 1.6 else voice["B"] for a, b in spans])

    out = split_voice_changes([Turn(0.0, 2.9, "A")], embed, voice)
    assert [t.speaker for t in out] == ["A", "B"] and out[0].end == out[1].start and 1.2 <= out[0].end <= 1.8
    assert split_voice_changes([Turn(0.0, 2.4, "A")], embed, voice) == [Turn(0.0, 2.4, "A")]
