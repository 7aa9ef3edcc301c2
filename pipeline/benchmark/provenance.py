"""Where a release's samples came from, as the data root recorded it when they were made: the
catalog line of each ingested interview says whether a generator made it (the batch manifest's
``synthetic`` column), and a corpus sample with no catalog line was not ingested here (imported
with ``rescue import-rescue`` or placed there by hand). The card and the manifest say only what this
record proves: never a guess from a sample's or group's name.
"""
from __future__ import annotations

import os
from collections import Counter

from pipeline.catalog import read_catalog


def corpus_origin(data_root: str | os.PathLike, sample_ids: list[str]) -> dict:
    """``{"recorded": n, "generated": {what made them: n}, "not_ingested_here": n}`` over ``sample_ids``."""
    catalog = read_catalog(data_root)
    made_by = dict(zip(catalog.column("sample_id").to_pylist(), catalog.column("synthetic").to_pylist()))
    generated: Counter = Counter()
    recorded = elsewhere = 0
    for sid in sample_ids:
        if sid not in made_by:
            elsewhere += 1
        elif made_by[sid]:
            generated[made_by[sid]] += 1
        else:
            recorded += 1
    return {"recorded": recorded, "generated": dict(sorted(generated.items())), "not_ingested_here": elsewhere}


def generated_count(origin: dict | None) -> int:
    return sum((origin or {}).get("generated", {}).values())
