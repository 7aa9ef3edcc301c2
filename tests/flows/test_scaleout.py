"""One batch spread over two workers of one pool, on a Prefect server backed by PostgreSQL.

A stack of its own (``ops.stack.up``: server on a fresh PostgreSQL database, worker A, the
sweeper), six generated interviews (subtitles, real espeak-ng speech, real ffmpeg, the offline
pyannote pipeline) and a broken video (quarantined with its reason, by its own child run and
inside a chunk):

1. reference: the ``ingest-batch`` deployment with ``fan_out=False`` (the whole batch in one
   flow-run process on worker A, as before the fan-out; nothing pushed);
2. fan-out into another data root: ``ingest-batch`` submits one ``ingest-interview`` run per
   interview; worker B (limit 1) joins once the batch run is running on A; when B has finished
   an interview and runs another, B and its flow-run process are SIGKILLed. The sweeper marks
   that run Crashed, the batch reports it quarantined and pushes the rest;
3. B is started again and the batch is run again: only the killed interview is computed again.

Asserted from the child runs' own records (the worker name, the worker's pid as the flow-run
process's parent) that both workers executed interviews; the drafts are byte-identical to the
reference; each annotator's desk (one Label Studio per annotator, for the fanned-out data root)
holds each interview once after its two pushes.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.slow

ANNOTATORS = ["scale-a@example.org", "scale-b@example.org"]
N = 6
BROKEN = "scaleout/broken"
PG = dict(host=os.environ.get("RESCUE_TEST_PG_HOST", "127.0.0.1"),
          port=int(os.environ.get("RESCUE_TEST_PG_PORT", "5432")),
          user=os.environ.get("RESCUE_TEST_PG_USER", "root"))


def _pg(sql: list[str], database: str = "postgres") -> None:
    import asyncio

    import asyncpg

    async def go():
        conn = await asyncpg.connect(database=database, timeout=5, **PG)
        try:
            for stmt in sql:
                await conn.execute(stmt)
        finally:
            await conn.close()

    asyncio.run(go())


@pytest.fixture(scope="module")
def pg_database():
    """A fresh database for the Prefect server (with pg_trgm, which Prefect needs); dropped after."""
    name = f"rescue_prefect_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        _pg([f'CREATE DATABASE "{name}"'])
    except (OSError, ImportError) as exc:
        pytest.skip(f"PostgreSQL at {PG['host']}:{PG['port']} is unreachable ({type(exc).__name__}: {exc}); "
                    "the scale-out tests run the Prefect server on PostgreSQL")
    except Exception as exc:  # noqa: BLE001 - e.g. no right to create a database: say so
        pytest.skip(f"cannot create a PostgreSQL database at {PG['host']}:{PG['port']}: {type(exc).__name__}: {exc}")
    try:
        _pg(["CREATE EXTENSION IF NOT EXISTS pg_trgm"], database=name)
        yield f"postgresql+asyncpg://{PG['user']}@{PG['host']}:{PG['port']}/{name}"
    finally:
        _pg([f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'])


class Scale:
    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env

    def settings(self):
        from prefect.settings import PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

        return temporary_settings({PREFECT_API_URL: self.env["PREFECT_API_URL"],
                                   PREFECT_RESULTS_LOCAL_STORAGE_PATH: self.env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"]})

    def client(self):
        from prefect.client.orchestration import get_client

        return get_client(sync_client=True)


def make_batch(path: Path) -> list[str]:
    from pipeline.synthetic import interviews as synth

    synth.make_batch(path, [{"name": f"s{i}", "scenario": "couple" if i % 2 == 0 else "family", "seed": 20 + i,
                             "n_rows": 6, "group": "scaleout"} for i in range(N)])
    (path / "broken.mp4").write_bytes(b"this is not a video")  # last: quarantined, alone and in a chunk
    with open(path / "manifest.csv", "a") as fh:
        fh.write(f"{BROKEN},couple,broken.mp4,Ann;Bob,\n")
    return [f"scaleout/s{i}" for i in range(N)]


@pytest.fixture(scope="module")
def scale(pg_database, tmp_path_factory):  # PostgreSQL first: no stack started just to skip
    """Server on PostgreSQL + worker A (limit 2: the batch run and one interview) + sweeper,
    and the generated batch (made while the server starts)."""
    from concurrent.futures import ThreadPoolExecutor

    from ops import stack as st

    root = tmp_path_factory.mktemp("scaleout-data")
    env = {"RESCUE_DATA_ROOT": str(root), "RESCUE_PREFECT_PORT": str(free_port()),
           "RESCUE_DESK_BASE_PORT": str(free_port()), "PREFECT_API_DATABASE_CONNECTION_URL": pg_database,
           "RESCUE_SWEEP_EVERY_S": "1", "OMP_NUM_THREADS": "1"}  # one torch thread per flow run: 2 cores
    path = tmp_path_factory.mktemp("scale-batch")
    with mock.patch.dict(os.environ, env), ThreadPoolExecutor(1) as pool:
        for k in ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_RESULTS_LOCAL_STORAGE_PATH"):
            os.environ.pop(k, None)  # this stack's own, not the caller's
        made = pool.submit(make_batch, path)
        try:
            env.update(st.up(root, label_studio=False, worker_limit=2, log=lambda *_: None))
            yield Scale(root, env), (path, made.result())
        finally:
            st.down(root, label_studio=False, log=lambda *_: None)


@pytest.fixture(scope="module")
def desks(scale, open_desks):
    """The annotators' desks of the fanned-out data root ("two"; the reference pushes nothing)."""
    scale, _ = scale
    with open_desks(scale.root / "two", [(a, "annotator") for a in ANNOTATORS]) as desks:
        yield desks


