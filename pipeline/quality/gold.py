"""Gold rows from the annotation rounds, with provenance for every value.

Rules, per row and field (field names are row-schema keys):

1. An adjudicator's answer, when there is one, wins (``adjudicated``).
2. All annotators gave the same value (``unanimous``).
3. Otherwise by type: ``choice`` / ``multichoice`` / ``rows`` - the value more than half of the
   annotators gave (``majority``); ``number`` - the median, rounded half up (``median``);
   ``records`` - the record structure (records matched on the field's key, with their
   choice subfields) more than half gave, numbers inside as the median (``majority``);
   pre-filled text (the verbatim transcript) - majority.
4. Descriptive free text (tone, reasons, emotion descriptions, strategy content) comes from a
   reference annotator: the first (by id) whose structured answers on the row equal the gold
   (``reference``); descriptive text alone never makes a disagreement.
5. Anything else is ``unresolved``: ``build_gold(strict=True)`` refuses; with ``strict=False``
   the first annotator's value is used and the provenance says so. So is a field (but numbers
   and descriptive text) that someone who answered the row has no value for, because the pull
   refused their answer: the others' answers alone are not "all annotators" (an adjudicator
   decides; ``disagreements.refused``).

The provenance table keeps, per (round, sample, row, field): the rule used, the annotators,
the share of them that gave the gold value, whether it was adjudicated and by whom, and the
gold value as JSON.

:func:`build_and_store` is the stage the CLI (``rescue gold build``) and the annotation-round
flow call: it reads every pulled round (``DataRoot.labels``) and its adjudications
(``DataRoot.adjudications``), merges the valid gold samples back into the work store (and
finished ones into the corpus; see :mod:`pipeline.corpus`) and writes provenance, violations
and a summary to ``DataRoot.gold_dir()``. Where annotators disagree is
:mod:`pipeline.quality.disagreements`.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import corpus, store, taxonomy, validate
from pipeline.annotation import voice_naming
from pipeline.annotation.rounds import load_round
from pipeline.annotation.rounds import round_names as all_rounds
from pipeline.paths import DataRoot, check_name
from pipeline.quality.agreement import require_annotators
from pipeline.quality.disagreements import index_labels, record_key, refused, row_annotators, structure, value_key

PROVENANCE = pa.schema([
    pa.field("round", pa.string(), nullable=False),
    pa.field("sample_id", pa.string(), nullable=False),
    pa.field("row_index", pa.int64(), nullable=False),
    pa.field("field", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),  # adjudicated|unanimous|majority|median|reference|unresolved|missing
    pa.field("annotators", pa.list_(pa.string())),
    pa.field("agreement", pa.float64()),  # share of annotators whose value equals the gold
    pa.field("adjudicated", pa.bool_(), nullable=False),
    pa.field("adjudicator", pa.string()),
    pa.field("value", pa.string()),  # gold value, JSON
])


class UnresolvedError(ValueError):
    """Disagreements without an adjudication; the message lists them."""


def _same(a: Any, b: Any) -> bool:
    """JSON equality (Python's == on parsed JSON; top-level True/1 kept apart; 5 == 5.0 inside records)."""
    return type(a) is type(b) and a == b


def _json(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _median(xs: Sequence[float]) -> int:
    s = sorted(float(x) for x in xs)
    n = len(s)
    m = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return int(math.floor(m + 0.5))


def _majority(values: Mapping[str, Any]) -> Any | None:
    counts = Counter(value_key(v) for v in values.values())
    key, n = counts.most_common(1)[0]
    return next(v for v in values.values() if value_key(v) == key) if n * 2 > len(values) else None


def resolve(f, values: Mapping[str, Any], answered: Collection[str] = ()) -> tuple[Any, str]:
    """(gold value, method) from annotator -> value; method 'unresolved' when no rule decides,
    or when someone in ``answered`` (everyone who answered the row) has no value for the field:
    one answer standing where another was refused is no agreement (``disagreements.refused``)."""
    anns = sorted(values)
    if refused(f, values, answered):
        return (values[anns[0]] if anns else None), "unresolved"
    first = values[anns[0]]
    if all(_same(values[a], first) for a in anns[1:]):
        return first, "unanimous"
    if f.type == "number":
        nums = [v for v in values.values() if isinstance(v, (int, float))]
        return (_median(nums), "median") if nums else (None, "unresolved")
    if f.type == "text" and not f.prefill:
        return values[anns[0]], "reference"
    if f.type == "records":
        structures = {a: structure(f, values[a]) for a in anns}
        top, n = Counter(structures.values()).most_common(1)[0]
        if n * 2 <= len(anns):
            return values[anns[0]], "unresolved"
        holders = [a for a in anns if structures[a] == top]
        ref = holders[0]
        out = []
        for rec in values[ref] or []:
            new = dict(rec)
            for s in f.subfields:
                if s.type == "number":
                    nums = [r.get(s.name) for a in holders for r in (values[a] or [])
                            if record_key(f, r) == record_key(f, rec) and isinstance(r.get(s.name), (int, float))]
                    if nums:
                        new[s.name] = _median(nums)
            out.append(new)
        return out, "majority"
    v = _majority(values)
    return (v, "majority") if v is not None else (values[anns[0]], "unresolved")


def _text_reference(rnd, per_field: Mapping[str, Mapping[str, Any]], gold: Mapping[str, Any]) -> str | None:
    """The first annotator whose structured answers on a row equal the gold."""
    anns = sorted({a for vals in per_field.values() for a in vals})
    structured = [f for f in rnd.fields if f.type != "text"]
    for a in anns:
        if all(f.name not in per_field or a not in per_field[f.name]
               or (structure(f, per_field[f.name][a]) == structure(f, gold.get(f.name)) if f.type == "records"
                   else f.type == "number" or value_key(per_field[f.name][a]) == value_key(gold.get(f.name)))
               for f in structured):
            return a
    return anns[0] if anns else None


@dataclass
class GoldResult:
    samples: list[dict]
    provenance: pa.Table
    unresolved: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def _empty(f) -> Any:
    return [] if f.type in ("records", "multichoice", "rows") else ("" if f.type in ("text", "choice") else None)


def _fix_records(f, value: Any) -> Any:
    """Records in the row-schema form: const subfields filled, numbers as int."""
    if f.type != "records" or not isinstance(value, list):
        return value
    out = []
    for rec in value:
        rec = dict(rec)
        for s in f.subfields:
            if s.type == "const":
                rec[s.name] = s.const
            elif s.type == "number" and isinstance(rec.get(s.name), float):
                rec[s.name] = int(math.floor(rec[s.name] + 0.5))
        out.append(rec)
    return out


def build_gold(base_samples: Sequence[dict], labels: Any, rounds: Sequence[Any], adjudications: Any = None,
               strict: bool = True) -> GoldResult:
    """Gold samples (RESCUE row shape) from base samples, the label table and adjudications.

    ``base_samples``: samples in the ``pipeline.rows`` shape whose rows carry at least the draft
    fields (row_index, start/end, primary_speaker, target, dialogue_cleaned,
    background_dialogue); rounds are applied in their order, so a row's speaker from the
    transcript round decides which later rounds apply to it.
    ``adjudications``: adjudicators' answers in the label-table shape (``annotator`` = adjudicator).
    """
    lab = index_labels(labels)
    adj = index_labels(adjudications)
    rounds = sorted(rounds, key=lambda r: r.order)
    prov: list[dict] = []
    unresolved: list[dict] = []
    out_samples = []
    methods: Counter = Counter()
    for s in base_samples:
        scenario = s["scenario"]
        rows = []
        for base in sorted(s["rows"], key=lambda r: r["row_index"]):
            row = {k: base.get(k) for k in base}
            ri = row["row_index"]
            for rnd in rounds:
                if not rnd.applies(row.get("primary_speaker")):
                    continue
                per_field = lab.get((rnd.name, s["sample_id"], ri), {})
                answered = row_annotators(per_field)
                adj_field = adj.get((rnd.name, s["sample_id"], ri), {})
                gold: dict[str, Any] = {}
                meta: dict[str, tuple] = {}
                for f in rnd.fields:
                    values = per_field.get(f.name, {})
                    if f.type == "records" and per_field and not values:
                        values = {}
                    adjudicator = None
                    if f.name in adj_field:
                        adjudicator = sorted(adj_field[f.name])[-1]
                        value, method = adj_field[f.name][adjudicator], "adjudicated"
                    elif not values and not refused(f, values, answered):
                        value, method = (row.get(f.name) if row.get(f.name) is not None else _empty(f)), "missing"
                    else:
                        value, method = resolve(f, values, answered)
                    gold[f.name] = _fix_records(f, value)
                    meta[f.name] = (method, values, adjudicator)
                ref = _text_reference(rnd, per_field, gold)
                for f in rnd.fields:  # descriptive text from the reference annotator (rule 4)
                    method, values, adjudicator = meta[f.name]
                    if f.type == "text" and method == "reference" and ref in values:
                        gold[f.name] = values[ref]
                    if f.type == "records" and method == "majority" and ref is not None:
                        gold[f.name] = _records_text_from(f, gold[f.name], per_field.get(f.name, {}).get(ref))
                for f in rnd.fields:
                    method, values, adjudicator = meta[f.name]
                    value = gold[f.name]
                    agree = (sum(1 for v in values.values() if _same(v, value)) / len(values)) if values else None
                    if method == "unresolved":
                        unresolved.append({"round": rnd.name, "sample_id": s["sample_id"], "row_index": ri,
                                           "field": f.name, "values": {a: values[a] for a in sorted(values)}})
                    methods[method] += 1
                    prov.append({"round": rnd.name, "sample_id": s["sample_id"], "row_index": ri, "field": f.name,
                                 "method": method, "annotators": sorted(values), "agreement": agree,
                                 "adjudicated": method == "adjudicated", "adjudicator": adjudicator,
                                 "value": _json(value)})
                    row[f.name] = value
            rows.append(_rescue_row(row, scenario))
        rows = voice_naming.name_background(s["rows"], rows)  # backchannels: the voices' names from the rows
        out_samples.append({**{k: v for k, v in s.items() if k != "rows"}, "rows": rows})
    if strict and unresolved:
        head = "; ".join(f"{u['round']}/{u['sample_id']}#{u['row_index']}.{u['field']}" for u in unresolved[:10])
        raise UnresolvedError(f"{len(unresolved)} disagreements have no adjudication (run `rescue adjudicate "
                              f"push ROUND`, or build with strict=False): {head}")
    summary = {"samples": len(out_samples), "rows": sum(len(s["rows"]) for s in out_samples),
               "values": sum(methods.values()), "methods": dict(sorted(methods.items())),
               "unresolved": len(unresolved)}
    return GoldResult(out_samples, pa.Table.from_pylist(prov, schema=PROVENANCE), unresolved, summary)


def _records_text_from(f, gold_records: list, ref_records: Any) -> list:
    by_key = {record_key(f, r): r for r in (ref_records or [])}
    out = []
    for rec in gold_records or []:
        src = by_key.get(record_key(f, rec), {})
        out.append({**rec, **{s.name: src[s.name] for s in f.subfields if s.type == "text" and s.name in src}})
    return out


def _rescue_row(row: dict, scenario: str) -> dict:
    """Fill the RESCUE row shape: therapist/client conventions and empty lists (spec §1.3, §1.5)."""
    therapist = taxonomy.is_therapist(row.get("primary_speaker"))
    for key in ("target", "background_dialogue", "body_posture", "facial_expressions", "self_directed_behavior",
                "interaction_behavior", "internal_emotion", "viewpoints_attitudes", "support_strategy"):
        if row.get(key) is None:
            row[key] = []
    for key in ("dialogue_cleaned", "tone_of_voice"):
        if row.get(key) is None:
            row[key] = ""
    if therapist:
        row["utterance_type"] = ""
        if row.get("relation_cycle_state") is None:
            row["relation_cycle_state"] = ""
        if row.get("relation_cycle_evidence_rows") is None:
            row["relation_cycle_evidence_rows"] = []
    else:
        row["support_strategy"] = []
        row["relation_cycle_state"] = row["relation_cycle_reason"] = row["relation_cycle_evidence_rows"] = None
        row.setdefault("utterance_type", "")
    return row


@dataclass(frozen=True)
class GoldBuild:
    """What :func:`build_and_store` built and wrote."""

    result: GoldResult
    violations: list          # validate.Violation of the gold samples (those samples were not merged)
    summary: dict             # also written as summary.json
    dir: Path                 # DataRoot.gold_dir(): provenance.parquet, violations.parquet, summary.json

    @property
    def provenance_path(self) -> Path:
        return self.dir / "provenance.parquet"


def build_and_store(root: DataRoot, base_samples: Sequence[dict] | None = None,
                    round_names: Sequence[str] | None = None, strict: bool = True) -> GoldBuild:
    """The gold stage (``rescue gold build`` and the annotation-round flow): gold from every
    pulled round (with its adjudications), validated, merged into the corpus.

    Base samples default to what the rounds were pushed from: the work store (interviews in
    annotation), and corpus samples not in it (imported samples annotated again). Gold of a work
    sample goes back into the work store, and into the corpus once every round has labels for it
    (finished: the corpus never holds draft rows); gold of a corpus sample goes to the corpus.
    What would enter the corpus is checked against V1-V12 first (an unfinished interview lacks
    the later rounds' fields and is checked when it is finished); samples that break a rule are
    not merged anywhere, and their violations are written beside the provenance table.
    """
    names = [check_name(n, "round") for n in round_names] if round_names else \
        [n for n in all_rounds() if root.labels(n).is_file()]
    if not names:
        raise FileNotFoundError(f"no pulled label tables under {root.labels('x').parent}")
    for n in names:
        if not root.labels(n).is_file():
            raise FileNotFoundError(f"{root.labels(n)}: no labels for round {n!r}; run `rescue annotate pull {n}` first")
    in_work = corpus.sample_ids(root, corpus.WORK)
    if base_samples is not None:
        base = list(base_samples)
    else:
        base = corpus.load_annotated(root)
    if not base:
        raise FileNotFoundError(f"no base samples: neither the work store under {root.work_dir()} nor the corpus "
                                f"under {root.corpus_dir()} holds any")
    tables = [pq.read_table(root.labels(n)) for n in names]
    for n, table in zip(names, tables):  # one annotator's answers are never "unanimous"
        require_annotators(root, load_round(n), table.column("annotator").to_pylist(), "gold")
    adj = [pq.read_table(root.adjudications(n)) for n in names if root.adjudications(n).is_file()]
    labels = pa.concat_tables(tables, promote_options="default")
    adjudications = pa.concat_tables(adj, promote_options="default") if adj else None
    labelled = set(labels.column("sample_id").to_pylist())
    # A sample some annotators of a round have not labelled yet waits: one person's answers are
    # not "unanimous" (it is listed in the summary and merged nowhere).
    short: dict[str, list[str]] = {}
    for n, table in zip(names, tables):
        need = load_round(n).annotators
        per: dict[str, set] = {}
        for sid, who in zip(table.column("sample_id").to_pylist(), table.column("annotator").to_pylist()):
            per.setdefault(sid, set()).add(who)
        for sid, who in sorted(per.items()):
            if len(who) < need:
                short.setdefault(sid, []).append(f"{n}: {len(who)} of {need} annotators ({', '.join(sorted(who))})")
    base = [s for s in base if s["sample_id"] in labelled and s["sample_id"] not in short]
    result = build_gold(base, labels, [load_round(n) for n in names], adjudications, strict=strict)
    labelled_in = {n: set(tb.column("sample_id").to_pylist()) for n, tb in zip(names, tables)}
    finished = {s["sample_id"] for s in result.samples
                if all(s["sample_id"] in labelled_in.get(n, ()) for n in all_rounds())}
    # What goes to the corpus must pass V1-V12; an interview still in annotation lacks the later
    # rounds' fields by design (e.g. utterance_type before the emotion round) and is checked
    # when it is finished.
    complete = [s for s in result.samples if s["sample_id"] not in in_work or s["sample_id"] in finished]
    violations = validate.validate_samples(complete)
    bad = {v.sample_id for v in violations}
    work = corpus.merge_into_work(root, [s for s in result.samples if s["sample_id"] in in_work
                                         and s["sample_id"] not in bad])
    merged = corpus.merge_into_corpus(root, [s for s in complete if s["sample_id"] not in bad])
    out = root.gold_dir()
    store.write_parquet(result.provenance, out / "provenance.parquet")
    store.write_parquet(validate.violations_table(violations), out / "violations.parquet")
    summary = {**result.summary, "rounds": names, "violations": len(violations), "invalid_samples": sorted(bad),
               "waiting_for_annotators": {sid: short[sid] for sid in sorted(short)},
               "corpus": {"added": len(merged.added), "replaced": len(merged.replaced),
                          "unchanged": len(merged.unchanged)},
               "work": {"added": len(work.added), "replaced": len(work.replaced), "unchanged": len(work.unchanged)},
               "finished": sorted(finished & in_work)}
    store.atomic_write_text(out / "summary.json", store.canonical_json(summary))
    return GoldBuild(result, violations, summary, out)
