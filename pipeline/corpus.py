"""The working corpus: every sample a release is built from, keyed by sample_id.

Lives at ``<data root>/corpus/{samples,rows}.parquet``. Imported releases
(``rescue import-rescue``) and gold rows from annotation rounds (``rescue gold build``)
are merged into it; a release is a frozen, versioned export of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import store
from pipeline.rows import samples_to_tables, tables_to_samples


def corpus_dir(root: str | Path) -> Path:
    return Path(root) / "corpus"


@dataclass
class MergeSummary:
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def load_corpus(root: str | Path) -> list[dict]:
    d = corpus_dir(root)
    if not (d / "samples.parquet").exists():
        return []
    return tables_to_samples(pq.read_table(d / "samples.parquet"), pq.read_table(d / "rows.parquet"))


def save_corpus(root: str | Path, samples: list[dict]) -> None:
    samples = sorted(samples, key=lambda s: s["sample_id"])
    sample_table, row_table = samples_to_tables(samples)
    d = corpus_dir(root)
    # rows first: a crash between the two writes leaves samples.parquet naming only old samples.
    store.write_parquet(row_table, d / "rows.parquet")
    store.write_parquet(sample_table, d / "samples.parquet")


def merge_into_corpus(root: str | Path, samples: list[dict]) -> MergeSummary:
    """Add or replace samples by sample_id; the rest of the corpus is kept as it is."""
    current = {s["sample_id"]: s for s in load_corpus(root)}
    summary = MergeSummary()
    for s in samples:
        old = current.get(s["sample_id"])
        if old is None:
            summary.added.append(s["sample_id"])
        elif old == s:
            summary.unchanged.append(s["sample_id"])
            continue
        else:
            summary.replaced.append(s["sample_id"])
        current[s["sample_id"]] = s
    if summary.added or summary.replaced or not corpus_dir(root).exists():
        save_corpus(root, list(current.values()))
    return summary
