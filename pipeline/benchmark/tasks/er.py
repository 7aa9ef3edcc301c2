"""ER - Emotion Recognition (spec §4.5).

Client rows whose speaker has a gold emotion (the first ``internal_emotion`` item of the
speaker with a description and an intensity that is an integer 0..10), with at least
``min_words`` words; the first 30% of row positions are dropped, then at most
``checkpoints`` rows are picked evenly.
"""
from __future__ import annotations

import math
import re

from pipeline import taxonomy
from pipeline.benchmark.tasks.common import current_row_fields, group_id, instance_keys, pick_evenly, prior_context

DEFAULT_OPTIONS = {"min_words": 5, "checkpoints": 5, "start_ratio": 0.3}
_WORD = re.compile(r"[A-Za-z0-9']+")


def word_count(text: str | None) -> int:
    return len(_WORD.findall(text or ""))


def parse_intensity(value) -> int | None:
    """``int(round(float(v)))`` if that lies in 0..10, else None (the scripts' rule)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(round(float(value)))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 <= number <= 10 else None


def gold_emotion(row: dict) -> tuple[str, int] | None:
    speaker = row["primary_speaker"]
    for item in row.get("internal_emotion") or []:
        if item.get("person") != speaker:
            continue
        description = (item.get("emotion_description") or "").strip()
        intensity = parse_intensity(item.get("intensity"))
        if description and intensity is not None:
            return description, intensity
    return None


def instances(sample: dict, inputs: list[dict], context_size: int, min_words: int = 5,
              checkpoints: int = 5, start_ratio: float = 0.3) -> list[dict]:
    rows = sample["rows"]
    n = len(rows)
    drop = min(n - 1, math.ceil(n * start_ratio))
    candidates = []
    for row in rows:
        if row["row_index"] < drop + 1 or not taxonomy.is_client_speaker(row["primary_speaker"]):
            continue
        if word_count(row.get("dialogue_cleaned")) < min_words:
            continue
        gold = gold_emotion(row)
        if gold:
            candidates.append((row, gold))
    out = []
    for row, (description, intensity) in pick_evenly(candidates, checkpoints):
        k = row["row_index"]
        out.append(
            {
                **instance_keys(sample, k, "er"),
                "group_id": group_id(sample),
                **current_row_fields(row, inputs[k - 1]),
                "prior_context": prior_context(inputs, k, context_size),
                "label": description,
                "label_intensity": intensity,
            }
        )
    return out
