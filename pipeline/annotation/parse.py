"""Validate and parse what annotators submitted: one annotation into label lines, one annotator
project's export (windows stitched) into lines, problems and a count of done tasks.

Every annotation is checked against the round definition - Label Studio itself accepts anything
through its API - and turned into the long label table (``schemas.LABELS``): one line per
(sample, row, annotator, field) with the value as JSON of the row-schema type and the scenario
of the task. A field with a problem gets no line; the problem goes to the report
(``schemas.LABEL_PROBLEMS``) with the offending value. Nothing is "fixed" silently.

What a set of results says does not depend on whose annotation holds it: :class:`ParseOnce`
reads each (task data, results) once, so the pull's acceptance measure and its label table
(:mod:`.pull`, :mod:`.acceptance`), which both parse the annotator's submitted annotation, share
the work.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from pipeline import taxonomy
from pipeline.annotation import ls_config, naming, screen, voice_naming
from pipeline.annotation.rounds import Field, Round

# The parse's hot spots, cached: control names, a field's allowed values per sample shape, and
# one JSON encoder (``json.dumps(..., ensure_ascii=False)`` builds a new encoder on every call).
_dumps = json.JSONEncoder(ensure_ascii=False).encode


@lru_cache(maxsize=1 << 16)
def _control(name: str) -> tuple[bool, tuple | None]:
    """(a pre-fill mark or box, ``naming.parse_control_name``) of a result's ``from_name``."""
    return ls_config.is_prefill_control(name), naming.parse_control_name(name)


@lru_cache(maxsize=1 << 12)
def _options(f: Field, scenario: str, participants: tuple[str, ...], n_rows: int) -> tuple[str, ...]:
    return f.options(scenario, participants, n_rows)


class _Problems:
    """Problems found, each with ``base`` (round, sample, annotator; none: whose is not known yet)."""

    def __init__(self, round_name: str | None = None, sample_id: str | None = None, annotator: str | None = None):
        self.base = {} if round_name is None else {"round": round_name, "sample_id": sample_id, "annotator": annotator}
        self.items: list[dict] = []

    def add(self, row_index: int | None, field_name: str | None, problem: str, value=None) -> None:
        self.items.append({**self.base, "row_index": row_index, "field": field_name, "problem": problem,
                           "value": None if value is None else _dumps(value)})


@dataclass
class _Ctx:
    scenario: str
    participants: tuple[str, ...]
    n_rows: int
    row_index: int
    speaker: str
    options: dict = field(default_factory=dict)  # id(Field) -> its allowed values; shared by a task's rows


def _convert(f: Field, raw, ctx: _Ctx, path: str, problems: _Problems) -> tuple[bool, object]:
    """(ok, value) of one control's raw value; raw None = not filled (value is the empty form)."""
    ri = ctx.row_index
    if f.type == "const":
        return True, f.const
    if raw is None or raw == [] or (isinstance(raw, str) and not raw.strip()):
        return True, {"text": "", "choice": "", "multichoice": [], "rows": [], "number": None}[f.type]
    if f.type == "text":
        return True, str(raw).strip()
    if f.type == "number":
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or float(raw) != int(raw):
            problems.add(ri, path, "not a whole number", raw)
            return False, None
        lo, hi = f.minimum, f.maximum
        if (lo is not None and raw < lo) or (hi is not None and raw > hi):
            problems.add(ri, path, f"out of range [{lo:g}, {hi:g}]", raw)
            return False, None
        return True, int(raw)
    allowed = ctx.options.get(id(f))
    if allowed is None:  # the same for every row of a task (the lru_cache would hash the Field each time)
        allowed = ctx.options[id(f)] = _options(f, ctx.scenario, ctx.participants, ctx.n_rows)
    items = raw if isinstance(raw, list) else [raw]
    bad = [v for v in items if v not in allowed]
    if bad:
        what = "row that does not exist" if f.type == "rows" else "unknown label"
        problems.add(ri, path, f"{what}: {', '.join(map(str, bad))}", raw)
        return False, None
    if f.type == "choice":
        if len(items) != 1:
            problems.add(ri, path, "more than one choice", raw)
            return False, None
        return True, "" if items[0] == f.empty_choice else items[0]
    if f.type == "rows":
        return True, sorted(int(v) - 1 for v in items)  # displayed row_index -> 0-based position
    return True, list(items)


