"""Round definitions, generated configs and the result <-> value mapping (no server needed)."""
from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET

import pytest
from ls_samples import make_sample

from pipeline import taxonomy
from pipeline.annotation import ls_config, naming, push
from pipeline.annotation.pull import parse_annotation
from pipeline.annotation.rounds import RoundDefinitionError, load_round, parse_round, round_names
from tests.helpers import benchmark_head_records


def test_five_rounds_in_order_with_fields_from_the_taxonomy():
    assert round_names() == ("transcript", "emotion", "viewpoints", "relation", "strategy")
    emotion = load_round("emotion")
    assert emotion.field("utterance_type").options("couple") == taxonomy.utterance_types()
    rel = load_round("relation").field("relation_cycle_state")
    for sc in taxonomy.SCENARIOS:
        assert rel.options(sc)[:-1] == taxonomy.relation_patterns(sc)
        assert rel.options(sc)[-1] == rel.empty_choice == "no clear pattern"
    strat = load_round("strategy").field("support_strategy").subfield("strategy_type")
    assert strat.labels("family") == taxonomy.support_strategies("family")
    assert set(strat.labels("couple")) != set(strat.labels("family"))


def test_applies_to_selects_rows_by_speaker():
    assert load_round("transcript").applies("SPEAKER_01")
    assert load_round("emotion").applies("Alan") and not load_round("emotion").applies("Therapist")
    assert not load_round("emotion").applies("Couple")
    assert load_round("relation").applies("Therapist") and not load_round("relation").applies("Alan")


def test_every_field_declares_metric_and_threshold():
    for name in round_names():
        rnd = load_round(name)
        paths = [p for p, _, _ in rnd.agreement_fields()]
        assert paths, name
        for _, metric, threshold in rnd.agreement_fields():
            assert metric in ("nominal", "interval", "masi", "presence") and threshold == pytest.approx(0.667)
    emo = dict((p, m) for p, m, _ in load_round("emotion").agreement_fields())
    assert emo["internal_emotion.intensity"] == "interval" and emo["utterance_type"] == "nominal"


def test_malformed_round_names_file_and_field(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nversion: 1\norder: 9\napplies_to: all\nfields:\n"
                   "  - {name: tone, type: colour, agreement: {metric: nominal}}\n")
    with pytest.raises(RoundDefinitionError, match=r"broken\.yaml: field 'tone': type 'colour'"):
        parse_round(bad)
    bad.write_text("name: broken\nversion: 1\norder: 9\napplies_to: all\nfields:\n"
                   "  - {name: x, type: choice, values: {taxonomy: colours}}\n")
    with pytest.raises(RoundDefinitionError, match="broken.yaml: field 'x': values"):
        parse_round(bad)


def test_checked_in_configs_match_the_round_definitions():
    """Fails when a round YAML or the taxonomy changed without `rescue annotate render-configs`."""
    assert ls_config.stale_configs() == []


@pytest.mark.parametrize("name", ["transcript", "emotion", "viewpoints", "relation", "strategy"])
@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_config_has_line_players_and_one_control_per_field(name, scenario):
    rnd = load_round(name)
    root = ET.fromstring(ls_config.config_path(name, scenario).read_text())
    # no waveform player: it decoded the whole interview's audio on every task (seconds of CPU);
    # the dialogue's lines and every form's row play from the audio URL themselves
    assert root.find(".//Audio") is None
    assert root.find("Paragraphs").get("audioUrl") == "$media_url"
    assert any(h.get("value") == ls_config.KEYS_HELP for h in root.iter("Header"))
    repeater = root.find("Repeater")
    assert repeater.get("on") == "$units"
    controls = {el.get("name"): el for el in repeater.iter() if el.get("toName")}
    for f in rnd.fields:
        if f.type == "records":
            for slot in range(1, f.max_items + 1):
                for sub in f.subfields:
                    if sub.type != "const":
                        assert naming.control_name(f.name, "{{idx}}", slot, sub.name) in controls
        else:
            el = controls[naming.control_name(f.name, "{{idx}}")]
            assert (el.get("required") == "true") == f.required
            if not f.is_dynamic and f.type in ("choice", "multichoice"):
                # stored: the exact taxonomy names (the alias where the button shows words)
                assert tuple(c.get("alias") or c.get("value") for c in el.findall("Choice")) == f.options(scenario)


