"""`ingest-batch` as an operator runs it: `prefect deployment run ... --watch` against the real
stack (server + process worker + Label Studio), on synthetic interviews (real espeak-ng speech,
real ffmpeg, the real offline pyannote pipeline), then checks the drafts in Label Studio.

Crash test: a run is killed with SIGKILL mid-batch; the rerun recomputes only what had not
finished (per-interview executed/cached lists from the run's summary artifact, and the drafts'
files untouched), creates no duplicate Label Studio task, and ends with the same bytes as an
uninterrupted run (drafts, corpus and a release built from it).
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
    from pipeline import synth

    specs = [{"name": f"s{i}", "scenario": "couple" if i % 2 == 0 else "family", "seed": i, "n_rows": 5,
              "group": group} for i in range(n)]
    synth.make_batch(path, specs)
    return [f"{group}/s{i}" for i in range(n)]


@pytest.fixture(scope="module")
def annotators(stack):
    client = stack.client()
    for email in ANNOTATORS:
        client.create_user(email)
    return ANNOTATORS


def run_ingest(stack, batch: Path, root: Path, *extra: str, watch: bool = True):
    args = ["deployment", "run", "ingest-batch/default", "--param", f"batch_dir={batch}",
            "--param", f"data_root={root}", "--param", f"annotators={json.dumps(ANNOTATORS)}", *extra]
    return stack.prefect(*args, *(["--watch"] if watch else []))


def flow_run_id(output: str) -> str:
    for line in output.splitlines():
        if "UUID:" in line:
            return line.split("UUID:")[1].strip()
    raise AssertionError(f"no flow run id in:\n{output}")


def api(stack):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    class _Api:
        def __enter__(self):
            self._ts = temporary_settings({PREFECT_API_URL: stack.env["PREFECT_API_URL"]})
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


def transcript_tasks(stack, prefix: str) -> dict[tuple[str, str], list[dict]]:
    """Label Studio tasks of the transcript round per (annotator, scenario) project, only
    this test's samples."""
    from pipeline.annotation.push import parse_project_key

    client = stack.client()
    out = {}
    for project in client.projects():
        parsed = parse_project_key(project.key or "")
        if parsed and parsed[0] == "transcript":
            out[(parsed[2], parsed[1])] = [t for t in client.tasks(project.id)
                                           if t["data"]["sample_id"].startswith(prefix)]
    return out


def tree_digest(root: Path, *subdirs: str) -> dict[str, str]:
    out = {}
    for sub in subdirs:
        for p in sorted((root / sub).rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_ingest_batch_deployment_lands_drafts_in_label_studio(stack, annotators, tmp_path):
    batch = tmp_path / "batch"
    ids = make_batch(batch, "deploy_test", 2)
    (batch / "broken.mp4").write_bytes(b"this is not a video")
    with open(batch / "manifest.csv", "a") as fh:
        fh.write("deploy_test/broken,couple,broken.mp4,Ann;Bob,\n")
    root = tmp_path / "data"

    proc = run_ingest(stack, batch, root)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

    items = items_artifact(stack, flow_run_id(proc.stdout))
    assert {i: items[i]["status"] for i in ids} == {i: "done" for i in ids}
    assert items["deploy_test/broken"]["status"] == "quarantined"
    assert "broken.mp4" in items["deploy_test/broken"]["reason"]

    tasks = transcript_tasks(stack, "deploy_test/")
    per_annotator = Counter()
    for (annotator, _scenario), ts in tasks.items():
        for t in ts:
            per_annotator[annotator] += 1
            assert (root / "drafts" / f"{t['data']['sample_id']}.parquet").is_file()
            assert t["data"]["turns"], "a task without draft turns"
            assert all(turn["text"] for turn in t["data"]["turns"])
            assert t["data"]["media_url"].startswith("/data/local-files/?d=media/")
    # every good interview reached both annotators' projects exactly once; the broken one none
    assert per_annotator == Counter({a: len(ids) for a in ANNOTATORS})
    sids = [t["data"]["sample_id"] for ts in tasks.values() for t in ts]
    assert sorted(set(sids)) == sorted(ids)


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


def _segment_done(root: Path, ids: list[str]) -> set[str]:
    return {i for i in ids if (root / "drafts" / f"{i}.parquet").exists()}


def test_crash_mid_batch_then_rerun_redoes_only_unfinished(stack, annotators, tmp_path):
    n = 4
    batch = tmp_path / "batch"
    ids = make_batch(batch, "crash_test", n)

    # 1. start, then SIGKILL the flow-run process once some (not all) interviews are segmented
    root = tmp_path / "crashed"
    proc = run_ingest(stack, batch, root, "--param", "max_workers=1", watch=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = flow_run_id(proc.stdout)
    deadline = time.monotonic() + 600
    pid = None
    while time.monotonic() < deadline:
        pid = pid or _flow_run_pid(run_id)
        if pid and 1 <= len(_segment_done(root, ids)) < n:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"flow run {run_id} never reached the middle of the batch")
    finished_before = _segment_done(root, ids)
    assert 1 <= len(finished_before) < n
    mtimes = {i: (root / "drafts" / f"{i}.parquet").stat().st_mtime_ns for i in finished_before}
    assert not any(transcript_tasks(stack, "crash_test/").values()), \
        "nothing is pushed before the whole batch is drafted"

    # 2. rerun: only the unfinished interviews are computed again
    rerun = run_ingest(stack, batch, root, "--param", "max_workers=1")
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    items = items_artifact(stack, flow_run_id(rerun.stdout))
    for i in ids:
        if i in finished_before:
            assert items[i]["status"] == "cached" and items[i]["executed"] == "", items[i]
            assert (root / "drafts" / f"{i}.parquet").stat().st_mtime_ns == mtimes[i], f"{i} was recomputed"
        else:
            assert "segment" in items[i]["executed"].split(","), items[i]

    # 3. a third run is all cache and still creates no Label Studio task twice
    third = run_ingest(stack, batch, root)
    assert third.returncode == 0
    assert {r["status"] for r in items_artifact(stack, flow_run_id(third.stdout)).values()} == {"cached"}
    tasks = transcript_tasks(stack, "crash_test/")
    for who in ANNOTATORS:
        sids = [t["data"]["sample_id"] for (a, _), ts in tasks.items() if a == who for t in ts]
        assert sorted(sids) == sorted(ids), f"{who}: duplicate or missing tasks: {Counter(sids)}"

    # 4. same bytes as an uninterrupted run (other data root: its own cache keys; its push
    #    meets the same tasks and must leave them alone)
    clean = tmp_path / "clean"
    ok = run_ingest(stack, batch, clean)
    assert ok.returncode == 0, ok.stdout[-4000:]
    assert transcript_tasks(stack, "crash_test/") == tasks
    assert tree_digest(root, "drafts", "transcripts", "diarization", "media", "corpus") == \
        tree_digest(clean, "drafts", "transcripts", "diarization", "media", "corpus")
    for r in (root, clean):
        rel = stack.prefect("deployment", "run", "build-release/default", "--param", "version=0.1.0",
                            "--param", f"source={r / 'corpus'}", "--param", f"data_root={r}", "--watch")
        assert rel.returncode == 0, rel.stdout[-4000:]
    assert tree_digest(root, "releases") == tree_digest(clean, "releases")
