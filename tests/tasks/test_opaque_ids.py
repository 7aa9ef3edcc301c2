"""Ids that leak nothing: no task's instance_id (or any other non-gold column) lets a trivial rule
recover the label. The paper's ITP ids (``..._pos_after_row2``) did."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from pipeline.benchmark import tasks
from pipeline.benchmark.tasks.common import instance_id
from pipeline.synthetic.corpus import generate

ID_RE = re.compile(r"(itp|rpp|stp|ssp|er|vp)_[0-9a-f]{20}")


@pytest.fixture(scope="module")
def tables():
    return tasks.build_all(generate(scale=0.1, seed=5))


def _label_strings(task: str, rec: dict) -> set[str]:
    out = set()
    for col, value in rec.items():
        if not col.startswith("label") or value is None:
            continue
        if task == "vp":
            out |= {v for item in value for v in item.values() if v}
        elif isinstance(value, (str, int)) and not isinstance(value, bool):
            out.add(str(value))
    return {s for s in out if len(s) >= 2}  # 1-char values (intensity 7) can occur in any hex digest


def test_ids_are_opaque_stable_and_unique(tables, head_samples):
    for task, table in tables.items():
        recs = table.to_pylist()
        ids = [r["instance_id"] for r in recs]
        assert len(set(ids)) == len(ids), task
        for rec in recs:
            assert ID_RE.fullmatch(rec["instance_id"]) and rec["instance_id"].startswith(task + "_"), rec["instance_id"]
            assert rec["instance_id"] == instance_id(rec["sample_id"], task, rec["row_index"])  # stable
            for label in _label_strings(task, rec):
                assert label.lower() not in rec["instance_id"].lower(), (task, label)
            assert rec["sample_id"] not in rec["instance_id"]
    head = tasks.build_task("itp", head_samples)
    assert not any(w in i for i in head["instance_id"].to_pylist() for w in ("pos", "neg", "yes", "no", "row"))


def test_itp_classes_are_indistinguishable_by_id(tables):
    recs = tables["itp"].to_pylist()
    by_class = {lab: [r["instance_id"] for r in recs if r["label"] == lab] for lab in ("yes", "no")}
    assert len(by_class["yes"]) == len(by_class["no"]) > 50
    for lab, ids in by_class.items():
        assert {len(i) for i in ids} == {len("itp_") + 20}, lab
    # no character position separates the classes: each hex digit's share is alike in both
    for pos in range(4, 24):
        yes = Counter(i[pos] for i in by_class["yes"])
        no = Counter(i[pos] for i in by_class["no"])
        for digit in "0123456789abcdef":
            assert abs(yes[digit] - no[digit]) / len(by_class["yes"]) < 0.2, (pos, digit)


def test_no_input_column_holds_the_itp_label(tables):
    """No non-gold column holds the answer as a value (the scripts' ``gold_should_speak`` /
    ``candidate_type`` would): only ``label*`` columns carry yes/no or the boundary type."""
    recs = tables["itp"].to_pylist()
    gold_values = {"yes", "no", "therapist_entry", "same_speaker_continuation", "non_therapist_exchange",
                   "actual_therapist_entry", "continue_listening"}

    def strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for x in v.values():
                yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)

    for col in recs[0]:
        if col.startswith("label"):
            continue
        hits = [s for r in recs for s in strings(r[col]) if s.strip().lower() in gold_values]
        assert not hits, (col, hits[:3])