@pytest.mark.parametrize("name", ["transcript", "emotion", "viewpoints", "relation", "strategy"])
def test_every_field_has_its_own_accept_box_shown_where_the_mark_names_it(name):
    """A pre-filled value is a proposal, field by field: beside every control a required "accept"
    box whose view is shown only where the form's hidden mark names that field, with one sentence
    naming the field; the mark lists every field of the form."""
    root = ET.fromstring(ls_config.config_path(name, "family").read_text())
    repeater = root.find("Repeater")
    [mark] = [el for el in repeater.iter("Choices") if el.get("name") == f"{ls_config.PROPOSED_MARK}_{{{{idx}}}}"]
    keys = [c.get("value") for c in mark.findall("Choice")]
    fields = [el.get("name") for el in repeater.iter() if el.get("toName") == "turn_{{idx}}"
              and naming.parse_control_name(el.get("name").replace("{{idx}}", "0"))]
    assert keys == [f[: -len("_{{idx}}")] for f in fields] and keys
    labels = {}
    for view in repeater.iter("View"):
        if (view.get("idAttr") or "").startswith(f"{ls_config.PROPOSAL_VIEW}-"):
            key = view.get("idAttr")[len(ls_config.PROPOSAL_VIEW) + 1: -len("_{{idx}}")]
            assert (view.get("visibleWhen"), view.get("whenTagName"), view.get("whenChoiceValue")) == (
                "choice-selected", mark.get("name"), key)
            [box] = view.findall("Choices")
            assert box.get("name") == ls_config.accept_name(key, "{{idx}}") and box.get("required") == "true"
            labels[key] = box.get("requiredMessage")
    assert list(labels) == keys
    for key, message in labels.items():
        assert message.endswith("or change it.") and message.startswith("The proposed '") and "accept it (key a)" in message
        assert message.replace("...", "").count(".") == 1  # one sentence
    assert all(ls_config.is_prefill_control(ls_config.accept_name(k, 3)) for k in keys)
    assert not any(naming.parse_control_name(ls_config.accept_name(k, 3)) for k in keys)


def test_evidence_rows_are_one_click_boxes_around_the_row():
    root = ET.fromstring(ls_config.config_path("relation", "family").read_text())
    evidence = next(el for el in root.iter("Choices") if el.get("name").startswith("relation_cycle_evidence_rows"))
    assert evidence.get("layout") != "select" and evidence.get("showInline") == "true"
    assert evidence.get("choice") == "multiple"


def test_defaults_prefill_the_speaker_where_the_round_says_so():
    rnd = load_round("emotion")
    sample = make_sample("synthetic/defaults_001", "couple", 6)
    defaults = ls_config.default_values(rnd, sample)
    clients = [r for r in sample["rows"] if r["primary_speaker"] != "Therapist"]
    assert set(defaults) == {r["row_index"] for r in clients}  # the round's rows only
    for r in clients:
        assert defaults[r["row_index"]] == {"internal_emotion": [{"person": r["primary_speaker"]}]}
    # pushed as a prediction: the first entry's "who feels it" is the speaker, nothing else
    data = ls_config.build_task_data(rnd, sample)
    results = ls_config.values_to_results(rnd, data, defaults)
    assert {r["from_name"] for r in results} == {f"internal_emotion__1__person_{i}" for i in range(len(data["units"]))}
    assert ls_config.default_values(load_round("relation"), sample) == {}


def test_an_unknown_default_names_the_round_and_field(tmp_path):
    rnd = load_round("emotion")
    bad = tmp_path / "emotion.yaml"
    bad.write_text(rnd.source.read_text().replace("default: speaker", "default: the_moon"))
    rnd = dataclasses.replace(rnd, source=bad)
    with pytest.raises(ValueError, match=r"emotion\.yaml: internal_emotion\.person: default 'the_moon'"):
        ls_config.render_config(rnd, "couple")


