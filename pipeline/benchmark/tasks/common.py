"""Machinery shared by the six task builders (spec §4.0).

Everything here is deterministic: no randomness, only order-preserving selection with
Python's ``round`` (banker's rounding), exactly as the paper's scripts.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import TypeVar

from pipeline import taxonomy
from pipeline.rows import group_id_of

T = TypeVar("T")


def _spread(items: Sequence[T], limit: int, single_index: int) -> list[T]:
    n = len(items)
    if limit <= 0 or n <= limit:
        return list(items)
    if limit == 1:
        return [items[single_index]]
    picked: list[int] = []
    for r in range(limit):
        pos = round(r * (n - 1) / (limit - 1))  # banker's rounding, as in the scripts
        if pos not in picked:
            picked.append(pos)
    # Dedupe-and-pad: top up with unselected items in order (unreachable for n > limit >= 2,
    # kept so the function matches the scripts for any input).
    for pos in range(n):
        if len(picked) >= limit:
            break
        if pos not in picked:
            picked.append(pos)
    return [items[pos] for pos in sorted(picked)]


def even_sample(items: Sequence[T], limit: int) -> list[T]:
    """ITP's balancing: ``limit`` items spread evenly; a single pick takes the middle item."""
    return _spread(items, limit, len(items) // 2)


def pick_evenly(items: Sequence[T], limit: int) -> list[T]:
    """ER/VP checkpoint sampling: like :func:`even_sample` but a single pick takes the first item."""
    return _spread(items, limit, 0)


def timestamp(row: dict) -> str:
    return "%.3f-%.3f" % (row["start_time"], row["end_time"])


def _keep(items, *required: str) -> list[dict]:
    """The scripts' normaliser: drop sub-items whose person/target/description is empty."""
    return [dict(it) for it in (items or []) if all(it.get(k) for k in required)]


def input_row(row: dict) -> dict:
    """A row as model input: the fields of ``schemas.CONTEXT_ROW`` and nothing else (no gold)."""
    return {
        "row_index": row["row_index"],
        "timestamp": timestamp(row),
        "primary_speaker": row["primary_speaker"],
        "target": list(row.get("target") or []),
        "dialogue_cleaned": row.get("dialogue_cleaned") or "",
        "background_dialogue": _keep(row.get("background_dialogue"), "speaker", "target", "content"),
        "tone_of_voice": row.get("tone_of_voice") or "",
        "body_posture": _keep(row.get("body_posture"), "person", "description"),
        "facial_expressions": _keep(row.get("facial_expressions"), "person", "description"),
        "self_directed_behavior": _keep(row.get("self_directed_behavior"), "person", "description"),
        "interaction_behavior": _keep(row.get("interaction_behavior"), "initiator", "target", "description"),
    }


def prior_context(inputs: list[dict], current_row_index: int, context_size: int) -> list[dict]:
    """Rows ``[max(1, cur - ctx), cur - 1]`` (1-based); ctx < 0 = all prior rows, 0 = none."""
    end = current_row_index - 1  # exclusive slice end in 0-based positions
    if context_size == 0 or end <= 0:
        return []
    start = 0 if context_size < 0 else max(0, end - context_size)
    return inputs[start:end]


def canonical_target(target) -> list[str]:
    """Drop ``Therapist`` and empty strings (order kept, duplicates removed)."""
    out: list[str] = []
    for t in target or []:
        t = (t or "").strip()
        if t and t != taxonomy.THERAPIST and t not in out:
            out.append(t)
    return out


def target_label(target: list[str], group_label: str) -> str:
    """One name -> that name; several -> the scenario's group label; none -> ''."""
    if not target:
        return ""
    return target[0] if len(target) == 1 else group_label


def support_target(row: dict, group_label: str) -> tuple[str, str]:
    """(gold target label, source) of a therapist row with a strategy, else ``("", "none")``."""
    items = row.get("support_strategy") or []
    if not items or not (items[0].get("strategy_type") or "").strip():
        return "", "none"
    target = canonical_target(items[0].get("target"))
    if target:
        return target_label(target, group_label), "support_strategy"
    fallback = canonical_target(row.get("target"))
    if fallback:
        return target_label(fallback, group_label), "row_target_fallback"
    return "", "none"


def candidate_target_labels(sample: dict) -> list[str]:
    """STP's closed target set for a sample (``build_candidate_target_labels``).

    Participants singly, then the group label, then every other target label found on the
    sample's therapist rows (row target and strategy targets; several names -> group label).
    Deliberate deviation: the scripts can list the group label twice; we keep each label once,
    since a duplicate candidate carries no information and distorts top-3 ranking.
    """
    group = taxonomy.group_label(sample["scenario"])
    labels: list[str] = []

    def add(label: str) -> None:
        if label and label not in labels:
            labels.append(label)

    for p in sample.get("participants") or []:
        add(p)
    add(group)
    for row in sample["rows"]:
        if not taxonomy.is_therapist(row["primary_speaker"]):
            continue
        add(target_label(canonical_target(row.get("target")), group))
        for item in row.get("support_strategy") or []:
            add(target_label(canonical_target(item.get("target")), group))
    return labels


def turn_id(sample: dict, row_index: int) -> str:
    """The paper's RPP/STP/SSP id: file stem only (not unique across couples)."""
    return "%s__row%d" % (PurePosixPath(sample["sample_id"]).name, row_index)


def therapist_turn_keys(sample: dict, row_index: int, task: str) -> dict:
    """Key columns of the therapist-turn tasks (RPP, STP, SSP): the row keys, the paper's
    turn_id and the sample's participants."""
    return {**instance_keys(sample, row_index, task), "turn_id": turn_id(sample, row_index),
            "participants": list(sample.get("participants") or [])}


def instance_id(sample_id: str, task: str, row_index: int) -> str:
    """An opaque, stable instance id: ``<task>_`` + 20 hex digits of sha256(task, sample_id, row_index).

    Nothing in it depends on the gold (the paper's ITP ids said ``pos``/``neg``: a model that saw
    the id saw the answer); the same instance keeps its id across releases. The sample and row
    stay readable in the ``sample_id`` / ``row_index`` columns."""
    digest = hashlib.sha256(f"rescue\x1f{task}\x1f{sample_id}\x1f{row_index}".encode("utf-8")).hexdigest()
    return f"{task}_{digest[:20]}"


def instance_keys(sample: dict, row_index: int, task: str) -> dict:
    """The key columns every row-anchored task table starts with (schemas.TASK_KEY_FIELDS)."""
    sid = sample["sample_id"]
    return {"sample_id": sid, "scenario": sample["scenario"], "row_index": row_index,
            "instance_id": instance_id(sid, task, row_index)}


def group_id(sample: dict) -> str:
    return sample.get("group_id") or group_id_of(sample["sample_id"])


def current_row_fields(row: dict, inp: dict) -> dict:
    """ER/VP's flat current-row inputs (names of the paper's er.jsonl / vp.jsonl)."""
    return {
        "timestamp": inp["timestamp"],
        "speaker": row["primary_speaker"],
        "target": inp["target"],
        "dialogue": inp["dialogue_cleaned"],
        "background_dialogue": inp["background_dialogue"],
        "tone_of_voice": inp["tone_of_voice"],
        "body_posture": inp["body_posture"],
        "facial_expressions": inp["facial_expressions"],
        "self_directed_behavior": inp["self_directed_behavior"],
        "interaction_behavior": inp["interaction_behavior"],
    }
