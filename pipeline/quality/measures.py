"""Agreement figures of one round, from the long label table.

Per field (coded by :mod:`pipeline.quality.coding`, coefficients from
:mod:`pipeline.quality.coefficients`): Krippendorff's alpha with the field's metric, pairwise
Cohen's kappa and Fleiss' kappa for categories (Fleiss only when every unit has the same number
of raters), percent agreement, the share of unanimous units, and breakdowns per annotator pair,
per annotator (against the others, and alpha without them), per label (one vs rest) and per
scenario. A sample's scenario comes from the label table's ``scenario`` column or the sample
table, never from its id.

Each field also gets a seeded bootstrap 95% interval for alpha (:func:`coefficients.bootstrap_alpha`,
the seed derived from round and field, so a report is reproducible), a short reading in the
interpretation bands of Krippendorff (2004) (:func:`reading`), a warning when fewer than
:data:`MIN_UNITS` units are pairable, and the list of disagreeing units with each annotator's
value. Free-text fields, which have no alpha, get their own measure (:func:`text_agreement`):
word error rate between annotators for the transcript text (``jiwer``), word-set overlap for
short descriptions such as tone of voice.

Issues are reported, not fixed: duplicates and bad JSON (from ``clean_labels``), values that do
not read as the metric, fields with no labels at all, and annotators who covered fewer units
than the round has. Pure computation: the files are written by :mod:`pipeline.quality.reports`
and :mod:`pipeline.quality.gates`, the stage is :func:`pipeline.quality.agreement.measure_round`.
"""
from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.quality.coding import UNIT, Coded, clean_labels, code_field, field_rules, label_scenarios, label_text
from pipeline.quality.coefficients import alpha_from_codes, bootstrap_alpha, cohen_kappa, fleiss_kappa

UNKNOWN_SCENARIO = "unknown"  # a sample whose scenario neither the labels nor the sample table give
MIN_UNITS = 50  # fewer pairable units than this: alpha is too unstable to act on (warned)
MAX_DISAGREEMENTS = 500  # disagreeing units kept per field (the count is always complete)
BOOTSTRAP_SAMPLES = 500

# Interpretation bands for alpha, with their source (named in every report).
BANDS_SOURCE = ("Krippendorff (2004), Content Analysis: An Introduction to Its Methodology, 2nd ed., ch. 11: "
                "rely on variables with alpha >= .800; alpha >= .667 allows tentative conclusions only; below, "
                "discard the variable")
BANDS = ((0.800, "reliable"), (0.667, "tentative"), (-math.inf, "unreliable"))
BAND_ADVICE = {
    "reliable": "usable as it is",
    "tentative": "usable for tentative conclusions only; check the disagreeing rows and the guideline for this field",
    "unreliable": "do not rely on it: read the disagreeing rows, clarify the guideline or retrain, and re-annotate "
                  "(or release under a recorded override, saying why)",
}
METRIC_MEANING = {
    "nominal": "categories: two annotators agree only on the same label",
    "interval": "numbers: disagreement grows with the squared difference (intensity 6 vs 7 is a small one)",
    "masi": "sets (e.g. several addressees): MASI distance (Passonneau 2006) = 1 - Jaccard x M, with M = 1 for "
            "identical sets, 2/3 when one set contains the other, 1/3 when they only overlap, 0 when disjoint: "
            "partial credit for partly matching sets",
    "presence": "optional records (e.g. internal emotion): only whether an annotator gave any record at all, "
                "present vs absent; what the records say is measured by the field's subfields",
}


def band(alpha: float | None) -> str | None:
    if alpha is None:
        return None
    return next(name for bound, name in BANDS if alpha >= bound)


def reading(alpha: float | None, threshold: float, ci: tuple[float, float] | None, n_pairable: int) -> str:
    """One sentence a maintainer can act on: the band of alpha (and of its interval), the gate."""
    if alpha is None:
        return ("alpha undefined: no unit was labelled by two annotators, or everybody used one value; "
                "nothing can be said about this field yet")
    b = band(alpha)
    text = f"alpha {alpha:.3f}"
    if ci is not None:
        text += f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})"
        lo, hi = band(ci[0]), band(ci[1])
        text += f": {b}" + (f", but the interval spans {lo} to {hi}" if lo != hi else "")
    else:
        text += f": {b}"
    text += f" - {BAND_ADVICE[b]}."
    text += (" Meets" if alpha >= threshold else " Below") + f" the round's threshold {threshold:.3f}."
    if n_pairable < MIN_UNITS:
        text += f" Only {n_pairable} pairable units (< {MIN_UNITS}): too few for a stable figure."
    return text