@pytest.fixture(scope="module")
def ready(scale, desks):
    return scale


def _start(scale: Scale, batch: Path, root: Path, **params):
    from ops.demo import start_deployment

    with scale.settings(), mock.patch.dict(os.environ, scale.env):
        return start_deployment("ingest-batch/default", {"batch_dir": str(batch), "data_root": str(root),
                                                         "annotators": ANNOTATORS, "backend": "subtitles",
                                                         **params})


def _finish(scale: Scale, run_id, timeout_s: float = 400) -> dict:
    from ops.demo import wait_flow_run

    with scale.settings():
        return wait_flow_run(run_id, timeout_s=timeout_s).state.result()


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(pid: int) -> list[int]:
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (pp := _ppid(int(d.name))) is not None:
            kids.setdefault(pp, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out += kids.get(p, [])
        todo += kids.get(p, [])
    return out


def _children(scale: Scale, parent_name: str):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with scale.settings(), scale.client() as client:
        return [r for r in client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(
            like_=f"{parent_name}:"))) if r.name.startswith(f"{parent_name}:")]


def _digest(root: Path, ids: list[str]) -> dict[str, str]:
    return {i: hashlib.sha256((root / "drafts" / f"{i}.parquet").read_bytes()).hexdigest() for i in ids}


@pytest.fixture(scope="module")
def runs(ready):
    from ops import stack as st

    scale, (batch, ids) = ready
    one, two = scale.root / "one", scale.root / "two"
    t0 = time.monotonic()
    reference = _finish(scale, _start(scale, batch, one, fan_out=False, push=False))
    t_ref = time.monotonic() - t0

    # fan-out: worker B (limit 1) joins once the batch run itself holds a slot of worker A
    t0 = time.monotonic()
    parent_id = _start(scale, batch, two)
    with scale.settings(), scale.client() as client:
        deadline = time.monotonic() + 120
        while (parent := client.read_flow_run(parent_id)).state.name != "Running":
            assert time.monotonic() < deadline and not parent.state.is_final(), parent.state
            time.sleep(0.3)
    a_pid = json.loads((scale.root / "stack" / "pids" / "prefect-worker.json").read_text())["pid"]
    with mock.patch.dict(os.environ, scale.env):
        b_pid = st.add_worker(scale.root, "prefect-worker-2", 1, log=lambda *_: None)

    where, killed, deadline = {}, None, time.monotonic() + 300
    while killed is None:
        assert time.monotonic() < deadline, "worker B never finished one interview while running another"
        children = _children(scale, parent.name)
        for run in children:
            pid = int(str(run.infrastructure_pid or "0").rpartition(":")[2] or 0)
            if pid and run.name not in where and _ppid(pid):
                where[run.name] = _ppid(pid)  # the worker that started the flow-run process
        on_b = [r for r in children if where.get(r.name) == b_pid]
        finished_on_b = [r for r in on_b if r.state.is_completed()]
        running_on_b = [r for r in on_b if r.state.name == "Running" and not r.name.endswith(BROKEN)]
        if finished_on_b and running_on_b:
            victims = [b_pid, *_descendants(b_pid)]
            for pid in victims:  # the worker and its flow-run process(es), at once
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed = running_on_b[0].name.rpartition(":")[2]
        time.sleep(0.2)
    with mock.patch.dict(os.environ, scale.env):  # the operator starts the worker again; the batch goes on
        b2_pid = st.add_worker(scale.root, "prefect-worker-2", 1, log=lambda *_: None)
    assert b2_pid and b2_pid != b_pid
    fanned = _finish(scale, parent_id)
    t_fan = time.monotonic() - t0

    t0 = time.monotonic()  # run the batch again, three interviews per child run (one process, one model load)
    rerun = _finish(scale, _start(scale, batch, two, chunk_size=3))
    t_rerun = time.monotonic() - t0
    print(f"\nscale-out: reference (1 process) {t_ref:.0f} s, fan-out with a kill {t_fan:.0f} s, "
          f"rerun {t_rerun:.0f} s, load {os.getloadavg()[0]:.1f}")
    return {"ids": ids, "one": one, "two": two, "reference": reference, "fanned": fanned, "rerun": rerun,
            "killed": killed, "a_pid": a_pid, "b_pid": b_pid, "b2_pid": b2_pid}


