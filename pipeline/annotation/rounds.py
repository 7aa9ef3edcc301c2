"""Annotation rounds, loaded from ``annotation_schemas/rounds/*.yaml``.

A round says which rows get controls (``applies_to``), which fields annotators fill, each
field's type, allowed values, whether it is required, and how agreement is measured on it.
The Label Studio configs (:mod:`pipeline.annotation.ls_config`), the result validator
(:mod:`pipeline.annotation.pull`) and the agreement code all read these objects; label names
come from :mod:`pipeline.taxonomy`, never from here.

Field names are row-schema keys (``schemas.ROWS``) and label values are stored as JSON of the
row-schema type: ``text``/``choice`` -> str, ``multichoice`` -> list[str], ``number`` -> int,
``rows`` -> list[int] (0-based positions, like the release's evidence rows),
``records`` -> list[dict] (one dict per filled slot, keys = subfield names).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from pipeline import schemas, taxonomy
from pipeline.config import SCHEMAS_DIR

ROUNDS_DIR = SCHEMAS_DIR / "rounds"

FIELD_TYPES = ("text", "choice", "multichoice", "number", "rows", "records", "const")
# Agreement metrics understood by the agreement stage; "none" = free text, judged in adjudication.
METRICS = ("nominal", "interval", "masi", "presence", "none")
DEFAULT_THRESHOLD = 0.667  # Krippendorff's alpha >= 0.667: the usual floor for tentative conclusions
APPLIES_TO = ("all", "client", "therapist")
# Per-sample value sources resolved from the sample's participants (see ``Field.options``).
DYNAMIC_VALUES = ("entities", "clients", "rows")
TAXONOMY_LISTS = {
    "utterance_types": lambda scenario: taxonomy.utterance_types(),
    "relation_patterns": taxonomy.relation_patterns,
    "support_strategies": taxonomy.support_strategies,
}


class RoundDefinitionError(ValueError):
    """A round YAML file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool = False
    metric: str = "none"
    threshold: float = DEFAULT_THRESHOLD
    values: str | None = None  # "entities" | "clients" | "rows" | "taxonomy:<list>"
    empty_choice: str | None = None  # a choice shown to annotators that stores "" (or [] for records)
    distinct_from: str | None = None  # sibling field (or row key) this value must not contain
    group_label_alone: tuple[str, ...] = ()  # scenarios where the group label must be the only item
    minimum: float | None = None
    maximum: float | None = None
    prefill: bool = False
    max_items: int = 1
    key: tuple[str, ...] = ()
    subfields: tuple["Field", ...] = ()
    const: str | None = None

    @property
    def is_dynamic(self) -> bool:
        return self.values in DYNAMIC_VALUES

    def labels(self, scenario: str) -> tuple[str, ...]:
        """The static label list of a taxonomy-backed choice (without the empty choice)."""
        if not self.values or not self.values.startswith("taxonomy:"):
            return ()
        return TAXONOMY_LISTS[self.values.split(":", 1)[1]](scenario)

    def options(self, scenario: str, participants: list[str] | tuple[str, ...] = (),
                n_rows: int = 0) -> tuple[str, ...]:
        """Every value an annotator may pick for this sample, as shown in Label Studio."""
        group = taxonomy.group_label(scenario)
        if self.values == "entities":
            return (*participants, taxonomy.THERAPIST, group)
        if self.values == "clients":
            return (*participants, group)
        if self.values == "rows":
            return tuple(str(i) for i in range(1, n_rows + 1))  # row_index as displayed
        labels = self.labels(scenario)
        return (*labels, self.empty_choice) if self.empty_choice else labels

    def subfield(self, name: str) -> "Field":
        for sub in self.subfields:
            if sub.name == name:
                return sub
        raise KeyError(name)


@dataclass(frozen=True)
class Round:
    name: str
    version: int
    order: int
    title: str
    applies_to: str
    annotators: int
    instructions: str
    fields: tuple[Field, ...]
    source: Path

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"round {self.name!r} has no field {name!r}")

    def applies(self, primary_speaker: str | None) -> bool:
        """Whether a row spoken by ``primary_speaker`` gets controls in this round."""
        if self.applies_to == "client":
            return taxonomy.is_client_speaker(primary_speaker)
        if self.applies_to == "therapist":
            return taxonomy.is_therapist(primary_speaker)
        return True

    def agreement_fields(self) -> list[tuple[str, str, float]]:
        """``(path, metric, threshold)`` for every field and record subfield with a metric.

        Paths are ``field`` or ``field.subfield``; subfields of records compare records of two
        annotators matched on ``Field.key``.
        """
        out = []
        for f in self.fields:
            if f.metric != "none":
                out.append((f.name, f.metric, f.threshold))
            for sub in f.subfields:
                if sub.metric != "none":
                    out.append((f"{f.name}.{sub.name}", sub.metric, sub.threshold))
        return out


