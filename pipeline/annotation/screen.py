"""What a pull lets through of an export: only well-formed tasks and answers, only what was pushed.

Everything in an annotator's project is theirs to change: Label Studio stores any JSON they send
as an answer (``{"text": [1]}``, ``"choices": null``, a result that is a number) and lets them
edit a task's data (``sample_id`` a list) or import a task of their own. None of that may stop
the pull for anyone else, and none of it may count. So, before anything reads an export:

* :func:`task_shape` and :func:`annotation_shape` say what is wrong with a task or an answer
  that is not shaped as the push builds it and Label Studio's controls send it (a task's data
  with the keys and types the parse reads; a result item an object with a string ``from_name``
  and a ``value`` of choices (strings), text (a string or strings) or a finite number). An
  answer also has size limits: :data:`MAX_TEXT_BYTES` for any one text value and
  :data:`MAX_ANNOTATION_BYTES` for all its results as JSON.
* :func:`well_formed` drops what is misshapen, each with one note ``(sample, message)`` naming
  the task: the parse (:mod:`.parse`), the stitching of windows (:mod:`.windows`) and the
  acceptance measure (:mod:`.acceptance`) each call it first, so they never raise on what an
  annotator stored.
* the pull also counts only what was pushed (:mod:`.pull_trust`).

A dropped task or answer is one problem line; the pull keeps that annotator's earlier lines for
the sample (:func:`.pull.pull_round`).
"""
from __future__ import annotations

import json
import math

from pipeline import taxonomy
from pipeline.annotation import voice_naming

MAX_TEXT_BYTES = 64 * 1024          # one text value of an answer (UTF-8)
MAX_ANNOTATION_BYTES = 1024 * 1024  # all results of one answer, as JSON

