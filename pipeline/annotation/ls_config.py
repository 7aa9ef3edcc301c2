"""How a round looks in Label Studio: the labeling config, the task data, and the mapping
between field values and Label Studio results (both ways). Everything is derived from the
round definition (:mod:`pipeline.annotation.rounds`) and the taxonomy; nothing is typed twice.

One task per sample, or per window of a long sample (:mod:`.windows`: at most
``WINDOW_UNITS`` rows with controls per task, stitched back on pull). The dialogue is shown as
Paragraphs with the audio URL, synced with the Audio player (a line's play button plays from
that line on); every row with controls has its own player that plays exactly that row and stops
at its end (:func:`turn_player`). Below the dialogue a Repeater gives every row the round applies to
("units") its own controls, each labelled in words (``label`` in the round YAML), required ones
marked ``*``. Control names carry the unit's position in the task: ``<field>_<i>`` and, for
record slots, ``<field>__<slot>__<subfield>_<i>``; the unit list in the task data maps ``i`` to
the row_index.

This module renders the labeling config and owns the pre-fill mark. Its other parts have one
module each and are re-exported here, so every caller keeps ``ls_config.<name>``: the words and
defaults of a round's YAML (:mod:`.round_ui`), the task data (:mod:`.ls_tasks`), values <->
results (:mod:`.ls_results`).
"""
from __future__ import annotations

from html import escape
from pathlib import Path
from xml.sax.saxutils import quoteattr

from pipeline import taxonomy
from pipeline.annotation import naming, voice_naming
from pipeline.annotation.ls_results import result_value, values_to_results  # noqa: F401 (re-exported)
from pipeline.annotation.ls_tasks import (DYNAMIC_KEY, EVIDENCE_AFTER, EVIDENCE_BEFORE,  # noqa: F401 (re-exported)
                                          UNIT_ROW_OPTIONS, build_task_data, build_tasks_data, content_sha,
                                          turn_player)
from pipeline.annotation.naming import control_name
from pipeline.annotation.round_ui import (DEFAULTS, check_defaults, choice_text, default_value,  # noqa: F401
                                          default_values, field_label, has_defaults, record_defaults,
                                          shown_choice, ui_text)
from pipeline.annotation.rounds import Field, Round, load_round, round_names
from pipeline.config import SCHEMAS_DIR

CONFIG_DIR = SCHEMAS_DIR / "label_studio"
GUIDANCE_KIND = {  # taxonomy list -> the guidance section shown as hints
    "taxonomy:utterance_types": "utterance_types",
    "taxonomy:relation_patterns": "relation_patterns",
    "taxonomy:support_strategies": "support_strategies",
}
# The annotators' keys (added to the page by the desk's front, pipeline/labelstudio/front/static/keys.js).
KEYS_HELP = ("Keys (through the desk's front): Tab goes from list to list, one stop each; the arrow keys move "
             "in a list (in a one-answer list they also choose), Space ticks; in the list in focus each choice "
             "shows its key: 1-9, 0 the 1st-10th choice, - the last (none), and in a list of rows the row "
             "number (1 then 2 for row 12); a number with no list in focus goes to the first list of the form "
             "in view; a one-answer list picked by number goes on to the form's next open field; a value marked "
             "'proposed' (pre-filled) is yours once you accept it: a on that field accepts it as it is, and "
             "changing a field accepts that field only; Shift+Enter keeps a text or a number and goes on; Enter "
             "goes to the next form (the first: Who is each voice?, where there is one); p plays the row, p "
             "again stops it; Ctrl+Enter submits; Esc closes the instructions.")
