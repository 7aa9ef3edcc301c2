"""How a pull reads the desks through their API (a desk it may not read from its
database, ``tests/helpers.ThroughTheApi``), on two real desks (one Label Studio each): on each
desk the projects are exported largest first, one export at a time (``EXPORTS_PER_DESK``), each
after its own look (none when the pull has nothing to compare with); what the pull archives and writes is the same bytes however the reads are
spread; a desk that is down is a clear error naming it, raised once the other desk's exports are
archived."""
from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, pull, pull_look, push, pushed
from pipeline.labelstudio.client import LabelStudioUnavailable
from pipeline.labelstudio.desks import Desks
from pipeline.annotation.rounds import load_round
from pipeline.paths import DataRoot
from tests.helpers import ThroughTheApi, annotator_desks, desk_hooks, sample_media

pytestmark = pytest.mark.slow

ROUND = "transcript"
A, B = "read-a@rescue.test", "read-b@rescue.test"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two annotators with a desk each, the transcript round pushed to both (per desk a family
    project of 6 tasks and a couple one of 2) and every task annotated as pushed."""
    root = tmp_path_factory.mktemp("pull-read") / "data"
    with annotator_desks(root, (A, B)) as desks:
        # the family project the larger: first by size, though second by its key
        samples = [make_sample(f"synthetic/couple_{i:03d}", "couple", 5) for i in range(2)] + [
            make_sample(f"synthetic/family_{i:03d}", "family", 6 + i % 3) for i in range(6)]
        rnd = load_round(ROUND)
        report = push.push_round(desks, ROUND, samples, [A, B], root=DataRoot(root), media_url=sample_media(root, samples))
        by_id = {s["sample_id"]: s for s in samples}
        for key, pid in report.projects.items():
            who = push.parse_project_key(key)[2]
            client = desks.client(who)
            for task in client.tasks(pid):
                values = push.input_values(rnd, by_id[task["data"]["sample_id"]])
                client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                         completed_by=desks.owner_id(who), lead_time=5.0)
        yield SimpleNamespace(root=root, desks=desks, projects=report.projects)


def _fresh(world, path: Path) -> Path:
    """A data root holding only the push record: a first pull into it reads everything."""
    shutil.copytree(DataRoot(world.root).pushed(ROUND).parent, DataRoot(path).pushed(ROUND).parent)
    return path


@contextlib.contextmanager
def _spans(desks: Desks):
    """``[(port, path, project, sent, answered)]`` of every request the desks' clients send."""
    spans, open_ = [], {}

    def sent(request):
        open_[id(request)] = [request.url.port, request.url.path, request.url.params.get("project"),
                              time.perf_counter(), None]
        spans.append(open_[id(request)])

    def answered(response):
        span = open_.pop(id(response.request), None)
        if span is not None:
            span[4] = time.perf_counter()

    with desk_hooks(desks, (A, B), request=sent, response=answered):
        yield spans


def _bytes(root: Path) -> dict[str, bytes]:
    """Every file a pull writes, the time a predictions record was taken and the pull state
    (its looks are times) left out."""
    out = {}
    for path in sorted((root / "annotation").rglob("*")):
        if path.is_file() and "sync" not in path.parts and "locks" not in path.parts:
            data = path.read_bytes()
            if path.name.endswith(".predictions.json"):
                data = re.sub(rb'"pulled_at": "[^"]*"', b"", data)
            out[str(path.relative_to(root))] = data
    return out


def _exports_largest_first(desks: Desks, world, spans, looked: bool) -> None:
    """On each desk: the larger project exported first, one export at a time, each with its
    prediction listing; ``looked``: each after its own look was answered, else with no look."""
    for who in (A, B):
        port = int(desks.url(who).rsplit(":", 1)[1])
        larger, smaller = (world.projects[push.project_key(ROUND, s, who)] for s in ("family", "couple"))
        exports = [s for s in spans if s[0] == port and s[1].endswith("/export")]
        assert [s[1] for s in exports] == [f"/api/projects/{larger}/export", f"/api/projects/{smaller}/export"]
        assert exports[1][3] >= exports[0][4], "two exports at once on one desk"
        for pid, export in zip((larger, smaller), exports):
            looks = [s for s in spans if s[0] == port and s[1] == "/api/tasks/" and s[2] == str(pid)]
            if looked:
                assert looks and looks[0][4] <= export[3], f"project {pid} exported before its look was answered"
            else:
                assert not looks, f"project {pid} looked at with nothing to compare"
            assert any(s[1] == "/api/predictions/" and s[2] == str(pid) for s in spans if s[0] == port)


def test_each_desk_exports_its_largest_project_first_one_at_a_time_each_after_its_look(world, tmp_path):
    desks = ThroughTheApi(Desks(DataRoot(world.root)))
    root = _fresh(world, tmp_path)
    with _spans(desks) as spans:  # a first pull: nothing to compare with, no look (read off each export)
        result = pull.pull_round(desks, ROUND, DataRoot(root))
    assert result.new_snapshots == 4, result.summary()
    _exports_largest_first(desks, world, spans, looked=False)
    # a pull whose last looks all differ from what the desks show: each project looked at, then exported
    state = pushed.sync_path(DataRoot(root), ROUND, "pull")
    saved = json.loads(state.read_bytes())
    assert len(saved["projects"]) == 4
    for look in saved["projects"].values():
        look["drafts"] = "not as the desk shows"
    state.write_text(json.dumps(saved))
    with _spans(desks) as spans:
        pull.pull_round(desks, ROUND, DataRoot(root))
    _exports_largest_first(desks, world, spans, looked=True)
    desks.close()


def test_what_a_pull_writes_does_not_depend_on_how_its_reads_are_spread(world, tmp_path, monkeypatch):
    desks = ThroughTheApi(Desks(DataRoot(world.root)))
    first = pull.pull_round(desks, ROUND, DataRoot(_fresh(world, tmp_path / "spread")))
    monkeypatch.setattr(pull_look, "EXPORTS_PER_DESK", 2)  # both projects of a desk at once
    monkeypatch.setattr(pull_look, "LOOKS_PER_DESK", 1)    # looks and predictions one by one
    other = pull.pull_round(desks, ROUND, DataRoot(_fresh(world, tmp_path / "other")))
    desks.close()
    assert first.labels.num_rows > 0 and first.labels.equals(other.labels)
    spread, again = _bytes(tmp_path / "spread"), _bytes(tmp_path / "other")
    assert len([p for p in spread if p.endswith(".predictions.json")]) == 4
    assert spread.keys() == again.keys() and all(spread[p] == again[p] for p in spread), \
        [p for p in spread if spread[p] != again.get(p)]


def test_a_desk_that_is_down_is_named_and_the_other_desks_exports_are_archived(world, tmp_path):
    desks = Desks(DataRoot(world.root))
    url = desks.url(B)
    desks.down([B])
    try:
        root = _fresh(world, tmp_path)
        with pytest.raises(LabelStudioUnavailable, match=re.escape(url)):
            pull.pull_round(desks, ROUND, DataRoot(root))
        archived = {p.parent.name for p in DataRoot(root).root.rglob("*.predictions.json")}
        assert archived == {"read-a_rescue.test"}, archived
        assert len(list(DataRoot(root).root.rglob("*.predictions.json"))) == 2
        assert not DataRoot(root).labels(ROUND).exists()  # the pull failed: no table is written
    finally:
        desks.up([B], log=lambda *_: None)
        desks.close()
