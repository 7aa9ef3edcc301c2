"""SIMULATED annotators, for tests, benchmarks and the demo - never a source of real labels.

A :class:`SimulatedAnnotator` answers a round from a known truth (samples in the RESCUE row
shape) with a controlled error rate per field and an optional confusion pattern. It can write
label lines straight into the long label table (``schemas.LABELS``) or answer real Label
Studio tasks through the API, exactly as a person would submit them.

How an answer goes wrong (with probability ``error_rates[path]``, path = field or
``field.subfield``; ``"*"`` is the default):

- choice: replaced by a draw from ``confusion[truth]`` if given, else uniformly from all
  allowed values (the truth included: "uniformly replaced");
- multichoice / rows: replaced by a random non-empty subset;
- number: replaced by a uniform integer in [min, max];
- text: its last word dropped (or "unclear" for empty text);
- records: presence flipped (a record invented or all records dropped), then each subfield
  of each record as above.

:func:`expected_alpha` gives the large-sample Krippendorff alpha that such annotators
produce, so tests can check measured agreement against theory.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import schemas, taxonomy
from pipeline.annotation.ls_config import values_to_results

SIMULATED_PREFIX = "sim-"  # simulated annotator ids start with this, so they are never mistaken for people


@dataclass
class SimulatedAnnotator:
    """A simulated annotator (name starts with ``sim-``) answering from a known truth."""

    name: str
    error_rates: Mapping[str, float] = field(default_factory=dict)
    confusion: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)  # path -> truth -> {answer: weight}
    coverage: float = 1.0  # share of samples (tasks) this annotator does at all
    seed: int = 0
    lead_time_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.name.startswith(SIMULATED_PREFIX):
            self.name = SIMULATED_PREFIX + self.name

    # --- randomness: one stream per (annotator, sample, row, path), independent of call order
    def _rng(self, *key: Any) -> random.Random:
        digest = hashlib.blake2b(json.dumps([self.name, self.seed, *key]).encode(), digest_size=8).digest()
        return random.Random(int.from_bytes(digest, "big"))

    def rate(self, path: str) -> float:
        return float(self.error_rates.get(path, self.error_rates.get("*", 0.0)))

    def does(self, sample_id: str) -> bool:
        return self.coverage >= 1.0 or self._rng("coverage", sample_id).random() < self.coverage

    # --- answers -----------------------------------------------------------------------
    def _domain(self, f, scenario: str, participants: Sequence[str], n_rows: int, exclude: set) -> list:
        if f.type == "rows":
            return list(range(n_rows))
        opts = [o for o in f.options(scenario, participants, n_rows) if o != f.empty_choice]
        if f.empty_choice:
            opts.append("")  # the stored form of the empty choice
        return [o for o in opts if o not in exclude]

    def _value(self, f, path: str, truth: Any, rng: random.Random, scenario: str, participants: Sequence[str],
               n_rows: int, exclude: set) -> Any:
        if f.type == "const":
            return f.const
        if rng.random() >= self.rate(path):
            return truth
        if f.type == "text":
            words = (truth or "").split()
            return " ".join(words[:-1]) if len(words) > 1 else "unclear"
        if f.type == "number":
            lo = int(f.minimum if f.minimum is not None else 0)
            hi = int(f.maximum if f.maximum is not None else 10)
            return rng.randint(lo, hi)
        domain = self._domain(f, scenario, participants, n_rows, exclude)
        if not domain:
            return truth
        if f.type == "choice":
            pattern = self.confusion.get(path, {}).get(truth)
            if pattern:
                labels = list(pattern)
                return rng.choices(labels, weights=[pattern[x] for x in labels])[0]
            return rng.choice(domain)
        # multichoice / rows: a random non-empty subset
        picked = rng.sample(domain, k=min(len(domain), rng.randint(1, 2)))
        group = taxonomy.group_label(scenario)
        if scenario in f.group_label_alone and group in picked:
            picked = [group]
        return sorted(picked) if f.type == "rows" else [d for d in domain if d in picked]

    def answer_row(self, rnd, sample: dict, row: dict) -> dict[str, Any]:
        """``{field: value}`` for one row, in the stored (row-schema) form of each field."""
        scenario, participants = sample["scenario"], list(sample.get("participants") or [])
        n_rows = len(sample["rows"])
        sid, ri = sample["sample_id"], row["row_index"]
        out: dict[str, Any] = {}
        for f in rnd.fields:
            truth = row.get(f.name)
            if f.type != "records":
                exclude = {out.get(f.distinct_from, row.get(f.distinct_from))} if f.distinct_from else set()
                exclude |= {None}
                out[f.name] = self._value(f, f.name, truth, self._rng(sid, ri, f.name), scenario, participants,
                                          n_rows, exclude)
                continue
            records = [dict(r) for r in (truth or [])][: f.max_items]
            rng = self._rng(sid, ri, f.name)
            if rng.random() < self.rate(f.name):  # presence flipped
                records = [] if records else [{}]
            answered = []
            for slot, rec in enumerate(records):
                new: dict[str, Any] = {}
                for sub in f.subfields:
                    path = f"{f.name}.{sub.name}"
                    exclude = {new.get(sub.distinct_from), rec.get(sub.distinct_from)} if sub.distinct_from else set()
                    exclude |= {None, f.const if sub.distinct_from == "provider" else None}
                    sub_truth = rec.get(sub.name)
                    sub_rng = self._rng(sid, ri, path, slot)
                    if sub_truth is None and sub.type != "const":  # an invented record: every subfield drawn
                        sub_truth = self._value(sub, path, None, _Always(sub_rng), scenario, participants, n_rows,
                                                exclude)
                        if sub.type == "text":
                            sub_truth = "simulated record"
                    new[sub.name] = self._value(sub, path, sub_truth, sub_rng, scenario, participants, n_rows, exclude)
                if f.name == "support_strategy" and new.get("strategy_type") == "":
                    continue  # the "no strategy" choice means no record
                answered.append(new)
            out[f.name] = answered
        return out

    def answer_sample(self, rnd, sample: dict) -> dict[int, dict[str, Any]] | None:
        """``{row_index: {field: value}}`` for every row the round applies to; None = skipped."""
        if not self.does(sample["sample_id"]):
            return None
        return {r["row_index"]: self.answer_row(rnd, sample, r) for r in sample["rows"]
                if rnd.applies(r.get("primary_speaker"))}

    # --- theory: the law of one answer, mirroring _value and answer_row ------------------
    def answer_distribution(self, f, path: str, truth: Any, scenario: str, participants: Sequence[str],
                            n_rows: int = 0, exclude: Iterable = ()) -> dict[Any, float]:
        """P(answer) for a choice or number field (or subfield) whose truth is ``truth``: what
        :meth:`_value` draws from, so expected agreement follows from the error rates."""
        e = self.rate(path)
        if f.type == "choice":
            domain = self._domain(f, scenario, participants, n_rows, set(exclude) | {None})
            if not domain:
                return {truth: 1.0}
            pattern = self.confusion.get(path, {}).get(truth)
            total = sum(pattern.values()) if pattern else 0.0
            wrong = {k: w / total for k, w in pattern.items()} if pattern else {d: 1 / len(domain) for d in domain}
        elif f.type == "number":
            lo = int(f.minimum if f.minimum is not None else 0)
            hi = int(f.maximum if f.maximum is not None else 10)
            wrong = {v: 1 / (hi - lo + 1) for v in range(lo, hi + 1)}
        else:
            raise ValueError(f"{path}: no answer law for a {f.type} field (choice and number only)")
        out = {truth: 1.0 - e}
        for k, w in wrong.items():
            out[k] = out.get(k, 0.0) + e * w
        return out

    def presence_distribution(self, f, present: bool, scenario: str, participants: Sequence[str],
                              n_rows: int = 0) -> dict[str, float]:
        """P(present / absent) of a records field's answer on a row whose truth has a record
        (``present``) or not: presence flipped at the field's rate; a support strategy whose
        type comes out as the empty choice is no record (see :meth:`answer_row`)."""
        e = self.rate(f.name)
        keep_kept = keep_invented = 1.0
        if f.name == "support_strategy":
            sub = f.subfield("strategy_type")
            path = f"{f.name}.{sub.name}"
            domain = self._domain(sub, scenario, participants, n_rows, {None})
            p_empty = (1 / len(domain)) if "" in domain and not self.confusion.get(path) else 0.0
            keep_kept = 1.0 - self.rate(path) * p_empty  # a kept record's type replaced by "no strategy"
            keep_invented = 1.0 - p_empty  # an invented record's type is drawn uniformly
        p = (1.0 - e) * keep_kept if present else e * keep_invented
        return {"present": p, "absent": 1.0 - p}

    # --- outputs -----------------------------------------------------------------------
    def label_rows(self, rnd, samples: Iterable[dict]) -> list[dict]:
        """Label-table lines (``schemas.LABELS``) as if pulled from Label Studio."""
        out = []
        for s in samples:
            answers = self.answer_sample(rnd, s)
            if answers is None:
                continue
            ann_id = int.from_bytes(hashlib.blake2b(f"{self.name}/{rnd.name}/{s['sample_id']}".encode(),
                                                    digest_size=6).digest(), "big")
            for ri, values in answers.items():
                for name, v in values.items():
                    out.append({"round": rnd.name, "sample_id": s["sample_id"], "scenario": s["scenario"],
                                "row_index": ri,
                                "annotator": self.name, "field": name,
                                "value": json.dumps(v, ensure_ascii=False), "annotation_id": ann_id,
                                "lead_time_s": self.lead_time_s, "created_at": "2026-01-01T00:00:00+00:00",
                                "updated_at": "2026-01-01T00:00:00+00:00"})
        return out

    def annotate_tasks(self, client, project_id: int, rnd, truth: Mapping[str, dict],
                       completed_by: int | None = None) -> int:
        """Answer every task of a Label Studio project through the API (``client``: a
        ``pipeline.labelstudio.client.LabelStudioClient``); returns annotations posted.

        ``truth``: sample_id -> sample. Tasks of samples this annotator skips (``coverage``)
        stay unanswered. ``completed_by``: the annotator's Label Studio user id (an admin
        token may post on a user's behalf).
        """
        posted = 0
        for task in client.tasks(project_id):
            data = task["data"]
            sample = truth.get(data.get("sample_id"))
            if sample is None:
                continue
            answers = self.answer_sample(rnd, sample)
            if answers is None:
                continue
            client.create_annotation(task["id"], values_to_results(rnd, data, answers), completed_by=completed_by,
                                     lead_time=self.lead_time_s)
            posted += 1
        return posted


class _Always(random.Random):
    """A random stream whose first draw always 'errs': used to invent a record's subfields."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng.random())
        self._first = True

    def random(self) -> float:
        if self._first:
            self._first = False
            return -1.0
        return super().random()


