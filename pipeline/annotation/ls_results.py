"""Field values and Label Studio results, both ways: a round's ``{row_index: {field: value}}``
as the results of a prediction (values a form could not show left out), and the raw value of
one result item as an answer holds it.
"""
from __future__ import annotations

from pipeline.annotation.naming import control_name
from pipeline.annotation.rounds import Field, Round


def _result(name: str, unit: int, kind: str, value) -> dict:
    key = {"choices": "choices", "textarea": "text", "number": "number"}[kind]
    return {"from_name": name, "to_name": f"turn_{unit}", "type": kind, "value": {key: value}}


def _field_results(field: Field, name: str, unit: int, value, scenario: str) -> list[dict]:
    if value is None:
        return []
    if field.type == "text":
        return [_result(name, unit, "textarea", [value])] if value != "" else []
    if field.type == "number":
        return [_result(name, unit, "number", value)]
    if field.type == "choice":
        if value == "" and field.empty_choice:
            value = field.empty_choice
        return [_result(name, unit, "choices", [value])] if value != "" else []
    if field.type == "multichoice":
        return [_result(name, unit, "choices", list(value))] if value else []
    if field.type == "rows":  # 0-based positions -> displayed row_index
        return [_result(name, unit, "choices", [str(int(v) + 1) for v in value])] if value else []
    return []


def values_to_results(rnd: Round, data: dict, values: dict[int, dict]) -> list[dict]:
    """Label Studio results (a prediction) from ``{row_index: {field: value}}``.

    Values outside a dynamic field's choice list (e.g. an undiarized ``SPEAKER_01``) are left
    out: Label Studio could not show them.
    """
    scenario = data["scenario"]
    n_rows = len(data["turns"])
    participants = data.get("participants") or []
    allowed: dict[int, set] = {}  # per field (by id): its options, asked once per task, not per row
    results: list[dict] = []
    for unit, u in enumerate(data["units"]):
        row_values = values.get(u["row_index"]) or {}
        for field in rnd.fields:
            value = row_values.get(field.name)
            if field.type == "records":
                records = list(value or [])[: field.max_items]
                if not records and field.required:
                    empty = next((s for s in field.subfields if s.empty_choice), None)
                    if empty is not None and value is not None:  # a known "none" decision
                        results += _field_results(empty, control_name(field.name, unit, 1, empty.name),
                                                  unit, empty.empty_choice, scenario)
                for slot, rec in enumerate(records, start=1):
                    for sub in field.subfields:
                        if sub.type == "const":
                            continue
                        v = rec.get(sub.name)
                        if not _offerable(sub, v, scenario, participants, n_rows, allowed):
                            continue
                        results += _field_results(sub, control_name(field.name, unit, slot, sub.name),
                                                  unit, v, scenario)
                continue
            if not _offerable(field, value, scenario, participants, n_rows, allowed):
                continue
            results += _field_results(field, control_name(field.name, unit), unit, value, scenario)
    return results


def _offerable(field: Field, value, scenario: str, participants, n_rows: int, allowed: dict[int, set]) -> bool:
    if value is None or field.type not in ("choice", "multichoice"):
        return value is not None
    options = allowed.get(id(field))
    if options is None:
        options = allowed[id(field)] = set(field.options(scenario, participants, n_rows))
    items = value if isinstance(value, list) else [value]
    return all(v in options or (v == "" and field.empty_choice) for v in items)


def result_value(result: dict):
    """The raw value of one Label Studio result item (list of choices, text, number)."""
    value = result.get("value") or {}
    if "choices" in value:
        return list(value["choices"])
    if "text" in value:
        text = value["text"]
        return "\n".join(text) if isinstance(text, list) else text
    if "number" in value:
        return value["number"]
    return None