# Label Studio (1.23, ``setupHotKeys``/``makeComb`` in its editor bundle) gives every choice, number
# and label without a ``hotkey`` the first free key of this list, in page order: the keys then act
# on the first forms of a task, whichever form the annotator is on. No config attribute or project
# setting turns that off (the user setting "Labeling hotkeys" turns off every key, Ctrl+Enter too;
# ``readonly`` is no attribute of Choices), so every config takes each of these keys first with a
# hidden Filter, whose key only focuses its own input, which is hidden and so cannot take focus: no
# control is left a key, with or without the desk's front (the front's own keys act instead).
AUTO_HOTKEYS = "1234567890qwetasdfgzxcvbyiopjklnm"
HOTKEY_SINK = "no_auto_hotkeys"
# Pre-filled values are proposals, field by field. The prediction itself marks, per form, which of
# its fields it proposes: one hidden multiple choice (PROPOSED_MARK) whose choices are the form's
# field keys (``dialogue_cleaned``, ``internal_emotion__1__person``: :func:`field_key`). Beside
# every field stands its "accept" box (ACCEPT), shown and required only where the mark names that
# field, and never set by the prediction: Label Studio refuses the submit until the person has
# ticked it, with one sentence naming the field (through the desk's front: the key ``a`` on the
# field ticks it, and so does an edit of that field, and of that field only). Label Studio skips
# the requirement on a hidden View (``Required.js``: ``getParent(self, 2)?.isVisible !== false``),
# so a field nobody proposed needs no tick. The hyphen keeps these names out of
# ``naming.parse_control_name`` (no field of any round: windows, acceptance and adjudication never
# see them; the pull skips them). The form-level mark and "pre-fill checked" box of earlier pushes
# (PREFILLED_MARK, PREFILL_CHECK) are still known, so their stored results stay no answers.
PROPOSED_MARK = "proposed-fields"
ACCEPT, ACCEPT_VALUE = "accept", "proposed: accept it"
PROPOSAL_VIEW = "proposal"
PREFILLED_MARK, PREFILL_CHECK = "prefilled-form", "prefill-checked"  # earlier pushes' form-level pair
PREFILL_CONTROLS = (PROPOSED_MARK, PREFILLED_MARK, PREFILL_CHECK)


def field_key(field: str, slot: int | None = None, sub: str | None = None) -> str:
    """A form's field as the proposal mark names it: its control name without the unit."""
    return naming.control_name(field, "", slot, sub)[:-1]


def accept_name(key: str, unit: int | str) -> str:
    """The "accept" box of field ``key`` (:func:`field_key`) in form ``unit``."""
    return f"{ACCEPT}-{key}_{unit}"


def config_path(round_name: str, scenario: str) -> Path:
    return CONFIG_DIR / f"{round_name}_{scenario}.xml"


# --- config ------------------------------------------------------------------------------

def _required_message(label: str) -> str:
    # Label Studio names the first form (from the top) where it is missing; the desk's front puts the
    # message next to that field (a form's number would be zero-based: the Repeater's index)
    return quoteattr(f"{label.rstrip(' *')} is missing: fill it in, or choose the 'none' option where there is "
                     f"one (the first form from the top where it is empty).")