def simulate_labels(rnd, samples: Sequence[dict], annotators: Sequence[SimulatedAnnotator]) -> pa.Table:
    """The label table of one round answered by simulated annotators (no Label Studio)."""
    lines = [line for a in annotators for line in a.label_rows(rnd, samples)]
    return pa.Table.from_pylist(lines, schema=schemas.LABELS)


# --- theory --------------------------------------------------------------------------------


def uniform_error_confusion(k: int, error_rate: float) -> np.ndarray:
    """P(answer | truth) for an annotator who replaces the truth uniformly (truth included) with
    probability ``error_rate``."""
    return (1.0 - error_rate) * np.eye(k) + error_rate / k


def expected_alpha(truth_p: Sequence[float], confusions: Sequence[np.ndarray], distance: np.ndarray) -> float:
    """Large-sample Krippendorff alpha of annotators with confusion matrices ``C_i[t, a]`` on
    units whose truth is distributed as ``truth_p``, every unit coded by every annotator.

    D_o = mean over annotator pairs of sum_t p_t sum_ab C_i[t,a] C_j[t,b] d(a,b);
    D_e = sum_ab pi_a pi_b d(a,b) with pi the pooled answer distribution. With uniform
    replacement at rate e and truth distributed like the replacement, alpha = (1 - e)^2.
    """
    p = np.asarray(truth_p, dtype=np.float64)
    cs = [np.asarray(c, dtype=np.float64) for c in confusions]
    d = np.asarray(distance, dtype=np.float64)
    pairs = list(combinations(range(len(cs)), 2))
    d_o = np.mean([np.einsum("t,ta,tb,ab->", p, cs[i], cs[j], d) for i, j in pairs])
    pi = np.mean([p @ c for c in cs], axis=0)
    d_e = pi @ d @ pi
    return float(1.0 - d_o / d_e)


