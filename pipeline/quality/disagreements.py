"""Where annotators disagree: the rows of a round that need an adjudicator.

Shared by :mod:`pipeline.quality.gold` (which resolves what it can by rule) and
:mod:`pipeline.quality.adjudication` (which puts the rest into Label Studio). A field's values
on one row disagree when (gold rules 2-4): categories, lists and row sets differ; records
differ in structure (keys and choice subfields); pre-filled text (the verbatim transcript)
differs; one annotator's answer was refused by the pull (no line) while others stand. Numbers
never disagree (the median decides) and descriptive free text alone never makes a disagreement
(it follows a reference annotator).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pipeline.quality.coding import clean_labels

STRUCTURED = ("choice", "multichoice", "rows", "const")  # field types whose values must agree


def value_key(v: Any) -> Any:
    """A hashable, orderable key of a JSON value: equal keys <=> equal JSON (dict key order aside)."""
    if isinstance(v, list):
        return ("list", tuple(value_key(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, value_key(x)) for k, x in v.items())))
    return (type(v).__name__, v)


def structure(f, records: Any) -> tuple:
    """A records value reduced to what must agree: keys and choice subfields, in key order."""
    recs = [{s.name: r.get(s.name) for s in f.subfields if s.type in STRUCTURED} for r in (records or [])]
    return tuple(sorted(value_key(r) for r in recs))


def record_key(f, rec: dict) -> Any:
    """What matches a record across annotators: its key subfields, else its structured subfields."""
    if f.key:
        return value_key([rec.get(k) for k in f.key])
    return value_key({s.name: rec.get(s.name) for s in f.subfields if s.type in STRUCTURED})


def row_annotators(per_field: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """Who answered one row of a round: everyone with a line for any of its fields."""
    return set().union(*per_field.values()) if per_field else set()


def refused(f, values: Mapping[str, Any], answered: Collection[str] = ()) -> bool:
    """Whether someone who answered the row has no value for this field that must agree: the pull
    refused their answer (a self-target, a required field left empty, an unknown label) and wrote
    no line. The others' answers alone are not the round's agreement: an adjudicator decides.
    Numbers (the median of those given) and descriptive text (a reference annotator's) are exempt."""
    if f.type == "number" or (f.type == "text" and not f.prefill):
        return False
    return len(answered) >= 2 and not set(answered) <= set(values)


def is_disagreement(f, values: Mapping[str, Any], answered: Collection[str] = ()) -> bool:
    """Whether annotators' values of one field on one row need an adjudicator (rules 2-4);
    ``answered``: everyone who answered the row (:func:`row_annotators`), see :func:`refused`."""
    if refused(f, values, answered):
        return True
    if len(values) < 2:
        return False
    if f.type == "number":
        return False  # median
    if f.type == "text":
        return f.prefill and len({value_key(v) for v in values.values()}) > 1
    if f.type == "records":
        structures = {structure(f, v) for v in values.values()}
        return len(structures) > 1
    return len({value_key(v) for v in values.values()}) > 1


def index_labels(labels: Any) -> dict[tuple[str, str, int], dict[str, dict[str, Any]]]:
    """(round, sample_id, row_index) -> field -> annotator -> parsed value."""
    if labels is None:
        return {}
    df = labels[0] if isinstance(labels, tuple) else clean_labels(labels)[0]
    out: dict = {}
    for rnd, sid, ri, ann, fld, val in zip(*(df[c].to_list() for c in
                                               ("round", "sample_id", "row_index", "annotator", "field", "parsed"))):
        out.setdefault((rnd, sid, ri), {}).setdefault(fld, {})[ann] = val
    return out


def disagreements(labels: Any, rnd) -> list[dict]:
    """Rows of a round where annotators disagree on any field (rules 2-4): the adjudication work."""
    lab = index_labels(labels)
    out = []
    for (rname, sid, ri), per_field in sorted(lab.items()):
        if rname != rnd.name:
            continue
        answered = row_annotators(per_field)
        fields = [f.name for f in rnd.fields if is_disagreement(f, per_field.get(f.name, {}), answered)]
        if fields:
            out.append({"sample_id": sid, "row_index": ri, "fields": fields,
                        "answers": {f.name: per_field.get(f.name, {}) for f in rnd.fields}})
    return out
