"""What enters the annotation rounds, and opening a round: one stage for the CLI and the flows.

:func:`admit_drafts` turns segmented interviews (``DataRoot.drafts(sample_id)`` plus the
catalog's facts about each) into samples of the work store (:mod:`pipeline.corpus`); an
interview already there (maybe with gold from earlier rounds) stays as it is.
:func:`open_round` pushes a round to Label Studio from the work store, admitting new drafts
first when it is the first round. ``rescue segment`` + ``rescue annotate push transcript``,
the ``ingest-batch`` flow and the ``annotation-round`` flow all come through here.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from pipeline import corpus
from pipeline.annotation import push
from pipeline.annotation.desks import DeskAccess
from pipeline.annotation.rounds import round_names
from pipeline.catalog import read_catalog
from pipeline.paths import DataRoot, check_sample_id
from pipeline.rows import group_id_of


@dataclass(frozen=True)
class Admitted:
    """Segmented interviews admitted to the work store (``added``), already there (``kept``), or
    refused because segmenting left no row (``empty``: a 0-row sample never reaches annotators)."""

    added: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)


def first_round() -> str:
    return round_names()[0]


def sample_from_drafts(root: str | os.PathLike, sample_id: str, catalog_line: dict) -> dict:
    """One segmented interview in the ``pipeline.rows`` sample shape (draft rows, no labels)."""
    rows = pq.read_table(DataRoot(root).drafts(sample_id)).to_pylist()
    for r in rows:
        r.pop("sample_id", None)
    return {"sample_id": sample_id, "scenario": catalog_line["scenario"], "group_id": group_id_of(sample_id),
            "participants": list(catalog_line["participants"]), "source_file": None,
            "duration_s": catalog_line["duration_s"], "rows": rows}


def admit_drafts(root: str | os.PathLike, sample_ids: Sequence[str] | None = None) -> Admitted:
    """Admit segmented interviews (default: every ingested one with drafts) to the work store.

    A named interview without drafts is an error naming it; finished ones (in the corpus) and
    ones already in the work store are kept as they are."""
    root = DataRoot(root)
    catalog = {r["sample_id"]: r for r in read_catalog(root).to_pylist() if r["status"] == "done"}
    if sample_ids is None:
        ids = [sid for sid in sorted(catalog) if root.drafts(sid).is_file()]
    else:
        ids = sorted({check_sample_id(sid) for sid in sample_ids})
        missing = [sid for sid in ids if sid not in catalog or not root.drafts(sid).is_file()]
        if missing:
            raise FileNotFoundError(f"no draft rows for {', '.join(missing)}: ingest and segment them first "
                                    "(rescue ingest, transcribe, diarize, segment)")
    known = corpus.sample_ids(root, corpus.WORK) | corpus.sample_ids(root, corpus.CORPUS)
    drafted = [sample_from_drafts(root, sid, catalog[sid]) for sid in ids if sid not in known]
    new = [s for s in drafted if s["rows"]]
    corpus.merge_into_work(root, new)
    return Admitted(added=[s["sample_id"] for s in new], kept=[sid for sid in ids if sid in known],
                    empty=[s["sample_id"] for s in drafted if not s["rows"]])


@dataclass(frozen=True)
class Opened:
    """A round pushed from the work store."""

    round: str
    admitted: Admitted
    report: push.PushReport


def open_round(desks: DeskAccess, root: str | os.PathLike, round_name: str,
               annotators: Sequence[str] | None = None, *, sample_ids: Sequence[str] | None = None,
               k: int | None = None, prelabel: push.Prelabeler | None = push.input_values,
               prelabel_source: str = "input", on_chunk: Callable[[int, int], None] | None = None) -> Opened:
    """Push ``round_name`` for the interviews in annotation (or only ``sample_ids``).

    The first round admits segmented interviews first. Pushing is idempotent (keyed on
    sample_id and the content's hash), so opening a round again adds only what is new."""
    root = DataRoot(root)
    admitted = admit_drafts(root, sample_ids) if round_name == first_round() else Admitted()
    samples = corpus.load_work(root)
    if sample_ids is not None:
        wanted = set(sample_ids)
        samples = [s for s in samples if s["sample_id"] in wanted]
    if not samples:
        raise push.PushError(f"no interviews in annotation under {root.work_dir()}: ingest, transcribe, diarize "
                             "and segment a batch first (or run the ingest-batch flow)")
    report = push.push_round(desks, round_name, samples, annotators, k=k, prelabel=prelabel,
                             prelabel_source=prelabel_source, media_url=push.catalog_media_urls(root),
                             on_chunk=on_chunk, data_root=root)
    return Opened(round_name, admitted, report)