def _check_multi(f: Field, value: list, other, ctx: _Ctx, path: str, problems: _Problems) -> bool:
    """Self-target (``distinct_from``) and the couple rule (group label alone)."""
    ok = True
    others = other if isinstance(other, list) else [other]
    clash = [v for v in (value if isinstance(value, list) else [value]) if v and v in others]
    if f.distinct_from and clash:
        problems.add(ctx.row_index, path, f"self-target: {', '.join(clash)} is also the {f.distinct_from}", value)
        ok = False
    group = taxonomy.group_label(ctx.scenario)
    if ctx.scenario in f.group_label_alone and isinstance(value, list) and group in value and len(value) > 1:
        problems.add(ctx.row_index, path, f"{group} must be the only target when used", value)
        ok = False
    return ok


def _row_values(rnd: Round, raw: dict, ctx: _Ctx, problems: _Problems, plain: dict[str, Field],
                defaults: dict) -> dict[str, object]:
    """Validated ``{field: value}`` of one row; fields with a problem are left out. ``plain``
    (the round's fields but records) and ``defaults`` (``ls_config.record_defaults``): the
    same for every row, made once by the caller."""
    out: dict[str, object] = {}
    converted: dict[str, tuple[bool, object]] = {}  # this row's plain fields converted so far
    for f in rnd.fields:
        if f.type == "records":
            ok, records = _records(f, raw.get(f.name) or {}, ctx, problems, defaults.get(f.name, {}))
            if ok:
                out[f.name] = records
            continue
        ok, value = converted[f.name] = _convert(f, raw.get(f.name), ctx, f.name, problems)
        if not ok:
            continue
        if f.required and value in ("", [], None) and not (f.empty_choice and raw.get(f.name) is not None):
            problems.add(ctx.row_index, f.name, "missing required field")
            continue
        if f.distinct_from and value not in ("", [], None):
            if f.distinct_from in plain:  # its problems are its own to report (or were reported)
                o_ok, other = converted.get(f.distinct_from) or _convert(
                    plain[f.distinct_from], raw.get(f.distinct_from), ctx, f.distinct_from, _Problems("", "", ""))
                other = other if o_ok else None
            else:
                other = ctx.speaker if f.distinct_from == "primary_speaker" else None
            if not _check_multi(f, value, other, ctx, f.name, problems):
                continue
        out[f.name] = value
    return out


def _blank(value) -> bool:
    return value in (None, [], "") or (isinstance(value, str) and not value.strip())


def _only_defaults(raw: dict, defaults: dict[str, str], ctx: _Ctx) -> bool:
    """An entry holding nothing but the round's pre-filled defaults (e.g. emotion's "who feels
    it" = the speaker, with no feeling or intensity): the pre-fill left alone on a row where no
    feeling can be read. It is no entry; the annotator need not clear it."""
    filled = {k: v for k, v in raw.items() if not _blank(v)}
    if not filled or not set(filled) <= set(defaults):
        return False
    for sub, value in filled.items():
        want = ls_config.default_value(defaults[sub], ctx.speaker)
        if value != want and value != [want]:
            return False
    return True


def _records(f: Field, slots: dict[int, dict], ctx: _Ctx, problems: _Problems,
             defaults: dict[str, str] | None = None) -> tuple[bool, list[dict]]:
    """``(ok, records)`` of one row's records field; ``defaults``: the field's pre-filled
    subfields (``ls_config.record_defaults``), whose untouched values alone make no record."""
    ok, records, decided = True, [], False
    for slot in sorted(slots):
        raw = slots[slot]
        if slot > f.max_items:
            problems.add(ctx.row_index, f.name, f"slot {slot} does not exist (max {f.max_items})", raw)
            ok = False
            continue
        if all(v in (None, [], "") for v in raw.values()):
            continue
        if slot == 1 and defaults and _only_defaults(raw, defaults, ctx):  # defaults start slot 1 only
            continue
        decided = True
        rec: dict[str, object] = {}
        none_chosen = False
        for sub in f.subfields:
            path = f"{f.name}.{sub.name}"
            s_ok, value = _convert(sub, raw.get(sub.name), ctx, path, problems)
            if not s_ok:
                ok = False
                continue
            if sub.empty_choice and raw.get(sub.name) is not None and value == "":
                none_chosen = True
            rec[sub.name] = value
        if none_chosen:  # e.g. "no strategy": no record; anything else filled is contradictory
            extra = [s.name for s in f.subfields if s.type != "const" and not s.empty_choice
                     and rec.get(s.name) not in (None, "", [])]
            if extra:
                problems.add(ctx.row_index, f.name, f"{', '.join(extra)} filled although no record was chosen", raw)
                ok = False
            continue
        for sub in f.subfields:
            if sub.required and sub.type != "const" and sub.name in rec and rec[sub.name] in ("", [], None):
                problems.add(ctx.row_index, f"{f.name}.{sub.name}", f"incomplete record in slot {slot}: missing {sub.name}")
                ok = False
            if sub.distinct_from and rec.get(sub.name) not in (None, "", []):
                other = rec.get(sub.distinct_from)
                if not _check_multi(sub, rec[sub.name], other, ctx, f"{f.name}.{sub.name}", problems):
                    ok = False
        records.append(rec)
    if f.required and not decided:
        problems.add(ctx.row_index, f.name, "missing required field")
        ok = False
    return ok, records


