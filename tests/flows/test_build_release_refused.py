"""`build-release` refused by the agreement gates on the real Prefect engine (in-process harness):
the run ends Failed in a state named ``Refused`` whose message names each refusing round with its
exact override command, each reason is one ERROR log line, and no log line holds a traceback.
A refused release writes nothing; the same data root with the override recorded builds it."""
from __future__ import annotations

import pytest

from pipeline import corpus, store
from pipeline.paths import DataRoot
from pipeline.synthetic.corpus import load_synthetic

pytestmark = pytest.mark.slow


def _gate(root, name: str) -> None:
    gate = {"round": name, "passed": False, "labels_sha256": "ab" * 32,
            "failing": [{"field": "utterance_type", "metric": "nominal", "alpha": 0.41, "threshold": 0.667}],
            "fields": [{"field": "utterance_type", "metric": "nominal", "alpha": 0.41, "threshold": 0.667,
                        "n_units": 40, "n_annotators": 2}]}
    store.atomic_write_text(DataRoot(root).gate(name), store.canonical_json(gate))


def _logs(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # the run's logs reach the server before they are read
    with get_client(sync_client=True) as client:
        return client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))


def test_refused_release_is_named_with_each_gate_and_its_override_command(prefect_harness, tmp_path):
    from flows.build_release import build_release_flow
    from pipeline.quality import gates

    root = tmp_path / "root"
    corpus.save_corpus(DataRoot(root), load_synthetic(scale=0.05, seed=3).samples)
    _gate(root, "emotion")
    _gate(root, "relation")
    state = build_release_flow(version="1.0.0", data_root=str(root), return_state=True)
    assert state.is_failed() and state.name == "Refused", (state.name, state.message)
    for name in ("emotion", "relation"):
        assert f"round {name} is below its agreement threshold: utterance_type alpha=0.410 < 0.667" in state.message
        assert f"`rescue agreement {name} --override REASON --by NAME`" in state.message
    assert not (root / "releases" / "1.0.0").exists()
    logs = _logs(state.state_details.flow_run_id)
    refused = [log.message for log in logs if log.level >= 40 and "refused" in log.message]
    assert len(refused) == 3, refused  # the header line and one line per round
    assert not [log.message for log in logs if "Traceback" in log.message], "a traceback in the run's logs"

    for name in ("emotion", "relation"):
        gates.record_override(DataRoot(root), name, "pilot round; guidelines revised", "maintainer")
    state = build_release_flow(version="1.0.0", data_root=str(root), return_state=True)
    assert state.is_completed(), state.message
    assert (root / "releases" / "1.0.0" / "manifest.json").is_file()


def test_a_missing_input_is_one_line(prefect_harness, tmp_path):
    from flows.build_release import build_release_flow

    state = build_release_flow(version="1.0.0", source=str(tmp_path / "nowhere.jsonl"), data_root=str(tmp_path),
                               return_state=True)
    assert state.is_failed() and state.name == "Refused"
    assert state.message == f"release 1.0.0 refused: input file not found: {tmp_path / 'nowhere.jsonl'}"
