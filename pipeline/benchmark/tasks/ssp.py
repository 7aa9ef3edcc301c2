"""SSP - Support Strategy Prediction (spec §4.4).

One instance per therapist row whose ``support_strategy[0].strategy_type`` is in the
scenario's taxonomy and whose target resolves; the target is given as input
(``known_support_target``). Optionally the target's most recent internal emotion from the
context window is given too (the scripts' ``--include-target-internal-emotion``).
"""
from __future__ import annotations

from pipeline import taxonomy
from pipeline.benchmark.tasks.common import prior_context, support_target, therapist_turn_keys

DEFAULT_OPTIONS = {"include_target_emotion": False}


def _target_emotion(rows: list[dict], k: int, context_size: int, target: str, group: str) -> list[dict]:
    """Most recent emotion items of ``target`` in the window before row k (group: anyone's)."""
    first = 1 if context_size < 0 else max(1, k - context_size)
    for idx in range(k - 1, first - 1, -1):
        items = [
            {"person": it["person"], "emotion_description": it["emotion_description"], "intensity": it.get("intensity")}
            for it in rows[idx - 1].get("internal_emotion") or []
            if it.get("person") and it.get("emotion_description")
            and (it["person"] == target or (target == group and it["person"] != taxonomy.THERAPIST))
        ]
        if items:
            return items
    return []


def instances(sample: dict, inputs: list[dict], context_size: int, include_target_emotion: bool = False) -> list[dict]:
    scenario = sample["scenario"]
    strategies = taxonomy.support_strategies(scenario)
    group = taxonomy.group_label(scenario)
    rows = sample["rows"]
    out = []
    for row in rows:
        if not taxonomy.is_therapist(row["primary_speaker"]):
            continue
        items = row.get("support_strategy") or []
        strategy = (items[0].get("strategy_type") or "").strip() if items else ""
        if strategy not in strategies:
            continue
        target, _ = support_target(row, group)
        if not target:
            continue
        k = row["row_index"]
        out.append(
            {
                **therapist_turn_keys(sample, k, "ssp"),
                "known_support_target": target,
                "candidate_strategy_labels": list(strategies),
                "target_internal_emotion": (
                    _target_emotion(rows, k, context_size, target, group) if include_target_emotion else None
                ),
                "prior_context": prior_context(inputs, k, context_size),
                "label": strategy,
            }
        )
    return out