def parse_annotation(rnd: Round, data: dict, annotation: dict, annotator: str) -> tuple[list[dict], list[dict]]:
    """Label lines and problems of one annotation of one task."""
    return _with_meta(rnd, data, annotation, annotator, _read_results(rnd, data, annotation.get("result")))


class ParseOnce:
    """:func:`parse_annotation` that reads each (round, task data, results) once and keeps the
    answer: the acceptance measure and the label table both parse the annotator's submitted
    annotation of a task (the same objects within one export), and only the author's name and
    the annotation's times differ between the two. One per export: it holds what it read."""

    def __init__(self) -> None:
        self._read: dict[tuple[int, int, int], tuple] = {}

    def __call__(self, rnd: Round, data: dict, annotation: dict, annotator: str) -> tuple[list[dict], list[dict]]:
        results = annotation.get("result")
        key = (id(rnd), id(data), id(results))
        hit = self._read.get(key)
        if hit is None:  # kept with the objects themselves: their ids stay theirs while the memo lives
            hit = self._read[key] = (rnd, data, results, _read_results(rnd, data, results))
        return _with_meta(rnd, data, annotation, annotator, hit[3])


def _read_results(rnd: Round, data: dict, results: list | None) -> tuple[list[tuple], list[dict]]:
    """What one set of results says of a task, whoever gave it: ``[(row_index, field, value
    JSON)]`` and the problems (without round, sample and annotator)."""
    problems = _Problems()
    if results is not None and not isinstance(results, list):  # typed into a desk's API: say so, read nothing
        problems.add(None, None, "the annotation's result is not a list of results", results)
        results = []
    for result in results or []:
        if not isinstance(result, dict):
            problems.add(None, None, "not a result (an object with from_name and value)", result)
    results = [r for r in results or [] if isinstance(r, dict)]
    # the voice names -> every row of the voice
    annotation = voice_naming.resolve(rnd, data, {"result": results}, problems.add)
    units = data.get("units") or []
    fields = {f.name: f for f in rnd.fields}
    raw: dict[int, dict] = defaultdict(dict)
    for result in annotation.get("result") or []:
        name = result.get("from_name", "")
        prefill, parsed = _control(name) if isinstance(name, str) else (False, None)
        if prefill:  # a form's pre-fill mark or "checked" box: no answer
            continue
        if parsed is None:
            problems.add(None, name if isinstance(name, str) else _dumps(name), "unknown control", result.get("value"))
            continue
        fname, slot, sub, unit = parsed
        f = fields.get(fname)
        try:
            if f is None or (slot is None) != (f.type != "records") or (sub is not None and f.subfield(sub) is None):
                raise KeyError(name)
        except KeyError:
            problems.add(None, name, "unknown field", result.get("value"))
            continue
        if unit >= len(units):
            problems.add(None, name, f"row does not exist (unit {unit} of {len(units)})", result.get("value"))
            continue
        value = ls_config.result_value(result)
        if slot is None:
            raw[unit][fname] = value
        else:
            raw[unit].setdefault(fname, {}).setdefault(slot, {})[sub] = value
    values = []
    if units:  # what every row of the task shares, once
        scenario, participants = data["scenario"], tuple(data.get("participants") or [])
        n_rows, options = len(data.get("turns") or []), {}
        plain = {f.name: f for f in rnd.fields if f.type != "records"}
        defaults = ls_config.record_defaults(rnd) if len(plain) < len(rnd.fields) else {}
    empty: dict = {}
    for i, u in enumerate(units):
        ri = u["row_index"]
        ctx = _Ctx(scenario, participants, n_rows, ri, u.get("speaker") or "", options)
        for fname, value in _row_values(rnd, raw.get(i, empty), ctx, problems, plain, defaults).items():
            values.append((ri, fname, _dumps(value)))
    return values, problems.items


