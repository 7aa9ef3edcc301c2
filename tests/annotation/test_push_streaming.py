"""A project the push makes takes its tasks while the rest are still being built; a build that
fails stops the push with its own error and no desk left waiting (real Label Studio server)."""
from __future__ import annotations

import threading

import pytest
from ls_samples import make_sample

from pipeline.annotation import push, push_tasks, pushed
from pipeline.labelstudio.client import LabelStudioClient
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow


def test_a_new_project_imports_before_the_last_sample_is_built(ls_desks, new_annotators, monkeypatch, tmp_path):
    """The last sample's build waits (up to 60 s) until a chunk of earlier samples is in Label
    Studio: with the import only after the whole build, it would wait out the 60 s and the test
    fail. Every task arrives once and the push state equals a push's without waiting."""
    monkeypatch.setattr(push, "IMPORT_CHUNK", 10)
    samples = [make_sample(f"synthetic/stream_{i:03d}", "couple", 3) for i in range(30)]
    last = max(s["sample_id"] for s in samples)
    (annotator,) = new_annotators(1)
    client = ls_desks.client(annotator)
    imported, waited = threading.Event(), {}
    real_import, real_build = LabelStudioClient.import_tasks, push_tasks.build_tasks

    def import_tasks(self, project_id, tasks):
        ids = real_import(self, project_id, tasks)
        imported.set()
        return ids

    def build_tasks(rnd, sample, values, url, window):
        if sample["sample_id"] == last:
            waited["imported first"] = imported.wait(60)
        return real_build(rnd, sample, values, url, window)

    monkeypatch.setattr(LabelStudioClient, "import_tasks", import_tasks)  # the desks' clients, whichever object
    monkeypatch.setattr(push_tasks, "build_tasks", build_tasks)
    report = push.push_round(ls_desks, "emotion", samples, [annotator], k=1, root=DataRoot(tmp_path))
    assert waited == {"imported first": True}
    assert report.created == 30 and not report.duplicates
    pid = report.projects[push.project_key("emotion", "couple", annotator)]
    assert sorted(t["data"]["sample_id"] for t in client.tasks(pid)) == sorted(s["sample_id"] for s in samples)
    state = pushed.read_sync(DataRoot(tmp_path), "emotion", "push")
    assert set(state["samples"]) == {s["sample_id"] for s in samples}  # every sample's hashes kept
    again = push.push_round(ls_desks, "emotion", samples, [annotator], k=1, root=DataRoot(tmp_path))
    assert again.created == 0 and again.unchanged == 30


def test_a_build_that_fails_stops_the_push_with_its_own_error(ls_desks, new_annotators, monkeypatch, tmp_path):
    """The 20th sample cannot be built: the push raises that error (the desks stop waiting for
    it), keeps no push state, and the same push once the build works imports only what is missing."""
    monkeypatch.setattr(push, "IMPORT_CHUNK", 5)
    samples = [make_sample(f"synthetic/broken_{i:03d}", "couple", 3) for i in range(30)]
    broken = sorted(s["sample_id"] for s in samples)[19]
    annotators = new_annotators(2)
    real_build = push_tasks.build_tasks

    def build_tasks(rnd, sample, values, url, window):
        if sample["sample_id"] == broken:
            raise ValueError(f"sample {broken}: cannot be built")
        return real_build(rnd, sample, values, url, window)

    monkeypatch.setattr(push_tasks, "build_tasks", build_tasks)
    with pytest.raises(ValueError, match="cannot be built"):
        push.push_round(ls_desks, "emotion", samples, annotators, root=DataRoot(tmp_path))
    assert pushed.read_sync(DataRoot(tmp_path), "emotion", "push") in (None, {})  # nothing recorded of a stopped push
    monkeypatch.setattr(push_tasks, "build_tasks", real_build)
    report = push.push_round(ls_desks, "emotion", samples, annotators, root=DataRoot(tmp_path))
    assert report.created + report.unchanged == 60 and not report.duplicates
    for key, pid in report.projects.items():
        tasks = ls_desks.client(push.parse_project_key(key)[2]).tasks(pid)
        assert sorted(t["data"]["sample_id"] for t in tasks) == sorted(s["sample_id"] for s in samples)
