"""benchmarks/bench_rehearsal.py (issue #26 part 2, the machine half) at its smallest: a RESCUE-shaped
batch of four interviews cut to 6 rows (scale 0.02, seed 0: a family and a couple interview that
are good, a couple interview with a cut-short video and one with an unreadable subtitle timing
line) through the `ingest-batch` deployment on a stack of the bench's own with 2 workers (Prefect
on a fresh PostgreSQL database when the machine has one, else SQLite, as the bench says).

Asserted from the bench's last line and its --json figures: nothing lost, every good interview
drafted with truth.json's row count, each bad file quarantined naming the file, per-stage
figures from the task runs, and that the bench left no process and no database behind."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--scale", "0.02", "--seed", "0", "--max-rows", "6", "--workers", "2"]
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


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("rehearsal") / "figures.json"
    before = _databases()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RESCUE_DATA_ROOT"))}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_rehearsal.py"), *ARGS, "--json", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    after = _databases()
    return proc, json.loads(out.read_text()) if out.is_file() else None, (before, after)


def test_last_line_says_nothing_lost(bench):
    proc, fig, _ = bench
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    m = LAST.match(lines[-1])
    assert m, lines[-3:]
    scale, n, minutes, wall, per, lost = m.groups()
    assert (scale, int(n), lost) == ("0.02", 4, "yes")
    assert float(minutes) == pytest.approx(fig["truth_totals"]["minutes"])
    assert float(per) == pytest.approx(float(wall) / 4, abs=0.06)
    assert "human half" in lines[-2] and "not in this rehearsal yet" in lines[-2]


def test_counts_equal_truth(bench):
    _, fig, _ = bench
    counts, truth = fig["checks"]["counts"], fig["truth_totals"]
    assert counts["interviews"] == truth["interviews"] == 4
    assert counts["planted"] == sum(truth["faults"].values()) == 2 == counts["quarantined"]
    assert counts["drafted"] == 2
    assert counts["rows_drafted"] == counts["rows_truth_of_drafted"] == 2 * 6
    assert counts["turns"] > 0
    for key in ("accounted", "bad_files", "good_not_quarantined", "rows_equal_truth"):
        assert fig["checks"][key]["ok"], fig["checks"][key]


def test_figures_per_stage_and_process(bench):
    _, fig, _ = bench
    stages = fig["stages"]
    assert list(stages) == ["ingest", "transcribe", "diarize", "segment"]
    assert stages["ingest"]["runs"] == 4  # the corrupt video's ingest ran and failed
    assert stages["transcribe"]["runs"] == 3 and stages["segment"]["runs"] == 2
    assert stages["diarize"]["runs"] >= 2
    assert all(s["wall_sum_s"] > 0 for s in stages.values())
    assert stages["diarize"]["cpu_s"] > 0
    kinds = fig["processes"]
    for kind in ("prefect server", "prefect worker", "flow run: ingest-batch", "flow run: ingest-interview"):
        assert kinds[kind]["peak_rss_mb"] > 20, kinds
    assert kinds["prefect worker"]["processes"] == 2 and kinds["flow run: ingest-interview"]["processes"] >= 4
    assert fig["child_runs"]["count"] == 4


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
