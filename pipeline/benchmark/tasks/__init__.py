"""The six RESCUE benchmark task builders (spec §4): ITP, RPP, STP, SSP, ER, VP.

Each task module has ``instances(sample, inputs, context_size, **options) -> list[dict]``;
this package turns them into Arrow tables with the schemas in ``pipeline.schemas``.
Call :func:`build_task` for one task or :func:`build_all` for all six. Every instance gets an
opaque, stable ``instance_id`` (:func:`common.instance_id`: a hash of task, sample and row), so no
id tells the answer (the paper's ITP ids named it: ``..._pos_after_row2``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields

import pyarrow as pa

from pipeline import schemas
from pipeline.config import Settings
from pipeline.benchmark.tasks import er, itp, rpp, ssp, stp, vp
from pipeline.benchmark.tasks.common import even_sample, input_row, pick_evenly  # noqa: F401 (public)

TASKS = ("itp", "rpp", "stp", "ssp", "er", "vp")
_MODULES = {"itp": itp, "rpp": rpp, "stp": stp, "ssp": ssp, "er": er, "vp": vp}
# The README defaults of the paper's scripts, as Settings declares them (``<task>_context``; -1: all prior rows).
DEFAULT_CONTEXT = {task: next(f.default for f in fields(Settings) if f.name == f"{task}_context") for task in TASKS}


def context_sizes(settings: Settings | None = None) -> dict[str, int]:
    if settings is None:
        return dict(DEFAULT_CONTEXT)
    return {task: getattr(settings, f"{task}_context") for task in TASKS}


def default_options() -> dict[str, dict]:
    return {task: dict(_MODULES[task].DEFAULT_OPTIONS) for task in TASKS}


def _sort_key(rec: dict) -> tuple:
    return rec["sample_id"], rec["row_index"], rec["instance_id"]


def build_task(task: str, samples: Iterable[dict], context_size: int | None = None,
               inputs: dict[str, list[dict]] | None = None, **options) -> pa.Table:
    """One task's instance table, sorted by (sample_id, row_index, instance_id)."""
    if task not in _MODULES:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    ctx = DEFAULT_CONTEXT[task] if context_size is None else context_size
    records: list[dict] = []
    for sample in samples:
        rows_in = inputs[sample["sample_id"]] if inputs else [input_row(r) for r in sample["rows"]]
        records.extend(_MODULES[task].instances(sample, rows_in, ctx, **options))
    records.sort(key=_sort_key)
    return pa.Table.from_pylist(records, schema=schemas.TASK_SCHEMAS[task])


def build_all(samples: list[dict], settings: Settings | None = None, options: dict[str, dict] | None = None,
              on_task: Callable[[str], None] | None = None) -> dict[str, pa.Table]:
    """All six task tables. ``options`` overrides per-task options (see each module's DEFAULT_OPTIONS)."""
    ctx = context_sizes(settings)
    opts = default_options()
    for task, extra in (options or {}).items():
        opts[task].update(extra)
    inputs = {s["sample_id"]: [input_row(r) for r in s["rows"]] for s in samples}
    tables = {}
    for task in TASKS:
        tables[task] = build_task(task, samples, ctx[task], inputs=inputs, **opts[task])
        if on_task:
            on_task(task)
    return tables
