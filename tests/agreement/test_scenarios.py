"""The per-scenario breakdown takes each sample's scenario from the data, never from its id."""
from __future__ import annotations

import copy
import json

import pyarrow as pa

from pipeline import corpus, schemas, store
from pipeline.paths import DataRoot
from pipeline.quality import agreement, measures
from pipeline.quality.coding import FieldRule

FAMILY = "smiths/002_session"        # a family interview whose id says nothing about families
COUPLE = "alan_and_evelyn/001_clip"


def _lines(sample_id: str, scenario: str | None, values: dict[str, list[str]], round_name: str = "r",
           field: str = "x") -> list[dict]:
    return [{"round": round_name, "sample_id": sample_id, "scenario": scenario, "row_index": ri, "annotator": ann,
             "field": field, "value": json.dumps(v), "annotation_id": 1, "lead_time_s": 1.0,
             "created_at": "2026-01-01T00:00:00", "updated_at": "2026-01-01T00:00:00"}
            for ann, vs in values.items() for ri, v in enumerate(vs)]


def test_breakdown_uses_the_label_tables_scenario_column():
    lines = _lines(COUPLE, "couple", {"a": ["x", "y", "x", "y"], "b": ["x", "y", "x", "x"]}) \
        + _lines(FAMILY, "family", {"a": ["x", "y", "y"], "b": ["x", "y", "y"]})
    (f,) = measures.round_agreement(pa.Table.from_pylist(lines, schema=schemas.LABELS), "r",
                                    [FieldRule("x", "nominal")]).fields
    by = {s["scenario"]: s for s in f.scenarios}
    assert set(by) == {"couple", "family"}
    assert by["family"]["n_units"] == 3 and by["couple"]["n_units"] == 4
    assert by["family"]["alpha"] == 1.0


def test_a_sample_no_table_knows_is_unknown_not_guessed():
    lines = _lines(FAMILY, None, {"a": ["x", "y"], "b": ["x", "y"]})
    (f,) = measures.round_agreement(pa.Table.from_pylist(lines, schema=schemas.LABELS), "r",
                                    [FieldRule("x", "nominal")]).fields
    assert [s["scenario"] for s in f.scenarios] == [measures.UNKNOWN_SCENARIO]


def test_measure_round_reads_scenarios_from_the_sample_table(tmp_path, truth_samples):
    """Label lines without a scenario (tables pulled before the column existed): the corpus says."""
    fam = copy.deepcopy(next(s for s in truth_samples if s["scenario"] == "family"))
    cpl = copy.deepcopy(next(s for s in truth_samples if s["scenario"] == "couple"))
    fam.update(sample_id=FAMILY, group_id="smiths")
    cpl.update(sample_id=COUPLE, group_id="alan_and_evelyn")
    root = DataRoot(tmp_path / "data")
    corpus.save_corpus(root, [cpl, fam])
    lines = []
    for s in (cpl, fam):
        rows = [r for r in s["rows"] if r["primary_speaker"] == "Therapist"][:6]
        for ann in ("a@x.org", "b@x.org"):
            lines += [{**line, "row_index": r["row_index"]} for r, line in zip(rows, _lines(
                s["sample_id"], None, {ann: [r["relation_cycle_state"] or "" for r in rows]}, "relation",
                "relation_cycle_state"))]
    store.write_parquet(pa.Table.from_pylist(lines, schema=schemas.LABELS), root.labels("relation"))

    out = agreement.measure_round(root, "relation")
    f = next(x for x in out.report.fields if x.field == "relation_cycle_state")
    assert {s["scenario"]: s["n_units"] for s in f.scenarios} == {"couple": 6, "family": 6}
    assert out.paths["json"] == root.agreement_report_dir("relation") / "agreement.json"
    figures = json.loads(out.paths["json"].read_text())
    [fig] = [x for x in figures["fields"] if x["field"] == "relation_cycle_state"]
    assert {s["scenario"] for s in fig["scenarios"]} == {"couple", "family"}
    assert out.gate["round"] == "relation" and root.gate("relation").is_file()
