"""pyannote's clustering on a bounded, evenly spread sample of voice prints (the rest assigned to
the nearest centroid): known answers on generated prints, no model and no audio."""
from __future__ import annotations

import time

import numpy as np
import pytest
from pyannote.audio.pipelines.clustering import AgglomerativeClustering
from pyannote.core import SlidingWindow, SlidingWindowFeature

from pipeline.media.speedups import MAX_CLUSTERED_EMBEDDINGS, bound_clustering, evenly_spread

PARAMS = {"method": "centroid", "min_cluster_size": 3, "threshold": 0.25}  # the offline default's


class Holder:
    """Stands in for a SpeakerDiarization pipeline: only its ``clustering`` is touched."""

    def __init__(self):
        self.clustering = AgglomerativeClustering(metric="cosine")
        self.clustering.instantiate(PARAMS)


def prints(chunks: int, seed: int = 0, voices: int = 3, dim: int = 32):
    """(chunks, 3 local speakers, dim) prints: local speaker s of chunk c is voice (c + s) % 3,
    every speaker active alone on a third of each chunk's frames; returns prints, segmentation, truth."""
    rng = np.random.default_rng(seed)
    centres = np.eye(dim)[:voices] * 2 + 0.3 * rng.standard_normal((voices, dim))
    truth = (np.arange(chunks)[:, None] + np.arange(3)[None, :]) % voices
    emb = centres[truth] + 0.25 * rng.standard_normal((chunks, 3, dim))
    emb /= np.linalg.norm(emb, axis=-1, keepdims=True)
    seg = np.zeros((chunks, 30, 3))
    for s in range(3):
        seg[:, s * 10:(s + 1) * 10, s] = 1
    return emb, SlidingWindowFeature(seg, SlidingWindow(start=0.0, duration=10.0, step=1.0)), truth


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = {(int(x), int(y)) for x, y in zip(a.ravel(), b.ravel())}
    return len(pairs) == len({x for x, _ in pairs}) == len({y for _, y in pairs})


def test_evenly_spread_keeps_all_below_the_limit_and_spans_the_recording_above():
    assert evenly_spread(10, 20).tolist() == list(range(10))
    kept = evenly_spread(10_000, 1_500)
    assert len(kept) == 1_500 and kept[0] == 0 and kept[-1] == 9_999
    assert np.diff(kept).max() - np.diff(kept).min() <= 1  # even steps


def test_bounded_clustering_samples_and_assigns_every_print():
    emb, seg, truth = prints(400)  # 1,200 prints
    holder = bound_clustering(Holder(), max_embeddings=150)
    clustering = holder.clustering
    assert type(clustering).__name__ == "BoundedAgglomerativeClustering"
    assert clustering.parameters(instantiated=True) == PARAMS  # hyper-parameters kept
    seen = []
    original = clustering.cluster
    clustering.cluster = lambda e, **k: seen.append(len(e)) or original(e, **k)
    hard, _, centroids = clustering(embeddings=emb, segmentations=seg, num_clusters=3)
    assert seen == [150] and centroids.shape[0] == 3
    assert hard.shape == truth.shape and same_partition(hard, truth)  # every print, sampled or not


def test_below_the_bound_the_result_is_pyannotes_own():
    emb, seg, _ = prints(120)
    plain = Holder().clustering(embeddings=emb.copy(), segmentations=seg, num_clusters=3)[0]
    bounded = bound_clustering(Holder()).clustering(embeddings=emb.copy(), segmentations=seg, num_clusters=3)[0]
    assert 360 < MAX_CLUSTERED_EMBEDDINGS and (plain == bounded).all()


def test_bound_clustering_is_idempotent_and_leaves_other_objects_alone():
    holder = bound_clustering(bound_clustering(Holder(), 100), 200)
    assert holder.clustering.max_embeddings == 200
    assert type(holder.clustering).__mro__[2] is AgglomerativeClustering
    no_clustering = object()
    assert bound_clustering(no_clustering) is no_clustering


@pytest.mark.slow
def test_clustering_time_per_print_does_not_grow_with_the_recording():
    """The hour's 10,000 prints cost little more than the bound's own clustering (linear rest)."""
    def cpu(chunks: int) -> float:
        emb, seg, _ = prints(chunks, seed=1)
        clustering = bound_clustering(Holder(), max_embeddings=600).clustering
        started = time.process_time()
        clustering(embeddings=emb, segmentations=seg, num_clusters=3)
        return time.process_time() - started
    short, long = cpu(200), cpu(3_400)  # 600 prints (all clustered) vs 10,200 (600 sampled)
    print(f"clustering CPU: 600 prints {short:.2f} s, 10,200 prints {long:.2f} s")
    assert long < 4 * short + 0.5  # unbounded: about (17)^2 = 290 times
