"""The whole-interview bench's own judges (benchmarks/bench_annotator_ui.py --keyboard --whole):
its oracle read-back counts every stored value that differs from the answer meant, and its page
observer counts a choice changed while its row is off screen, and only then."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

from pipeline.annotation import ls_config, push
from pipeline.annotation.rounds import load_round
from tests.annotation.ls_samples import make_sample

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_annotator_ui as bench  # noqa: E402


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
    assert bench.wrong_answers(rnd, _exported(rnd, sample, truth), truth)[:2] == (0, 1)

    changed = copy.deepcopy(right)
    choice = next(r for r in changed if "choices" in r["value"] and r["from_name"].startswith("utterance_type"))
    choice["value"]["choices"] = ["other" if choice["value"]["choices"] != ["other"] else "request"]
    wrong, done, examples = bench.wrong_answers(rnd, _exported(rnd, sample, truth, changed), truth)
    assert (wrong, done) == (1, 1) and choice["from_name"] in examples[0], examples

    dropped = [r for r in right if r["from_name"] != choice["from_name"]]  # a meant answer not stored
    assert bench.wrong_answers(rnd, _exported(rnd, sample, truth, dropped), truth)[0] == 1
    # a cancelled (skipped) window is no stored answer
    assert bench.wrong_answers(rnd, _exported(rnd, sample, truth, changed, cancelled=True), truth)[:2] == (0, 0)


_PAGE = """<html><body style="margin:0">
<div id="unit_0" style="height:300px"><label class="ant-checkbox-wrapper" id="seen">a</label></div>
<div style="height:3000px"></div>
<div id="unit_1" style="height:300px"><label class="ant-checkbox-wrapper" id="unseen">b</label></div>
</body></html>"""
_TOGGLE = "id => document.getElementById(id).classList.toggle('ant-checkbox-wrapper-checked')"


def test_the_page_observer_counts_only_changes_off_screen_while_watching(browser):
    page = browser.new_page(viewport={"width": 800, "height": 600})
    page.set_content(_PAGE)
    page.evaluate(bench._UNSEEN_WATCH)  # (the bench adds it to every page of its tab before Label Studio's)
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
