"""A rebuild a maintainer can trust: after a change of code or of a model file, `rescue status
--stale` names what is stale and why, and the next run makes exactly that again - through the
flows (``ingest-batch`` on Prefect's real engine and result storage) and on the CLI path.

One short synthetic interview (subtitles + the offline diarization pipeline). The changes are
made the way a maintainer makes them: one line of the segmenter (``pipeline/media/turns.py``)
in a scratch copy of the package put first on PYTHONPATH, and one byte of a copy of the models
folder that RESCUE_MODELS_DIR points at. Every run is a process of its own (the installed
``rescue`` script, or ``python`` calling the flow), so each reads the code it is given from
source, as a worker's flow-run process does. Prefect's test harness is the server; the result
storage is a folder of the test's own.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import Settings
from tests.helpers import package_copy_with

pytestmark = pytest.mark.slow

SID = "stale_couple/s01"
RESCUE = Path(sys.executable).with_name("rescue")
STAGES = ("ingest", "transcribe", "diarize", "segment")
RUN_FLOW = """
import json, sys
from flows.ingest_batch import ingest_batch_flow
result = ingest_batch_flow(batch_dir=sys.argv[1], data_root=sys.argv[2], push=False, fan_out=False)
print("RESULT " + json.dumps({"items": result["items"], "recomputed": result["recomputed"]}))
"""


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    from pipeline.synthetic import interviews as synth

    path = tmp_path_factory.mktemp("stale-batch")
    synth.make_batch(path, [{"name": "s01", "scenario": "couple", "seed": 5, "n_rows": 8, "group": "stale_couple"}])
    return path


@pytest.fixture(scope="module")
def changed(tmp_path_factory) -> dict[str, Path]:
    """A scratch copy of the package with one line of the segmenter changed, and a copy of the
    models folder with one byte of the diarization pipeline's config changed."""
    base = tmp_path_factory.mktemp("stale-changes")
    scratch = package_copy_with(base / "scratch", "pipeline/media/turns.py", "MIN_ACTIVE_S = MIN_PIECE_S",
                                "MIN_ACTIVE_S = MIN_PIECE_S * 1.0")
    models = base / "models"
    shutil.copytree(Settings.from_env().models_dir, models, ignore=shutil.ignore_patterns("downloads"))
    config = models / "diarization-offline/config.yaml"
    text = config.read_text()
    assert "segmentation_batch_size: 16" in text
    config.write_text(text.replace("segmentation_batch_size: 16", "segmentation_batch_size: 15", 1))
    return {"scratch": scratch, "models": models}


@pytest.fixture(scope="module")
def prefect_env(prefect_harness, tmp_path_factory) -> dict:
    """What a flow-run process needs to reach the harness's server and the test's result storage."""
    from prefect.settings import PREFECT_API_URL

    return {"PREFECT_API_URL": PREFECT_API_URL.value(),
            "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path_factory.mktemp("stale-results")),
            "RESCUE_GPU_LIMIT": "", "RESCUE_PUSH_LIMIT": ""}


