"""Label taxonomies, loaded once from ``annotation_schemas/taxonomies.yaml``.

This module is the only reader of that file; every other module asks here for label names.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal

import yaml

from pipeline.config import SCHEMAS_DIR

Scenario = Literal["couple", "family"]
SCENARIOS: tuple[str, ...] = ("couple", "family")
THERAPIST = "Therapist"


@lru_cache(maxsize=1)
def _load() -> dict:
    with open(SCHEMAS_DIR / "taxonomies.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _names(items: list[dict]) -> tuple[str, ...]:
    return tuple(item["name"] for item in items)


def check_scenario(scenario: str) -> str:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of {', '.join(SCENARIOS)}")
    return scenario


def group_label(scenario: str) -> str:
    """``Couple`` or ``Family``: the collective addressee of a scenario."""
    return _load()["entities"]["group_labels"][check_scenario(scenario)]


def group_label_alone(scenario: str) -> bool:
    """V10: in this scenario a support target naming the group label names nobody else."""
    return check_scenario(scenario) in _load()["entities"].get("group_label_alone", ())


def group_labels() -> tuple[str, ...]:
    return tuple(_load()["entities"]["group_labels"].values())


def utterance_types() -> tuple[str, ...]:
    return _names(_load()["utterance_types"])


def relation_patterns(scenario: str) -> tuple[str, ...]:
    return _names(_load()["relation_patterns"][check_scenario(scenario)])


def support_strategies(scenario: str) -> tuple[str, ...]:
    return _names(_load()["support_strategies"][check_scenario(scenario)])


def guidance(kind: str, scenario: str | None = None) -> dict[str, str]:
    """Annotator guidance per label for ``utterance_types``, ``relation_patterns`` or ``support_strategies``."""
    items = _load()[kind]
    if isinstance(items, dict):
        items = items[check_scenario(scenario or "")]
    return {item["name"]: item["guidance"] for item in items}


def entity_rules() -> list[str]:
    return list(_load()["entities"]["rules"])


def allowed_entities(scenario: str, participants: list[str] | tuple[str, ...]) -> frozenset[str]:
    """V2's closed entity set: participants, Therapist and the scenario's group label."""
    return frozenset(participants) | {THERAPIST, group_label(scenario)}


def fallback_addressee(speaker: str | None, scenario: str | None) -> list[str]:
    """Whom a row speaks to when its addressee came out empty (it was the row's own speaker once
    two voices were named as one person): the therapist, or for the therapist's own row the
    scenario's group; nobody when the scenario is unknown. The segmenter's voice renaming and the
    pull of a voice-naming round both apply it, so drafts and gold rows agree."""
    if speaker != THERAPIST:
        return [THERAPIST]
    return [group_label(scenario)] if scenario in SCENARIOS else []


def is_therapist(speaker: str | None) -> bool:
    return speaker == THERAPIST


def is_client_speaker(speaker: str | None) -> bool:
    """A row spoken by a client: not the therapist and not a group label (ER/VP filter)."""
    return bool(speaker) and speaker != THERAPIST and speaker not in group_labels()