def _seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()[:8], "big")


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
    ci_low: float | None = None  # bootstrap 95% interval of alpha (seeded: reproducible)
    ci_high: float | None = None
    reading: str = ""
    warnings: list[str] = field(default_factory=list)
    n_disagreeing: int = 0
    disagreements: list[dict] = field(default_factory=list)  # first MAX_DISAGREEMENTS: sample, row, values
    pairs: list[dict] = field(default_factory=list)
    labels: list[dict] = field(default_factory=list)
    annotators: list[dict] = field(default_factory=list)
    scenarios: list[dict] = field(default_factory=list)
    coded: Coded | None = field(default=None, repr=False)

    def summary(self) -> dict:
        return {k: getattr(self, k) for k in ("round", "field", "metric", "threshold", "alpha", "ci_low", "ci_high",
                                              "n_units", "n_pairable", "n_annotators", "percent_agreement",
                                              "unanimous", "fleiss_kappa", "passed", "n_disagreeing")}

    def to_dict(self) -> dict:
        return {**self.summary(), "reading": self.reading, "warnings": self.warnings, "pairs": self.pairs,
                "labels": self.labels, "annotators": self.annotators, "scenarios": self.scenarios,
                "disagreements": self.disagreements}


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
    ci = None
    if alpha_v is not None and coded.domain:
        ci = bootstrap_alpha(codes, coded.distance, samples=BOOTSTRAP_SAMPLES, seed=_seed(round_name, coded.field))
    n_pairable = int(pairable.sum())
    warnings = []
    if n_pairable < MIN_UNITS:
        warnings.append(f"only {n_pairable} units were labelled by two or more annotators (minimum {MIN_UNITS}): "
                        "alpha and its interval are unstable; label more units before acting on this figure")
    # disagreeing units: pairable, and not every annotator gave the same value
    dis_mask = pairable & (agree < all_pairs)
    dis_idx = np.nonzero(dis_mask)[0]
    dis = []
    for u in dis_idx[:MAX_DISAGREEMENTS]:
        unit = coded.units[u]
        dis.append({"sample_id": unit[0], "row_index": unit[1], "part": unit[2] if len(unit) > 2 else "",
                    "scenario": scen_of[u],
                    "values": {coded.annotators[k]: label_text(coded.domain[c]) for k, c in enumerate(codes[u]) if c >= 0}})
    return FieldAgreement(
        round=round_name, field=coded.field, metric=coded.metric, threshold=threshold, alpha=alpha_v,
        n_units=len(coded.units), n_pairable=n_pairable, n_annotators=len(coded.annotators),
        percent_agreement=_nan_to_none(pct), unanimous=_nan_to_none(unan), fleiss_kappa=_nan_to_none(fk),
        passed=None if alpha_v is None else bool(alpha_v >= threshold),
        ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
        reading=reading(alpha_v, threshold, ci, n_pairable), warnings=warnings,
        n_disagreeing=int(len(dis_idx)), disagreements=dis,
        pairs=pairs, labels=per_label(coded), annotators=per_annotator(coded, pairs), scenarios=scen, coded=coded,
    )


# --- free text: no alpha, but a measure of how alike the annotators' texts are ------------------

TEXT_MEASURES = {"dialogue_cleaned": "wer"}  # other free-text fields: "word_overlap"
TEXT_MEANING = {
    "wer": ("word error rate between annotators (jiwer; lower-cased, punctuation removed), averaged over both "
            "directions of each pair and over pairs: 0 = identical transcripts, 0.10 = about one word in ten differs"),
    "word_overlap": ("word-set overlap between annotators: Jaccard index of the lower-cased words of the two "
                     "descriptions, averaged over units and pairs: 1 = the same words, 0 = no word in common"),
}
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> frozenset:
    return frozenset(_WORD.findall(text.lower()))


def _wer(refs: list[str], hyps: list[str]) -> float:
    """Corpus word error rate between two annotators, symmetric: the word edits (jiwer's alignment)
    divided by each side's word count, averaged. Lower-cased words, punctuation removed; units
    where either text has no word are left out; identical units cost no alignment."""
    import jiwer

    edits_from, edits_to, n_a, n_b = [], [], 0, 0
    for r, h in zip(refs, hyps):
        rw, hw = _WORD.findall(r.lower()), _WORD.findall(h.lower())
        if not rw or not hw:
            continue
        n_a += len(rw)
        n_b += len(hw)
        if rw != hw:
            edits_from.append(" ".join(rw))
            edits_to.append(" ".join(hw))
    if not n_a:
        return math.nan
    edits = 0
    if edits_from:
        out = jiwer.process_words(edits_from, edits_to)
        edits = out.substitutions + out.deletions + out.insertions
    return (edits / n_a + edits / n_b) / 2.0