def _control(field: Field, name: str, scenario: str, required: bool, indent: str, label: str,
             shown: dict[str, str] | None = None) -> list[str]:
    to = 'toName="turn_{{idx}}"'
    req = f' required="true" requiredMessage={_required_message(label)}' if required else ""
    head = f'{indent}<Header size="6" value={quoteattr(label)}/>'
    if field.type == "text":
        return [head, f'{indent}<TextArea name="{name}" {to} rows="2" maxSubmissions="1" editable="true"'
                f' placeholder={quoteattr(label.rstrip(" *"))}{req}/>']
    if field.type == "number":
        lo = f' min="{field.minimum:g}"' if field.minimum is not None else ""
        hi = f' max="{field.maximum:g}"' if field.maximum is not None else ""
        return [head, f'{indent}<Number name="{name}" {to}{lo}{hi}{req}/>']
    if field.type == "rows":  # nearby rows only, each a box with its speaker and first words: one click each
        return [head, f'{indent}<Choices name="{name}" {to} choice="multiple" showInline="true"{req}'
                      f' value="$units[{{{{idx}}}}].{UNIT_ROW_OPTIONS}"/>']
    if field.type in ("choice", "multichoice"):
        # short lists (people, labels) as buttons in a line: one click per choice, no dropdown
        kind = "multiple" if field.type == "multichoice" else "single"  # checkboxes: each one a Tab stop
        open_ = f'{indent}<Choices name="{name}" {to} choice="{kind}" showInline="true"{req}'
        if field.is_dynamic:
            return [head, f'{open_} value="${DYNAMIC_KEY[field.values]}"/>']
        hints = taxonomy.guidance(GUIDANCE_KIND[field.values], scenario) if field.values in GUIDANCE_KIND else {}
        lines = [head, open_ + ">"]
        for value in field.options(scenario):
            hint = f" hint={quoteattr(hints[value])}" if value in hints else ""
            text = (shown or {}).get(value) or value.replace("_", " ")
            # shown: words; stored (the alias): the taxonomy's exact label name
            alias = f" alias={quoteattr(value)}" if text != value else ""
            lines.append(f"{indent}  <Choice value={quoteattr(text)}{alias}{hint}/>")
        lines.append(f"{indent}</Choices>")
        return lines
    raise ValueError(f"field {field.name!r}: type {field.type!r} has no Label Studio control")


def proposal_box(key: str, label: str, indent: str) -> list[str]:
    """The "accept" box beside field ``key`` (:func:`field_key`): shown, and required, only where
    the form's hidden mark names the field as proposed (see :data:`PROPOSED_MARK`)."""
    msg = quoteattr(f"The proposed '{label.rstrip(' *')}' is not accepted yet (the first such form from the "
                    f"top): check it, then accept it (key a) or change it.")
    return [f'{indent}<View idAttr="{PROPOSAL_VIEW}-{key}_{{{{idx}}}}" visibleWhen="choice-selected"'
            f' whenTagName="{PROPOSED_MARK}_{{{{idx}}}}" whenChoiceValue="{key}">',
            f'{indent}  <Choices name="{accept_name(key, "{{idx}}")}" toName="turn_{{{{idx}}}}" choice="multiple"'
            f' showInline="true" required="true" requiredMessage={msg}>',
            f"{indent}    <Choice value={quoteattr(ACCEPT_VALUE)}/>",
            f"{indent}  </Choices>",
            f"{indent}</View>"]


def proposed_mark(keys: list[str]) -> list[str]:
    """The end of every form: its hidden mark, one choice per field key (set by the push's
    prediction, :func:`mark_prefilled`: the fields it proposes)."""
    return [f'      <View idAttr="{PROPOSED_MARK}_{{{{idx}}}}" style="display: none">',
            f'        <Choices name="{PROPOSED_MARK}_{{{{idx}}}}" toName="turn_{{{{idx}}}}" choice="multiple">',
            *(f"          <Choice value={quoteattr(k)}/>" for k in keys),
            "        </Choices>",
            "      </View>"]


def _field(field: Field, name: str, scenario: str, required: bool, indent: str, label: str,
           shown: dict[str, str] | None, keys: list[str]) -> list[str]:
    """A field's control and, beside it, its "accept" box (:func:`proposal_box`); its key goes to ``keys``."""
    key = name[:-len("_{{idx}}")]
    keys.append(key)
    return _control(field, name, scenario, required, indent, label, shown) + proposal_box(key, label, indent)


def hotkey_sink() -> list[str]:
    """Hidden Filters holding every key of :data:`AUTO_HOTKEYS` (see there), on a hidden choice
    list of their own (a Filter needs one; it gets no key, none being left)."""
    return ['  <View style="display: none">',
            f'    <Choices name="{HOTKEY_SINK}" toName="heading" choice="single">',
            '      <Choice value="-"/>',
            "    </Choices>",
            *(f'    <Filter name="{HOTKEY_SINK}_{k}" toName="{HOTKEY_SINK}" hotkey="{k}"/>' for k in AUTO_HOTKEYS),
            "  </View>"]


