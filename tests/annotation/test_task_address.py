"""A pushed task is serialised once: the content address and the JSON text sent to every desk
come from the same dump. The address must stay what it was (a live round's push state and the
``content_sha`` of every task in Label Studio hold it: another value would rewrite every task and
flag each annotated one as changed after annotation), and the text must be exactly the task."""
from __future__ import annotations

import hashlib
import json

from ls_samples import make_sample

from pipeline.annotation import ls_tasks, push_tasks
from pipeline.annotation.rounds import load_round


def _address_as_written_before(data: dict, prediction) -> str:
    """The definition every pushed task's content_sha was made with until now, verbatim."""
    payload = json.dumps({"data": {k: v for k, v in data.items() if k != "content_sha"},
                          "prediction": prediction or []}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


ODD = {"sample_id": "synthetic/ünï", "text": "Row 1 · Ann → Bob: \"quoted\" \\ back\nslash \t✓ 😀",
       "nested": {"b": [1, 2.5, None, True], "a": {"z": "", "y": []}}, "n": 0}


def test_the_address_is_the_one_written_before_and_the_text_is_the_task():
    for data, prediction in [(dict(ODD), [{"from_name": "x", "value": {"text": ["é"]}}]), (dict(ODD), []),
                             (dict(ODD), None), ({"k": "v", "content_sha": "stale"}, [{"a": 1}]), ({}, [])]:
        before = _address_as_written_before(data, prediction)
        assert ls_tasks.content_sha(data, prediction) == before
        data_json, prediction_json = ls_tasks.address(data, prediction)
        assert data["content_sha"] == before
        assert json.loads(data_json) == data  # the address included, stale one replaced
        assert json.loads(prediction_json) == (prediction or [])


def test_a_prepared_task_sends_its_data_and_prediction_as_built():
    sent = []
    for name, prefilled in [("transcript", True), ("emotion", True), ("emotion", False)]:
        rnd = load_round(name)
        sample = make_sample(f"synthetic/address_{name}", "family", 60)
        values = push_tasks.input_values(rnd, sample) if prefilled else {}
        built = push_tasks.build_tasks(rnd, sample, values, "/data/local-files/?d=media/a.wav", None)
        assert len(built) > 1  # windows
        for p in built:
            assert p.data["content_sha"] == _address_as_written_before(p.data, p.prediction)
            task = json.loads(p.task_json('model "v1"'))
            expected = {"data": p.data}
            if p.prediction:
                expected["predictions"] = [{"model_version": 'model "v1"', "result": p.prediction}]
            assert task == expected
        sent.append(all(p.prediction for p in built) if prefilled else any(p.prediction for p in built))
    assert sent == [True, True, False]  # with a prediction on every task, and without any
