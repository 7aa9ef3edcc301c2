"""`rescue demo`: the whole pipeline on SYNTHETIC interviews, through the real stack.

One command on a fresh machine (after scripts/setup.sh): start the local stack (Prefect
server + worker + Label Studio on 127.0.0.1), generate synthetic couple and family
interviews, run the `ingest-batch` deployment, let simulated annotators work every round in
the real Label Studio, close each round with the `annotation-round` deployment, assemble
gold rows and build a release with the `build-release` deployment. It prints where the
release and the agreement report are.

It is a demo: the interviews are synthetic and the annotators simulated. Real batches use
the very same deployments (docs/OPERATIONS.md). The demo has its own data root
(``<data root>/demo`` by default) so it never touches real data.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import typer

from pipeline.config import Settings

DEMO_RELEASE = "0.1.0"


@dataclass
class DemoResult:
    data_root: Path
    release: Path | None = None
    agreement_reports: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def run_deployment(name: str, parameters: dict, env: dict[str, str], timeout_s: float = 1800) -> object:
    """Run a deployment through the server and the worker; raise unless it completed."""
    os.environ.update(env)  # the Prefect client reads PREFECT_API_URL at import/settings time
    from prefect.deployments import run_deployment as _run

    flow_run = _run(name, parameters=parameters, timeout=timeout_s)
    if not flow_run.state.is_completed():
        raise RuntimeError(f"deployment {name} ended {flow_run.state.name}: {flow_run.state.message}; "
                           f"see the Prefect UI at {env['PREFECT_API_URL'].removesuffix('/api')}/runs")
    return flow_run


def run(data_root: str | Path | None = None, *, interviews: int = 4, seed: int = 0,
        log: Callable[[str], None] = print) -> DemoResult:
    from pipeline import stack

    base = Settings.from_env(data_root).data_root
    root = (base / "demo" if data_root is None else base).resolve()
    result = DemoResult(root)

    def step(name: str, fn):
        t0 = time.perf_counter()
        log(f"[demo] {name} ...")
        out = fn()
        result.timings[name] = time.perf_counter() - t0
        return out

    env = step("stack up", lambda: stack.up(root, log=log))

    from pipeline import synth

    batch_dir = root / "batches" / "demo-batch"
    step("synthesize interviews", lambda: synth.generate_batch(batch_dir, n=interviews, seed=seed))
    step("ingest-batch", lambda: run_deployment("ingest-batch/default", {"batch_dir": str(batch_dir),
                                                                      "data_root": str(root)}, env))

    from pipeline import simulate
    from pipeline.annotation import rounds

    for round_name in rounds.round_names():
        step(f"simulated annotators: {round_name}",
             lambda r=round_name: simulate.annotate_round(r, Settings.from_env(root), seed=seed))
        step(f"annotation-round: {round_name}",
             lambda r=round_name: run_deployment("annotation-round/default",
                                                 {"round_name": r, "data_root": str(root)}, env))

    from pipeline import gold

    step("gold rows", lambda: gold.build_gold(root))
    step("build-release", lambda: run_deployment(
        "build-release/default", {"version": DEMO_RELEASE, "data_root": str(root)}, env))
    result.release = root / "releases" / DEMO_RELEASE
    result.agreement_reports = sorted((root / "agreement").glob("**/*.md")) if (root / "agreement").is_dir() else []
    return result


def demo_command(
    data_root: Path = typer.Option(None, help="Data root of the demo (default: <RESCUE_DATA_ROOT or ./data>/demo)."),
    interviews: int = typer.Option(4, help="Synthetic interviews to generate (couples and families)."),
    seed: int = typer.Option(0, help="Seed of the synthetic interviews and simulated annotators."),
) -> None:
    """DEMO: synthetic interviews -> ingest -> simulated annotators in a real Label Studio ->
    agreement -> gold -> a versioned release, all through the Prefect deployments."""
    typer.secho("RESCUE pipeline DEMO - synthetic interviews, simulated annotators "
                "(real batches: see docs/OPERATIONS.md)", bold=True)
    res = run(data_root, interviews=interviews, seed=seed)
    total = sum(res.timings.values())
    typer.echo("\n".join(f"  {k:45s} {v:7.1f} s" for k, v in res.timings.items()))
    typer.echo(f"  {'total':45s} {total:7.1f} s")
    typer.secho(f"\nRelease:           {res.release}", fg="green")
    for rep in res.agreement_reports:
        typer.secho(f"Agreement report:  {rep}", fg="green")
    typer.echo(json.dumps({"stack": "still running - stop it with: rescue stack down --data-root "
                                    f"{res.data_root}"}))