# the samples each round trip is checked on: generated ones always, the release's head where
# ../shared is present (else that case is skipped, saying why)
SAMPLES = {"generated": lambda: [make_sample("synthetic/family_001", "family", 10)],
           "release head": benchmark_head_records}


@pytest.mark.parametrize("source", SAMPLES)
@pytest.mark.parametrize("name", ["transcript", "emotion", "viewpoints", "relation", "strategy"])
def test_values_survive_the_label_studio_round_trip(name, source):
    """values -> Label Studio results -> validated values: identical, no problems."""
    rnd = load_round(name)
    checked = 0
    for sample in SAMPLES[source]():
        data = ls_config.build_task_data(rnd, sample)
        values = push.input_values(rnd, sample)
        # The release keeps the relation reason on the row before; give therapist rows their own.
        for u in data["units"]:
            values[u["row_index"]].setdefault("relation_cycle_reason", f"reason {u['row_index']}")
        result = ls_config.values_to_results(rnd, data, values)
        labels, problems = parse_annotation(rnd, data, {"id": 1, "result": result}, "a@x.test")
        assert problems == []
        got = {(lab["row_index"], lab["field"]): json.loads(lab["value"]) for lab in labels}
        for u in data["units"]:
            for f in rnd.fields:
                want = values[u["row_index"]].get(f.name)
                if want is None:
                    continue
                if f.type == "records":  # compare as the row schema holds them
                    want = [{k: r[k] for k in r} for r in want[: f.max_items]]
                    have = got[(u["row_index"], f.name)]
                    assert [dict(sorted(r.items())) for r in have] == [dict(sorted(r.items())) for r in want]
                else:
                    assert got[(u["row_index"], f.name)] == want, (sample["sample_id"], u, f.name)
                checked += 1
    assert checked > 0


def _emotion_task():
    sample = make_sample("synthetic/couple_900", "couple", 6)
    rnd = load_round("emotion")
    return rnd, ls_config.build_task_data(rnd, sample)


def _r(name, kind, value):
    key = {"choices": "choices", "textarea": "text", "number": "number"}[kind]
    return {"from_name": name, "to_name": "turn_0", "type": kind, "value": {key: value}}


def test_validation_reports_each_problem_and_drops_only_that_field():
    rnd, data = _emotion_task()
    n_units = len(data["units"])
    result = [
        _r("utterance_type_0", "choices", ["sarcasm"]),                       # unknown label
        _r("tone_of_voice_0", "textarea", ["flat"]),
        _r("internal_emotion__1__person_0", "choices", ["Ann"]),
        _r("internal_emotion__1__emotion_description_0", "textarea", ["feels tired"]),
        _r("internal_emotion__1__intensity_0", "number", 11),                  # out of range
        _r("utterance_type_1", "choices", ["request"]),                        # tone missing (required)
        _r(f"utterance_type_{n_units + 3}", "choices", ["request"]),           # a turn that does not exist
        _r("mood_2", "choices", ["calm"]),                                     # unknown field
        _r("internal_emotion__1__person_2", "choices", ["Zed"]),               # not in the clip
    ]
    labels, problems = parse_annotation(rnd, data, {"id": 7, "result": result}, "a@x.test")
    row0, row1, row2 = (u["row_index"] for u in data["units"][:3])
    found = {(p["row_index"], p["field"], p["problem"].split(":")[0]) for p in problems}
    assert (row0, "utterance_type", "unknown label") in found
    assert (row0, "internal_emotion.intensity", "out of range [0, 10]") in found
    assert (row1, "tone_of_voice", "missing required field") in found
    assert (None, f"utterance_type_{n_units + 3}", "row does not exist (unit %d of %d)" % (n_units + 3, n_units)) in found
    assert (None, "mood_2", "unknown field") in found
    assert (row2, "internal_emotion.person", "unknown label") in found
    got = {(lab["row_index"], lab["field"]): json.loads(lab["value"]) for lab in labels}
    assert got[(row0, "tone_of_voice")] == "flat"          # the valid field of the same row stays
    assert (row0, "utterance_type") not in got and (row0, "internal_emotion") not in got
    assert got[(row1, "utterance_type")] == "request"
    assert got[(row1, "internal_emotion")] == []           # optional and empty: an explicit empty value


