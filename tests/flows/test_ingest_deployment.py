"""`ingest-batch` as an operator runs it: `prefect deployment run ... --watch` against the real
stack (server + process worker), on synthetic interviews (real espeak-ng speech, real ffmpeg,
the real offline pyannote pipeline), then checks the drafts on the annotators' desks (each data
root has its own: one Label Studio per annotator).

One synthetic batch (three interviews and a broken video) is ingested twice:
- into data root "crashed": the flow-run process is killed with SIGKILL mid-batch, then the
  run is repeated; only the interviews that had not finished (their segment task not Completed:
  a draft on disk whose result Prefect had not yet recorded may be redone) are computed again (per-interview
  executed/cached lists from the runs' summary artifacts; the finished drafts' files are not
  rewritten), a third run is all cache, and no task exists twice on a desk;
- into data root "clean", uninterrupted: its drafts are on its desks (the same tasks as on the
  crashed root's desks), the broken video is quarantined with its reason, and every byte
  (drafts, transcripts, RTTMs, audio, corpus and a release built from it) equals the
  crashed-and-resumed root's.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ANNOTATORS = ["ann1@example.org", "ann2@example.org"]
STAGES = ("ingest", "transcript", "diarize", "segment")


def make_batch(path: Path, group: str, n: int) -> list[str]:
    from pipeline.synthetic import interviews as synth

    specs = [{"name": f"s{i}", "scenario": "couple" if i % 2 == 0 else "family", "seed": i, "n_rows": 6,
              "group": group} for i in range(n)]
    synth.make_batch(path, specs)
    return [f"{group}/s{i}" for i in range(n)]


PEOPLE = [(a, "annotator") for a in ANNOTATORS]


@pytest.fixture(scope="module")
def crashed_desks(stack, open_desks):
    """The desks of data root "crashed" (the "clean" root's start in its own test, once these
    are stopped: at most two desks run at once)."""
    with open_desks(stack.root / "crashed", PEOPLE) as desks:
        yield desks


def run_ingest(stack, batch: Path, root: Path, *extra: str, watch: bool = True):
    # fan_out=false: the whole batch in ONE flow-run process, the one the crash test kills
    # (the fan-out over workers and its crash test: tests/test_bench_rehearsal.py)
    args = ["deployment", "run", "ingest-batch/default", "--param", f"batch_dir={batch}",
            "--param", f"data_root={root}", "--param", f"annotators={json.dumps(ANNOTATORS)}",
            "--param", "fan_out=false", *extra]
    return stack.prefect(*args, *(["--watch"] if watch else []))


def flow_run_id(output: str) -> str:
    for line in output.splitlines():
        if "UUID:" in line:
            return line.split("UUID:")[1].strip()
    raise AssertionError(f"no flow run id in:\n{output}")


def api(stack):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    class _Api:
        def __enter__(self):
            self._ts = temporary_settings({PREFECT_API_URL: stack.env["PREFECT_API_URL"],
                                           PREFECT_API_AUTH_STRING: stack.env["PREFECT_API_AUTH_STRING"]})
            self._ts.__enter__()
            self._c = get_client(sync_client=True)
            return self._c.__enter__()

        def __exit__(self, *exc):
            self._c.__exit__(*exc)
            self._ts.__exit__(*exc)

    return _Api()


def items_artifact(stack, run_id: str) -> dict[str, dict]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterId

    with api(stack) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["ingest-batch-items"])),
                                     flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    assert arts, f"no summary artifact for flow run {run_id}"
    data = arts[0].data if isinstance(arts[0].data, list) else json.loads(arts[0].data)
    return {row["item"]: row for row in data}


def transcript_tasks(desks, prefix: str) -> dict[tuple[str, str], list[dict]]:
    """Tasks of the transcript round per (annotator, scenario) project, each read from the
    annotator's own desk, only this test's samples."""
    from pipeline.annotation.push import parse_project_key

    out = {}
    for who in ANNOTATORS:
        client = desks.client(who)
        for project in client.projects():
            parsed = parse_project_key(project.key or "")
            if parsed and parsed[0] == "transcript" and parsed[2] == who:
                out[(parsed[2], parsed[1])] = [t for t in client.tasks(project.id)
                                               if t["data"]["sample_id"].startswith(prefix)]
    return out


def task_data(tasks: dict[tuple[str, str], list[dict]]) -> dict[tuple[str, str], list[dict]]:
    """What a task shows its annotator (no Label Studio ids or times): comparable across desks."""
    return {k: sorted((t["data"] for t in ts), key=lambda d: d["sample_id"]) for k, ts in tasks.items()}


def tree_digest(root: Path, *subdirs: str) -> dict[str, str]:
    out = {}
    for sub in subdirs:
        for p in sorted((root / sub).rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _flow_run_pid(run_id: str) -> int | None:
    """The process running this flow run: the worker puts its id in the child's environment."""
    needle = f"PREFECT__FLOW_RUN_ID={run_id}".encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    return int(d.name)
            except OSError:
                continue
    return None


