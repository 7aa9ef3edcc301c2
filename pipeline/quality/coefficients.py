"""Agreement coefficients: Krippendorff's alpha, MASI distance, Cohen's and Fleiss' kappa.

Plain numpy over count or code matrices; no label tables, no files. Alpha is computed with our
own vectorised coincidence-matrix code because MASI needs a distance matrix over set values and
the per-label / per-annotator breakdowns call it many times; the tests check it against the
``krippendorff`` package and the published worked examples.

Distances per metric (:func:`distance_matrix`): ``nominal`` and ``presence`` 0/1, ``interval``
the squared difference, ``masi`` the MASI distance (Passonneau 2006).

:func:`bootstrap_alpha` gives a percentile confidence interval for alpha by resampling units
with replacement (a seeded generator: the same codes and seed give the same interval), computed
from per-unit sufficient statistics so that the default 500 resamples cost a few vector operations.
"""
from __future__ import annotations

import math

import numpy as np


def alpha_from_counts(counts: np.ndarray, distance: np.ndarray) -> float:
    """Krippendorff's alpha from a units x values count matrix and a values x values distance.

    ``counts[u, v]`` = how many coders gave value v to unit u. Units with fewer than two values
    are not pairable and drop out, exactly as in Krippendorff (2011). Returns NaN when alpha is
    undefined (no pairable unit, or no expected disagreement: everybody used one value).
    """
    counts = np.asarray(counts, dtype=np.float64)
    m = counts.sum(axis=1)
    pairable = m >= 2
    if not pairable.any():
        return math.nan
    c = counts[pairable]
    w = 1.0 / (m[pairable] - 1.0)
    # coincidences o = sum_u (c_u c_u^T - diag(c_u)) / (m_u - 1): one matmul, no N x V x V array
    o = (c * w[:, None]).T @ c - np.diag((c * w[:, None]).sum(axis=0))
    n_v = o.sum(axis=0)
    n = n_v.sum()
    e = (np.outer(n_v, n_v) - np.diag(n_v)) / (n - 1.0)
    d_e = float((e * distance).sum())
    if d_e <= 0:
        return math.nan
    return 1.0 - float((o * distance).sum()) / d_e


def alpha_from_codes(codes: np.ndarray, distance: np.ndarray) -> float:
    """Krippendorff's alpha from a units x coders matrix of value codes (-1 = missing).

    Same coefficient as :func:`alpha_from_counts`, computed from the coder pairs inside each
    unit (O(units x coders^2)) instead of a units x values count matrix (O(units x values^2)):
    set-valued fields can have thousands of distinct values.
    """
    codes = np.asarray(codes)
    present = codes >= 0
    m = present.sum(axis=1)
    keep = m >= 2
    if not keep.any():
        return math.nan
    codes, present, m = codes[keep], present[keep], m[keep]
    w = 1.0 / (m - 1.0)
    V = distance.shape[0]
    n_v = np.bincount(codes[present], minlength=V).astype(np.float64)
    n = n_v.sum()
    d_o = 0.0
    A = codes.shape[1]
    for i in range(A):
        for j in range(A):
            if i != j:
                both = present[:, i] & present[:, j]
                d_o += float((w[both] * distance[codes[both, i], codes[both, j]]).sum())
    d_e = float(n_v @ distance @ n_v - (n_v * np.diag(distance)).sum()) / (n - 1.0)
    if d_e <= 0:
        return math.nan
    return 1.0 - d_o / d_e


