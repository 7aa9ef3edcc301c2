"""The working corpus: every sample a release is built from, keyed by sample_id.

Lives at ``<data root>/corpus/{samples,rows}.parquet``. Imported releases
(``rescue import-rescue``) and gold rows from annotation rounds (``rescue gold build``)
are merged into it; a release is a frozen, versioned export of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.rows import read_rows_dir, rows_dir_paths, write_rows_dir


def corpus_dir(root: str | Path) -> Path:
    return Path(root) / "corpus"


@dataclass
class MergeSummary:
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def load_corpus(root: str | Path) -> list[dict]:
    if not rows_dir_paths(corpus_dir(root))["samples"].exists():
        return []
    return read_rows_dir(corpus_dir(root))


def save_corpus(root: str | Path, samples: list[dict]) -> None:
    write_rows_dir(sorted(samples, key=lambda s: s["sample_id"]), corpus_dir(root))


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
