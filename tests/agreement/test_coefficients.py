"""The agreement coefficients against published worked examples and reference libraries."""
from __future__ import annotations

import json
import math

import krippendorff
import numpy as np
import pyarrow as pa
import pytest

from pipeline import schemas
from pipeline.quality import coefficients, measures
from pipeline.quality.coding import FieldRule

NA = None
# Krippendorff (2011) "Computing Krippendorff's Alpha-Reliability", section C: 4 observers x 12 units,
# values 1..5, missing data. Published: nominal 0.743, ordinal 0.815, interval 0.849, ratio 0.797.
K2011 = {
    "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, NA, NA, NA],
    "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NA, 3],
    "C": [NA, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NA],
    "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NA],
}


def label_table(data: dict[str, list], field: str = "x", round_name: str = "r", sample: str = "s/1") -> pa.Table:
    recs = []
    for ann, values in data.items():
        for unit, v in enumerate(values, start=1):
            if v is NA:
                continue
            recs.append({"round": round_name, "sample_id": sample, "row_index": unit, "annotator": ann,
                         "field": field, "value": json.dumps(v), "annotation_id": 1, "lead_time_s": 1.0,
                         "created_at": "2026-01-01T00:00:00", "updated_at": "2026-01-01T00:00:00"})
    return pa.Table.from_pylist(recs, schema=schemas.LABELS)


@pytest.mark.parametrize("metric,published", [("nominal", 0.743), ("interval", 0.849)])
def test_krippendorff_2011_worked_example_through_the_label_table(metric, published):
    rep = measures.round_agreement(label_table(K2011), "r", [FieldRule("x", metric)])
    (f,) = rep.fields
    assert round(f.alpha, 3) == published
    assert f.n_units == 12 and f.n_pairable == 11  # unit 12 has one value: not pairable


def test_alpha_matches_krippendorff_package_on_random_data_with_missing():
    rng = np.random.default_rng(7)
    for trial in range(20):
        data = rng.integers(0, 6, size=(4, 80)).astype(float)
        data[:, : 40] = data[0, :40]  # some agreement
        data[rng.random(data.shape) < 0.2] = np.nan
        domain = np.unique(data[~np.isnan(data)])
        counts = np.stack([(data == v).sum(axis=0) for v in domain], axis=1)
        for metric in ("nominal", "interval"):
            ours = coefficients.alpha_from_counts(counts, coefficients.distance_matrix(list(domain), metric))
            ref = krippendorff.alpha(reliability_data=data, level_of_measurement=metric)
            assert ours == pytest.approx(ref, abs=1e-12)


def test_masi_distance_and_alpha_match_nltk():
    from nltk.metrics.agreement import AnnotationTask
    from nltk.metrics.distance import masi_distance

    sets = [frozenset(), frozenset("a"), frozenset("ab"), frozenset("bc"), frozenset("abc"), frozenset("d")]
    for s in sets:
        for t in sets:
            if s and t:
                assert coefficients.masi_distance(s, t) == pytest.approx(masi_distance(set(s), set(t)))
    rng = np.random.default_rng(3)
    truth = [sets[i] for i in rng.integers(1, len(sets), size=30)]
    data = {}
    for ann in ("a1", "a2", "a3"):
        data[ann] = [sorted(t if rng.random() > 0.3 else sets[rng.integers(1, len(sets))]) for t in truth]
    (f,) = measures.round_agreement(label_table(data), "r", [FieldRule("x", "masi")]).fields
    task = AnnotationTask(
        data=[(ann, str(u), frozenset(v)) for ann, vals in data.items() for u, v in enumerate(vals)],
        distance=masi_distance,
    )
    assert f.alpha == pytest.approx(task.alpha(), abs=1e-9)


def test_fleiss_kappa_wikipedia_example():
    # Fleiss (1971) as worked on Wikipedia "Fleiss' kappa": 10 subjects, 14 raters, 5 categories.
    counts = np.array([
        [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
    ])
    assert round(coefficients.fleiss_kappa(counts), 3) == 0.210
    assert math.isnan(coefficients.fleiss_kappa(counts[:, :] + np.eye(10, 5, dtype=int)[:, :]))  # unequal raters


def test_cohen_kappa_textbook_and_sklearn():
    # Wikipedia "Cohen's kappa": 50 grant proposals, yes/yes 20, yes/no 5, no/yes 10, no/no 15 -> 0.4
    assert coefficients.cohen_kappa(np.array([[20, 5], [10, 15]])) == pytest.approx(0.4)
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(1)
    a = rng.integers(0, 4, 200)
    b = np.where(rng.random(200) < 0.6, a, rng.integers(0, 4, 200))
    data = {"a": [int(x) for x in a], "b": [int(x) for x in b]}
    (f,) = measures.round_agreement(label_table(data), "r", [FieldRule("x", "nominal")]).fields
    assert f.pairs[0]["cohen_kappa"] == pytest.approx(cohen_kappa_score(a, b), abs=1e-9)
    assert f.percent_agreement == pytest.approx(float((a == b).mean()))


def test_undefined_alpha_is_none_and_does_not_pass():
    data = {"a": ["x", "x", "x"], "b": ["x", "x", "x"]}
    (f,) = measures.round_agreement(label_table(data), "r", [FieldRule("x", "nominal")]).fields
    assert f.alpha is None and f.passed is None and f.percent_agreement == 1.0


def test_pair_based_alpha_equals_count_based_alpha_for_every_metric():
    """The production path (alpha_from_codes, per coder pair) equals the coincidence-matrix form."""
    rng = np.random.default_rng(11)
    sets = [frozenset(rng.choice(6, size=rng.integers(0, 4), replace=False).tolist()) for _ in range(12)]
    for metric, domain in (("nominal", list(range(5))), ("interval", [0.0, 1.0, 2.5, 7.0, 10.0]), ("masi", sets)):
        d = coefficients.distance_matrix(domain, metric)
        codes = rng.integers(0, len(domain), size=(150, 4))
        codes[:75, 1:] = codes[:75, :1]
        codes[rng.random(codes.shape) < 0.25] = -1
        counts = np.zeros((150, len(domain)))
        for u, row in enumerate(codes):
            for c in row[row >= 0]:
                counts[u, c] += 1
        assert coefficients.alpha_from_codes(codes, d) == pytest.approx(coefficients.alpha_from_counts(counts, d), abs=1e-12)
    m = coefficients.masi_matrix(sets)
    for i, a in enumerate(sets):
        for j, b in enumerate(sets):
            assert m[i, j] == pytest.approx(coefficients.masi_distance(a, b))
