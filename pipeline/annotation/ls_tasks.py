"""The task data of a round's sample in Label Studio: every turn for the dialogue, the round's
units (the rows with controls) with their players and evidence choices, the per-sample choice
lists; windows of a long sample (:mod:`.windows`); and the content address a push compares.
The labeling config (:mod:`.ls_config`) names these keys.
"""
from __future__ import annotations

import hashlib
import json
from html import escape

from pipeline import taxonomy
from pipeline.annotation import voice_naming, windows
from pipeline.annotation.naming import heading
from pipeline.annotation.rounds import Round

# Task-data keys that hold the per-sample choice lists of dynamic fields.
DYNAMIC_KEY = {"entities": "entities", "clients": "clients"}
UNIT_ROW_OPTIONS = "row_options"  # per unit: the rows offered for a ``rows`` field (evidence)
# Rows offered as evidence around a unit's own row, as one-click boxes: in the release's head
# every evidence row but one lies within 5 before and 4 after the therapist row.
EVIDENCE_BEFORE = 6
EVIDENCE_AFTER = 6


def _first_words(text: str, n: int = 8) -> str:
    words = (text or "").split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def turn_player(media_url: str, start: float, end: float) -> str:
    """An audio control that plays exactly one turn: the media with a temporal fragment
    (``#t=start,end``), which the browser starts at ``start`` and pauses at ``end``. (Label
    Studio 1.23's Paragraphs play buttons keep playing past the line's end.)"""
    if not media_url:
        return ""
    src = escape(f"{media_url}#t={start:.2f},{end:.2f}", quote=True)
    return (f'<audio controls preload="none" src="{src}" style="height: 28px; width: 260px"'
            f' title="plays this row, {start:.2f}-{end:.2f} s"></audio>')


def build_task_data(rnd: Round, sample: dict, media_url: str = "") -> dict:
    """Task data of one sample: every turn for the dialogue, the round's units, choice lists.

    ``sample`` has the ``pipeline.rows`` shape (sample_id, scenario, participants, rows with
    row_index, start_time, end_time, primary_speaker, target, dialogue_cleaned). Each person is
    one author of the dialogue (``speaker`` is the name alone; the row number leads the line).
    A round with a ``rows`` field gives each unit the rows around it as choices
    (:data:`EVIDENCE_BEFORE` before, :data:`EVIDENCE_AFTER` after), shown with speaker and
    first words.
    """
    scenario = sample["scenario"]
    rows = sorted(sample["rows"], key=lambda r: r["row_index"])
    participants = list(sample.get("participants") or [])
    turns = [{"row_index": r["row_index"], "speaker": r.get("primary_speaker") or "?",
              "text": r.get("dialogue_cleaned") or "",
              "line": f"{r['row_index']}  {r.get('dialogue_cleaned') or ''}",
              "start": float(r["start_time"]), "end": float(r["end_time"])} for r in rows]
    wants_rows = any(f.type == "rows" for f in rnd.fields)
    position = {r["row_index"]: i for i, r in enumerate(rows)}
    units = []
    for r in rows:
        if not rnd.applies(r.get("primary_speaker")):
            continue
        to = ", ".join(r.get("target") or []) or "?"
        speaker = r.get("primary_speaker") or "?"
        unit = {"row_index": r["row_index"], "speaker": r.get("primary_speaker") or "",
                "title": f"Row {r['row_index']} · {speaker} → {to}",  # the form's heading
                "text": r.get("dialogue_cleaned") or "",
                "clip": turn_player(media_url, float(r["start_time"]), float(r["end_time"]))}
        if wants_rows:
            i = position[r["row_index"]]
            # shown: "12 · Ann: first words ..."; stored (the alias): "12"
            unit[UNIT_ROW_OPTIONS] = [
                {"value": f"{o['row_index']} · {o.get('primary_speaker') or '?'}: "
                          f"{_first_words(o.get('dialogue_cleaned') or '', 5)}",
                 "alias": str(o["row_index"])}
                for o in rows[max(0, i - EVIDENCE_BEFORE): i + 1 + EVIDENCE_AFTER]]
        units.append(unit)
    data = {
        "sample_id": sample["sample_id"],
        "scenario": scenario,
        "round": rnd.name,
        "round_version": rnd.version,
        "participants": participants,
        "media_url": media_url,
        "n_rows": len(rows),
        "turns": turns,
        "units": units,
        "entities": [{"value": v} for v in (*participants, taxonomy.THERAPIST, taxonomy.group_label(scenario))],
        "clients": [{"value": v} for v in (*participants, taxonomy.group_label(scenario))],
    }
    voice_naming.add_task_data(rnd, sample, data, media_url, turn_player)  # the transcript round's voice block
    data["heading"] = heading(data)
    return data


def build_tasks_data(rnd: Round, sample: dict, media_url: str = "", window: int | None = None) -> list[dict]:
    """The task data of one sample as pushed: one task, or windows for a long sample (default:
    more than ``windows.SPLIT_ABOVE`` units, windows of ``windows.WINDOW_UNITS``; ``window``:
    more than ``window`` units, windows of ``window``)."""
    whole = build_task_data(rnd, sample, media_url)
    parts = voice_naming.first_part_only(windows.split(whole, window))  # voices are named in part 1
    if len(parts) > 1:
        for part in parts:
            part["heading"] = heading(part)
    return parts


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _address(data_json: str, prediction_json: str) -> str:
    # = sha256 of _canonical({"data": data, "prediction": prediction}): a dump is its parts' dumps
    return hashlib.sha256(f'{{"data": {data_json}, "prediction": {prediction_json}}}'.encode("utf-8")).hexdigest()


def content_sha(data: dict, prediction: list[dict] | None) -> str:
    """Content address of what a task shows (data + pre-annotation), for change detection."""
    return _address(_canonical({k: v for k, v in data.items() if k != "content_sha"}), _canonical(prediction or []))


def address(data: dict, prediction: list[dict] | None) -> tuple[str, str]:
    """Sets ``data["content_sha"]`` (:func:`content_sha`) and returns the JSON text of the data
    (with it) and of the prediction, from the one serialisation the address is taken of: a push
    sends that text to every desk instead of encoding each task once more per desk."""
    data.pop("content_sha", None)
    data_json, prediction_json = _canonical(data), _canonical(prediction or [])
    sha = data["content_sha"] = _address(data_json, prediction_json)
    return f'{data_json[:-1]}{", " if data_json != "{}" else ""}"content_sha": "{sha}"}}', prediction_json
