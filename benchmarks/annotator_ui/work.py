"""The work per turn: the clicks, key presses and typed text fields that turn the pushed forms
into the oracle's answers, counted from the pushed config and pre-filled values (no server, no
browser; ``--work-only`` prints them alone)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from pipeline.annotation import ls_config, naming, push
from pipeline.annotation.rounds import load_round

from .oracle import answers, family_sample


def _controls(label_config: str) -> dict[str, ET.Element]:
    root = ET.fromstring(label_config)
    return {el.get("name"): el for el in root.iter() if el.get("toName") and el.get("name")}


def _first_list(label_config: str) -> str | None:
    """The template name of a form's first choice list: the one the front's number keys act on
    when no list has the focus (``pipeline.labelstudio.front.comfort.KEYS_JS``)."""
    repeater = ET.fromstring(label_config).find(".//Repeater")
    first = next((el for el in repeater.iter("Choices")), None) if repeater is not None else None
    return first.get("name") if first is not None else None


def work_per_turn(rnd, label_config: str, data: dict, prediction: list[dict], truth: dict[int, dict],
                  keys: bool = True) -> dict:
    """Clicks, key presses and typed text fields needed to turn the pre-filled form into the
    answers, per unit (row with controls). Reads the pushed config (which controls exist and how
    they are shown) and the pre-filled results; a control already holding the answer costs
    nothing, unless it holds a proposal (``ls_config.mark_prefilled``), which is accepted: the
    key ``a`` (a form whose work starts so costs one Enter to come to it), or a click on its
    "accept" box without the front's keys. With ``keys`` (the desk front's keys, ``pipeline.labelstudio.front.comfort.KEYS_JS``): a choice of a form's
    first list costs its number key (no click), and a form where that is used, or where nothing
    needs changing, costs one Enter to come to it."""
    controls = _controls(label_config)
    first = _first_list(label_config) if keys else None
    want = ls_config.values_to_results(rnd, data, truth)
    have = {r["from_name"]: ls_config.result_value(r) for r in prediction}
    proposed = {f"{key}_{r['from_name'].rsplit('_', 1)[1]}" for r in prediction
                if r["from_name"].startswith(f"{ls_config.PROPOSED_MARK}_") for key in ls_config.result_value(r)}
    clicks = key_presses = texts = 0
    acted: dict[int, str] = {}  # unit -> "key" / "click": how its first needed action is done
    kept = proposed - {r["from_name"] for r in want if have.get(r["from_name"]) != ls_config.result_value(r)}
    for name in sorted(kept):  # a proposal kept as it is: accepted
        unit = naming.parse_control_name(name)[3]
        if keys:
            key_presses += 1
        else:
            clicks += 1
        acted.setdefault(unit, "key" if keys else "click")
    for r in want:
        name = r["from_name"]
        value = ls_config.result_value(r)
        parsed = naming.parse_control_name(name)
        if have.get(name) == value:
            continue
        template = naming.control_name(parsed[0], "{{idx}}", parsed[1], parsed[2]) if parsed else name
        el = controls.get(template)
        if el is None:  # (an Element without children is falsy: no `or` here)
            el = controls.get(name)
        tag = el.tag if el is not None else r["type"]
        unit = parsed[3] if parsed else -1
        by_key = False
        if tag in ("Choices", "choices"):
            items = value if isinstance(value, list) else [value]
            options = [c.get("alias") or c.get("value") for c in el.findall("Choice")] if el is not None else []
            if not options and el is not None and el.get("value", "").startswith("$"):  # a list from the task data
                options = [o["value"] for o in data.get(el.get("value")[1:], [])]
            keyed = [v for v in items if v in options[:10] or (options and v == options[-1])]
            if template == first and len(keyed) == len(items):  # the front's keys: 1-9, 0, - (last)
                key_presses += len(items)
                by_key = True
            elif el is not None and el.get("layout") != "select":
                clicks += len(items)  # buttons / boxes in a line: one click each
            elif el is not None and el.get("choice") == "multiple":
                clicks += 1 + len(items)
                key_presses += 1
            else:
                clicks += 2
        elif tag in ("TextArea", "textarea"):
            clicks, key_presses, texts = clicks + 1, key_presses + 1, texts + 1
        elif tag in ("Number", "number"):
            clicks, key_presses = clicks + 1, key_presses + len(str(value)) + 1
        acted.setdefault(unit, "key" if by_key else "click")
    if keys:  # Enter to come to each form whose work starts with a key or needs nothing
        key_presses += sum(1 for i in range(len(data["units"])) if acted.get(i, "key") == "key")
    return {"clicks": clicks, "keys": key_presses, "texts": texts, "units": len(data["units"])}


def work_for_sample(rnd, sample: dict, truth: dict[int, dict], keys: bool = True, window: int | None = None) -> dict:
    """:func:`work_per_turn` over every task of the sample exactly as the pipeline pushes it
    (``push._prepare``: windows, the round's defaults, the transcript round pre-filled with the
    draft, the later rounds without gold from earlier rounds), per unit."""
    config = ls_config.render_config(rnd, sample["scenario"])
    prelabel = push.input_values if rnd.name == "transcript" else None
    total = {"clicks": 0, "keys": 0, "texts": 0, "units": 0}
    for prepared in push._prepare(rnd, sample, prelabel, None, window):
        for k, v in work_per_turn(rnd, config, prepared.data, prepared.prediction, truth, keys).items():
            total[k] += v
    units = max(1, total["units"])
    return {"clicks": total["clicks"] / units, "keys": total["keys"] / units, "texts": total["texts"] / units}


def work_main(args) -> None:
    """``--work-only``: the clicks and keys per turn alone, one line per size and round (counted
    with the front's keys, without them under ``--direct``)."""
    keys = not args.direct
    for n_rows in args.rows:
        sample = family_sample(n_rows)
        for name in args.rounds:
            rnd = load_round(name)
            w = work_for_sample(rnd, sample, answers(rnd, sample), keys, args.window)
            print(f"{name.upper()} {n_rows} clicks_per_turn={w['clicks']:.2f} keys_per_turn={w['keys']:.2f} "
                  f"text_fields_per_turn={w['texts']:.2f}")
