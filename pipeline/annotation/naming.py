"""The names Label Studio and our code share: control names (``<field>_<unit>``, with a slot
and subfield for records) and the heading line of a task (which rows it covers, and for a
window of a long sample, its part). Both the configs (:mod:`.ls_config`) and the windows
(:mod:`.windows`) speak them, so they live below both."""
from __future__ import annotations

import re

_NAME_RE = re.compile(r"^(?P<field>[a-z_]+?)(?:__(?P<slot>\d+)__(?P<sub>[a-z_]+))?_(?P<unit>\d+)$")


def control_name(field: str, unit: int | str, slot: int | None = None, sub: str | None = None) -> str:
    return f"{field}__{slot}__{sub}_{unit}" if slot is not None else f"{field}_{unit}"


def parse_control_name(name: str) -> tuple[str, int | None, str | None, int] | None:
    """``(field, slot, subfield, unit)`` of a control name, or None if it is not one of ours."""
    m = _NAME_RE.match(name)
    if not m:
        return None
    slot = int(m["slot"]) if m["slot"] else None
    return m["field"], slot, m["sub"], int(m["unit"])


def heading(data: dict) -> str:
    """The line above the dialogue: which rows the task covers (and, for a window, its part)."""
    rows = [t["row_index"] for t in data["turns"]]
    total = data.get("n_rows") or len(rows)
    window = data.get("window")
    if not window:
        return f"{data['sample_id']}: rows {rows[0] if rows else 0}-{rows[-1] if rows else 0} of {total}"
    lo, hi = window["rows"]
    context = [r for r in rows if r < lo or r > hi]
    note = f"; rows {', '.join(_spans(context))} are shown for context only" if context else ""
    return (f"{data['sample_id']}: part {window['index'] + 1} of {window['count']} - you annotate rows "
            f"{lo}-{hi} of {total}{note}")


def _spans(rows: list[int]) -> list[str]:
    out: list[list[int]] = []
    for r in rows:
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return [f"{a}-{b}" if a != b else str(a) for a, b in out]
