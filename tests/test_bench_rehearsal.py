"""benchmarks/bench_rehearsal.py at the suite's scale: a
RESCUE-shaped batch of ten interviews cut to 6 rows (scale 0.05, seed 0: eight good ones, a
family's and seven couples', and two planted bad files) through
the `ingest-batch` deployment on a stack of the bench's own with 2 workers, fanned out (one
ingest-interview child run per interview; Prefect on a fresh PostgreSQL database when the
machine has one, else SQLite, as the bench says), then the five
rounds answered by the generator's three simulated annotators on their own desks (real Label
Studio servers) with an adjudicator on the adjudication desk, through `annotation-round`, and
`build-release`.

Asserted from the bench's last line and its --json figures: nothing lost, every good interview
drafted and released with truth.json's row count, each bad file quarantined naming the file,
gold equal to the truth where the annotators agree, alpha inside its interval, per-stage and
per-step figures, both workers running interviews, and that the bench left no process and no
database behind. The faulted run (a worker SIGKILLed mid-run, a desk killed mid-pull, the
Prefect server restarted, a task submitted twice), starting from the clean run's own batch
(saved beside its release), must give the clean run's release byte for byte, with each
interview once on each desk after the rerun's second push: this is the scale-out crash test
(it replaced tests/flows/test_scaleout.py, whose fan-out vs one-process equivalence
tests/flows/test_cli_path.py now checks)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.ingest_batch import CHUNK_SIZE

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# interviews, good ones, rows each at --scale 0.05 --seed 0 --max-rows 6 (the pair of runs: about 16
# minutes on a 2-core machine, beside the rest of the suite)
SCALE, N, GOOD, ROWS = "0.05", 10, 8, 6
ARGS = ["--scale", SCALE, "--seed", "0", "--max-rows", "6", "--workers", "2"]
LAST = re.compile(r"^rehearsal scale=(\S+) interviews=(\d+) minutes=(\S+) wall_s=(\S+) per_interview_s=(\S+) "
                  r"nothing_lost=(yes|no)$")


def _databases() -> set[str] | None:
    """The bench's databases on the machine's PostgreSQL (None: not reachable)."""
    import asyncio

    try:
        import asyncpg
    except ImportError:
        return None

    async def go():
        conn = await asyncpg.connect(database="postgres", timeout=5, host="127.0.0.1", port=5432, user="root")
        try:
            return {r["datname"] for r in await conn.fetch("SELECT datname FROM pg_database")}
        finally:
            await conn.close()

    try:
        return {d for d in asyncio.run(go()) if d.startswith("rescue_rehearsal_")}
    except Exception:  # noqa: BLE001 - no PostgreSQL here: the bench runs on SQLite
        return None


def _run(out: Path, *extra: str):
    before = _databases()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RESCUE_DATA_ROOT"))}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_rehearsal.py"), *ARGS, "--json", str(out),
                           *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    print(proc.stdout[-8000:], proc.stderr[-3000:])
    after = _databases()
    return proc, json.loads(out.read_text()) if out.is_file() else None, (before, after)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("reference") / "release"


@pytest.fixture(scope="module")
def bench(tmp_path_factory, reference):
    """The run without faults; its release is the faulted run's reference."""
    return _run(tmp_path_factory.mktemp("rehearsal") / "figures.json", "--save-release", str(reference))


@pytest.fixture(scope="module")
def faulted(tmp_path_factory, bench, reference):
    """The same batch with the four faults, each recovered; its release compared with the clean one's."""
    return _run(tmp_path_factory.mktemp("faulted") / "figures.json", "--faults", "--reference", str(reference))


def test_last_line_says_nothing_lost(bench):
    proc, fig, _ = bench
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    m = LAST.match(lines[-1])
    assert m, lines[-3:]
    scale, n, minutes, wall, per, lost = m.groups()
    assert (scale, int(n), lost) == (SCALE, N, "yes")
    assert float(minutes) == pytest.approx(fig["truth_totals"]["minutes"])
    assert float(per) == pytest.approx(float(wall) / N, abs=0.06)
    assert "machine half" in lines[-2] and "human half" in lines[-2]
    assert float(wall) >= fig["batch_wall_s"] and float(wall) == pytest.approx(fig["wall_s"], abs=0.06)


