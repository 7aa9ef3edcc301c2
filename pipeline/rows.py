"""In-memory samples <-> the ``samples`` and ``rows`` tables.

A *sample* is a plain dict ``{sample_id, scenario, participants, source_file, group_id,
duration_s, rows: [row, ...]}`` whose rows carry ``schemas.ROW_KEYS`` (without sample_id):
the 15 base keys, ``row_index`` and the relation fields (null on client rows). Task builders,
validation and export all work on this shape; Parquet holds the same data column-wise.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas, store


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


def rows_dir_paths(rows_dir: str | Path) -> dict[str, Path]:
    return {name: Path(rows_dir) / f"{name}.parquet" for name in ("samples", "rows")}


def read_rows_dir(rows_dir: str | Path) -> list[dict]:
    """Samples from a directory holding ``samples.parquet`` and ``rows.parquet``."""
    paths = rows_dir_paths(rows_dir)
    for path in paths.values():
        if not path.is_file():
            raise FileNotFoundError(f"{rows_dir}: missing {path.name} (expected samples.parquet and rows.parquet)")
    # ParquetFile, not read_table: the latter imports pyarrow.dataset (seconds, unused here)
    samples_t = pq.ParquetFile(paths["samples"]).read().select(schemas.SAMPLES.names).cast(schemas.SAMPLES)
    rows_t = pq.ParquetFile(paths["rows"]).read().select(schemas.ROWS.names).cast(schemas.ROWS)
    return tables_to_samples(samples_t, rows_t)


def write_rows_dir(samples: Iterable[dict], rows_dir: str | Path) -> Path:
    """Write samples as a rows directory (the inverse of :func:`read_rows_dir`), atomically per file.

    rows.parquet goes first: a crash between the two writes leaves samples.parquet naming
    only samples whose rows are already there.
    """
    samples_t, rows_t = samples_to_tables(samples)
    paths = rows_dir_paths(rows_dir)
    store.write_parquet(rows_t, paths["rows"])
    store.write_parquet(samples_t, paths["samples"])
    return Path(rows_dir)
