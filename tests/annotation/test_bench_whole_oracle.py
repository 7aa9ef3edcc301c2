"""The whole-interview bench's own judges (benchmarks/bench_annotator_ui.py --keyboard --whole):
its oracle read-back counts every stored value that differs from the answer meant, and its page
observer counts a choice changed while its row is off screen, and only then."""
from __future__ import annotations

import copy
import json

from benchmarks.annotator_ui import driver, oracle
from pipeline.annotation import ls_config, push, voice_naming
from pipeline.annotation.rounds import load_round
from tests.annotation.ls_samples import make_sample


def _exported(rnd, sample, truth, results=None, cancelled=False):
    """One task as the desk's export gives it, its annotation holding ``results`` (default: the
    oracle's own answers)."""
    data = ls_config.build_task_data(rnd, sample)
    result = ls_config.values_to_results(rnd, data, truth) if results is None else results
    return [{"id": 7, "data": data, "annotations": [{"id": 1, "result": result, "was_cancelled": cancelled}]}]


def test_the_oracle_counts_each_stored_value_that_differs():
    rnd = load_round("emotion")
    sample = make_sample("synthetic/bench_whole_001", "family", 6)
    truth = push.input_values(rnd, sample)
    right = ls_config.values_to_results(rnd, ls_config.build_task_data(rnd, sample), truth)
    assert oracle.wrong_answers(rnd, _exported(rnd, sample, truth), truth)[:2] == (0, 1)

    changed = copy.deepcopy(right)
    choice = next(r for r in changed if "choices" in r["value"] and r["from_name"].startswith("utterance_type"))
    choice["value"]["choices"] = ["other" if choice["value"]["choices"] != ["other"] else "request"]
    wrong, done, examples = oracle.wrong_answers(rnd, _exported(rnd, sample, truth, changed), truth)
    assert (wrong, done) == (1, 1) and choice["from_name"] in examples[0], examples

    dropped = [r for r in right if r["from_name"] != choice["from_name"]]  # a meant answer not stored
    assert oracle.wrong_answers(rnd, _exported(rnd, sample, truth, dropped), truth)[0] == 1
    # a cancelled (skipped) window is no stored answer
    assert oracle.wrong_answers(rnd, _exported(rnd, sample, truth, changed, cancelled=True), truth)[:2] == (0, 0)


def test_the_oracle_reads_a_row_left_on_its_voice_as_the_name_the_block_gave(tmp_path):
    """The bench's transcript round opens with "Who is each voice?" (every voice pre-filled by the
    speaking-order hint): a row left on its voice holds the name its voice got in the block (part 1
    of the sample), and a voice named otherwise than the oracle's name is a wrong answer."""
    rnd = load_round("transcript")
    sample = oracle.family_sample(20)
    truth = oracle.answers(rnd, sample)
    voices = oracle.voice_names(sample, truth)
    with_table = {**sample, "voices": oracle.voice_table(sample)}
    parts = ls_config.build_tasks_data(rnd, with_table, "", window=8)
    assert len(parts) > 1 and parts[0]["voices"] and not parts[1]["voices"]
    values = push.input_values(rnd, sample)

    def task(k, part, names):
        pred = voice_naming.prefill(rnd, part, values, ls_config.values_to_results(rnd, part, values))
        result = [r for r in pred if not r["from_name"].startswith("voice_")] + [
            {"from_name": f"voice_{i}_is", "to_name": f"voice_{i}_label", "type": "choices",
             "value": {"choices": [names.get(v["voice"], v["voice"])]}} for i, v in enumerate(part["voices"])]
        result = [r for r in result if not r["from_name"].startswith("dialogue_cleaned")] + [
            r for r in ls_config.values_to_results(rnd, part, truth) if r["from_name"].startswith("dialogue_cleaned")]
        return {"id": k, "data": part, "annotations": [{"id": 1, "result": result, "was_cancelled": False}]}

    kept = [task(k, p, {}) for k, p in enumerate(parts)]
    assert any(voice_naming.TOKEN in json.dumps(t["annotations"][0]["result"]) for t in kept[1:])  # rows on a voice
    assert oracle.wrong_answers(rnd, kept, truth, voices)[:2] == (0, len(parts))
    # Cara's voice named as Dan: the voice, and every row (and addressee) on it in every part, wrong
    wrong, _, examples = oracle.wrong_answers(rnd, [task(k, p, {"Cara Miller": "Dan Miller"})
                                                   for k, p in enumerate(parts)], truth, voices)
    on_cara = sum(r["primary_speaker"] == "Cara Miller" for r in sample["rows"]) \
        + sum("Cara Miller" in r["target"] for r in sample["rows"])
    assert wrong == 1 + on_cara and "voice 'Cara Miller'" in examples[0], examples


_PAGE = """<html><body style="margin:0">
<div id="unit_0" style="height:300px"><label class="ant-checkbox-wrapper" id="seen">a</label></div>
<div style="height:3000px"></div>
<div id="unit_1" style="height:300px"><label class="ant-checkbox-wrapper" id="unseen">b</label></div>
</body></html>"""
_TOGGLE = "id => document.getElementById(id).classList.toggle('ant-checkbox-wrapper-checked')"


def test_the_page_observer_counts_only_changes_off_screen_while_watching(browser):
    page = browser.new_page(viewport={"width": 800, "height": 600})
    page.set_content(_PAGE)
    page.evaluate(driver.UNSEEN_WATCH)  # (the bench adds it to every page of its tab before Label Studio's)
    page.evaluate(_TOGGLE, "unseen")  # not watching yet (a window being drawn)
    page.evaluate("() => { window.__rescueWatch = true; }")
    page.evaluate(_TOGGLE, "seen")  # on screen
    page.evaluate(_TOGGLE, "unseen")  # off screen: counted (an untick: it was ticked unwatched)
    page.evaluate("() => document.getElementById('unseen').setAttribute('title', 'x')")  # no class change
    page.wait_for_timeout(100)  # the observer's records come in a microtask
    unseen = page.evaluate("() => window.__rescueUnseen")
    assert [(u["form"], u["now"]) for u in unseen] == [("unit_1", False)], unseen
    page.evaluate("() => window.scrollTo(0, 3000)")  # now unit_1 is on screen and unit_0 is not
    page.evaluate(_TOGGLE, "unseen")
    page.evaluate(_TOGGLE, "seen")
    page.wait_for_timeout(100)
    unseen = page.evaluate("() => window.__rescueUnseen")
    assert [(u["form"], u["now"]) for u in unseen] == [("unit_1", False), ("unit_0", False)], unseen
