"""Label table -> coded matrices: what each field's agreement is computed over.

Input is ``schemas.LABELS`` (one line per round, sample, row, annotator, field; ``value`` is
JSON). Every field is compared with the metric its round definition declares
(``annotation_schemas/rounds/*.yaml``, read by :mod:`pipeline.annotation.rounds`):

- ``nominal``  - categories (utterance_type, relation_cycle_state).
- ``interval`` - numbers (intensity).
- ``masi``     - sets (target lists).
- ``presence`` - optional fields (support_strategy): "present / absent" compared nominally. An
  annotator who labelled the row but left the field out counts as "absent".

The unit is one (sample_id, row_index); a record subfield that is not part of the record key
is compared per matched record (sample_id, row_index, key values). :func:`clean_labels` drops
duplicate annotations (same annotator, unit and field: the most recently updated one is kept)
and unparseable JSON, and reports both: bad data is reported, never fixed silently.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.annotation.rounds import DEFAULT_THRESHOLD
from pipeline.annotation.rounds import METRICS as ROUND_METRICS
from pipeline.quality.coefficients import alpha_from_codes, distance_matrix

Metric = Literal["nominal", "interval", "masi", "presence"]
# The metrics that give a coefficient: every metric a round may declare except "none" (free text).
METRICS: tuple[str, ...] = tuple(m for m in ROUND_METRICS if m != "none")
UNIT = ("sample_id", "row_index")
PRESENT, ABSENT = "present", "absent"


@dataclass(frozen=True)
class FieldRule:
    """What agreement means for one field (``name``) or record subfield (``name = "field.sub"``).

    For a subfield of a records field, ``key`` names the subfields that identify a record
    (the round definition's ``Field.key``): a key subfield is compared per row (the row's key values), any
    other subfield per matched record (unit = sample, row, key values). Rows where an
    annotator wrote no record leave that annotator missing: presence is its own rule.
    """

    name: str
    metric: Metric = "nominal"
    threshold: float = DEFAULT_THRESHOLD
    key: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"field {self.name!r}: unknown agreement metric {self.metric!r}; expected one of {METRICS}")

    @property
    def parent(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def sub(self) -> str | None:
        return self.name.split(".", 1)[1] if "." in self.name else None


def field_rules(round_def: Any) -> list[FieldRule]:
    """The agreement rules of a round: a ``pipeline.annotation.rounds.Round`` (its
    ``agreement_fields()``), a mapping ``{field: metric}`` or an iterable of ``FieldRule``.

    Free-text fields (metric "none") have no rule: they are settled in adjudication.
    """
    if isinstance(round_def, Mapping):
        return [r if isinstance(r, FieldRule) else FieldRule(name, r) for name, r in round_def.items()]
    if hasattr(round_def, "agreement_fields"):
        rules = []
        for path, metric, threshold in round_def.agreement_fields():
            key: tuple[str, ...] = ()
            if "." in path:
                key = tuple(round_def.field(path.split(".", 1)[0]).key)
            rules.append(FieldRule(path, metric, float(threshold), key))
        return rules
    return [r if isinstance(r, FieldRule) else FieldRule(*r) for r in round_def]


def _canonical(value: Any) -> Any:
    """A hashable, order-stable form of a JSON value (dicts/lists as canonical JSON text)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


def agreement_value(value: Any, metric: Metric) -> Any:
    """The comparable value of one label for ``metric``; None = not coded (missing).

    - nominal: the category (strings as they are, records as canonical JSON). ``""`` is a
      category (e.g. "no clear relation pattern"), JSON null is missing.
    - interval: a number; records or lists of records carrying ``intensity`` give their mean
      (internal_emotion lists); an empty list is missing.
    - masi: the set of items (names; records as canonical JSON). ``[]`` is the empty set.
    - presence: "present" for a non-empty value, "absent" for ``[]``, ``""``, ``{}``.
    """
    if value is None:
        return None
    if metric == "nominal":
        return _canonical(value)
    if metric == "presence":
        return PRESENT if value not in ([], "", {}) else ABSENT
    if metric == "masi":
        items = value if isinstance(value, list) else [value]
        return frozenset(_canonical(v) for v in items)
    if metric == "interval":
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value)
        items = value if isinstance(value, list) else [value]
        nums = [float(v["intensity"]) for v in items if isinstance(v, dict) and v.get("intensity") is not None]
        return float(np.mean(nums)) if nums else None
    raise ValueError(f"unknown metric {metric!r}")


