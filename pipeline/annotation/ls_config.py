"""How a round looks in Label Studio: the labeling config, the task data, and the mapping
between field values and Label Studio results (both ways). Everything is derived from the
round definition (:mod:`pipeline.annotation.rounds`) and the taxonomy; nothing is typed twice.

One task per sample. The whole dialogue is shown as Paragraphs synced with the Audio (clicking
a line plays it); below it a Repeater gives every row the round applies to ("units") its own
controls. Control names carry the unit's position: ``<field>_<i>`` and, for record slots,
``<field>__<slot>__<subfield>_<i>``; the unit list in the task data maps ``i`` to the row_index.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from xml.sax.saxutils import quoteattr

from pipeline import taxonomy
from pipeline.annotation.rounds import Field, Round, load_round, round_names
from pipeline.config import SCHEMAS_DIR

CONFIG_DIR = SCHEMAS_DIR / "label_studio"
GUIDANCE_KIND = {  # taxonomy list -> the guidance section shown as hints
    "taxonomy:utterance_types": "utterance_types",
    "taxonomy:relation_patterns": "relation_patterns",
    "taxonomy:support_strategies": "support_strategies",
}
# Task-data keys that hold the per-sample choice lists of dynamic fields.
DYNAMIC_KEY = {"entities": "entities", "clients": "clients", "rows": "row_options"}
_NAME_RE = re.compile(r"^(?P<field>[a-z_]+?)(?:__(?P<slot>\d+)__(?P<sub>[a-z_]+))?_(?P<unit>\d+)$")


def config_path(round_name: str, scenario: str) -> Path:
    return CONFIG_DIR / f"{round_name}_{scenario}.xml"


# --- config ------------------------------------------------------------------------------

def control_name(field: str, unit: int | str, slot: int | None = None, sub: str | None = None) -> str:
    return f"{field}__{slot}__{sub}_{unit}" if slot is not None else f"{field}_{unit}"


def parse_control_name(name: str) -> tuple[str, int | None, str | None, int] | None:
    """``(field, slot, subfield, unit)`` of a control name, or None if it is not one of ours."""
    m = _NAME_RE.match(name)
    if not m:
        return None
    slot = int(m["slot"]) if m["slot"] else None
    return m["field"], slot, m["sub"], int(m["unit"])


def _control(field: Field, name: str, scenario: str, required: bool, indent: str) -> list[str]:
    to = 'toName="turn_{{idx}}"'
    req = ' required="true"' if required else ""
    if field.type == "text":
        return [f'{indent}<TextArea name="{name}" {to} rows="2" maxSubmissions="1" editable="true"'
                f' placeholder={quoteattr(field.name.replace("_", " "))}{req}/>']
    if field.type == "number":
        lo = f' min="{field.minimum:g}"' if field.minimum is not None else ""
        hi = f' max="{field.maximum:g}"' if field.maximum is not None else ""
        return [f'{indent}<Number name="{name}" {to}{lo}{hi}{req}/>']
    if field.type in ("choice", "multichoice", "rows"):
        multiple = ' choice="multiple"' if field.type in ("multichoice", "rows") else ""
        head = f'{indent}<Choices name="{name}" {to} layout="select"{multiple}{req}'
        if field.is_dynamic:
            return [f'{head} value="${DYNAMIC_KEY[field.values]}"/>']
        hints = taxonomy.guidance(GUIDANCE_KIND[field.values], scenario) if field.values in GUIDANCE_KIND else {}
        lines = [head + ">"]
        for label in field.options(scenario):
            hint = f" hint={quoteattr(hints[label])}" if label in hints else ""
            lines.append(f"{indent}  <Choice value={quoteattr(label)}{hint}/>")
        lines.append(f"{indent}</Choices>")
        return lines
    raise ValueError(f"field {field.name!r}: type {field.type!r} has no Label Studio control")


def render_config(rnd: Round, scenario: str) -> str:
    """The Label Studio labeling config of one round for one scenario (deterministic text)."""
    taxonomy.check_scenario(scenario)
    out = [
        f"<!-- Generated from annotation_schemas/rounds/{rnd.name}.yaml (version {rnd.version}) by"
        f" `rescue annotate render-configs`; do not edit. -->",
        "<View>",
        f"  <Header value={quoteattr(f'{rnd.title} ({scenario})')}/>",
        f"  <Header size=\"6\" value={quoteattr(rnd.instructions)}/>",
        '  <Audio name="media" value="$media_url" sync="media"/>',
        '  <Paragraphs name="dialogue" value="$turns" layout="dialogue" nameKey="speaker"'
        ' textKey="text" sync="media"/>',
        '  <Repeater on="$units" indexFlag="{{idx}}">',
        '    <View idAttr="unit_{{idx}}" style="border-top: 1px solid #ccc; padding-top: 6px; margin-top: 6px">',
        '      <Text name="turn_{{idx}}" value="$units[{{idx}}].text"/>',
    ]
    for field in rnd.fields:
        if field.type == "records":
            for slot in range(1, field.max_items + 1):
                out.append(f"      <Header size=\"6\" value={quoteattr(f'{field.name} {slot}')}/>")
                out.append('      <View style="display: flex; gap: 8px; flex-wrap: wrap">')
                for sub in field.subfields:
                    if sub.type == "const":
                        continue
                    # A required records field needs an explicit decision in slot 1: the subfield
                    # carrying the "none" choice (e.g. strategy type or "no strategy").
                    required = field.required and slot == 1 and sub.empty_choice is not None
                    name = control_name(field.name, "{{idx}}", slot, sub.name)
                    out += _control(sub, name, scenario, required, "        ")
                out.append("      </View>")
        else:
            out += _control(field, control_name(field.name, "{{idx}}"), scenario, field.required, "      ")
    out += ["    </View>", "  </Repeater>", "</View>", ""]
    return "\n".join(out)


def render_all(write: bool = True) -> dict[Path, str]:
    """Render every round x scenario; write the files when ``write`` (returns path -> text)."""
    rendered = {config_path(name, sc): render_config(load_round(name), sc)
                for name in round_names() for sc in taxonomy.SCENARIOS}
    if write:
        CONFIG_DIR.mkdir(parents=True, exist_ok=True)
        for path, text in rendered.items():
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                tmp = path.with_suffix(".xml.tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(path)
    return rendered


def stale_configs() -> list[Path]:
    """Checked-in configs that differ from what the round definitions render."""
    return [p for p, text in render_all(write=False).items()
            if not p.exists() or p.read_text(encoding="utf-8") != text]


# --- task data ---------------------------------------------------------------------------

def _row_label(row: dict) -> str:
    return f"{row['row_index']} · {row.get('primary_speaker') or '?'}"


def build_task_data(rnd: Round, sample: dict, media_url: str = "") -> dict:
    """Task data of one sample: every turn for the dialogue, the round's units, choice lists.

    ``sample`` has the ``pipeline.rows`` shape (sample_id, scenario, participants, rows with
    row_index, start_time, end_time, primary_speaker, target, dialogue_cleaned).
    """
    scenario = sample["scenario"]
    rows = sorted(sample["rows"], key=lambda r: r["row_index"])
    participants = list(sample.get("participants") or [])
    turns = [{"row_index": r["row_index"], "speaker": _row_label(r), "text": r.get("dialogue_cleaned") or "",
              "start": float(r["start_time"]), "end": float(r["end_time"])} for r in rows]
    units = []
    for r in rows:
        if not rnd.applies(r.get("primary_speaker")):
            continue
        to = ", ".join(r.get("target") or []) or "?"
        units.append({"row_index": r["row_index"], "speaker": r.get("primary_speaker") or "",
                      "text": f"Row {_row_label(r)} → {to}: {r.get('dialogue_cleaned') or ''}"})
    data = {
        "sample_id": sample["sample_id"],
        "scenario": scenario,
        "round": rnd.name,
        "round_version": rnd.version,
        "participants": participants,
        "media_url": media_url,
        "turns": turns,
        "units": units,
        "entities": [{"value": v} for v in (*participants, taxonomy.THERAPIST, taxonomy.group_label(scenario))],
        "clients": [{"value": v} for v in (*participants, taxonomy.group_label(scenario))],
        "row_options": [{"value": str(r["row_index"])} for r in rows],
    }
    return data


def content_sha(data: dict, prediction: list[dict] | None) -> str:
    """Content address of what a task shows (data + pre-annotation), for change detection."""
    payload = json.dumps({"data": {k: v for k, v in data.items() if k != "content_sha"},
                          "prediction": prediction or []}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# --- values <-> results --------------------------------------------------------------------

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
                        if not _offerable(sub, v, scenario, participants, n_rows):
                            continue
                        results += _field_results(sub, control_name(field.name, unit, slot, sub.name),
                                                  unit, v, scenario)
                continue
            if not _offerable(field, value, scenario, participants, n_rows):
                continue
            results += _field_results(field, control_name(field.name, unit), unit, value, scenario)
    return results


def _offerable(field: Field, value, scenario: str, participants, n_rows: int) -> bool:
    if value is None or field.type not in ("choice", "multichoice"):
        return value is not None
    allowed = set(field.options(scenario, participants, n_rows))
    items = value if isinstance(value, list) else [value]
    return all(v in allowed or (v == "" and field.empty_choice) for v in items)


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
