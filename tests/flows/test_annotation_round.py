"""`annotation-round` through the real stack (server + process worker + each person's desk): simulated
annotators answer the transcript round of one synthetic interview, the round's run pauses while
disagreements wait for adjudication, and once resumed it builds gold and opens the next round.
A second run of the same round reuses the agreement figures (same labels) and opens nothing twice.
"""
from __future__ import annotations

import json

import pytest
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow

# This module's data root and its people, each with a desk of their own (three Label Studios,
# stopped when the module is done).
ANNOTATORS = ["round-a@example.org", "round-b@example.org"]
ADJUDICATOR = "round-adjudicator@example.org"
SAMPLE = "roundtest/r0"


@pytest.fixture(scope="module")
def desks(stack, open_desks):
    people = [*((a, "annotator") for a in ANNOTATORS), (ADJUDICATOR, "adjudicator")]
    with open_desks(stack.root / "rounds", people) as desks:
        yield desks


@pytest.fixture(scope="module")
def drafted(stack, desks, tmp_path_factory):
    """One family interview ingested by the `ingest-batch` deployment: its transcript round is on
    the desks of ANNOTATORS."""
    from pipeline.synthetic import interviews as synth

    batch = tmp_path_factory.mktemp("round-batch")
    synth.make_batch(batch, [{"name": "r0", "scenario": "family", "seed": 5, "n_rows": 6, "group": "roundtest"}])
    root = stack.root / "rounds"
    proc = stack.prefect("deployment", "run", "ingest-batch/default", "--param", f"batch_dir={batch}",
                         "--param", f"data_root={root}", "--param", f"annotators={json.dumps(ANNOTATORS)}", "--watch")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return root


def round_tasks(desks, round_name: str) -> dict[str, list[str]]:
    """Each annotator's tasks of the round, read from their own desk."""
    from pipeline.annotation.push import parse_project_key

    out = {}
    for who in ANNOTATORS:
        client = desks.client(who)
        for project in client.projects():
            parsed = parse_project_key(project.key or "")
            if parsed and parsed[0] == round_name and parsed[2] == who:
                out.setdefault(who, []).extend(t["data"]["sample_id"] for t in client.tasks(project.id))
    return out


def task_states(run_id) -> dict[str, list[str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    out: dict[str, list[str]] = {}
    for t in sorted(runs, key=lambda t: t.expected_start_time):
        out.setdefault(t.name.rsplit("-", 1)[0], []).append(t.state.name)
    return out


def run_table(stack, run_id, key: str) -> list[dict]:
    """A table artifact of one flow run, read back through the Prefect client."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterId

    with stack.prefect_settings(), get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                                     flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    assert len(arts) == 1, f"{len(arts)} artifacts {key!r} for flow run {run_id}"
    return arts[0].data if isinstance(arts[0].data, list) else json.loads(arts[0].data)


def test_round_run_pauses_for_adjudication_then_builds_gold_and_opens_the_next_round(stack, desks, drafted):
    from prefect.flow_runs import resume_flow_run

    from pipeline import corpus
    from ops import demo

    truth = demo.demo_truth(corpus.load_work(DataRoot(drafted)), seed=0)
    assert demo.annotate_round(desks, "transcript", truth, seed=0, annotators=ANNOTATORS) == len(ANNOTATORS)
    params = {"round_name": "transcript", "data_root": str(drafted), "annotators": ANNOTATORS}
    # Without waiting: nothing moves on, and the terminal says so - a Completed state named for
    # it (exit 0), and the next step as the log's word
    proc = stack.prefect("deployment", "run", "annotation-round/default", "--param", "round_name=transcript",
                         "--param", f"data_root={drafted}", "--param", f"annotators={json.dumps(ANNOTATORS)}", "--watch")
    out = " ".join((proc.stdout + proc.stderr).split())  # the terminal wraps long lines
    assert proc.returncode == 0, out[-4000:]
    assert "finished successfully in 'Awaiting adjudication'" in out, out[-3000:]
    assert "round transcript: awaiting adjudication (" in out and "disagreeing rows open on the adjudicator" in out, \
        out[-6000:]
    assert "Traceback" not in out
    assert round_tasks(desks, "emotion") == {}, "nothing moves on while rows wait for adjudication"
    with stack.prefect_settings():
        run_id = demo.start_deployment("annotation-round/default", {**params, "wait_for_adjudication_s": 300})
        paused = demo.wait_flow_run(run_id, until_paused=True, timeout_s=600)
        assert paused.state.is_paused(), paused.state
        assert round_tasks(desks, "emotion") == {}, "the next round opens only after adjudication"
        assert demo.adjudicate_round(desks, "transcript", truth, ADJUDICATOR) >= 1
        resume_flow_run(run_id)
        out = demo.wait_flow_run(run_id, timeout_s=600).state.result()
        assert out["status"] == "done" and out["disagreements"] >= 1, out
        assert out["gold"]["rows"] >= 1
        assert out["next"]["round"] == "emotion" and out["next"]["created"] == len(ANNOTATORS), out["next"]
        assert round_tasks(desks, "emotion") == {a: [SAMPLE] for a in ANNOTATORS}
        states = task_states(run_id)
        assert states["pull-adjudication"] == ["Completed", "Completed"], states  # pulled again after resuming
        assert states["gold"] == ["Completed", "Completed"], states

    # The run publishes the progress table of `rescue annotate status` (the same rows) for this
    # round (every row done) and the one it opened (nothing done yet) ...
    from pipeline.annotation import acceptance, push
    from pipeline.annotation.rounds import load_round
    from pipeline.annotation.status import round_status, status_rows

    published = run_table(stack, run_id, "round-transcript-status")
    assert published == status_rows(round_status(desks, ["transcript", "emotion"], ANNOTATORS))
    assert sorted((r["round"], r["annotator"]) for r in published) == sorted(
        (rnd, a) for rnd in ("transcript", "emotion") for a in ANNOTATORS)
    for r in published:
        done, total = map(int, r["rows done"].split(" / "))
        assert total > 0 and done == (total if r["round"] == "transcript" else 0), r
    # ... and what the annotators did with the segmenter's drafts (the pull's acceptance table).
    accepted = run_table(stack, run_id, "round-transcript-acceptance")
    assert accepted and accepted == acceptance.summarize(acceptance.read(DataRoot(drafted), "transcript"), by_annotator=True)
    assert {r["source"] for r in accepted} == {push.model_version(load_round("transcript"), "input")}
    assert {r["annotator"] for r in accepted} == set(ANNOTATORS)
    with stack.prefect_settings():
        # The same round again (e.g. an operator's rerun): agreement is served from the cache
        # (the labels did not change), gold is complete at once, nothing is pushed twice.
        again_id = demo.start_deployment("annotation-round/default", params)
        again = demo.wait_flow_run(again_id, timeout_s=600).state.result()
    assert again["status"] == "done" and again["next"]["created"] == 0, again
    with stack.prefect_settings():
        states = task_states(again_id)
    assert states["agreement"] == ["Cached"], states
    assert round_tasks(desks, "emotion") == {a: [SAMPLE] for a in ANNOTATORS}
