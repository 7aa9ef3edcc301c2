"""The catalog of ingested media: ``catalog.parquet`` under the data root (``schemas.CATALOG``),
one line per sample_id, and :class:`Ingested`, the typed record of a usable line.

``pipeline.media.ingest`` writes it (under ``catalog.lock``). The later media stages do not read
it: they take the :class:`Ingested` record (the flows pass the ingest task's; a command looks its
samples up in one :class:`Catalog` read). The annotation rounds (intake, push) read it too. It
lives in the core so that ``annotation`` and ``media`` stand side by side, neither importing the other.
"""
from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas
from pipeline.paths import DataRoot, check_sample_id
from pipeline.store import write_parquet


@dataclass(frozen=True)
class Ingested:
    """What the later stages need of an ingested sample; content addressed by ``sha256``."""

    sample_id: str
    scenario: str
    participants: tuple[str, ...]
    sha256: str
    audio_path: str            # relative to the data root (DataRoot.resolve)
    subtitle_path: str | None  # relative to the data root, None when the manifest gave none
    duration_s: float
    speaking_order: bool = False  # the manifest's naming hint (part of the segment task's cache key)


class QuarantinedAtIngest(ValueError):
    """A catalogued sample that ingest quarantined: no later stage runs on it."""


def read_catalog(root: DataRoot) -> pa.Table:
    path = root.catalog()
    if not path.exists():
        return schemas.CATALOG.empty_table()
    return pq.read_table(path, schema=schemas.CATALOG)


def write_catalog(root: DataRoot, rows_by_id: dict[str, dict]) -> Path:
    """Replace the whole catalog (atomic). Callers that update it hold :func:`catalog_lock`;
    :func:`record_catalog` does both."""
    ordered = [rows_by_id[k] for k in sorted(rows_by_id)]
    table = pa.Table.from_pylist(ordered, schema=schemas.CATALOG)
    return write_parquet(table, root.catalog())


@contextlib.contextmanager
def catalog_lock(root: DataRoot) -> Iterator[None]:
    """Hold the catalog's lock: an exclusive ``flock`` on ``catalog.lock``. Every holder opens the
    file anew, so the lock excludes other threads of this process as well as other processes."""
    path = root.catalog_lock()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def record_catalog(root: DataRoot, row: dict) -> None:
    """Put ``row`` into the catalog (its sample_id's line), read-modify-write under the lock."""
    with catalog_lock(root):
        rows = {r["sample_id"]: r for r in read_catalog(root).to_pylist()}
        rows[row["sample_id"]] = row
        write_catalog(root, rows)


@dataclass(frozen=True)
class Catalog:
    """One read of the catalog: a command that runs a stage on several samples looks each one up
    here instead of reading the file once per sample."""

    root: DataRoot
    rows: Mapping[str, dict]  # sample_id -> catalog line

    @classmethod
    def read(cls, root: DataRoot) -> "Catalog":
        return cls(root, {r["sample_id"]: r for r in read_catalog(root).to_pylist()})

    def entry(self, sample_id: str) -> dict:
        """The catalog line of ``sample_id`` (``KeyError`` naming the data root when it has none)."""
        check_sample_id(sample_id)
        if sample_id not in self.rows:
            raise KeyError(f"{sample_id!r} is not in the catalog of {self.root}")
        return self.rows[sample_id]

    def ingested(self, sample_id: str) -> Ingested:
        """The typed record of a usable sample; :class:`QuarantinedAtIngest` with ingest's reason otherwise."""
        row = self.entry(sample_id)
        if row["status"] != "done":
            raise QuarantinedAtIngest(f"{sample_id}: quarantined at ingest ({row['reason']})")
        return ingested(row)

    def done(self) -> list[str]:
        """The sample ids ingest made usable, in id order."""
        return sorted(sid for sid, r in self.rows.items() if r["status"] == "done")


def catalog_entry(root: DataRoot, sample_id: str) -> dict:
    """One sample's catalog line (one read; :class:`Catalog` for several)."""
    check_sample_id(sample_id)  # before any read
    return Catalog.read(root).entry(sample_id)


def ingested(row: dict) -> Ingested:
    """The typed record of a catalog line with ``status=done``."""
    return Ingested(row["sample_id"], row["scenario"], tuple(row.get("participants") or ()), row["sha256"],
                    row["audio_path"], row.get("subtitle_path"), row["duration_s"], bool(row.get("speaking_order")))