def test_self_targets_and_the_couple_rule():
    sample = make_sample("synthetic/couple_901", "couple", 6)
    tr = load_round("transcript")
    data = ls_config.build_task_data(tr, sample)
    result = [_r("dialogue_cleaned_0", "textarea", ["hi"]), _r("primary_speaker_0", "choices", ["Ann"]),
              _r("target_0", "choices", ["Ann", "Therapist"])]
    _, problems = parse_annotation(tr, data, {"result": result}, "a")
    first = data["units"][0]["row_index"]
    assert [p["problem"] for p in problems if p["field"] == "target" and p["row_index"] == first] == [
        "self-target: Ann is also the primary_speaker"]

    vp = load_round("viewpoints")
    data = ls_config.build_task_data(vp, sample)
    result = [_r("viewpoints_attitudes__1__source_0", "choices", ["Ben"]),
              _r("viewpoints_attitudes__1__target_0", "choices", ["Ben"]),
              _r("viewpoints_attitudes__1__viewpoint_0", "textarea", ["x"]),
              _r("viewpoints_attitudes__1__attitude_0", "textarea", ["y"]),
              _r("viewpoints_attitudes__2__source_0", "choices", ["Ben"])]   # incomplete record
    _, problems = parse_annotation(vp, data, {"result": result}, "a")
    problems = [p for p in problems if p["row_index"] == data["units"][0]["row_index"]]
    kinds = sorted(p["problem"].split(":")[0] for p in problems)
    assert kinds == ["incomplete record in slot 2", "incomplete record in slot 2", "incomplete record in slot 2",
                     "self-target"]

    st = load_round("strategy")
    data = ls_config.build_task_data(st, sample)
    pre = "support_strategy__1__"
    result = [_r(pre + "strategy_type_0", "choices", ["track"]), _r(pre + "target_0", "choices", ["Couple", "Ann"]),
              _r(pre + "strategy_content_0", "textarea", ["names the cycle"]),
              _r(pre + "strategy_type_1", "choices", ["no strategy"]), _r(pre + "strategy_content_1", "textarea", ["x"])]
    labels, problems = parse_annotation(st, data, {"result": result}, "a")
    units01 = {u["row_index"] for u in data["units"][:2]}
    problems = [p for p in problems if p["row_index"] in units01]
    assert {p["problem"] for p in problems} == {"Couple must be the only target when used",
                                                "strategy_content filled although no record was chosen"}
    missing = {p["row_index"] for p in parse_annotation(st, data, {"result": []}, "a")[1]}
    assert missing == {u["row_index"] for u in data["units"]}  # a decision is required on every row


def test_defaults_fill_only_what_the_pre_annotation_does_not_give():
    """A pre-annotation's explicit "no entry" (e.g. a model's no emotion) stays; rows it does not
    cover get the round's default."""
    rnd = load_round("emotion")
    sample = make_sample("synthetic/defaults_002", "couple", 6)
    clients = [r["row_index"] for r in sample["rows"] if r["primary_speaker"] != "Therapist"]
    [prepared] = push._prepare(rnd, sample, lambda r, s: {clients[0]: {"internal_emotion": []}}, None)
    units = [u["row_index"] for u in prepared.data["units"]]
    named = {r["from_name"] for r in prepared.prediction}
    for i, ri in enumerate(units):
        assert (f"internal_emotion__1__person_{i}" in named) == (ri != clients[0]), ri


def test_only_rounds_with_defaults_have_them():
    assert [n for n in round_names() if ls_config.has_defaults(load_round(n))] == ["emotion"]