@dataclass
class Coded:
    """One field of one round as a units x annotators matrix of value codes (-1 = missing)."""

    field: str
    metric: Metric
    units: list[tuple[str, int]]
    annotators: list[str]
    domain: list  # value of each code
    codes: np.ndarray  # int32, shape (units, annotators)

    @property
    def distance(self) -> np.ndarray:
        if not hasattr(self, "_distance"):
            self._distance = distance_matrix(self.domain, self.metric)
        return self._distance

    def counts(self, unit_mask: np.ndarray | None = None, annotator_idx: Iterable[int] | None = None) -> np.ndarray:
        codes = self.codes if unit_mask is None else self.codes[unit_mask]
        if annotator_idx is not None:
            codes = codes[:, list(annotator_idx)]
        out = np.zeros((codes.shape[0], len(self.domain)), dtype=np.float64)
        u, a = np.nonzero(codes >= 0)
        np.add.at(out, (u, codes[u, a]), 1.0)
        return out

    def alpha(self, unit_mask: np.ndarray | None = None, annotator_idx: Iterable[int] | None = None) -> float:
        if not self.domain:
            return math.nan
        codes = self.codes if unit_mask is None else self.codes[unit_mask]
        if annotator_idx is not None:
            codes = codes[:, list(annotator_idx)]
        return alpha_from_codes(codes, self.distance)


def read_labels(path_or_table: Any) -> pl.DataFrame:
    """The label table as a polars frame (a Parquet path, a pyarrow table or a frame)."""
    if isinstance(path_or_table, pl.DataFrame):
        return path_or_table
    if isinstance(path_or_table, pa.Table):
        return pl.from_arrow(path_or_table)
    return pl.read_parquet(path_or_table)


def clean_labels(labels: Any) -> tuple[pl.DataFrame, list[dict]]:
    """Drop duplicate annotations (keep the latest) and unparseable values; report both.

    Returns the cleaned frame with a parsed ``parsed`` column (Python objects) and a list of
    issues ``{kind, round, sample_id, row_index, annotator, field, message}``.
    """
    df = read_labels(labels)
    issues: list[dict] = []
    key = ["round", "sample_id", "row_index", "annotator", "field"]
    if df.height:
        df = df.with_row_index("_pos").sort(
            ["updated_at", "annotation_id", "_pos"], descending=True, nulls_last=True
        )
        dup_mask = df.select(pl.struct(key).is_duplicated()).to_series()
        if dup_mask.any():
            dups = df.filter(dup_mask)
            for grp in dups.group_by(key, maintain_order=True).agg(pl.col("annotation_id")).iter_rows(named=True):
                kept, *dropped = grp["annotation_id"]
                issues.append({
                    "kind": "duplicate", **{k: grp[k] for k in key},
                    "message": f"{len(dropped) + 1} annotations for one unit and field; kept annotation "
                               f"{kept} (latest update), ignored {dropped}",
                })
        df = df.unique(subset=key, keep="first", maintain_order=True).sort("_pos").drop("_pos")
    parsed, bad = [], []
    scalars: dict[str, Any] = {}  # most values are a few repeated labels: parse each once
    for i, raw in enumerate(df["value"].to_list()):
        if raw in scalars:
            parsed.append(scalars[raw])
            continue
        try:
            v = None if raw is None else json.loads(raw)
        except (TypeError, ValueError) as exc:
            parsed.append(None)
            bad.append(i)
            rec = df.row(i, named=True)
            issues.append({"kind": "bad_json", **{k: rec[k] for k in key},
                           "message": f"value is not JSON ({exc}): {str(raw)[:60]!r}"})
            continue
        if not isinstance(v, (list, dict)):
            scalars[raw] = v
        parsed.append(v)
    df = df.with_columns(pl.Series("parsed", parsed, dtype=pl.Object))
    if bad:
        df = df.with_row_index("_i").filter(~pl.col("_i").is_in(bad)).drop("_i")
    return df, issues


