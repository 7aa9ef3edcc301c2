"""Inter-annotator agreement per round and field, computed from the long label table.

Input is ``schemas.LABELS`` (one line per round, sample, row, annotator, field; ``value`` is
JSON). Every field is compared with the metric its round definition declares:

- ``nominal``  - categories (utterance_type, relation_cycle_state): Krippendorff's alpha with
  the 0/1 distance, pairwise Cohen's kappa, Fleiss' kappa when every unit has the same number
  of raters.
- ``interval`` - numbers (intensity): alpha with the squared difference.
- ``masi``     - sets (target lists): alpha with the MASI distance (Passonneau 2006).
- ``presence`` - optional fields (support_strategy): "present / absent" compared nominally. An
  annotator who labelled the row but left the field out counts as "absent".

The unit is one (sample_id, row_index). Alpha is computed with our own vectorised
coincidence-matrix code (``alpha_from_counts``) because MASI needs a distance matrix over
set values and the per-label / per-annotator breakdowns call it many times; the tests check it
against the ``krippendorff`` package and the published worked examples.

Bad data is reported, not fixed silently: duplicate annotations (same annotator, unit and
field) keep the most recently updated one and are listed; unparseable JSON is listed and left
out; annotators who covered fewer units than the round has are listed with their coverage.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa

Metric = Literal["nominal", "interval", "masi", "presence"]
METRICS: tuple[str, ...] = ("nominal", "interval", "masi", "presence")
DEFAULT_THRESHOLD = 0.667  # Krippendorff's lowest acceptable alpha for tentative conclusions
UNIT = ("sample_id", "row_index")
PRESENT, ABSENT = "present", "absent"


@dataclass(frozen=True)
class FieldRule:
    """What agreement means for one field (``name``) or record subfield (``name = "field.sub"``).

    For a subfield of a records field, ``key`` names the subfields that identify a record
    (issue #4's ``Field.key``): a key subfield is compared per row (the row's key values), any
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


# --- the coefficients --------------------------------------------------------------------


def alpha_from_counts(counts: np.ndarray, distance: np.ndarray) -> float:
    """Krippendorff's alpha from a units x values count matrix and a values x values distance.

    ``counts[u, v]`` = how many coders gave value v to unit u. Units with fewer than two values
    are not pairable and drop out, exactly as in Krippendorff (2011). Returns NaN when alpha is
    undefined (no pairable unit, or no expected disagreement: everybody used one value).
    """
    counts = np.asarray(counts, dtype=np.float64)
    m = counts.sum(axis=1)
    pairable = m >= 2
    if not pairable.any():
        return math.nan
    c = counts[pairable]
    w = 1.0 / (m[pairable] - 1.0)
    # coincidences o = sum_u (c_u c_u^T - diag(c_u)) / (m_u - 1): one matmul, no N x V x V array
    o = (c * w[:, None]).T @ c - np.diag((c * w[:, None]).sum(axis=0))
    n_v = o.sum(axis=0)
    n = n_v.sum()
    e = (np.outer(n_v, n_v) - np.diag(n_v)) / (n - 1.0)
    d_e = float((e * distance).sum())
    if d_e <= 0:
        return math.nan
    return 1.0 - float((o * distance).sum()) / d_e


def alpha_from_codes(codes: np.ndarray, distance: np.ndarray) -> float:
    """Krippendorff's alpha from a units x coders matrix of value codes (-1 = missing).

    Same coefficient as :func:`alpha_from_counts`, computed from the coder pairs inside each
    unit (O(units x coders^2)) instead of a units x values count matrix (O(units x values^2)):
    set-valued fields can have thousands of distinct values.
    """
    codes = np.asarray(codes)
    present = codes >= 0
    m = present.sum(axis=1)
    keep = m >= 2
    if not keep.any():
        return math.nan
    codes, present, m = codes[keep], present[keep], m[keep]
    w = 1.0 / (m - 1.0)
    V = distance.shape[0]
    n_v = np.bincount(codes[present], minlength=V).astype(np.float64)
    n = n_v.sum()
    d_o = 0.0
    A = codes.shape[1]
    for i in range(A):
        for j in range(A):
            if i != j:
                both = present[:, i] & present[:, j]
                d_o += float((w[both] * distance[codes[both, i], codes[both, j]]).sum())
    d_e = float(n_v @ distance @ n_v - (n_v * np.diag(distance)).sum()) / (n - 1.0)
    if d_e <= 0:
        return math.nan
    return 1.0 - d_o / d_e


def masi_matrix(sets: list[frozenset]) -> np.ndarray:
    """Pairwise MASI distances of a list of sets, vectorised over a membership matrix."""
    items = {x: k for k, x in enumerate(sorted({x for s in sets for x in s}, key=str))}
    mem = np.zeros((len(sets), max(1, len(items))), dtype=np.float32)
    for r, s in enumerate(sets):
        for x in s:
            mem[r, items[x]] = 1.0
    size = mem.sum(axis=1).astype(np.float64)
    inter = (mem @ mem.T).astype(np.float64)
    union = size[:, None] + size[None, :] - inter
    jaccard = np.divide(inter, union, out=np.ones_like(inter), where=union > 0)
    a_in_b = inter == size[:, None]
    b_in_a = inter == size[None, :]
    mono = np.where(a_in_b & b_in_a, 1.0, np.where(a_in_b | b_in_a, 2 / 3, np.where(inter > 0, 1 / 3, 0.0)))
    return 1.0 - jaccard * mono


def masi_distance(a: frozenset, b: frozenset) -> float:
    """MASI distance (Passonneau 2006): 1 - Jaccard * monotonicity."""
    if a == b:
        return 0.0
    union = len(a | b)
    inter = len(a & b)
    if inter == 0:
        return 1.0
    m = 2 / 3 if (a <= b or b <= a) else 1 / 3
    return 1.0 - (inter / union) * m


def distance_matrix(domain: list, metric: Metric) -> np.ndarray:
    n = len(domain)
    if metric in ("nominal", "presence"):
        return 1.0 - np.eye(n)
    if metric == "interval":
        v = np.asarray(domain, dtype=np.float64)
        return (v[:, None] - v[None, :]) ** 2
    if metric == "masi":
        return masi_matrix(list(domain))
    raise ValueError(f"unknown metric {metric!r}")


def cohen_kappa(confusion: np.ndarray) -> float:
    """Cohen's kappa from a square confusion matrix of two raters (rows: rater A)."""
    c = np.asarray(confusion, dtype=np.float64)
    n = c.sum()
    if n == 0:
        return math.nan
    p_o = np.trace(c) / n
    p_e = float((c.sum(axis=1) * c.sum(axis=0)).sum()) / n**2
    return math.nan if p_e >= 1 else (p_o - p_e) / (1 - p_e)


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' kappa from a units x categories count matrix with the same rater count per unit."""
    c = np.asarray(counts, dtype=np.float64)
    m = c.sum(axis=1)
    if len(c) == 0 or m.min() != m.max() or m[0] < 2:
        return math.nan
    r = m[0]
    p_j = c.sum(axis=0) / c.sum()
    p_i = ((c * c).sum(axis=1) - r) / (r * (r - 1))
    p_bar, p_e = p_i.mean(), float((p_j**2).sum())
    return math.nan if p_e >= 1 else (p_bar - p_e) / (1 - p_e)


# --- label table -> coded matrix ---------------------------------------------------------


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


def label_text(v: Any) -> str:
    """A short printable name of a domain value."""
    if isinstance(v, frozenset):
        return "{" + ", ".join(sorted(map(str, v))) + "}"
    if v == "":
        return '""'
    return str(v)


# --- breakdowns ----------------------------------------------------------------------------


def scenario_of(sample_id: str) -> str:
    """The scenario a sample id implies (the release's rule: family ids start with family_therapy/)."""
    return "family" if sample_id.startswith("family_therapy/") else "couple"


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def pairwise(coded: Coded) -> list[dict]:
    """Per annotator pair: units both coded, percent agreement, alpha, Cohen's kappa (categories)."""
    out = []
    V = len(coded.domain)
    for i, j in combinations(range(len(coded.annotators)), 2):
        both = (coded.codes[:, i] >= 0) & (coded.codes[:, j] >= 0)
        a, b = coded.codes[both, i], coded.codes[both, j]
        rec = {"a": coded.annotators[i], "b": coded.annotators[j], "n_units": int(both.sum()),
               "percent_agreement": _nan_to_none(float((a == b).mean()) if len(a) else math.nan),
               "alpha": _nan_to_none(coded.alpha(both, (i, j))), "cohen_kappa": None}
        if coded.metric in ("nominal", "presence") and len(a):
            conf = np.zeros((V, V))
            np.add.at(conf, (a, b), 1)
            rec["cohen_kappa"] = _nan_to_none(cohen_kappa(conf))
        out.append(rec)
    return out


def confusion(coded: Coded, i: int, j: int) -> np.ndarray:
    both = (coded.codes[:, i] >= 0) & (coded.codes[:, j] >= 0)
    V = len(coded.domain)
    conf = np.zeros((V, V), dtype=np.int64)
    np.add.at(conf, (coded.codes[both, i], coded.codes[both, j]), 1)
    return conf


def per_label(coded: Coded) -> list[dict]:
    """One-vs-rest alpha per category (nominal) or per set member (masi)."""
    if coded.metric == "nominal":
        labels = list(range(len(coded.domain)))
        names = [label_text(v) for v in coded.domain]
        member = lambda k: coded.codes == k  # noqa: E731
    elif coded.metric == "masi":
        items = sorted({x for s in coded.domain for x in s}, key=str)
        names = [str(x) for x in items]
        labels = items
        has = {x: np.array([x in s for s in coded.domain] + [False]) for x in items}
        member = lambda x: has[x][coded.codes]  # noqa: E731  (index -1 hits the trailing False)
    else:
        return []
    out = []
    present = coded.codes >= 0
    for lab, name in zip(labels, names):
        binary = np.where(present, member(lab).astype(np.int32), -1)
        out.append({"label": name, "n": int((binary == 1).sum()),
                    "alpha": _nan_to_none(alpha_from_codes(binary, 1.0 - np.eye(2)))})
    return out


def per_annotator(coded: Coded, pairs: list[dict]) -> list[dict]:
    """Each annotator against the others: mean pairwise alpha and alpha of the rest without them."""
    out = []
    n = len(coded.annotators)
    n_units = len(coded.units)
    for i, ann in enumerate(coded.annotators):
        mine = [p["alpha"] for p in pairs if ann in (p["a"], p["b"]) and p["alpha"] is not None]
        kap = [p["cohen_kappa"] for p in pairs if ann in (p["a"], p["b"]) and p["cohen_kappa"] is not None]
        others = [k for k in range(n) if k != i]
        coded_n = int((coded.codes[:, i] >= 0).sum())
        out.append({
            "annotator": ann, "n_units": coded_n, "coverage": round(coded_n / n_units, 6) if n_units else None,
            "alpha_vs_others": _nan_to_none(float(np.mean(mine)) if mine else math.nan),
            "kappa_vs_others": _nan_to_none(float(np.mean(kap)) if kap else math.nan),
            "alpha_without": _nan_to_none(coded.alpha(None, others)) if len(others) >= 2 else None,
        })
    return out


@dataclass
class FieldAgreement:
    round: str
    field: str
    metric: str
    threshold: float
    alpha: float | None
    n_units: int
    n_pairable: int
    n_annotators: int
    percent_agreement: float | None
    unanimous: float | None
    fleiss_kappa: float | None
    passed: bool | None  # None: alpha undefined (no pairable unit or no variation)
    pairs: list[dict] = field(default_factory=list)
    labels: list[dict] = field(default_factory=list)
    annotators: list[dict] = field(default_factory=list)
    scenarios: list[dict] = field(default_factory=list)
    coded: Coded | None = field(default=None, repr=False)

    def summary(self) -> dict:
        return {k: getattr(self, k) for k in ("round", "field", "metric", "threshold", "alpha", "n_units",
                                              "n_pairable", "n_annotators", "percent_agreement", "unanimous",
                                              "fleiss_kappa", "passed")}

    def to_dict(self) -> dict:
        return {**self.summary(), "pairs": self.pairs, "labels": self.labels, "annotators": self.annotators,
                "scenarios": self.scenarios}


def field_agreement(coded: Coded, round_name: str, threshold: float,
                    scenarios: Mapping[str, str] | None = None) -> FieldAgreement:
    codes = coded.codes
    present = codes >= 0
    m = present.sum(axis=1)
    pairable = m >= 2
    a = coded.alpha()
    # percent agreement: share of agreeing coder pairs within each pairable unit, averaged
    agree = np.zeros(len(codes))
    for i, j in combinations(range(codes.shape[1]), 2):
        agree += present[:, i] & present[:, j] & (codes[:, i] == codes[:, j])
    all_pairs = m * (m - 1) / 2.0
    pct = float((agree[pairable] / all_pairs[pairable]).mean()) if pairable.any() else math.nan
    unan = float((agree[pairable] == all_pairs[pairable]).mean()) if pairable.any() else math.nan
    fk = math.nan
    if coded.metric in ("nominal", "presence") and pairable.any():
        fk = fleiss_kappa(coded.counts(pairable))
    pairs = pairwise(coded)
    scen = []
    scen_of = [(scenarios or {}).get(u[0]) or scenario_of(u[0]) for u in coded.units]
    for s in sorted(set(scen_of)):
        mask = np.array([x == s for x in scen_of])
        scen.append({"scenario": s, "n_units": int(mask.sum()), "alpha": _nan_to_none(coded.alpha(mask))})
    alpha_v = _nan_to_none(a)
    return FieldAgreement(
        round=round_name, field=coded.field, metric=coded.metric, threshold=threshold, alpha=alpha_v,
        n_units=len(coded.units), n_pairable=int(pairable.sum()), n_annotators=len(coded.annotators),
        percent_agreement=_nan_to_none(pct), unanimous=_nan_to_none(unan), fleiss_kappa=_nan_to_none(fk),
        passed=None if alpha_v is None else bool(alpha_v >= threshold),
        pairs=pairs, labels=per_label(coded), annotators=per_annotator(coded, pairs), scenarios=scen, coded=coded,
    )


@dataclass
class RoundAgreement:
    round: str
    fields: list[FieldAgreement]
    issues: list[dict]  # duplicates, bad JSON, missing coverage

    @property
    def passed(self) -> bool:
        """Every measured field reaches its threshold (an undefined alpha does not pass)."""
        return all(f.passed for f in self.fields)

    def failing(self) -> list[FieldAgreement]:
        return [f for f in self.fields if not f.passed]

    def summary(self) -> dict:
        """Small JSON-ready dict for the release manifest and the Prefect artifact."""
        kinds: dict[str, int] = {}
        for i in self.issues:
            kinds[i["kind"]] = kinds.get(i["kind"], 0) + 1
        return {"round": self.round, "passed": self.passed, "fields": [f.summary() for f in self.fields],
                "issues": kinds}

    def to_dict(self) -> dict:
        return {"round": self.round, "passed": self.passed, "fields": [f.to_dict() for f in self.fields],
                "issues": self.issues}


def coverage_issues(df: pl.DataFrame, round_name: str) -> list[dict]:
    """Annotators who labelled fewer units of the round than the round has (half-done work)."""
    rdf = df.filter(pl.col("round") == round_name)
    units = rdf.select(UNIT).unique()
    total = units.height
    issues = []
    per = rdf.select(["annotator", *UNIT]).unique().group_by("annotator").len().sort("annotator")
    for ann, n in per.iter_rows():
        if n < total:
            missing = units.join(rdf.filter(pl.col("annotator") == ann).select(UNIT).unique(), on=list(UNIT),
                                 how="anti").sort(list(UNIT))
            samples = sorted(set(missing["sample_id"].to_list()))
            issues.append({"kind": "missing", "round": round_name, "annotator": ann, "sample_id": None,
                           "row_index": None, "field": None,
                           "message": f"{ann} labelled {n} of {total} units; missing {total - n} units in "
                                      f"{len(samples)} samples (e.g. {', '.join(samples[:3])})"})
    return issues


def round_agreement(labels: Any, round_name: str, rules: Any,
                    scenarios: Mapping[str, str] | None = None) -> RoundAgreement:
    """Agreement for every measured field of one round.

    ``rules``: a round definition, ``{field: metric}`` or ``FieldRule``s (see ``field_rules``).
    ``scenarios``: sample_id -> scenario (default: inferred from the sample id).
    """
    df, issues = labels if isinstance(labels, tuple) else clean_labels(labels)
    issues = [i for i in issues if i.get("round") == round_name]
    rdf = df.filter(pl.col("round") == round_name)
    if rdf.height == 0:
        raise ValueError(f"the label table has no labels for round {round_name!r}")
    units = sorted(set(zip(rdf["sample_id"].to_list(), rdf["row_index"].to_list(), [""] * rdf.height)))
    annotators = sorted(set(rdf["annotator"].to_list()))
    out = []
    known = set(rdf["field"].unique().to_list())
    for rule in field_rules(rules):
        if rule.parent not in known and rule.metric != "presence":
            issues.append({"kind": "missing_field", "round": round_name, "annotator": None, "sample_id": None,
                           "row_index": None, "field": rule.name,
                           "message": f"no labels at all for field {rule.name!r}"})
        coded, bad = code_field(rdf, round_name, rule, units, annotators)
        issues.extend(bad)
        out.append(field_agreement(coded, round_name, rule.threshold, scenarios))
    issues.extend(coverage_issues(rdf, round_name))
    return RoundAgreement(round_name, out, issues)


def agreement_table(report: RoundAgreement) -> pa.Table:
    """One line per field: the figures the CLI prints and the report tabulates."""
    return pa.Table.from_pylist([f.summary() for f in report.fields])


__all__ = [
    "FieldRule", "field_rules", "alpha_from_counts", "masi_distance", "distance_matrix", "cohen_kappa",
    "fleiss_kappa", "agreement_value", "Coded", "clean_labels", "code_field", "round_agreement",
    "RoundAgreement", "FieldAgreement", "agreement_table", "scenario_of", "confusion", "label_text",
    "DEFAULT_THRESHOLD",
]


# --- gate ----------------------------------------------------------------------------------
# A round whose measured fields do not all reach their thresholds blocks the release, unless an
# override with a reason is recorded. Both records are small JSON files under the data root; an
# override only counts for the exact label table it was made for (its sha256).


def gates_dir(data_root: str | Path) -> Path:
    return Path(data_root) / "annotation" / "gates"


def write_gate(data_root: str | Path, report: RoundAgreement, labels_sha256: str) -> dict:
    from pipeline import store

    record = {"round": report.round, "passed": report.passed, "labels_sha256": labels_sha256,
              "failing": [{"field": f.field, "metric": f.metric, "alpha": f.alpha, "threshold": f.threshold}
                          for f in report.failing()],
              "fields": [{"field": f.field, "metric": f.metric, "alpha": f.alpha, "threshold": f.threshold,
                          "n_units": f.n_units, "n_annotators": f.n_annotators} for f in report.fields]}
    store.atomic_write_text(gates_dir(data_root) / f"{report.round}.json", store.canonical_json(record))
    return record


def record_override(data_root: str | Path, round_name: str, reason: str, by: str) -> dict:
    """Record that a failing round may be released anyway, and why."""
    from datetime import datetime, timezone

    from pipeline import store

    if not reason.strip() or not by.strip():
        raise ValueError("an override needs a reason and the name of who decides")
    path = gates_dir(data_root) / f"{round_name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no gate for round {round_name!r}; run `rescue agreement {round_name}` first")
    gate = json.loads(path.read_text(encoding="utf-8"))
    if gate["passed"]:
        raise ValueError(f"round {round_name!r} passed its gate; nothing to override")
    record = {"round": round_name, "reason": reason.strip(), "by": by.strip(), "labels_sha256": gate["labels_sha256"],
              "failing": gate["failing"], "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    store.atomic_write_text(gates_dir(data_root) / f"{round_name}.override.json", store.canonical_json(record))
    return record


def gate_records(data_root: str | Path) -> list[dict]:
    """Every round's gate for the release manifest: passed, failing fields, override, blocks_release."""
    out = []
    d = gates_dir(data_root)
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        if path.name.endswith(".override.json"):
            continue
        gate = json.loads(path.read_text(encoding="utf-8"))
        ov_path = d / f"{gate['round']}.override.json"
        override = json.loads(ov_path.read_text(encoding="utf-8")) if ov_path.is_file() else None
        valid = bool(override) and override.get("labels_sha256") == gate["labels_sha256"]
        out.append({**gate, "override": override, "override_valid": valid,
                    "blocks_release": not gate["passed"] and not valid})
    return out


def release_blockers(data_root: str | Path) -> list[str]:
    """One message per round that blocks a release (empty: nothing blocks)."""
    msgs = []
    for g in gate_records(data_root):
        if g["blocks_release"]:
            fields = ", ".join(f"{f['field']} alpha={_fmt(f['alpha'])} < {f['threshold']}" for f in g["failing"])
            stale = " (the override was made for other labels)" if g["override"] and not g["override_valid"] else ""
            msgs.append(f"round {g['round']} is below its agreement threshold: {fields}{stale}; "
                        f"adjudicate and re-annotate, or record an override with a reason "
                        f"(`rescue agreement {g['round']} --override REASON --by NAME`)")
    return msgs


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# --- the stage, as the CLI and the flows call it ---------------------------------------------


def measure_round(data_root: str | Path, round_name: str, labels_path: str | Path | None = None) -> dict:
    """Agreement of a pulled round: report files beside the labels, the gate record, a summary.

    Returns ``{"report": RoundAgreement, "paths": {kind: Path}, "gate": dict, "summary": dict}``.
    """
    from pipeline import store
    from pipeline.quality import reports
    from pipeline.annotation.pull import labels_path as default_labels_path
    from pipeline.annotation.rounds import load_round

    rnd = load_round(round_name)
    path = Path(labels_path) if labels_path else default_labels_path(data_root, round_name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no label table for round {round_name!r}; run `rescue annotate pull "
                                f"{round_name}` first")
    report = round_agreement(path, round_name, rnd)
    paths = reports.write_report(report, reports.report_dir(path, round_name))
    gate = write_gate(data_root, report, store.sha256_file(path))
    return {"report": report, "paths": paths, "gate": gate, "summary": report.summary()}