def bootstrap_alpha(codes: np.ndarray, distance: np.ndarray, *, samples: int = 500, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of Krippendorff's alpha over units (``codes``: units x coders,
    -1 = missing). Pairable units are drawn with replacement ``samples`` times with
    ``numpy.random.default_rng(seed)``; returns ``(low, high)``, or None when alpha is undefined
    in most resamples (too few pairable units or no variation)."""
    codes = np.asarray(codes)
    present = codes >= 0
    m = present.sum(axis=1)
    keep = m >= 2
    if keep.sum() < 2:
        return None
    codes, present, m = codes[keep], present[keep], m[keep].astype(np.float64)
    U, A = codes.shape
    V = distance.shape[0]
    # per unit: observed disagreement sum_{i != j} d(c_i, c_j) / (m - 1), and value counts
    d_o = np.zeros(U)
    for i in range(A):
        for j in range(i + 1, A):
            both = present[:, i] & present[:, j]
            d_o[both] += 2.0 * distance[codes[both, i], codes[both, j]]
    d_o /= m - 1.0
    if V > 400:  # large set-valued domains: fewer resamples keep the V x V products affordable
        samples = min(samples, 200)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, U, size=(samples, U), dtype=np.int32)  # resample b draws units idx[b]
    obs = d_o[idx].sum(axis=1)
    nv_b = np.zeros(samples * V)
    offset = (np.arange(samples) * V)[:, None]
    for a in range(A):  # value counts per resample: one flat bincount per coder
        c = codes[:, a][idx] + offset
        if not present[:, a].all():
            c = c[codes[:, a][idx] >= 0]
        nv_b += np.bincount(c.ravel(), minlength=samples * V)
    nv_b = nv_b.reshape(samples, V)
    n = nv_b.sum(axis=1)
    diag = np.diag(distance)
    exp = (np.einsum("bv,vw,bw->b", nv_b, distance, nv_b, optimize=True) - nv_b @ diag) / (n - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        alphas = np.where(exp > 0, 1.0 - obs / exp, np.nan)
    alphas = alphas[~np.isnan(alphas)]
    if len(alphas) < samples / 2:
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(alphas, [tail, 100.0 - tail])
    return float(low), float(high)


def masi_matrix(sets: list[frozenset]) -> np.ndarray:
    """Pairwise MASI distances of a list of sets, vectorised over a membership matrix."""
    items = {x: k for k, x in enumerate(sorted({x for s in sets for x in s}, key=str))}
    mem = np.zeros((len(sets), max(1, len(items))), dtype=np.float32)
    for r, s in enumerate(sets):
        for x in s:
            mem[r, items[x]] = 1.0
    size = mem.sum(axis=1).astype(np.float64)
    inter = (mem @ mem.T).astype(np.float64)
    union = size[:, None] + size[None, :] - inter
    jaccard = np.divide(inter, union, out=np.ones_like(inter), where=union > 0)
    a_in_b = inter == size[:, None]
    b_in_a = inter == size[None, :]
    mono = np.where(a_in_b & b_in_a, 1.0, np.where(a_in_b | b_in_a, 2 / 3, np.where(inter > 0, 1 / 3, 0.0)))
    return 1.0 - jaccard * mono


def masi_distance(a: frozenset, b: frozenset) -> float:
    """MASI distance (Passonneau 2006): 1 - Jaccard * monotonicity."""
    if a == b:
        return 0.0
    union = len(a | b)
    inter = len(a & b)
    if inter == 0:
        return 1.0
    m = 2 / 3 if (a <= b or b <= a) else 1 / 3
    return 1.0 - (inter / union) * m


def distance_matrix(domain: list, metric: str) -> np.ndarray:
    n = len(domain)
    if metric in ("nominal", "presence"):
        return 1.0 - np.eye(n)
    if metric == "interval":
        v = np.asarray(domain, dtype=np.float64)
        return (v[:, None] - v[None, :]) ** 2
    if metric == "masi":
        return masi_matrix(list(domain))
    raise ValueError(f"unknown metric {metric!r}")


def cohen_kappa(confusion: np.ndarray) -> float:
    """Cohen's kappa from a square confusion matrix of two raters (rows: rater A)."""
    c = np.asarray(confusion, dtype=np.float64)
    n = c.sum()
    if n == 0:
        return math.nan
    p_o = np.trace(c) / n
    p_e = float((c.sum(axis=1) * c.sum(axis=0)).sum()) / n**2
    return math.nan if p_e >= 1 else (p_o - p_e) / (1 - p_e)


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' kappa from a units x categories count matrix with the same rater count per unit."""
    c = np.asarray(counts, dtype=np.float64)
    m = c.sum(axis=1)
    if len(c) == 0 or m.min() != m.max() or m[0] < 2:
        return math.nan
    r = m[0]
    p_j = c.sum(axis=0) / c.sum()
    p_i = ((c * c).sum(axis=1) - r) / (r * (r - 1))
    p_bar, p_e = p_i.mean(), float((p_j**2).sum())
    return math.nan if p_e >= 1 else (p_bar - p_e) / (1 - p_e)