def _observations(fdf: pl.DataFrame, rule: FieldRule) -> Iterable[tuple[tuple[str, int, str], str, Any]]:
    """(unit, annotator, raw value) for one rule; units are (sample_id, row_index, part)."""
    rows = zip(fdf["sample_id"].to_list(), fdf["row_index"].to_list(), fdf["annotator"].to_list(),
               fdf["parsed"].to_list())
    if rule.sub is None:
        for sid, ri, ann, val in rows:
            yield (sid, ri, ""), ann, val
        return
    sub, key = rule.sub, rule.key
    is_key = sub in key
    for sid, ri, ann, val in rows:
        if not val:
            continue  # no record: missing for this subfield (presence is measured on the field)
        records = [r for r in val if isinstance(r, dict)]
        if not records:
            continue
        if is_key:
            found = [r.get(sub) for r in records]
            yield (sid, ri, ""), ann, found[0] if len(found) == 1 else sorted(found, key=_canonical_str)
            continue
        for pos, r in enumerate(records):
            part = "\x1f".join(str(r.get(k)) for k in key) if key else str(pos)
            yield (sid, ri, part), ann, r.get(sub)


def _canonical_str(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def code_field(df: pl.DataFrame, round_name: str, rule: FieldRule,
               units: list[tuple[str, int, str]] | None = None,
               annotators: list[str] | None = None) -> tuple[Coded, list[dict]]:
    """The coded matrix of one rule from a cleaned label frame (``clean_labels``).

    ``units``: the round's rows as (sample_id, row_index, ""); record subfields add their own
    (sample_id, row_index, key) units.
    """
    rdf = df.filter(pl.col("round") == round_name)
    if units is None:
        units = sorted(set(zip(rdf["sample_id"].to_list(), rdf["row_index"].to_list(), [""] * rdf.height)))
    if annotators is None:
        annotators = sorted(set(rdf["annotator"].to_list()))
    a_index = {a: i for i, a in enumerate(annotators)}
    fdf = rdf.filter(pl.col("field") == rule.parent)
    obs: list[tuple[tuple, int, Any]] = []
    issues: list[dict] = []
    for unit, ann, val in _observations(fdf, rule):
        try:
            v = agreement_value(val, rule.metric)
        except (TypeError, ValueError, KeyError) as exc:
            issues.append({"kind": "bad_value", "round": round_name, "sample_id": unit[0], "row_index": unit[1],
                           "annotator": ann, "field": rule.name,
                           "message": f"cannot read {json.dumps(val)[:60]} as {rule.metric}: {exc}"})
            continue
        if v is not None:
            obs.append((unit, a_index[ann], v))
    if rule.sub is not None:
        units = sorted({u for u, _, _ in obs})
    u_index = {u: i for i, u in enumerate(units)}
    values: dict[Any, int] = {}
    codes = np.full((len(units), len(annotators)), -1, dtype=np.int32)
    for unit, ai, v in obs:
        codes[u_index[unit], ai] = values.setdefault(v, len(values))
    if rule.metric == "presence" and rule.sub is None:
        # An annotator who labelled the row (any field of the round) but not this optional field
        # said "absent"; one who never saw the row stays missing.
        absent = values.setdefault(ABSENT, len(values))
        seen = np.zeros(codes.shape, dtype=bool)
        ui = [u_index.get((s, r, "")) for s, r in zip(rdf["sample_id"].to_list(), rdf["row_index"].to_list())]
        ai = [a_index[a] for a in rdf["annotator"].to_list()]
        keep = [k for k, u in enumerate(ui) if u is not None]
        if keep:
            seen[np.array([ui[k] for k in keep]), np.array([ai[k] for k in keep])] = True
        codes[seen & (codes < 0)] = absent
    domain = [None] * len(values)
    for v, i in values.items():
        domain[i] = v
    if domain:  # a sorted domain keeps tables, plots and confusion matrices in a stable order
        if rule.metric == "interval":
            order = list(np.argsort(np.asarray(domain, dtype=np.float64), kind="stable"))
        else:
            order = sorted(range(len(domain)), key=lambda i: _sort_key(domain[i]))
        remap = np.empty(len(order), dtype=np.int32)
        remap[order] = np.arange(len(order), dtype=np.int32)
        codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1).astype(np.int32)
        domain = [domain[i] for i in order]
    return Coded(rule.name, rule.metric, units, annotators, domain, codes), issues