def instructions_html(rnd: Round, scenario: str) -> str:
    """The project's instruction panel: the round's instructions, every field in words, and the
    guidance of each label of the round's taxonomy lists (from the taxonomy, never typed twice)."""
    
    ui = ui_text(rnd)
    parts = [f"<h3>{escape(rnd.title)}</h3>", f"<p>{escape(rnd.instructions)}</p>", "<ul>"]

    def describe(f: Field, path: str, required: bool) -> None:
        help_ = (ui.get(path) or {}).get("help")
        parts.append(f"<li><b>{escape(field_label(f, ui, path, required))}</b>"
                     + (f": {escape(help_)}" if help_ else "") + "</li>")

    for f in rnd.fields:
        describe(f, f.name, f.required)
        for sub in f.subfields:
            if sub.type != "const":
                describe(sub, f"{f.name}.{sub.name}", sub.required)
    parts.append("</ul><p>* required. Fields of an optional entry are required once the entry is started.</p>")
    parts.append(f"<p>{escape(KEYS_HELP)}</p>")
    for f in (*rnd.fields, *(s for f in rnd.fields for s in f.subfields)):
        if f.values in GUIDANCE_KIND:
            parts.append(f"<h4>{escape(field_label(f, ui, f.name, False))}: the labels</h4><dl>")
            path = next((f"{g.name}.{f.name}" for g in rnd.fields if f in g.subfields), f.name)
            for value, text in taxonomy.guidance(GUIDANCE_KIND[f.values], scenario).items():
                shown = shown_choice(ui, path, value)
                stored = f" <small>(stored as {escape(value)})</small>" if shown != value else ""
                parts.append(f"<dt><b>{escape(shown)}</b>{stored}</dt><dd>{escape(text)}</dd>")
            if f.empty_choice:
                parts.append(f"<dt><b>{escape(f.empty_choice)}</b></dt><dd>None of the above applies.</dd>")
            parts.append("</dl>")
    return "".join(parts)