def _drafted(root: Path, ids: list[str]) -> set[str]:
    return {i for i in ids if (root / "drafts" / f"{i}.parquet").exists()}


def _segmented(stack, run_id: str) -> set[str]:
    """The interviews whose segment task Prefect recorded Completed in this flow run. Only these
    are finished: the draft file is written a moment before the task's result is persisted and
    its state recorded, and a kill in between leaves a draft whose task a rerun does again."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with api(stack) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    return {r.name[len("segment["):-1] for r in runs
            if r.name.startswith("segment[") and r.state is not None and r.state.is_completed()}


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("batch")
    ids = make_batch(path, "flowtest", 3)
    (path / "broken.mp4").write_bytes(b"this is not a video")
    with open(path / "manifest.csv", "a") as fh:
        fh.write("flowtest/broken,couple,broken.mp4,Ann;Bob,\n")
    return path, ids


@pytest.fixture(scope="module")
def crashed(stack, crashed_desks, batch) -> dict:
    """Start a run, SIGKILL its process once some (not all) interviews are drafted, rerun."""
    path, ids = batch
    root = stack.root / "crashed"
    proc = run_ingest(stack, path, root, "--param", "max_workers=1", watch=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = flow_run_id(proc.stdout)
    deadline, pid = time.monotonic() + 900, None
    while time.monotonic() < deadline:
        pid = pid or _flow_run_pid(run_id)
        if pid and 1 <= len(_drafted(root, ids)) < len(ids) and _segmented(stack, run_id):
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"flow run {run_id} never reached the middle of the batch")
    finished, drafted = _segmented(stack, run_id), _drafted(root, ids)  # the process is dead: final
    assert finished <= drafted and 1 <= len(finished) and len(drafted) < len(ids), (finished, drafted)
    mtimes = {i: (root / "drafts" / f"{i}.parquet").stat().st_mtime_ns for i in finished}
    pushed_early = transcript_tasks(crashed_desks, "flowtest/")

    rerun = run_ingest(stack, path, root, "--param", "max_workers=1")
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    return {"root": root, "ids": ids, "finished": finished, "drafted": drafted, "mtimes": mtimes,
            "pushed_early": pushed_early,
            "rerun": items_artifact(stack, flow_run_id(rerun.stdout))}


def test_rerun_after_sigkill_recomputes_only_unfinished_interviews(crashed):
    root, items = crashed["root"], crashed["rerun"]
    assert not any(crashed["pushed_early"].values()), "nothing is pushed before the whole batch is drafted"
    for i in crashed["ids"]:
        if i in crashed["finished"]:
            assert items[i]["status"] == "cached" and items[i]["executed"] == "", items[i]
            assert (root / "drafts" / f"{i}.parquet").stat().st_mtime_ns == crashed["mtimes"][i], f"{i} recomputed"
        elif i in crashed["drafted"]:  # killed between its draft and its record: only segment again
            assert items[i]["status"] == "done" and items[i]["executed"] == "segment", items[i]
        else:
            assert items[i]["status"] == "done" and "segment" in items[i]["executed"].split(","), items[i]
    assert items["flowtest/broken"]["status"] == "quarantined"


def test_third_run_is_all_cache_and_the_desks_have_no_duplicates(stack, batch, crashed, crashed_desks):
    path, ids = batch
    third = run_ingest(stack, path, crashed["root"])
    assert third.returncode == 0, third.stdout[-4000:]
    items = items_artifact(stack, flow_run_id(third.stdout))
    assert {i: items[i]["status"] for i in ids} == {i: "cached" for i in ids}
    tasks = transcript_tasks(crashed_desks, "flowtest/")
    for who in ANNOTATORS:
        sids = [t["data"]["sample_id"] for (a, _), ts in tasks.items() if a == who for t in ts]
        assert sorted(sids) == sorted(ids), f"{who}: duplicate or missing tasks: {Counter(sids)}"


def test_uninterrupted_deployment_run_drafts_on_the_desks_and_same_bytes(stack, batch, crashed, crashed_desks,
                                                                         open_desks):
    from pipeline.labelstudio.desks import media_path

    path, ids = batch
    before = task_data(transcript_tasks(crashed_desks, "flowtest/"))
    crashed_desks.down()  # read; the clean root's desks take their place (two desks at a time)
    clean = stack.root / "clean"
    with open_desks(clean, PEOPLE) as clean_desks:
        proc = run_ingest(stack, path, clean)               # the operator's command, --watch
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        tasks = transcript_tasks(clean_desks, "flowtest/")
        for (who, _), ts in tasks.items():  # each desk's file root holds the media of its own tasks
            files = clean_desks.root.desk_files(clean_desks.get(who).slug)
            assert ts and all((files / media_path(t["data"]["media_url"])).is_file() for t in ts), who

    items = items_artifact(stack, flow_run_id(proc.stdout))
    assert {i: items[i]["status"] for i in ids} == {i: "done" for i in ids}
    assert items["flowtest/broken"]["status"] == "quarantined"
    assert "broken.mp4" in items["flowtest/broken"]["reason"]

    # the draft turns are on the clean root's desks: every good interview once per annotator,
    # the very tasks the crashed-and-resumed root pushed to its own
    assert task_data(tasks) == before
    per_annotator = Counter()
    for (annotator, scenario), ts in tasks.items():
        for t in ts:
            per_annotator[annotator] += 1
            assert t["data"]["scenario"] == scenario
            assert t["data"]["turns"] and all(turn["text"] for turn in t["data"]["turns"])
            assert t["data"]["media_url"].startswith("/data/local-files/?d=media/")
            assert (clean / "drafts" / f"{t['data']['sample_id']}.parquet").is_file()
    assert per_annotator == Counter({a: len(ids) for a in ANNOTATORS})

    # crashed-and-resumed == uninterrupted, byte for byte, up to a release (built from the
    # interviews in annotation: the corpus takes only finished gold, none here yet)
    root = crashed["root"]
    parts = ("drafts", "transcripts", "diarization", "media", "work")
    assert tree_digest(root, *parts) == tree_digest(clean, *parts)
    assert not (root / "corpus").exists() and not (clean / "corpus").exists(), "drafts never enter the corpus"
    for r in (root, clean):
        rel = stack.prefect("deployment", "run", "build-release/default", "--param", "version=0.1.0",
                            "--param", f"data_root={r}", "--param", f"source={r / 'work'}", "--watch")
        assert rel.returncode == 0, rel.stdout[-4000:]
    assert tree_digest(root, "releases") and tree_digest(root, "releases") == tree_digest(clean, "releases")