def _sort_key(v: Any) -> tuple:
    if isinstance(v, frozenset):
        return (len(v), sorted(map(str, v)))
    return (0, [str(v)])


def field_of(rnd: Any, path: str | None) -> Any:
    """The round definition's field (``field`` or ``field.subfield``) a label belongs to; None
    when the round or the path is unknown (then a label is shown as it is stored)."""
    if rnd is None or not path:
        return None
    parent, _, sub = path.partition(".")
    try:
        f = rnd.field(parent)
        return f.subfield(sub) if sub else f
    except (KeyError, AttributeError):
        return None


def _one_text(v: Any, rnd: Any, path: str | None, f: Any) -> str:
    if f is None:
        return '""' if v == "" else str(v)
    if f.type == "rows" and isinstance(v, int) and not isinstance(v, bool):
        return str(v + 1)  # stored as 0-based positions; annotators pick the printed (1-based) rows
    if v == "":
        return f.empty_choice or "(empty)"
    if isinstance(v, str) and (f.values or "").startswith("taxonomy:"):
        from pipeline.annotation.round_ui import choice_text

        return choice_text(rnd, path, v)
    return str(v)


def label_text(v: Any, rnd: Any = None, path: str | None = None) -> str:
    """A printable name of a domain value. With the round definition (``rnd``) and the field's
    path (``field`` or ``field.subfield``), in the words annotators see: a choice as its button
    shows it (the round YAML's ``shown``), the empty choice by its name ("no clear pattern"), rows
    by their printed 1-based numbers. Without them, the value as stored (``""`` for empty)."""
    f = field_of(rnd, path)
    if isinstance(v, frozenset):
        if f is not None and f.type == "rows":
            rows = sorted(x for x in v if isinstance(x, int))
            return ("rows " + ", ".join(str(x + 1) for x in rows)) if rows else "no rows"
        return "{" + ", ".join(sorted(_one_text(x, rnd, path, f) for x in v)) + "}"
    return _one_text(v, rnd, path, f)


def confusion(coded: Coded, i: int, j: int) -> np.ndarray:
    both = (coded.codes[:, i] >= 0) & (coded.codes[:, j] >= 0)
    V = len(coded.domain)
    conf = np.zeros((V, V), dtype=np.int64)
    np.add.at(conf, (coded.codes[both, i], coded.codes[both, j]), 1)
    return conf



def label_scenarios(df: pl.DataFrame) -> dict[str, str]:
    """sample_id -> scenario from the label table's ``scenario`` column (pull writes it from the
    project the task came from); samples without one are left out."""
    if "scenario" not in df.columns:
        return {}
    pairs = df.select(["sample_id", "scenario"]).drop_nulls().unique()
    return dict(zip(pairs["sample_id"].to_list(), pairs["scenario"].to_list()))
