"""A segmented interview whose drafts hold no row never reaches annotators: admission to the
work store refuses it by name; one with rows goes in."""
from __future__ import annotations

import pyarrow as pa

from pipeline import corpus, schemas, store
from pipeline.annotation import intake
from pipeline.catalog import record_catalog
from pipeline.paths import DataRoot


def _catalog_line(sid: str) -> dict:
    line = {name: None for name in schemas.CATALOG.names}
    line.update(sample_id=sid, scenario="couple", source_name=f"{sid.replace('/', '_')}.mp4", sha256="0" * 64,
                participants=["Ann", "Bo"], status="done", duration_s=12.0)
    return line


def _draft_row(sid: str, i: int) -> dict:
    row = {name: None for name in schemas.DRAFT_ROWS.names}
    row.update(sample_id=sid, row_index=i, start_time=float(i), end_time=i + 0.8, primary_speaker="Ann",
               dialogue_cleaned="Hello there.", background_dialogue=[])
    return row


def test_a_zero_row_sample_is_not_admitted_and_is_named(tmp_path):
    root = DataRoot(tmp_path)
    for sid, n in (("g/empty", 0), ("g/full", 2)):
        record_catalog(root, _catalog_line(sid))
        table = pa.Table.from_pylist([_draft_row(sid, i) for i in range(n)], schema=schemas.DRAFT_ROWS)
        store.write_parquet(table, root.drafts(sid))
    admitted = intake.admit_drafts(root)
    assert admitted.added == ["g/full"] and admitted.empty == ["g/empty"]
    assert [s["sample_id"] for s in corpus.load_work(root)] == ["g/full"]