_dumps = json.JSONEncoder(ensure_ascii=False).encode


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _strs(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def sample_of(task) -> str:
    """The task's sample id as a report names it ("?" when it has none that is a string)."""
    data = task.get("data") if isinstance(task, dict) else None
    sid = data.get("sample_id") if isinstance(data, dict) else None
    return sid if isinstance(sid, str) and sid else "?"


def task_name(task) -> str:
    """``task 12`` (``a task without an id`` when it has none)."""
    tid = task.get("id") if isinstance(task, dict) else None
    return f"task {tid}" if _int(tid) else "a task without an id"


def _rows_shape(rows, what: str) -> str | None:
    if not isinstance(rows, list):
        return f"its {what} are not a list"
    for row in rows:
        if not isinstance(row, dict) or not _int(row.get("row_index")):
            return f"its {what} hold an item without a whole-number row_index"
        if not isinstance(row.get("speaker", ""), str):
            return f"its {what} hold a speaker that is not text"
    return None


def _data_shape(data) -> str | None:
    if not isinstance(data, dict):
        return "its data is not an object"
    sid = data.get("sample_id")
    if not isinstance(sid, str) or not sid:
        return "its sample_id is not text"
    if data.get("scenario") not in taxonomy.SCENARIOS:
        return f"its scenario is not one of {', '.join(taxonomy.SCENARIOS)}"
    if not _strs(data.get("participants", [])):
        return "its participants are not a list of names"
    if data.get("n_rows") is not None and not _int(data.get("n_rows")):
        return "its n_rows is not a whole number"
    for key, what in (("turns", "turns"), ("units", "units")):
        bad = _rows_shape(data.get(key), what)
        if bad:
            return bad
    for key, name in ((voice_naming.VOICES_KEY, "voice"), (voice_naming.PEOPLE_KEY, "value")):
        items = data.get(key)
        if items is not None and not (isinstance(items, list)
                                      and all(isinstance(i, dict) and isinstance(i.get(name), str) for i in items)):
            return f"its {key} are not a list of {name}s"
    window = data.get("window")
    if window is not None:
        if not isinstance(window, dict):
            return "its window is not an object"
        index, count, first, rows = (window.get(k) for k in ("index", "count", "first_unit", "rows"))
        if not (_int(index) and _int(count) and _int(first) and 0 <= index < count and first >= 0):
            return "its window has no index, count and first_unit (0 <= index < count)"
        if not (isinstance(rows, list) and len(rows) == 2 and all(_int(r) for r in rows)):
            return "its window's rows are not [first, last]"
    return None


def task_shape(task) -> str | None:
    """What is wrong with a task's shape (None: it is shaped as the push builds it). Its
    answers are judged one by one (:func:`annotation_shape`)."""
    if not isinstance(task, dict):
        return "not a task (an object with data)"
    if task.get("id") is not None and not _int(task.get("id")):
        return "its id is not a whole number"
    if task.get("annotations") is not None and not isinstance(task.get("annotations"), list):
        return "its annotations are not a list"
    return _data_shape(task.get("data"))


def _value_shape(value) -> str | None:
    if not isinstance(value, dict):
        return "a result's value is not an object"
    if "choices" in value and not _strs(value["choices"]):
        return "a result's choices are not a list of texts"
    if "text" in value and not (isinstance(value["text"], str) or _strs(value["text"])):
        return "a result's text is not text"
    if "number" in value and value["number"] is not None and not _number(value["number"]):
        return "a result's number is not a finite number"
    for item in [value.get("text")] + list(value.get("choices") or []):
        for text in item if isinstance(item, list) else [item]:
            if isinstance(text, str) and len(text) * 4 > MAX_TEXT_BYTES and len(text.encode()) > MAX_TEXT_BYTES:
                return f"a text value of {len(text.encode())} bytes is over the limit of {MAX_TEXT_BYTES}"
    return None


def annotation_shape(annotation) -> str | None:
    """What is wrong with an answer's shape or size (None: as Label Studio's controls send it)."""
    if not isinstance(annotation, dict):
        return "not an annotation (an object with a result)"
    for key, ok in (("id", _int), ("lead_time", _number), ("created_at", lambda v: isinstance(v, str)),
                    ("updated_at", lambda v: isinstance(v, str)), ("was_cancelled", lambda v: isinstance(v, bool)),
                    ("completed_by", lambda v: _int(v) or isinstance(v, dict)), ("parent_prediction", _int)):
        if annotation.get(key) is not None and not ok(annotation[key]):
            return f"its {key} is {type(annotation[key]).__name__}"
    results = annotation.get("result")
    if results is None:
        return None
    if not isinstance(results, list):
        return "its result is not a list of results"
    for r in results:
        if not isinstance(r, dict) or not isinstance(r.get("from_name"), str):
            return "a result is not an object with a from_name"
        if r.get("to_name") is not None and not isinstance(r.get("to_name"), str):
            return "a result's to_name is not text"
        bad = _value_shape(r.get("value"))
        if bad:
            return bad
    size = len(_dumps(results).encode())
    if size > MAX_ANNOTATION_BYTES:
        return f"its results are {size} bytes, over the limit of {MAX_ANNOTATION_BYTES}"
    return None


def well_formed(tasks, where: str = "") -> tuple[list[dict], list[tuple[str, str]]]:
    """The tasks whose shape the parse can read, each without its misshapen answers (a copy of
    the task then), and one note ``(sample, message)`` for each task or answer left out
    (``where``: the desk, named in each note)."""
    at = f" on {where}" if where else ""
    if not isinstance(tasks, list):
        return [], [("?", f"the export{at} is not a list of tasks; nothing read")]
    out, notes = [], []
    for task in tasks:
        bad = task_shape(task)
        if bad:
            notes.append((sample_of(task), f"{task_name(task)}{at}: {bad}; not counted"))
            continue
        answers = task.get("annotations") or []
        kept = []
        for a in answers:
            wrong = annotation_shape(a)
            if wrong is None:
                kept.append(a)
            else:
                aid = a.get("id") if isinstance(a, dict) and _int(a.get("id")) else "?"
                notes.append((sample_of(task), f"annotation {aid} of {task_name(task)}{at}: {wrong}; not counted"))
        out.append(task if len(kept) == len(answers) else {**task, "annotations": kept})
    return out, notes