@dataclass
class TextAgreement:
    """How alike annotators' free texts are on one field (reported, never a gate)."""

    round: str
    field: str
    measure: str  # wer | word_overlap
    value: float | None
    n_units: int  # units with texts from two or more annotators
    n_differing: int
    pairs: list[dict] = field(default_factory=list)
    examples: list[dict] = field(default_factory=list)  # differing units: sample, row, each annotator's text
    reading: str = ""

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("round", "field", "measure", "value", "n_units", "n_differing",
                                              "reading", "pairs", "examples")}


def text_agreement(rdf: pl.DataFrame, round_name: str, field_name: str, measure: str | None = None) -> TextAgreement:
    """Agreement on a free-text field of a round (cleaned label frame, ``parsed`` = the text)."""
    measure = measure or TEXT_MEASURES.get(field_name, "word_overlap")
    if measure not in TEXT_MEANING:
        raise ValueError(f"unknown text measure {measure!r}; expected one of {sorted(TEXT_MEANING)}")
    fdf = rdf.filter((pl.col("round") == round_name) & (pl.col("field") == field_name))
    texts: dict[tuple, dict[str, str]] = {}
    for sid, ri, ann, val in zip(fdf["sample_id"].to_list(), fdf["row_index"].to_list(), fdf["annotator"].to_list(),
                                 fdf["parsed"].to_list()):
        if isinstance(val, str):
            texts.setdefault((sid, ri), {})[ann] = val
    units = sorted(u for u, v in texts.items() if len(v) >= 2)
    annotators = sorted({a for v in texts.values() for a in v})
    cache: dict[str, frozenset] = {}

    def words(text: str) -> frozenset:
        if text not in cache:
            cache[text] = _words(text)
        return cache[text]

    pairs, weighted, total = [], 0.0, 0
    for a, b in combinations(annotators, 2):
        both = [u for u in units if a in texts[u] and b in texts[u]]
        if not both:
            continue
        ta, tb = [texts[u][a] for u in both], [texts[u][b] for u in both]
        if measure == "wer":
            v = _wer(ta, tb)
        else:
            scores = [1.0 if x == y else (len(words(x) & words(y)) / len(words(x) | words(y))
                                          if (words(x) | words(y)) else 1.0) for x, y in zip(ta, tb)]
            v = float(np.mean(scores))
        v = _nan_to_none(v)
        pairs.append({"a": a, "b": b, "n_units": len(both), "value": v})
        if v is not None:
            weighted += v * len(both)
            total += len(both)
    value = weighted / total if total else None
    differing = [u for u in units if len(set(texts[u].values())) > 1
                 and len({" ".join(_WORD.findall(t.lower())) for t in texts[u].values()}) > 1]
    examples = [{"sample_id": u[0], "row_index": u[1], "values": dict(sorted(texts[u].items()))}
                for u in differing[:MAX_DISAGREEMENTS]]
    if value is None:
        text = "no unit has texts from two annotators: nothing to compare yet."
    elif measure == "wer":
        text = (f"annotators' transcripts differ by {100 * value:.1f}% of their words"
                + (" - close to identical." if value <= 0.05 else " - read the differing rows; the adjudicator "
                   "settles each of them (transcript differences always go to adjudication)."))
    else:
        text = (f"on average {100 * value:.0f}% of the words are shared between two annotators' descriptions; "
                "free phrases rarely match word for word, so use this to spot an annotator who describes "
                "differently, not as a pass mark.")
    if 0 < len(units) < MIN_UNITS:
        text += f" Only {len(units)} units (< {MIN_UNITS})."
    return TextAgreement(round_name, field_name, measure, value, len(units), len(differing), pairs, examples, text)


@dataclass
class RoundAgreement:
    round: str
    fields: list[FieldAgreement]
    issues: list[dict]  # duplicates, bad JSON, missing coverage
    text_fields: list[TextAgreement] = field(default_factory=list)  # free text: no alpha, reported only

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
                "text_fields": [t.to_dict() for t in self.text_fields], "issues": self.issues}


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
    text = []
    for f in getattr(rules, "fields", ()) or ():
        if getattr(f, "type", None) == "text" and getattr(f, "metric", "none") == "none" and f.name in known:
            text.append(text_agreement(rdf, round_name, f.name))
    return RoundAgreement(round_name, out, issues, text)


def agreement_table(report: RoundAgreement) -> pa.Table:
    """One line per field: the figures the CLI prints and the report tabulates."""
    return pa.Table.from_pylist([f.summary() for f in report.fields])