def test_counts_equal_truth(bench):
    _, fig, _ = bench
    counts, truth = fig["checks"]["counts"], fig["truth_totals"]
    assert counts["interviews"] == truth["interviews"] == N
    assert counts["planted"] == sum(truth["faults"].values()) == N - GOOD == counts["quarantined"]
    assert counts["drafted"] == GOOD
    assert counts["rows_drafted"] == counts["rows_truth_of_drafted"] == GOOD * ROWS
    assert counts["turns"] > 0
    for key in ("accounted", "bad_files", "good_not_quarantined", "rows_equal_truth", "release_accounted",
                "release_rows", "gold_truth", "alpha"):
        assert fig["checks"][key]["ok"], fig["checks"][key]
    assert fig["checks"]["release_accounted"]["released"] == GOOD
    assert fig["checks"]["release_rows"]["rows"] == GOOD * ROWS


def test_figures_per_stage_and_process(bench):
    _, fig, _ = bench
    stages = fig["stages"]
    assert list(stages) == ["ingest", "transcribe", "diarize", "segment", "push"]
    assert stages["ingest"]["runs"] == N  # the corrupt video's ingest ran and failed
    assert stages["transcribe"]["runs"] == N - 1 and stages["segment"]["runs"] == GOOD
    # a stage after a quarantine is passed on, not run (flows.ingest_interview): counted apart
    assert stages["transcribe"]["not_run"] == 1 and stages["segment"]["not_run"] == N - GOOD, stages
    assert stages["diarize"]["runs"] >= GOOD
    assert stages["push"]["runs"] == 1  # the transcript round, from the batch run
    assert all(s["wall_sum_s"] > 0 for s in stages.values())
    assert stages["diarize"]["cpu_s"] > 0
    kinds = fig["processes"]
    for kind in ("prefect server", "prefect worker", "flow run: ingest-batch", "flow run: ingest-interview",
                 "flow run: annotation-round", "flow run: build-release"):
        assert kinds[kind]["peak_rss_mb"] > 20, kinds
    desks = [k for k in kinds if k.startswith("desk ")]
    assert len(desks) == 4 and all(kinds[k]["peak_rss_mb"] > 50 for k in desks), kinds  # 3 annotators, 1 adjudicator
    children = -(-N // CHUNK_SIZE)  # the batch's default: CHUNK_SIZE interviews per child run
    assert kinds["prefect worker"]["processes"] == 2 and kinds["flow run: ingest-interview"]["processes"] >= children
    assert fig["child_runs"]["count"] == children
    # the fan-out spreads: both workers ran interviews (the child runs' own records: worker name)
    workers = fig["child_runs"]["workers"]
    assert len(workers) == 2 and sum(workers.values()) == N, workers


def test_nothing_left_behind(bench):
    proc, fig, (before, after) = bench
    root = re.search(r"rehearsal: data root (\S+);", proc.stdout).group(1)
    assert not Path(root).exists()
    running = []  # no process of its stack is left: none has its data root in its environment
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and root.encode() in (d / "environ").read_bytes():
                running.append((d.name, (d / "cmdline").read_bytes()[:200]))
        except OSError:
            pass
    assert not running, running
    if fig["database"] == "postgresql":
        name = re.search(r"database (rescue_rehearsal_\w+)", proc.stdout).group(1)
        assert after is not None and name not in after and name not in (before or ()), (name, after)  # dropped
    else:
        assert "SQLite" in proc.stdout


def test_human_half_every_round_through_the_desks(bench):
    _, fig, _ = bench
    rounds = fig["human"]["rounds"]
    assert list(rounds) == ["transcript", "emotion", "viewpoints", "relation", "strategy"]
    for name, r in rounds.items():
        assert r["tasks"] == 3 * GOOD and r["annotations"] == r["tasks"], (name, r)  # 3 desks x the good interviews
        assert r["label_lines"] > 0 and r["gold_rows"] == GOOD * ROWS, (name, r)
        assert r["adjudications"] <= GOOD and r["adjudications"] <= r["disagreements"], (name, r)  # a task per interview
    # the error rates make disagreements; those a majority of three cannot settle go to the adjudicator
    assert sum(r["disagreements"] for r in rounds.values()) > sum(r["adjudications"] for r in rounds.values()) > 0
    steps = [s["step"] for s in fig["steps"]]
    assert steps[-1] == "build-release" and len([s for s in steps if "annotators answer" in s]) == 5
    assert all(s["wall_s"] > 0 and sum(s["cpu_s"].values()) > 0 for s in fig["steps"])
    answered = [s for s in fig["steps"] if "annotators answer" in s["step"]]
    assert all(s["cpu_s"].get("desks", 0) > 0 for s in answered)  # the desks did the work of taking answers
    tally = fig["checks"]["gold_truth"]["tally"]
    assert tally.get("unanimous, equal to the truth", 0) > 0, tally
    # each field is listed with its expected alpha; one with 50 pairable units or more is judged
    # (inside its bootstrap interval), one with fewer says it is not judged
    alpha = fig["checks"]["alpha"]
    assert alpha["ok"] and {f["round"] for f in alpha["fields"]} == set(rounds), alpha
    # every field's alpha is the simulated answers' own: the desks lost or changed none of them
    assert fig["checks"]["alpha_seeded"] == {"ok": True, "problems": [], "fields": len(alpha["fields"])}
    assert any(f["expected"] is not None for f in alpha["fields"])
    for f in alpha["fields"]:
        if f["ok"] is None:
            assert "not judged" in f["why"] or f["why"] == "no closed form", f
        else:
            assert f["ok"] is True and f["why"].startswith("inside"), f


def test_faults_recovered_and_the_release_is_the_same(faulted, reference):
    proc, fig, (_, after) = faulted
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    m = LAST.match(proc.stdout.strip().splitlines()[-1])
    assert m and m.group(6) == "yes", proc.stdout[-3000:]
    checks = fig["checks"]
    for key in ("accounted", "bad_files", "good_not_quarantined", "rows_equal_truth", "release_accounted",
                "release_rows", "gold_truth", "alpha_seeded", "faults", "release_identical"):
        assert checks[key]["ok"], (key, checks[key])
    assert checks["release_identical"]["reference"] == str(reference) and (reference / "manifest.json").is_file()
    # the same input as the clean run: its batch, saved beside its release, copied (not generated again)
    assert f"the reference run's batch, copied from {reference}.batch" in proc.stdout, proc.stdout[:3000]
    ev = fig["fault_events"]
    # the worker: its run (a chunk of interviews) crashed, the batch quarantined them; the rerun redid
    # the unfinished ones (an interview the run had finished comes from the cache)
    worker = ev["worker"]
    assert worker["injected"] and worker["recovered"] and worker["interviews"], worker
    assert all(status in ("done", "cached", "quarantined") for status in worker["redone"].values()), worker
    assert worker["cached"] >= 1, worker  # the others came from the cache
    # the desk: the round's run failed naming the desk; `rescue label-studio up` and a rerun closed it
    desk = ev["desk"]
    assert desk["injected"] and desk["recovered"] and "failed_run" in desk, desk
    assert ev["server"]["injected"] and ev["server"]["recovered"], ev["server"]
    assert ev["twice"]["injected"] and ev["twice"]["recovered"] and "submitted twice" in ev["twice"]["what"], ev["twice"]
    assert fig["human"]["rounds"]["viewpoints"]["problems"] >= 1  # the pull said so
    # the batch was pushed twice (the crashed run's, the rerun's): each desk holds each interview once
    drafted = checks["counts"]["drafted"]
    assert drafted >= 2 and all(r["tasks"] == 3 * drafted for r in fig["human"]["rounds"].values()), fig["human"]
    steps = [s["step"] for s in fig["steps"]]
    assert sum(s.startswith("FAULT") for s in steps) == 4, steps
    if fig["database"] == "postgresql":  # its own database dropped (another bench may run beside it)
        name = re.search(r"database (rescue_rehearsal_\w+)", proc.stdout).group(1)
        assert after is not None and name not in after, (name, after)


def test_release_says_generated_by_provenance(bench, reference):
    """The batch's manifest says who generated it; ingest carries that into the catalog and the
    release into its manifest and card: no claim about real people, documentary material or experts."""
    proc, _, _ = bench
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["origin"] == {"recorded": 0, "generated": {f"pipeline.synthetic.batch scale={SCALE} seed=0": GOOD},
                                  "not_ingested_here": 0}
    assert f"{GOOD} samples are generated interviews (pipeline.synthetic.batch scale={SCALE} seed=0)" in manifest["synthetic"]
    # every answer came from desks registered as simulated: each round says so
    rounds = manifest["annotation"]["rounds"]
    assert rounds and all(r["simulated_annotators"] == r["annotators"] > 0 for r in rounds), rounds
    card = (reference / "README.md").read_text()
    assert "SYNTHETIC / DEMO DATA" in card
    for claim in ("identifiable people", "documentary", "expert-generated"):
        assert claim not in card, claim