def render_config(rnd: Round, scenario: str) -> str:
    """The Label Studio labeling config of one round for one scenario (deterministic text).

    Every control has a label in words (the round YAML's ``label``; ranges and a ``*`` for
    required ones) and a required message naming the field and the form. Record slots after the
    first appear once the slot before them has its first choice set, and within a slot the
    other fields appear once its first choice is set (fields that appear only when needed).
    """
    taxonomy.check_scenario(scenario)
    check_defaults(rnd)
    ui = ui_text(rnd)
    out = [
        f"<!-- Generated from annotation_schemas/rounds/{rnd.name}.yaml (version {rnd.version}) by"
        f" `rescue annotate render-configs`; do not edit. -->",
        "<View>",
        f"  <Header value={quoteattr(f'{rnd.title} ({scenario})')}/>",
        f"  <Header size=\"6\" value={quoteattr(rnd.instructions)}/>",
        f"  <Header size=\"6\" value={quoteattr(KEYS_HELP)}/>",
        '  <Text name="heading" value="$heading"/>',
        *hotkey_sink(),
        '  <Paragraphs name="dialogue" value="$turns" layout="dialogue" nameKey="speaker"'
        ' textKey="line" audioUrl="$media_url"/>',
        '  <Repeater on="$units" indexFlag="{{idx}}">',
        '    <View idAttr="unit_{{idx}}" style="border-top: 1px solid #ccc; padding-top: 6px; margin-top: 6px">',
        '      <Header size="6" value="$units[{{idx}}].title"/>',
        '      <Text name="turn_{{idx}}" value="$units[{{idx}}].text"/>',
        '      <HyperText name="clip_{{idx}}" value="$units[{{idx}}].clip" inline="true"/>',
    ]
    keys: list[str] = []  # every field of a form, as its proposal mark names them
    for field in rnd.fields:
        if field.type == "records":
            opener = next((s for s in field.subfields if s.type in ("choice", "multichoice")), None)
            for slot in range(1, field.max_items + 1):
                title = (ui.get(field.name) or {}).get("label") or field.name.replace("_", " ")
                title += f" {slot}" if field.max_items > 1 else ""
                title += "" if field.required and slot == 1 else " (optional)"
                indent = "      "
                if slot > 1 and opener is not None:
                    # shown once the slot before it is started: fewer controls on the page
                    prev = control_name(field.name, "{{idx}}", slot - 1, opener.name)
                    out.append(f'      <View visibleWhen="choice-selected" whenTagName="{prev}">')
                    indent = "        "
                out.append(f"{indent}<Header size=\"6\" value={quoteattr(title)}/>")
                flex = 'style="display: flex; gap: 8px; flex-wrap: wrap; align-items: center"'
                out.append(f'{indent}<View {flex}>')
                rest = False  # the entry's other fields appear once its first choice is made
                for sub in field.subfields:
                    if sub.type == "const":
                        continue
                    if opener is not None and sub is not opener and not rest:
                        rest = True
                        when = control_name(field.name, "{{idx}}", slot, opener.name)
                        out.append(f'{indent}  <View visibleWhen="choice-selected" whenTagName="{when}" {flex}>')
                    # A required records field needs an explicit decision in slot 1: the subfield
                    # carrying the "none" choice (e.g. strategy type or "no strategy").
                    required = field.required and slot == 1 and sub.empty_choice is not None
                    label = field_label(sub, ui, f"{field.name}.{sub.name}", required or sub.required)
                    name = control_name(field.name, "{{idx}}", slot, sub.name)
                    out += _field(sub, name, scenario, required, indent + ("    " if rest else "  "), label,
                                  (ui.get(f"{field.name}.{sub.name}") or {}).get("shown"), keys)
                if rest:
                    out.append(f"{indent}  </View>")
                out.append(f"{indent}</View>")
                if slot > 1 and opener is not None:
                    out.append("      </View>")
        else:
            label = field_label(field, ui, field.name, field.required)
            out += _field(field, control_name(field.name, "{{idx}}"), scenario, field.required, "      ", label,
                          (ui.get(field.name) or {}).get("shown"), keys)
    out += [*proposed_mark(keys), "    </View>", "  </Repeater>", "</View>", ""]
    return voice_naming.add_to_config(rnd, "\n".join(out))  # the transcript round: voices named once


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


# --- the proposal mark ---------------------------------------------------------------------

def mark_prefilled(rnd: Round, data: dict, prediction: list[dict]) -> list[dict]:
    """``prediction`` plus, per form it pre-fills, the hidden mark naming every field it proposes
    (a non-empty value), each of which then shows its "accept" box (:func:`proposal_box`)."""
    units = len(data.get("units") or [])
    proposed: dict[int, list[str]] = {}
    for r in prediction:
        parsed = naming.parse_control_name(r.get("from_name") or "")
        value = result_value(r)
        if parsed is None or parsed[3] >= units or value in (None, [], "") \
                or (isinstance(value, str) and not value.strip()):
            continue
        field, slot, sub, unit = parsed
        proposed.setdefault(unit, []).append(field_key(field, slot, sub))
    return prediction + [{"from_name": f"{PROPOSED_MARK}_{i}", "to_name": f"turn_{i}", "type": "choices",
                          "value": {"choices": sorted(set(keys))}} for i, keys in sorted(proposed.items())]


def is_prefill_control(name: str) -> bool:
    """Whether a result's ``from_name`` is a form's proposal mark, a field's "accept" box, or an
    earlier push's form-level mark or "pre-fill checked" box, or the voice block's mark or "accept"
    box of a proposed name (:data:`.voice_naming.MARK_NAME`) (no field)."""
    return name.startswith(f"{ACCEPT}-") or any(name.startswith(f"{c}_") for c in PREFILL_CONTROLS) \
        or voice_naming.is_proposal_control(name)
