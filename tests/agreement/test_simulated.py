"""Agreement measured on simulated annotators lands where theory predicts (no Label Studio)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from pipeline.quality import measures
from pipeline.synthetic import annotators as simulate
from pipeline.annotation.rounds import load_round
from pipeline.synthetic.annotators import SimulatedAnnotator

# Monte Carlo over 400 repetitions (k=7, 3 annotators, 400 units) gave a standard deviation of
# alpha of 0.017 (e=0.1) to 0.023 (e=0.3); 0.08 is about 4 standard deviations.
TOLERANCE = 0.08


def _uniform_relation_truth(samples, seed=0):
    """Relation labels drawn uniformly over the scenario's choices ('' included) on every therapist row."""
    rnd = load_round("relation")
    f = rnd.field("relation_cycle_state")
    rng = random.Random(seed)
    out = []
    for s in samples:
        domain = list(f.labels(s["scenario"])) + [""]
        rows = [dict(r, relation_cycle_state=rng.choice(domain)) if r["primary_speaker"] == "Therapist" else r
                for r in s["rows"]]
        out.append({**s, "rows": rows})
    return out


@pytest.mark.parametrize("error_rate", [0.1, 0.3])
def test_nominal_alpha_matches_theory(truth_samples, error_rate):
    couple = [s for s in truth_samples if s["scenario"] == "couple"] * 2  # more units, same truth law
    couple = [{**s, "sample_id": f"{s['sample_id']}#{i}"} for i, s in enumerate(couple)]
    truth = _uniform_relation_truth(couple)
    rnd = load_round("relation")
    anns = [SimulatedAnnotator(f"a{i}", {"relation_cycle_state": error_rate}, seed=i) for i in range(3)]
    table = simulate.simulate_labels(rnd, truth, anns)
    (f,) = [x for x in measures.round_agreement(table, "relation", rnd).fields if x.field == "relation_cycle_state"]
    k = len(rnd.field("relation_cycle_state").labels("couple")) + 1
    expected = simulate.expected_alpha(np.full(k, 1 / k), [simulate.uniform_error_confusion(k, error_rate)] * 3,
                                       1 - np.eye(k))
    assert expected == pytest.approx((1 - error_rate) ** 2)
    assert f.n_pairable >= 400
    assert abs(f.alpha - expected) < TOLERANCE, (f.alpha, expected)


def test_interval_alpha_matches_theory(truth_samples):
    """Intensity (internal_emotion.intensity, matched on person) with uniform 0..10 truth and replacement."""
    rnd = load_round("emotion")
    rng = random.Random(1)
    truth = []
    for s in truth_samples * 3:
        rows = []
        for r in s["rows"]:
            emo = [{"person": r["primary_speaker"], "emotion_description": "feels x", "intensity": rng.randint(0, 10)}]
            rows.append(dict(r, internal_emotion=emo) if r["primary_speaker"] != "Therapist" else r)
        truth.append({**s, "sample_id": f"{s['sample_id']}#{len(truth)}", "rows": rows})
    e = 0.3
    anns = [SimulatedAnnotator(f"a{i}", {"internal_emotion.intensity": e}, seed=i) for i in range(3)]
    rep = measures.round_agreement(simulate.simulate_labels(rnd, truth, anns), "emotion", rnd)
    f = next(x for x in rep.fields if x.field == "internal_emotion.intensity")
    vals = np.arange(11)
    expected = simulate.expected_alpha(np.full(11, 1 / 11), [simulate.uniform_error_confusion(11, e)] * 3,
                                       (vals[:, None] - vals[None, :]) ** 2.0)
    assert expected == pytest.approx((1 - e) ** 2)
    assert abs(f.alpha - expected) < TOLERANCE, (f.alpha, expected)
    # the other fields were answered without error: perfect agreement
    assert next(x for x in rep.fields if x.field == "utterance_type").alpha == pytest.approx(1.0)


def test_gate_trips_at_threshold(truth_samples):
    rnd = load_round("relation")
    truth = _uniform_relation_truth(truth_samples)
    good = [SimulatedAnnotator(f"a{i}", {"relation_cycle_state": 0.05}, seed=i) for i in range(3)]
    bad = [SimulatedAnnotator(f"a{i}", {"relation_cycle_state": 0.6}, seed=i) for i in range(3)]
    ok = measures.round_agreement(simulate.simulate_labels(rnd, truth, good), "relation", rnd)
    low = measures.round_agreement(simulate.simulate_labels(rnd, truth, bad), "relation", rnd)
    f_ok = next(f for f in ok.fields if f.field == "relation_cycle_state")
    f_low = next(f for f in low.fields if f.field == "relation_cycle_state")
    assert f_ok.threshold == 0.667 and f_ok.alpha > 0.667 and f_ok.passed
    assert f_low.alpha < 0.667 and f_low.passed is False and not low.passed
    assert "relation_cycle_state" in [f.field for f in low.failing()]


def test_partial_and_malformed_sets(truth_samples):
    """Half-done annotator, cancelled task, duplicate annotation and bad JSON: alpha on what exists."""
    import json

    import krippendorff
    import pyarrow as pa

    from pipeline import schemas

    rnd = load_round("relation")
    truth = _uniform_relation_truth(truth_samples)
    anns = [SimulatedAnnotator("a0", {"relation_cycle_state": 0.2}, seed=0),
            SimulatedAnnotator("a1", {"relation_cycle_state": 0.2}, seed=1, coverage=0.5),  # did half
            SimulatedAnnotator("a2", {"relation_cycle_state": 0.2}, seed=2)]
    lines = [line for a in anns for line in a.label_rows(rnd, truth)]
    cancelled = truth[0]["sample_id"]
    lines = [x for x in lines if not (x["annotator"] == "sim-a2" and x["sample_id"] == cancelled)]
    rel = [x for x in lines if x["field"] == "relation_cycle_state"]
    dup = dict(rel[0], value=json.dumps("attack_attack"), annotation_id=999, updated_at="2026-02-01T00:00:00+00:00")
    bad = dict(rel[1], value="{not json", annotation_id=998, updated_at="2026-02-01T00:00:00+00:00")
    table = pa.Table.from_pylist(lines + [dup, bad], schema=schemas.LABELS)
    rep = measures.round_agreement(table, "relation", rnd)
    f = next(x for x in rep.fields if x.field == "relation_cycle_state")
    # independent reference: the same data through the krippendorff package
    kept = {(x["sample_id"], x["row_index"], x["annotator"]): json.loads(x["value"]) for x in rel}
    kept[(dup["sample_id"], dup["row_index"], dup["annotator"])] = "attack_attack"  # latest update wins
    kept.pop((bad["sample_id"], bad["row_index"], bad["annotator"]))  # unreadable: missing
    units = sorted({(s, r) for s, r, _ in kept})
    domain = sorted({v for v in kept.values()})
    data = np.array([[domain.index(kept[(s, r, a)]) if (s, r, a) in kept else np.nan for s, r in units]
                     for a in ("sim-a0", "sim-a1", "sim-a2")], dtype=float)
    assert f.alpha == pytest.approx(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))
    kinds = {i["kind"] for i in rep.issues}
    assert {"duplicate", "bad_json", "missing"} <= kinds
    missing = {i["annotator"]: i["message"] for i in rep.issues if i["kind"] == "missing"}
    assert "sim-a1" in missing and "sim-a2" in missing and cancelled in missing["sim-a2"]
    cov = {a["annotator"]: a["coverage"] for a in f.annotators}
    assert 0.3 < cov["sim-a1"] < 0.7 and f.annotators[0]["n_units"] == f.n_units - 1  # a0 lost the bad line