def test_an_untouched_default_alone_is_no_entry_but_a_real_answer_stays():
    """Emotion's "who feels it" is pre-filled with the speaker: left alone on a row where no feeling
    can be read (nothing else in the entry), it is no entry and no problem; anything the
    annotator did to it is an answer, checked as before."""
    rnd, data = _emotion_task()
    units = data["units"][:4]
    rows = [u["row_index"] for u in units]
    other = next(p for p in data["participants"] if p != units[1]["speaker"])
    result = []
    for i, u in enumerate(units):
        result += [_r(f"utterance_type_{i}", "choices", ["request"]), _r(f"tone_of_voice_{i}", "textarea", ["flat"])]
    result += [
        _r("internal_emotion__1__person_0", "choices", [units[0]["speaker"]]),   # the default, untouched
        _r("internal_emotion__1__person_1", "choices", [other]),                 # changed: an answer, incomplete
        _r("internal_emotion__1__person_2", "choices", [units[2]["speaker"]]),   # the default, completed
        _r("internal_emotion__1__emotion_description_2", "textarea", ["feels tired"]),
        _r("internal_emotion__1__intensity_2", "number", 4),
        _r("internal_emotion__2__person_3", "choices", [units[3]["speaker"]]),   # slot 2 has no default
    ]
    labels, problems = parse_annotation(rnd, data, {"id": 9, "result": result}, "a@x.test")
    got = {(lab["row_index"], lab["field"]): json.loads(lab["value"]) for lab in labels}
    assert got[(rows[0], "internal_emotion")] == []
    assert not [p for p in problems if p["row_index"] == rows[0]]
    assert {(p["field"], p["problem"]) for p in problems if p["row_index"] == rows[1]} == {
        ("internal_emotion.emotion_description", "incomplete record in slot 1: missing emotion_description"),
        ("internal_emotion.intensity", "incomplete record in slot 1: missing intensity")}
    assert got[(rows[2], "internal_emotion")] == [{"person": units[2]["speaker"], "emotion_description": "feels tired",
                                                   "intensity": 4}]
    assert {p["field"] for p in problems if p["row_index"] == rows[3]} == {
        "internal_emotion.emotion_description", "internal_emotion.intensity"}
    assert ls_config.record_defaults(rnd) == {"internal_emotion": {"person": "speaker"}}


def _installed_auto_keys() -> str | None:
    """The key list Label Studio's editor hands out to controls without a hotkey (``makeComb``
    in the installed bundle), or None when the bundle is not here."""
    import re

    from pipeline.labelstudio.server import DEFAULT_VENV

    for js in sorted(DEFAULT_VENV.glob("lib/python3*/site-packages/web/dist/apps/labelstudio/*.js")):
        text = js.read_text(encoding="utf-8", errors="replace")
        m = re.search(r'makeComb\(\)\{const \w+="([0-9a-z]+)"', text)
        if m:
            return m[1]
    return None


@pytest.mark.parametrize("name", ["transcript", "emotion", "viewpoints", "relation", "strategy"])
@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_every_config_holds_label_studios_automatic_keys_in_a_hidden_read_only_list(name, scenario):
    """Label Studio gives each choice without a hotkey the next free key of its list (so keys act
    on form 0); hidden Filters in every config hold them all, so no form gets one."""
    root = ET.fromstring(ls_config.config_path(name, scenario).read_text())
    [sink] = [el for el in root.iter("Choices") if el.get("name") == ls_config.HOTKEY_SINK]
    holder = next(v for v in root.iter("View") if sink in list(v))
    filters = holder.findall("Filter")
    assert holder.get("style") == "display: none" and holder in list(root)  # outside the Repeater
    assert "".join(f.get("hotkey") for f in filters) == ls_config.AUTO_HOTKEYS
    assert {f.get("toName") for f in filters} == {ls_config.HOTKEY_SINK}
    # no other element names a key of its own (in the Repeater it would act on every form)
    assert [el for el in root.iter() if el.get("hotkey") and el not in filters] == []
    installed = _installed_auto_keys()
    if installed is None:
        pytest.skip("Label Studio's editor bundle is not installed here (.label-studio/)")
    assert set(installed) <= set(ls_config.AUTO_HOTKEYS), "Label Studio's automatic key list changed"
