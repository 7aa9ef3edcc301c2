"""ITP - Intervention Timing Prediction (spec §4.1).

A positive is a therapist row preceded by a non-therapist row (decision after that row);
a negative is two consecutive non-therapist rows. Per sample the two classes are balanced
with :func:`even_sample`; a sample without a positive or without a negative gives nothing.
The scripts' candidate ids (``..._pos_after_row2``) named the answer; ours are opaque
(:func:`common.instance_id`), the same shape for both classes.
"""
from __future__ import annotations

from pipeline.taxonomy import is_therapist
from pipeline.benchmark.tasks.common import even_sample, instance_keys, prior_context

DEFAULT_OPTIONS = {"max_per_class": 0}  # the scripts' --max-candidates-per-class-per-sample


def instances(sample: dict, inputs: list[dict], context_size: int, max_per_class: int = 0) -> list[dict]:
    rows = sample["rows"]
    speakers = [r["primary_speaker"] for r in rows]
    positives, negatives = [], []
    for k in range(1, len(rows)):  # decision after row k (1-based); the next row is k+1
        cur_t, next_t = is_therapist(speakers[k - 1]), is_therapist(speakers[k])
        if next_t and not cur_t:
            positives.append((k, "yes", "therapist_entry"))
        elif not cur_t and not next_t:
            kind = "same_speaker_continuation" if speakers[k - 1] == speakers[k] else "non_therapist_exchange"
            negatives.append((k, "no", kind))
    if max_per_class > 0:
        positives, negatives = even_sample(positives, max_per_class), even_sample(negatives, max_per_class)
    n = min(len(positives), len(negatives))
    if n <= 0:
        return []
    chosen = sorted(even_sample(positives, n) + even_sample(negatives, n), key=lambda c: c[0])
    participants = list(sample.get("participants") or [])
    return [
        {
            **instance_keys(sample, k, "itp"),  # row_index = the scripts' context_end_row_index
            "participants": participants,
            "decision_after_row": inputs[k - 1],
            # The scripts' window ends WITH the decision row (it appears twice); kept for parity.
            "prior_context": prior_context(inputs, k + 1, context_size),
            "label": label,
            "label_boundary_type": boundary,
        }
        for k, label, boundary in chosen
    ]
