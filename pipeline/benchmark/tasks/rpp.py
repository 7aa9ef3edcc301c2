"""RPP - Relation Pattern Prediction (spec §4.2).

One instance per therapist row whose ``relation_cycle_state`` is a non-empty label of the
scenario's taxonomy; the input is prior rows only. The scripts' fallback that puts the gold
label first on request errors is an evaluation bug and has no counterpart here.
"""
from __future__ import annotations

from pipeline import taxonomy
from pipeline.benchmark.tasks.common import prior_context, therapist_turn_keys

DEFAULT_OPTIONS = {"speaker_filter": "therapist"}  # or "any" (same set on RESCUE data)


def instances(sample: dict, inputs: list[dict], context_size: int, speaker_filter: str = "therapist") -> list[dict]:
    if speaker_filter not in ("therapist", "any"):
        raise ValueError(f"RPP speaker_filter must be 'therapist' or 'any', not {speaker_filter!r}")
    labels = taxonomy.relation_patterns(sample["scenario"])
    out = []
    for row in sample["rows"]:
        if speaker_filter == "therapist" and not taxonomy.is_therapist(row["primary_speaker"]):
            continue
        state = (row.get("relation_cycle_state") or "").strip()
        if state not in labels:  # "" = no clear pattern; out-of-taxonomy labels are dropped too
            continue
        k = row["row_index"]
        out.append(
            {
                **therapist_turn_keys(sample, k, "rpp"),
                "target_primary_speaker": row["primary_speaker"],
                "candidate_relation_labels": list(labels),
                "prior_context": prior_context(inputs, k, context_size),
                "label": state,
                "label_reason": row.get("relation_cycle_reason"),
                "label_evidence_rows": list(row.get("relation_cycle_evidence_rows") or []),
            }
        )
    return out