def expected_alpha_units(units: Sequence[Sequence[Mapping[Any, float]]], metric: str = "nominal") -> float | None:
    """Large-sample Krippendorff alpha over heterogeneous units: ``units[u][i]`` is annotator i's
    answer law on unit u (e.g. :meth:`SimulatedAnnotator.answer_distribution`), every unit coded
    by every annotator. Generalises :func:`expected_alpha` to units whose truth and choices
    differ (per-sample participant names). ``metric``: ``nominal`` or ``interval``. None when
    fewer than two annotators or no expected disagreement."""
    if metric not in ("nominal", "interval"):
        raise ValueError(f"expected_alpha_units: metric {metric!r} is not nominal or interval")
    d_o, pooled, n = 0.0, {}, 0
    for laws in units:
        pairs = list(combinations(laws, 2))
        if not pairs:
            continue
        n += 1
        for law in laws:
            for a, w in law.items():
                pooled[a] = pooled.get(a, 0.0) + w / len(laws)
        if metric == "nominal":
            d_o += sum(1.0 - sum(w * q.get(a, 0.0) for a, w in p.items()) for p, q in pairs) / len(pairs)
        else:
            d_o += sum(_var(p) + _var(q) + (_mean(p) - _mean(q)) ** 2 for p, q in pairs) / len(pairs)
    if not n:
        return None
    pi = {a: w / n for a, w in pooled.items()}
    d_e = 1.0 - sum(w * w for w in pi.values()) if metric == "nominal" else 2.0 * _var(pi)
    return None if d_e <= 0 else float(1.0 - (d_o / n) / d_e)


def _mean(law: Mapping[Any, float]) -> float:
    return sum(float(a) * w for a, w in law.items())


def _var(law: Mapping[Any, float]) -> float:
    m = _mean(law)
    return sum(w * (float(a) - m) ** 2 for a, w in law.items())