def _with_meta(rnd: Round, data: dict, annotation: dict, annotator: str,
               read: tuple[list[tuple], list[dict]]) -> tuple[list[dict], list[dict]]:
    """:func:`_read_results`'s answer as label lines and problems of ``annotator``'s ``annotation``."""
    values, problems = read
    sample_id = data.get("sample_id", "?")
    meta = {
        "round": rnd.name, "sample_id": sample_id, "scenario": data.get("scenario"), "annotator": annotator,
        "annotation_id": annotation.get("id"), "lead_time_s": annotation.get("lead_time"),
        "created_at": annotation.get("created_at"), "updated_at": annotation.get("updated_at"),
    }
    base = {"round": rnd.name, "sample_id": sample_id, "annotator": annotator}
    return ([{**meta, "row_index": ri, "field": fname, "value": value} for ri, fname, value in values],
            [{**base, **p} for p in problems])


def author_id(completed_by) -> int | None:
    """The user id an export names as an annotation's author (an id, or a user object)."""
    if isinstance(completed_by, dict):
        completed_by = completed_by.get("id")
    return completed_by if isinstance(completed_by, int) and not isinstance(completed_by, bool) else None


def parse_export(rnd: Round, tasks: list[dict], annotator: str, users: dict[int, str] | None = None,
                 owner_id: int | None = None, where: str | None = None, *,
                 parse: Callable[[Round, dict, dict, str], tuple[list[dict], list[dict]]] = parse_annotation,
                 checked: bool = False) -> tuple[list[dict], list[dict], int]:
    """Label lines, problems and the number of done tasks of one annotator project's export.

    Only the desk owner's annotations count (``owner_id``: their user id on the desk; without it,
    annotations whose author is ``annotator`` by e-mail). Any other author's annotation (a login
    invited or made through the API on that desk) is reported naming the desk (``where``), never
    counted (moved annotations are dropped by :func:`.pull.pull_round` before windows are
    stitched). ``users`` maps the desk's user ids to e-mails; ``parse``: :func:`parse_annotation`
    or a :class:`ParseOnce` shared with the acceptance measure.

    Whatever an annotator stored, it never raises: a task or answer not shaped as the push and
    Label Studio's controls make them is one problem line and is not counted
    (:func:`.screen.well_formed`; ``checked``: the caller did that already).
    """
    users = users or {}
    where = where or f"{annotator}'s project"
    labels, problems, done = [], [], 0
    if not checked:
        tasks, notes = screen.well_formed(tasks, where)
        for sid, note in notes:
            report = _Problems(rnd.name, sid, annotator)
            report.add(None, None, note)
            problems += report.items

    def _own(a: dict) -> bool:
        author = author_id(a.get("completed_by"))
        if owner_id is not None:
            return author == owner_id
        by = a.get("completed_by")
        return (by.get("email") if isinstance(by, dict) else users.get(author)) in (None, annotator)

    def _who(a: dict) -> str:
        author = author_id(a.get("completed_by"))
        return users.get(author) or (f"user {author}" if author is not None else "no author")

    seen: set[str] = set()
    for task in tasks:
        data = task.get("data") or {}
        sid = data.get("sample_id", "?")
        report = _Problems(rnd.name, sid, annotator)
        if sid in seen:
            report.add(None, None, "duplicate task for this sample; only the first is used")
            problems += report.items
            continue
        seen.add(sid)
        anns = list(task.get("annotations") or [])
        if not anns:
            continue
        foreign = [a for a in anns if not _own(a)]
        for a in foreign:
            report.add(None, None, f"annotation {a.get('id')} by {_who(a)} on {where}: not the desk's owner; "
                                   "not counted")
        own = [a for a in anns if a not in foreign]
        live = [a for a in own if not a.get("was_cancelled")]
        if own and not live:
            report.add(None, None, "skipped (cancelled) by the annotator")
            done += 1
        if live:
            live.sort(key=lambda a: (a.get("updated_at") or "", a.get("id") or 0))
            if len(live) > 1:
                report.add(None, None, f"{len(live)} annotations; the latest is used")
            lines, probs = parse(rnd, data, live[-1], annotator)
            labels += lines
            report.items += probs
            done += 1
        problems += report.items
    return labels, problems, done

