"""What enters the annotation rounds, and opening a round: one stage for the CLI and the flows.

:func:`admit_drafts` turns segmented interviews (``DataRoot.drafts(sample_id)`` plus the
catalog's facts about each) into samples of the work store (:mod:`pipeline.corpus`); an
interview already there (maybe with gold from earlier rounds) stays as it is.
:func:`open_round` pushes a round to Label Studio from the work store, admitting new drafts
first when it is the first round. ``rescue segment`` + ``rescue annotate push transcript``,
the ``ingest-batch`` flow and the ``annotation-round`` flow all come through here.

An interview segmented again after it entered the work store (a re-draft, :mod:`.redraft`)
replaces its old drafts there only while nobody has answered it, or when the operator names it
(``redraft``); else the old drafts stay and :attr:`Admitted.held` says why, one line each.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from pipeline import corpus
from pipeline.annotation import push, redraft as redrafts
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.rounds import round_names
from pipeline.catalog import read_catalog
from pipeline.paths import DataRoot, check_sample_id
from pipeline.rows import group_id_of


@dataclass(frozen=True)
class Admitted:
    """Segmented interviews admitted to the work store (``added``), already there (``kept``), or
    refused because segmenting left no row (``empty``: a 0-row sample never reaches annotators).
    Of those already there and segmented again since (:mod:`.redraft`): ``redrafted``, their new
    drafts replace the old (nobody answered them, or the operator named them); ``held``, sample ->
    where its answers are: its old drafts are kept; ``redraft_unchanged``: named for ``redraft``
    but its drafts are those in the work store (nothing to replace)."""

    added: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    redrafted: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    redraft_unchanged: list[str] = field(default_factory=list)

    def held_lines(self) -> list[str]:
        """One line per re-drafted sample whose old drafts were kept."""
        return [redrafts.held_line(sid, where) for sid, where in sorted(self.held.items())]


def first_round() -> str:
    return round_names()[0]


def sample_from_drafts(root: DataRoot, sample_id: str, catalog_line: dict) -> dict:
    """One segmented interview in the ``pipeline.rows`` sample shape (draft rows, no labels)."""
    rows = pq.read_table(root.drafts(sample_id)).to_pylist()
    for r in rows:
        r.pop("sample_id", None)
    return {"sample_id": sample_id, "scenario": catalog_line["scenario"], "group_id": group_id_of(sample_id),
            "participants": list(catalog_line["participants"]), "source_file": None,
            "duration_s": catalog_line["duration_s"], "rows": rows}


def admit_drafts(root: DataRoot, sample_ids: Sequence[str] | None = None, *,
                 redraft: Sequence[str] = (), desks: DeskAccess | None = None) -> Admitted:
    """Admit segmented interviews (default: every ingested one with drafts) to the work store.

    A named interview without drafts is an error naming it; finished ones (in the corpus) are
    kept as they are, and so are ones in the work store whose drafts are those admitted. One
    re-drafted since (:mod:`.redraft`) gets its new drafts unless it has answers in some round
    (pulled label lines; with ``desks``, annotated tasks on the desks too) and is not named in
    ``redraft``: then it is :attr:`Admitted.held`. ``redraft`` names only interviews in annotation."""
    catalog = {r["sample_id"]: r for r in read_catalog(root).to_pylist() if r["status"] == "done"}
    if sample_ids is None:
        ids = [sid for sid in sorted(catalog) if root.drafts(sid).is_file()]
    else:
        ids = sorted({check_sample_id(sid) for sid in sample_ids})
        missing = [sid for sid in ids if sid not in catalog or not root.drafts(sid).is_file()]
        if missing:
            raise FileNotFoundError(f"no draft rows for {', '.join(missing)}: ingest and segment them first "
                                    "(rescue ingest, transcribe, diarize, segment)")
    finished = corpus.sample_ids(root, corpus.CORPUS)
    in_work = corpus.sample_ids(root, corpus.WORK) - finished
    asked = sorted({check_sample_id(sid) for sid in redraft})
    wrong = [sid for sid in asked if sid not in in_work or sid not in catalog or not root.drafts(sid).is_file()]
    if wrong:
        raise push.PushError("--redraft " + ", ".join(wrong) + ": not an interview in annotation with drafts "
                             "(a finished one is in the corpus; a new one needs no --redraft)")
    record = redrafts.read_admitted(root)
    before = dict(record)
    changed: dict[str, dict] = {}
    for sid in ids:
        if sid not in in_work:
            continue
        old = record.get(sid)
        if old is None:  # admitted before this record was kept: taken as admitted as it is now
            record[sid] = {**redrafts.drafts_digest(root, sid), "redraft": False}
            continue
        same, now = redrafts.same_drafts(old, root, sid)
        if same:
            record[sid] = {**old, **now}
        else:
            changed[sid] = now
    answered = redrafts.answered(desks, root, changed) if changed else {}
    held = {sid: answered[sid] for sid in changed if sid in answered and sid not in asked}
    known = finished | corpus.sample_ids(root, corpus.WORK)
    drafted = [sample_from_drafts(root, sid, catalog[sid]) for sid in ids
               if sid not in known or (sid in changed and sid not in held)]
    new = [s for s in drafted if s["rows"]]
    for sid in (s["sample_id"] for s in new):
        if sid in changed:  # answered ones stay marked until a push of the round has replaced their tasks
            record[sid] = {**changed[sid], "redraft": bool(record[sid].get("redraft")) or sid in answered}
        else:
            record[sid] = {**redrafts.drafts_digest(root, sid), "redraft": False}
    corpus.merge_into_work(root, new)
    if record != before:
        redrafts.write_admitted(root, record)
    return Admitted(added=[s["sample_id"] for s in new if s["sample_id"] not in changed],
                    kept=[sid for sid in ids if sid in known and sid not in changed],
                    empty=[s["sample_id"] for s in drafted if not s["rows"]],
                    redrafted=[s["sample_id"] for s in new if s["sample_id"] in changed], held=held,
                    redraft_unchanged=[sid for sid in asked if sid not in changed])


@dataclass(frozen=True)
class Opened:
    """A round pushed from the work store."""

    round: str
    admitted: Admitted
    report: push.PushReport


def open_round(desks: DeskAccess, root: DataRoot, round_name: str,
               annotators: Sequence[str] | None = None, *, sample_ids: Sequence[str] | None = None,
               k: int | None = None, prelabel: push.Prelabeler | None = push.input_values,
               prelabel_source: str = "input", on_chunk: Callable[[int, int], None] | None = None,
               redraft: Sequence[str] = ()) -> Opened:
    """Push ``round_name`` for the interviews in annotation (or only ``sample_ids``).

    The first round admits segmented interviews first (:func:`admit_drafts`; ``redraft``: the
    re-drafted interviews whose new drafts replace answered old ones). Pushing is idempotent
    (keyed on sample_id and the content's hash), so opening a round again adds only what is new;
    the answered tasks of a sample re-drafted by ``redraft`` are archived and replaced
    (:mod:`.redraft`)."""
    if redraft and round_name != first_round():
        raise push.PushError(f"--redraft applies to the first round ({first_round()}), where drafts are pushed; "
                             f"not to round {round_name!r}")
    admitted = admit_drafts(root, sample_ids, redraft=redraft, desks=desks) if round_name == first_round() \
        else Admitted()
    samples = corpus.load_work(root)
    if sample_ids is not None:
        wanted = set(sample_ids)
        samples = [s for s in samples if s["sample_id"] in wanted]
    if not samples:
        raise push.PushError(f"no interviews in annotation under {root.work_dir()}: ingest, transcribe, diarize "
                             "and segment a batch first (or run the ingest-batch flow)")
    record = redrafts.read_admitted(root) if round_name == first_round() else {}
    pushing = {s["sample_id"] for s in samples}
    replacing = sorted(sid for sid, r in record.items() if r.get("redraft") and sid in pushing)
    report = push.push_round(desks, round_name, samples, annotators, k=k, prelabel=prelabel,
                             prelabel_source=prelabel_source, media_url=push.catalog_media_urls(root),
                             on_chunk=on_chunk, root=root, redraft=replacing)
    if replacing and not annotators:  # their old tasks are replaced on every desk of the round: done
        record = redrafts.read_admitted(root)
        for sid in replacing:
            record[sid] = {**record[sid], "redraft": False}
        redrafts.write_admitted(root, record)
    return Opened(round_name, admitted, report)
