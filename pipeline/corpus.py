"""The two sample stores, keyed by sample_id, in the ``pipeline.rows`` shape.

- The **corpus** (``DataRoot.corpus_dir()``): what a release is built from. Imported releases
  (``rescue import-rescue``) and interviews whose every annotation round has gold
  (``rescue gold build``). It never holds draft rows, so neither can a release.
- The **work store** (``DataRoot.work_dir()``): interviews in annotation. The segmenter's drafts
  enter it (:mod:`pipeline.annotation.intake`), the rounds are pushed from it, and each round's
  gold values are merged back into it until the sample is finished.

The samples tables are where a sample's scenario is read (:func:`scenarios`), never its id.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.paths import DataRoot
from pipeline.rows import read_rows_dir, rows_dir_paths, write_rows_dir


@dataclass
class MergeSummary:
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


CORPUS, WORK = "corpus", "work"


def store_dir(root: DataRoot, store: str = CORPUS) -> Path:
    if store == CORPUS:
        return root.corpus_dir()
    if store == WORK:
        return root.work_dir()
    raise ValueError(f"unknown sample store {store!r} (corpus or work)")


def load_samples(root: DataRoot, store: str = CORPUS) -> list[dict]:
    sdir = store_dir(root, store)
    if not rows_dir_paths(sdir)["samples"].exists():
        return []
    return read_rows_dir(sdir)


def sample_ids(root: DataRoot, store: str = CORPUS) -> set[str]:
    """The ids in a store, from its samples table alone (the rows are not read)."""
    path = rows_dir_paths(store_dir(root, store))["samples"]
    return set(pq.ParquetFile(path).read(columns=["sample_id"]).column(0).to_pylist()) if path.is_file() else set()


def scenarios(root: DataRoot) -> dict[str, str]:
    """sample_id -> scenario from the samples tables of the corpus and the work store."""
    out: dict[str, str] = {}
    for store in (CORPUS, WORK):
        path = rows_dir_paths(store_dir(root, store))["samples"]
        if path.is_file():
            t = pq.ParquetFile(path).read(columns=["sample_id", "scenario"])
            out.update(zip(t.column("sample_id").to_pylist(), t.column("scenario").to_pylist()))
    return out


def save_samples(root: DataRoot, samples: list[dict], store: str = CORPUS) -> None:
    write_rows_dir(sorted(samples, key=lambda s: s["sample_id"]), store_dir(root, store))


def merge_samples(root: DataRoot, samples: list[dict], store: str = CORPUS) -> MergeSummary:
    """Add or replace samples by sample_id; the rest of the store is kept as it is."""
    current = {s["sample_id"]: s for s in load_samples(root, store)}
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
    if summary.added or summary.replaced or not store_dir(root, store).exists():
        save_samples(root, list(current.values()), store)
    return summary


def load_corpus(root: DataRoot) -> list[dict]:
    return load_samples(root, CORPUS)


def save_corpus(root: DataRoot, samples: list[dict]) -> None:
    save_samples(root, samples, CORPUS)


def merge_into_corpus(root: DataRoot, samples: list[dict]) -> MergeSummary:
    return merge_samples(root, samples, CORPUS)


def load_work(root: DataRoot) -> list[dict]:
    return load_samples(root, WORK)


def load_annotated(root: DataRoot) -> list[dict]:
    """The samples annotation labels refer to: the work store, and corpus samples not in it
    (imported samples annotated again). The base of adjudication and gold."""
    return list({**{s["sample_id"]: s for s in load_corpus(root)},
                 **{s["sample_id"]: s for s in load_work(root)}}.values())


def merge_into_work(root: DataRoot, samples: list[dict]) -> MergeSummary:
    return merge_samples(root, samples, WORK)
