"""In-memory samples <-> the ``samples`` and ``rows`` tables.

A *sample* is a plain dict ``{sample_id, scenario, participants, source_file, group_id,
duration_s, rows: [row, ...]}`` whose rows carry ``schemas.ROW_KEYS`` (without sample_id):
the 15 base keys, ``row_index`` and the relation fields (null on client rows). Task builders,
validation and export all work on this shape; Parquet holds the same data column-wise.
"""
from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from pipeline import schemas


def group_id_of(sample_id: str) -> str:
    """The couple/family directory of a sample id (``alan_and_evelyn/001_...`` -> ``alan_and_evelyn``)."""
    head, _, _ = sample_id.rpartition("/")
    return head or sample_id


def samples_to_tables(samples: Iterable[dict]) -> tuple[pa.Table, pa.Table]:
    sample_records, row_records = [], []
    for s in samples:
        sample_records.append(
            {
                "sample_id": s["sample_id"],
                "scenario": s["scenario"],
                "group_id": s.get("group_id") or group_id_of(s["sample_id"]),
                "participants": list(s.get("participants") or []),
                "source_file": s.get("source_file"),
                "n_rows": len(s["rows"]),
                "duration_s": s.get("duration_s"),
            }
        )
        for row in s["rows"]:
            rec = {key: row.get(key) for key in schemas.ROW_KEYS}
            rec["sample_id"] = s["sample_id"]
            row_records.append(rec)
    return (
        pa.Table.from_pylist(sample_records, schema=schemas.SAMPLES),
        pa.Table.from_pylist(row_records, schema=schemas.ROWS),
    )


def tables_to_samples(samples: pa.Table, rows: pa.Table) -> list[dict]:
    """Inverse of :func:`samples_to_tables`; rows come back ordered by row_index."""
    by_sample: dict[str, list[dict]] = {}
    for rec in rows.to_pylist():
        sid = rec.pop("sample_id")
        by_sample.setdefault(sid, []).append(rec)
    out = []
    for s in samples.to_pylist():
        s = dict(s)
        s.pop("n_rows", None)
        s["rows"] = sorted(by_sample.get(s["sample_id"], []), key=lambda r: r["row_index"])
        out.append(s)
    return out
