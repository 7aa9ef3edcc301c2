"""Windowed tasks: a long sample is pushed as several Label Studio tasks and stitched on pull.

Why: Label Studio builds every control of a task before it shows the form, and its cost grows
with the controls *and* their choice lists. A 111-row family interview as one task took 17-77 s
to show its form, 250 rows 27 s to never (``benchmarks/bench_annotator_ui.py``, loaded machine).
A window of 10 rows with controls costs no more than Label Studio's own start (measured: windows
of 2 and of 10 rows show their form equally fast, 20 rows take about twice as long; on a slower
machine 10 rows took about 1.3x as long as 5, see :data:`WINDOW_UNITS`). So a
sample with more than :data:`SPLIT_ABOVE` units (rows that get controls in a round) becomes
consecutive windows of at most :data:`WINDOW_UNITS` units:

* the sample's rows are cut into contiguous ranges, each holding at most ``WINDOW_UNITS`` units
  (rows without controls stay with the range before them), so every row belongs to exactly one
  window;
* a window's task shows its own rows plus up to :data:`CONTEXT_BEFORE` rows before and
  :data:`CONTEXT_AFTER` rows after them in the dialogue, read-only; only its own units get
  controls (the Repeater indexes them from 0 within the task);
* ``data["window"]`` says ``index`` (0-based), ``count``, ``first_unit`` (the unit offset of the
  window in the whole sample) and the window's own ``rows``.

A sample with at most ``SPLIT_ABOVE`` units stays one task without a ``window`` key, exactly as
before. :func:`stitch_tasks` turns an export of windowed tasks back into one task per sample
whose data equals the unwindowed task data and whose annotation holds every window's results
with control names renumbered to the whole sample: what an unwindowed pull would have parsed.
"""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from pipeline.annotation import screen
from pipeline.annotation.naming import control_name, heading, parse_control_name

# Units (rows with controls) per task of a long sample. Each unit's forms cost Label Studio's
# editor work before the first form shows: measured (emotion, 111 rows, through the gate, load
# 4.5-6.6, median of 3 interleaved): 10 units 7.8 s cold / 6.9 s warm, 5 units 6.3 / 5.1 (15
# tasks per 111 rows instead of 8), 3 units 5.1 / 4.5 (25 tasks, about twice the page waits per
# sample). 5: most of the gain for half the extra page loads of 3. With the gate's service worker
# (emotion and viewpoints, 111 and 250 rows, load 3.8-7, median of 2 interleaved) 4 units saved
# 0.2-0.8 s a page and 3 units up to 0.7 s, for about 25% and 65% more pages per sample: more waiting
# per sample in all, so the heavier rounds stay at 5 too.
WINDOW_UNITS = 5
SPLIT_ABOVE = 20      # a sample with at most this many units stays one task, as before
CONTEXT_BEFORE = 6    # read-only dialogue rows shown before a window's own rows
CONTEXT_AFTER = 3     # and after them
WINDOW_KEYS = ("window",)  # task-data keys only windowed tasks carry