def test_both_workers_executed_interviews_and_the_killed_one_is_quarantined(runs):
    fanned, killed = runs["fanned"], runs["killed"]
    assert runs["reference"]["fan_out"] is None and runs["fanned"]["fan_out"] == "ingest-interview/default"
    items = fanned["items"]
    assert items[killed]["status"] == "quarantined", items[killed]
    assert "Crashed" in fanned["quarantined"][killed] and "is gone" in fanned["quarantined"][killed]
    assert items[BROKEN]["status"] == "quarantined" and "broken.mp4" in fanned["quarantined"][BROKEN], items[BROKEN]
    done = {i: it for i, it in items.items() if i not in (killed, BROKEN)}
    assert all(it["status"] == "done" and "/runs/flow-run/" in it["flow_run"] for it in done.values()), done
    # the child runs' own record: the worker's name and the pid of the worker that started them
    names = Counter(it["worker"].split("@")[0] for it in done.values())
    pids = {int(it["worker"].rpartition(" pid ")[2]) for it in done.values()}
    assert {runs["a_pid"], runs["b_pid"]} <= pids <= {runs["a_pid"], runs["b_pid"], runs["b2_pid"]}, (pids, runs)
    assert len(names) == 2 and all(n.startswith("rescue-local-") for n in names), names  # B2 has B's name
    assert fanned["pushed"]["round"] == "transcript"


def test_rerun_redoes_only_the_killed_interview_and_drafts_match_one_worker(runs, desks):
    from pipeline.annotation.push import parse_project_key

    items, killed, ids = runs["rerun"]["items"], runs["killed"], runs["ids"]
    assert items[killed]["status"] == "done" and "segment" in items[killed]["executed"], items[killed]
    for i in ids:
        if i != killed:
            assert items[i]["status"] == "cached" and items[i]["executed"] == [], items[i]
    # a chunk lists its bad interview with the reason and finishes the others
    assert items[BROKEN]["status"] == "quarantined" and "broken.mp4" in runs["rerun"]["quarantined"][BROKEN]
    assert {int(it["worker"].rpartition(" pid ")[2]) for it in items.values()} <= {runs["a_pid"], runs["b2_pid"]}
    assert len({it["flow_run"] for it in items.values()}) == 3, "chunk_size=3: three child runs for seven entries"

    # the same bytes as the batch in one process on one worker
    assert _digest(runs["two"], ids) == _digest(runs["one"], ids)

    # each annotator's desk: every interview once, after two pushes (the fan-out, the rerun)
    per = Counter()
    for who in ANNOTATORS:
        client = desks.client(who)
        for project in client.projects():
            parsed = parse_project_key(project.key or "")
            if parsed and parsed[0] == "transcript" and parsed[2] == who:
                per.update((parsed[2], t["data"]["sample_id"]) for t in client.tasks(project.id)
                           if t["data"]["sample_id"].startswith("scaleout/"))
    assert per == Counter({(a, i): 1 for a in ANNOTATORS for i in ids}), per
    assert runs["reference"]["pushed"] is None and runs["fanned"]["pushed"] and runs["rerun"]["pushed"]
