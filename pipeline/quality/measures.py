"""Agreement figures of one round, from the long label table.

Per field (coded by :mod:`pipeline.quality.coding`, coefficients from
:mod:`pipeline.quality.coefficients`): Krippendorff's alpha with the field's metric, pairwise
Cohen's kappa and Fleiss' kappa for categories (Fleiss only when every unit has the same number
of raters), percent agreement, the share of unanimous units, and breakdowns per annotator pair,
per annotator (against the others, and alpha without them), per label (one vs rest) and per
scenario. A sample's scenario comes from the label table's ``scenario`` column or the sample
table, never from its id.

Issues are reported, not fixed: duplicates and bad JSON (from ``clean_labels``), values that do
not read as the metric, fields with no labels at all, and annotators who covered fewer units
than the round has. Pure computation: the files are written by :mod:`pipeline.quality.reports`
and :mod:`pipeline.quality.gates`, the stage is :func:`pipeline.quality.agreement.measure_round`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.quality.coding import UNIT, Coded, clean_labels, code_field, field_rules, label_scenarios, label_text
from pipeline.quality.coefficients import alpha_from_codes, cohen_kappa, fleiss_kappa

UNKNOWN_SCENARIO = "unknown"  # a sample whose scenario neither the labels nor the sample table give


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
    scen_of = [(scenarios or {}).get(u[0]) or UNKNOWN_SCENARIO for u in coded.units]
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
    ``scenarios``: sample_id -> scenario, for samples whose label lines carry no ``scenario``
    (the label table's own column wins); a sample known to neither is "unknown", never guessed
    from its id.
    """
    df, issues = labels if isinstance(labels, tuple) else clean_labels(labels)
    scenarios = {**(scenarios or {}), **label_scenarios(df)}
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