def window_ranges(row_indices: list[int], unit_rows: set[int], size: int = WINDOW_UNITS) -> list[tuple[int, int]]:
    """Contiguous ``(first_row, last_row)`` ranges covering every row, at most ``size`` units
    each, as even as possible (111 units at 20 -> 6 windows of 18-19 units)."""
    if size < 1:
        raise ValueError("a window holds at least one unit")
    n_units = sum(ri in unit_rows for ri in row_indices)
    count = max(1, -(-n_units // size))
    per = [n_units // count + (i < n_units % count) for i in range(count)]  # units per window
    ranges: list[list[int]] = []
    units = 0
    for ri in row_indices:
        if not ranges or (ri in unit_rows and units == per[len(ranges) - 1]):
            ranges.append([ri, ri])
            units = 0
        ranges[-1][1] = ri
        units += ri in unit_rows
    return [tuple(r) for r in ranges]


def split(data: dict, size: int | None = None, before: int = CONTEXT_BEFORE, after: int = CONTEXT_AFTER) -> list[dict]:
    """The task data of each window of a whole-sample task (``[data]`` when it fits in one).

    Default: a sample with more than :data:`SPLIT_ABOVE` units becomes windows of at most
    :data:`WINDOW_UNITS`; with ``size``, one with more than ``size`` units windows of ``size``."""
    units = data["units"]
    above = SPLIT_ABOVE if size is None else size
    size = size or WINDOW_UNITS
    if len(units) <= above:
        return [data]
    order = [t["row_index"] for t in data["turns"]]
    ranges = window_ranges(order, {u["row_index"] for u in units}, size)
    out, first_unit = [], 0
    for index, (lo, hi) in enumerate(ranges):
        pos_lo, pos_hi = order.index(lo), order.index(hi)
        shown = data["turns"][max(0, pos_lo - before): pos_hi + 1 + after]
        own = [u for u in units if lo <= u["row_index"] <= hi]
        window = {k: v for k, v in data.items() if k not in ("turns", "units")}
        window["turns"] = shown  # neighbouring windows share their context turns: task data is
        window["units"] = own    # not changed once built, only hashed and sent (copying cost 0.5 s a push)
        window["window"] = {"index": index, "count": len(ranges), "first_unit": first_unit, "rows": [lo, hi]}
        out.append(window)
        first_unit += len(own)
    return out


def stitch_data(windows: list[dict]) -> dict:
    """The whole-sample task data from all windows of one sample (in any order). It shares the
    windows' values (turns, units and the rest) instead of copying them: it is read, never
    changed (a pull parses it), and copying every turn of a round cost seconds."""
    windows = sorted(windows, key=lambda d: d["window"]["index"])
    whole = {k: v for k, v in windows[0].items() if k not in ("turns", "units", "content_sha", *WINDOW_KEYS)}
    turns: dict[int, dict] = {}
    for d in windows:
        for t in d["turns"]:
            turns.setdefault(t["row_index"], t)
    whole["turns"] = [turns[k] for k in sorted(turns)]
    whole["units"] = [u for d in windows for u in d["units"]]
    if "heading" in whole:
        whole["heading"] = heading(whole)
    return whole


_control = lru_cache(maxsize=1 << 16)(parse_control_name)  # a round's few thousand names, met again and again


def _renumber(result: dict, offset: int) -> dict:
    if not offset:
        return result
    parsed = _control(result.get("from_name", ""))
    if parsed is None:
        return result
    field, slot, sub, unit = parsed
    out = dict(result, from_name=control_name(field, unit + offset, slot, sub))
    if isinstance(out.get("to_name"), str) and out["to_name"] == f"turn_{unit}":
        out["to_name"] = f"turn_{unit + offset}"
    return out


def _who(annotation: dict):
    by = annotation.get("completed_by")
    return by.get("id", by.get("email")) if isinstance(by, dict) else by


def _latest(annotations: list[dict]) -> dict:
    return max(annotations, key=lambda a: (a.get("updated_at") or "", a.get("id") or 0))


def stitch_tasks(tasks: list[dict], checked: bool = False) -> tuple[list[dict], list[tuple[str, str]]]:
    """One task per sample from an export that may hold windowed tasks.

    A task or answer not shaped as the push and Label Studio make them is left out with a note
    (:func:`.screen.well_formed`; ``checked``: the caller did that already).

    Unwindowed tasks pass through unchanged (in place of their sample). For a windowed sample,
    every person who submitted every window gets one annotation: the results of their latest
    submitted annotation of each window, renumbered to the whole sample (``lead_time`` summed,
    ``created_at`` the earliest, ``updated_at`` the latest, ``id`` that of the first window).
    A person who skipped every window gets one skipped annotation; a window a person submitted
    more than once gives a note (the latest is used). Anything else (some windows
    not yet submitted, windows missing or repeated) leaves that person's work on the sample out
    and returns a note ``(sample_id, message)``; the sample then counts as not done.
    """
    notes: list[tuple[str, str]] = []
    if not checked:
        tasks, notes = screen.well_formed(tasks)
    order: list[str] = []
    groups: dict[str, list[dict]] = defaultdict(list)
    plain: dict[str, list[dict]] = defaultdict(list)
    for task in tasks:
        data = task.get("data") or {}
        sid = data.get("sample_id", "?")
        if sid not in order:
            order.append(sid)
        (groups if isinstance(data.get("window"), dict) else plain)[sid].append(task)
    out: list[dict] = []
    for sid in order:
        if sid not in groups:
            out += plain[sid]
            continue
        if plain[sid]:
            notes.append((sid, "unwindowed and windowed tasks of the same sample; the windowed ones are used"))
        windows = groups[sid]
        counts = {t["data"]["window"]["count"] for t in windows}
        indices = sorted(t["data"]["window"]["index"] for t in windows)
        if len(counts) != 1 or indices != list(range(next(iter(counts)))):
            notes.append((sid, f"windows {indices} of {sorted(counts)} do not make up the sample "
                               "(changed between pushes?); left out"))
            continue
        windows.sort(key=lambda t: t["data"]["window"]["index"])
        whole = {k: v for k, v in windows[0].items() if k not in ("data", "annotations", "predictions", "drafts")}
        whole["data"] = stitch_data([t["data"] for t in windows])
        whole["annotations"] = []
        people: list = []
        per_window: list[dict] = []
        for t in windows:
            mine = defaultdict(list)
            for a in t.get("annotations") or []:
                mine[_who(a)].append(a)
                if _who(a) not in people:
                    people.append(_who(a))
            per_window.append(mine)
        for who in people:
            chosen, skipped, missing = [], 0, []
            for t, mine in zip(windows, per_window):
                live = [a for a in mine.get(who, []) if not a.get("was_cancelled")]
                if len(live) > 1:  # submitted twice (a double click): said as an unwindowed task's parse says it
                    notes.append((sid, f"part {t['data']['window']['index'] + 1} by {who}: {len(live)} annotations; "
                                       "the latest is used"))
                if live:
                    chosen.append((t, _latest(live)))
                elif mine.get(who):
                    skipped += 1
                else:
                    missing.append(t["data"]["window"]["index"] + 1)
            if len(chosen) == len(windows):
                first = chosen[0][1]
                result = [_renumber(r, t["data"]["window"]["first_unit"])
                          for t, a in chosen for r in a.get("result") or []]
                times = [a.get("lead_time") for _, a in chosen if a.get("lead_time") is not None]
                whole["annotations"].append({
                    **{k: v for k, v in first.items() if k != "result"},
                    "result": result,
                    "lead_time": sum(times) if times else None,
                    "created_at": min((a.get("created_at") or "") for _, a in chosen) or None,
                    "updated_at": max((a.get("updated_at") or "") for _, a in chosen) or None,
                })
            elif skipped == len(windows):
                whole["annotations"].append({**_latest(per_window[0][who]), "result": []})
            else:
                done = len(chosen)
                notes.append((sid, f"{done} of {len(windows)} parts submitted"
                                   + (f", {skipped} skipped" if skipped else "")
                                   + (f" (parts not submitted: {', '.join(map(str, missing))})" if missing else "")
                                   + f" by {who}; the sample's labels come when every part is submitted"))
        out.append(whole)
    return out, notes
