"""What a round's YAML says to the people who annotate it: each field's label and help, the text
a choice shows (``shown:``), and the defaults it pre-fills (``default:``). Read from the round
YAML itself (:mod:`pipeline.annotation.rounds` keeps the fields' facts); used by the labeling
config (:mod:`.ls_config`, which re-exports these names) and through it by the push (pre-filled
defaults) and the reading of answers (an entry of nothing but defaults is no entry).
"""
from __future__ import annotations

from functools import lru_cache

import yaml

from pipeline.annotation.rounds import Field, Round


def ui_text(rnd: Round) -> dict[str, dict]:
    """``{field or field.subfield: {"label", "help", "default", "shown"}}``: the words annotators
    see, the pre-filled defaults and the text shown for a choice (``shown:`` in the round YAML,
    ``{stored value: shown text}``), from the round YAML."""
    raw = _parsed(rnd.source.read_text(encoding="utf-8"))
    out: dict[str, dict] = {}

    def text(f: dict) -> dict:
        return {"label": f.get("label"), "help": f.get("help"), "default": f.get("default"),
                "shown": dict(f.get("shown") or {})}

    for f in raw.get("fields") or []:
        out[f["name"]] = text(f)
        for sub in f.get("subfields") or []:
            out[f"{f['name']}.{sub['name']}"] = text(sub)
    return out


@lru_cache(maxsize=64)
def _parsed(text: str) -> dict:
    """A round YAML's text, parsed once (asked per sample and per choice; read only here)."""
    return yaml.safe_load(text) or {}


def shown_choice(ui: dict[str, dict], path: str, value: str) -> str:
    """The text a choice shows: the round YAML's ``shown`` for it, else a taxonomy identifier in
    words (``goal_align`` -> ``goal align``). What is stored is always the value itself (the
    Choice's ``alias``): label names are facts of the taxonomy."""
    return ((ui.get(path) or {}).get("shown") or {}).get(value) or value.replace("_", " ")


def choice_text(rnd: Round, path: str, value: str) -> str:
    """:func:`shown_choice` of a round's field (``field`` or ``field.subfield``)."""
    return shown_choice(ui_text(rnd), path, value)


# What a round YAML's ``default:`` may name: a value read from the row itself.
DEFAULTS = {"speaker": lambda row: row.get("primary_speaker")}


def default_values(rnd: Round, sample: dict) -> dict[int, dict]:
    """``{row_index: {field: value}}``: the round's sensible defaults (``default:`` in its YAML,
    e.g. "who feels it" = the speaker, right for 36 of 41 client rows of the release's head),
    pushed as pre-filled values (a prediction) where no other pre-annotation gives the field.
    A records subfield's default starts the first entry."""
    ui = ui_text(rnd)
    out: dict[int, dict] = {}
    for row in sample["rows"]:
        if not rnd.applies(row.get("primary_speaker")):
            continue
        values: dict = {}
        for f in rnd.fields:
            if f.type == "records":
                rec = {s.name: DEFAULTS[d](row) for s in f.subfields
                       if (d := (ui.get(f"{f.name}.{s.name}") or {}).get("default"))}
                rec = {k: v for k, v in rec.items() if v not in (None, "", [])}
                if rec:
                    values[f.name] = [rec]
            elif (d := (ui.get(f.name) or {}).get("default")) and DEFAULTS[d](row) not in (None, "", []):
                values[f.name] = DEFAULTS[d](row)
        if values:
            out[row["row_index"]] = values
    return out


@lru_cache(maxsize=32)
def record_defaults(rnd: Round) -> dict[str, dict[str, str]]:
    """``{records field: {subfield: default}}`` of a round (``default:`` in its YAML): the pull
    takes an entry holding nothing but these pre-filled values, untouched, as no entry."""
    out: dict[str, dict[str, str]] = {}
    for path, text in ui_text(rnd).items():
        if "." in path and text.get("default"):
            fname, sub = path.split(".", 1)
            out.setdefault(fname, {})[sub] = text["default"]
    return out


def default_value(kind: str, speaker: str | None):
    """The value a ``default:`` of kind ``kind`` gives on a row spoken by ``speaker``."""
    return DEFAULTS[kind]({"primary_speaker": speaker})


def has_defaults(rnd: Round) -> bool:
    return any(text.get("default") for text in ui_text(rnd).values())


def check_defaults(rnd: Round) -> None:
    """A ``default:`` that names nothing :data:`DEFAULTS` knows is an error naming the round and field."""
    for path, text in ui_text(rnd).items():
        if text.get("default") and text["default"] not in DEFAULTS:
            raise ValueError(f"annotation_schemas/rounds/{rnd.name}.yaml: {path}: default {text['default']!r} "
                             f"is not one of {sorted(DEFAULTS)}")


def field_label(field: Field, ui: dict[str, dict], path: str, required: bool) -> str:
    """A control's label in words: its name from the round YAML, the range, a required mark."""
    label = (ui.get(path) or {}).get("label") or path.split(".")[-1].replace("_", " ").capitalize()
    if field.type == "number" and field.minimum is not None and field.maximum is not None:
        label += f" {field.minimum:g}-{field.maximum:g}"
    return label + (" *" if required else "")