def _parse_field(raw: dict, where: str, sibling_names: set[str] | None = None) -> Field:
    if not isinstance(raw, dict) or "name" not in raw:
        raise RoundDefinitionError(f"{where}: every field needs a 'name'")
    name = raw["name"]
    where = f"{where}: field {name!r}"
    ftype = raw.get("type")
    if ftype not in FIELD_TYPES:
        raise RoundDefinitionError(f"{where}: type {ftype!r} is not one of {', '.join(FIELD_TYPES)}")
    agreement = raw.get("agreement") or {}
    metric = agreement.get("metric", "none")
    if metric not in METRICS:
        raise RoundDefinitionError(f"{where}: agreement metric {metric!r} is not one of {', '.join(METRICS)}")
    values = raw.get("values")
    if isinstance(values, dict):
        if set(values) != {"taxonomy"} or values["taxonomy"] not in TAXONOMY_LISTS:
            raise RoundDefinitionError(
                f"{where}: values must be one of {', '.join(DYNAMIC_VALUES)} or "
                f"{{taxonomy: {' | '.join(TAXONOMY_LISTS)}}}, got {values!r}")
        values = f"taxonomy:{values['taxonomy']}"
    elif values is not None and values not in DYNAMIC_VALUES:
        raise RoundDefinitionError(f"{where}: unknown value source {values!r}")
    other = raw.get("distinct_from")
    if other and other not in (sibling_names or set()) and other not in schemas.ROW_KEYS:
        raise RoundDefinitionError(f"{where}: distinct_from {other!r} is neither a sibling field nor a row key")
    if ftype == "rows":
        values = "rows"  # choices are the sample's rows
    if ftype in ("choice", "multichoice") and values is None:
        raise RoundDefinitionError(f"{where}: a {ftype} field needs 'values'")
    subfields: tuple[Field, ...] = ()
    if ftype == "records":
        raw_subs = raw.get("subfields") or []
        if not raw_subs:
            raise RoundDefinitionError(f"{where}: a records field needs 'subfields'")
        names = {s.get("name") for s in raw_subs if isinstance(s, dict)}
        subfields = tuple(_parse_field(s, where, names) for s in raw_subs)
        for k in raw.get("key") or []:
            if k not in names:
                raise RoundDefinitionError(f"{where}: key {k!r} is not a subfield")
    return Field(
        name=name,
        type=ftype,
        required=bool(raw.get("required", False)),
        metric=metric,
        threshold=float(agreement.get("threshold", DEFAULT_THRESHOLD)),
        values=values,
        empty_choice=raw.get("empty_choice"),
        distinct_from=raw.get("distinct_from"),
        group_label_alone=tuple(s for s in taxonomy.SCENARIOS if taxonomy.group_label_alone(s))
        if raw.get("group_label_alone") else (),
        minimum=raw.get("min"),
        maximum=raw.get("max"),
        prefill=bool(raw.get("prefill", False)),
        max_items=int(raw.get("max_items", 1)),
        key=tuple(raw.get("key") or ()),
        subfields=subfields,
        const=raw.get("value") if ftype == "const" else None,
    )


def parse_round(path: Path) -> Round:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RoundDefinitionError(f"{path}: not valid YAML: {exc}") from exc
    where = str(path)
    for key in ("name", "version", "order", "applies_to", "fields"):
        if key not in (raw or {}):
            raise RoundDefinitionError(f"{where}: missing {key!r}")
    if raw["name"] != path.stem:
        raise RoundDefinitionError(f"{where}: name {raw['name']!r} must equal the file name")
    if raw["applies_to"] not in APPLIES_TO:
        raise RoundDefinitionError(f"{where}: applies_to must be one of {', '.join(APPLIES_TO)}")
    names = {f.get("name") for f in raw["fields"]}
    fields = tuple(_parse_field(f, where, names) for f in raw["fields"])
    return Round(
        name=raw["name"],
        version=int(raw["version"]),
        order=int(raw["order"]),
        title=raw.get("title", raw["name"]),
        applies_to=raw["applies_to"],
        annotators=int(raw.get("annotators", 2)),
        instructions=" ".join(str(raw.get("instructions", "")).split()),
        fields=fields,
        source=path,
    )


@lru_cache(maxsize=None)
def load_round(name: str) -> Round:
    """A round by name; only the rounds in ``annotation_schemas/rounds/`` exist (a name is never a path)."""
    if name not in round_names():
        raise KeyError(f"no annotation round {name!r}; known rounds: {', '.join(round_names())}")
    return parse_round(ROUNDS_DIR / f"{name}.yaml")


def next_round(name: str) -> str | None:
    """The round after ``name`` in annotation order (None after the last); unknown names are an error."""
    names = list(round_names())
    if name not in names:
        raise ValueError(f"unknown round {name!r}; rounds: {', '.join(names)}")
    i = names.index(name)
    return names[i + 1] if i + 1 < len(names) else None


@lru_cache(maxsize=1)
def round_names() -> tuple[str, ...]:
    """All rounds, in annotation order."""
    rounds = [parse_round(p) for p in sorted(ROUNDS_DIR.glob("*.yaml"))]
    return tuple(r.name for r in sorted(rounds, key=lambda r: r.order))
