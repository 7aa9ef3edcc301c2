"""STP - Support Target Prediction (spec §4.3).

One instance per therapist row with a non-empty ``support_strategy[0].strategy_type`` whose
target resolves (strategy target, else the row target); several names map to the group
label. The candidate set is per sample (:func:`common.candidate_target_labels`).
"""
from __future__ import annotations

from pipeline import taxonomy
from pipeline.benchmark.tasks.common import candidate_target_labels, prior_context, support_target, therapist_turn_keys

DEFAULT_OPTIONS: dict = {}


def instances(sample: dict, inputs: list[dict], context_size: int) -> list[dict]:
    group = taxonomy.group_label(sample["scenario"])
    candidates = candidate_target_labels(sample)
    out = []
    for row in sample["rows"]:
        if not taxonomy.is_therapist(row["primary_speaker"]):
            continue
        gold, source = support_target(row, group)
        if not gold:
            continue
        k = row["row_index"]
        out.append(
            {
                **therapist_turn_keys(sample, k, "stp"),
                "target_primary_speaker": row["primary_speaker"],
                # Gold is always in the set (the set scans every therapist row's targets);
                # appended defensively as the scripts do.
                "candidate_target_labels": candidates if gold in candidates else candidates + [gold],
                "prior_context": prior_context(inputs, k, context_size),
                "label": gold,
                "label_source": source,
            }
        )
    return out
