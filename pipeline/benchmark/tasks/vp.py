"""VP - Viewpoint Prediction (spec §4.6).

Client rows with at least one viewpoint whose source is the speaker and whose target and
viewpoint are non-empty; the gold is all such viewpoints. At most ``checkpoints`` rows per
sample, picked evenly; no early cutoff and no word minimum.
"""
from __future__ import annotations

from pipeline import taxonomy
from pipeline.benchmark.tasks.common import current_row_fields, group_id, instance_keys, pick_evenly, prior_context

DEFAULT_OPTIONS = {"checkpoints": 5}


def vp_participants(rows: list[dict]) -> list[str]:
    """First-appearance order over speakers, targets and viewpoint source/target; includes
    ``Therapist``, excludes the group labels (the VP script's rule, e.g. [Alan, Therapist, Evelyn])."""
    groups = set(taxonomy.group_labels())
    seen: list[str] = []

    def add(name) -> None:
        if name and name not in groups and name not in seen:
            seen.append(name)

    for row in rows:
        add(row["primary_speaker"])
        for t in row.get("target") or []:
            add(t)
        for v in row.get("viewpoints_attitudes") or []:
            add(v.get("source"))
            add(v.get("target"))
    return seen


def gold_viewpoints(row: dict) -> list[dict]:
    speaker = row["primary_speaker"]
    return [
        {"source": v["source"], "target": v["target"].strip(), "viewpoint": v["viewpoint"].strip(),
         "attitude": (v.get("attitude") or "").strip()}
        for v in row.get("viewpoints_attitudes") or []
        if v.get("source") == speaker and (v.get("target") or "").strip() and (v.get("viewpoint") or "").strip()
    ]


def instances(sample: dict, inputs: list[dict], context_size: int, checkpoints: int = 5) -> list[dict]:
    candidates = []
    for row in sample["rows"]:
        if taxonomy.is_client_speaker(row["primary_speaker"]):
            gold = gold_viewpoints(row)
            if gold:
                candidates.append((row, gold))
    if not candidates:
        return []
    participants = vp_participants(sample["rows"])
    out = []
    for row, gold in pick_evenly(candidates, checkpoints):
        k = row["row_index"]
        out.append(
            {
                **instance_keys(sample, k, "vp"),
                "group_id": group_id(sample),
                "participants": participants,
                **current_row_fields(row, inputs[k - 1]),
                "prior_context": prior_context(inputs, k, context_size),
                "label": gold,
            }
        )
    return out