def _env(code: Path | None = None, models: Path | None = None, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESCUE_", "PYTHONPATH"))}
    env["RESCUE_MODELS_DIR"] = str(models or Settings.from_env().models_dir)
    env["COLUMNS"] = "200"  # tables on one line each
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return {**env, **(extra or {})}


def _run(cmd: list[str], env: dict, cwd: Path) -> str:
    run = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (cmd, run.stdout[-3000:], run.stderr[-3000:])
    assert "Traceback" not in run.stderr, (cmd, run.stderr[-3000:])
    return run.stdout


def _status(root: Path, env: dict) -> dict[str, tuple[str, list[str]]]:
    rows = json.loads(_run([str(RESCUE), "status", "--stale", "--json", "--data-root", str(root)], env, root.parent))
    assert {r["sample_id"] for r in rows} == {SID}, rows
    return {r["stage"]: (r["state"], r["why"]) for r in rows}


def _all_fresh(states: dict) -> None:
    assert states == {stage: ("fresh", []) for stage in STAGES}, states


def _segment_stale_for_turns(states: dict) -> None:
    assert {stage: states[stage][0] for stage in STAGES} == {
        "ingest": "fresh", "transcribe": "fresh", "diarize": "fresh", "segment": "stale"}, states
    assert states["segment"][1] == ["pipeline/media/turns.py changed"], states


def _diarize_stale_for_model(states: dict) -> None:
    assert {stage: states[stage][0] for stage in STAGES} == {
        "ingest": "fresh", "transcribe": "fresh", "diarize": "stale", "segment": "stale"}, states
    assert states["diarize"][1] == ["model diarization-offline changed"], states
    assert states["segment"][1] == ["diarize is stale"], states


def _rttm_digest(root: Path) -> str:
    from pipeline.paths import DataRoot
    from pipeline.store import sha256_file

    return sha256_file(DataRoot(root).rttm(SID))


# --- through the flows -----------------------------------------------------------------------

def _flow(batch: Path, root: Path, env: dict) -> dict:
    out = _run([sys.executable, "-c", RUN_FLOW, str(batch), str(root)], env, root.parent)
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    return {"item": result["items"][SID], "recomputed": result["recomputed"]}


def test_a_change_of_code_or_model_remakes_exactly_what_it_touched_through_the_flows(batch, changed, prefect_env,
                                                                                     tmp_path):
    root = tmp_path / "data"
    plain = _env(extra=prefect_env)
    first = _flow(batch, root, plain)
    assert first["item"]["executed"] == ["ingest", "transcript", "diarize", "segment"], first
    assert {r["stage"]: r["why"] for r in first["recomputed"]} == {s: "not made yet" for s in STAGES}
    _all_fresh(_status(root, plain))

    # nothing changed: everything fresh, and the next run takes everything from the cache
    again = _flow(batch, root, plain)
    assert again["item"]["executed"] == [] and again["item"]["status"] == "cached", again
    assert again["recomputed"] == []

    # one line of the segmenter: segment alone is stale, named by its file, and alone made again
    code = _env(changed["scratch"], extra=prefect_env)
    _segment_stale_for_turns(_status(root, code))
    after_code = _flow(batch, root, code)
    assert after_code["item"]["executed"] == ["segment"], after_code
    assert after_code["item"]["cached"] == ["ingest", "transcript", "diarize"], after_code
    assert after_code["recomputed"] == [{"item": SID, "stage": "segment", "why": "pipeline/media/turns.py changed"}]
    _all_fresh(_status(root, code))

    # one byte of the diarization pipeline: diarize is stale and made again, what it feeds follows
    rttm = _rttm_digest(root)
    model = _env(changed["scratch"], changed["models"], extra=prefect_env)
    _diarize_stale_for_model(_status(root, model))
    after_model = _flow(batch, root, model)
    remade = {r["stage"]: r["why"] for r in after_model["recomputed"]}
    assert remade["diarize"] == "model diarization-offline changed", after_model
    assert after_model["item"]["cached"][:2] == ["ingest", "transcript"], after_model
    # segment is made again exactly when the new RTTM differs (its input); else it is taken from the cache
    if _rttm_digest(root) == rttm:
        assert after_model["item"]["executed"] == ["diarize"], after_model
    else:
        assert after_model["item"]["executed"] == ["diarize", "segment"], after_model
        assert remade["segment"] == "input changed (rttm)", after_model
    _all_fresh(_status(root, model))


# --- on the CLI path ---------------------------------------------------------------------------

def _rescue(root: Path, env: dict, *args: str) -> str:
    return " ".join(_run([str(RESCUE), *args, "--data-root", str(root)], env, root.parent).split())


def _stages(batch: Path, root: Path, env: dict) -> dict[str, str]:
    return {"ingest": _rescue(root, env, "ingest", str(batch)), "transcribe": _rescue(root, env, "transcribe", "--all"),
            "diarize": _rescue(root, env, "diarize", "--all"), "segment": _rescue(root, env, "segment", "--all")}


def _skipped(out: str, stage: str) -> bool:
    return f"{SID}: {stage} up to date, skipped" in out


def test_a_change_of_code_or_model_remakes_exactly_what_it_touched_on_the_cli_path(batch, changed, tmp_path):
    root = tmp_path / "data"
    plain = _env()
    first = _stages(batch, root, plain)
    assert "(made: not made yet)" in first["segment"] and "(made: not made yet)" in first["diarize"], first
    _all_fresh(_status(root, plain))
    table = _rescue(root, plain, "status")
    assert table.count(f"{SID} ") == 4 and "4 made" in table, table

    # nothing changed: every command says its result is up to date and makes nothing
    again = _stages(batch, root, plain)
    assert "up to date" in again["ingest"] and "done 0, cached 1" in again["ingest"], again["ingest"]
    for stage in ("transcribe", "diarize", "segment"):
        assert _skipped(again[stage], stage) and "made:" not in again[stage], again[stage]
    # --redo makes it again, and says so
    assert "(made: redo asked for)" in _rescue(root, plain, "segment", "--all", "--redo")

    code = _env(changed["scratch"])
    _segment_stale_for_turns(_status(root, code))
    table = _rescue(root, code, "status", "--stale")
    assert "pipeline/media/turns.py changed" in table and "3 fresh, 1 stale" in table, table
    after_code = _stages(batch, root, code)
    assert "done 0, cached 1" in after_code["ingest"], after_code["ingest"]
    assert _skipped(after_code["transcribe"], "transcribe") and _skipped(after_code["diarize"], "diarize"), after_code
    assert "(made: pipeline/media/turns.py changed)" in after_code["segment"], after_code["segment"]
    _all_fresh(_status(root, code))

    rttm = _rttm_digest(root)
    model = _env(changed["scratch"], changed["models"])
    _diarize_stale_for_model(_status(root, model))
    after_model = _stages(batch, root, model)
    assert "done 0, cached 1" in after_model["ingest"] and _skipped(after_model["transcribe"], "transcribe")
    assert "(made: model diarization-offline changed)" in after_model["diarize"], after_model["diarize"]
    if _rttm_digest(root) == rttm:
        assert _skipped(after_model["segment"], "segment"), after_model["segment"]
    else:
        assert "(made: input changed (rttm))" in after_model["segment"], after_model["segment"]
    _all_fresh(_status(root, model))
