"""`rescue demo`: the whole pipeline on SYNTHETIC interviews, through the real stack.

One command on a fresh machine (after scripts/setup.sh): start the local stack (Prefect
server + worker + Label Studio on 127.0.0.1), generate synthetic couple and family
interviews (:mod:`pipeline.synthetic.interviews`), run the `ingest-batch` deployment, let SIMULATED
annotators (:mod:`pipeline.synthetic.annotators`) answer every round in the real Label Studio, close each
round with one run of the `annotation-round` deployment (it pauses while a simulated
adjudicator settles the disagreements, and is resumed), and build a release with the
`build-release` deployment. It prints where the release and the agreement reports are.

It is a demo: the interviews are synthetic, the annotators simulated, and the "truth" they
answer from is drawn at random (valid values of every round's fields). Real batches use the
very same deployments (docs/OPERATIONS.md). The demo keeps its own data root
(``<data root>/demo`` by default); each simulated person gets a desk of their own (their own
Label Studio, :mod:`pipeline.labelstudio.desks`) with a throw-away password nobody keeps: the
simulated people answer through their desk's service account, in their own name.
"""
from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import typer

from pipeline import taxonomy
from pipeline.config import Settings
from pipeline.paths import DataRoot

DEMO_RELEASE = "0.1.0"
ANNOTATOR_ERROR = 0.1          # simulated annotators' error rate per field
BATCH = [  # synthetic interviews: (name, scenario, seed)
    ("session01", "couple", 1), ("session02", "family", 2), ("session03", "couple", 3), ("session04", "family", 4),
]
# One couple and one family interview of 8 rows (~30 s of speech each) show every scenario
# and every round; diarization time grows with the audio, so more is only slower, not richer.
DEMO_INTERVIEWS = 2
DEMO_ROWS = 8
DEMO_OVERRIDE_REASON = "DEMO: simulated annotators on a few synthetic interviews; too few units for a stable alpha"
DEMO_OVERRIDE_BY = "rescue demo"
ADJUDICATION_WAIT_S = 600      # a round's run pauses at most this long for the simulated adjudicator


@dataclass
class DemoResult:
    data_root: Path
    release: Path | None = None
    agreement_reports: list[Path] = field(default_factory=list)
    rounds: dict[str, dict] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def start_deployment(name: str, parameters: dict):
    """A flow run of deployment ``name``, for the worker to pick up; returns its id."""
    from prefect.deployments import run_deployment

    return run_deployment(name, parameters=parameters, timeout=0).id


# wait_flow_run polls every WAIT_POLL_FAST_S for its first WAIT_FAST_FOR_S, then every WAIT_POLL_S
WAIT_POLL_FAST_S = 0.2
WAIT_FAST_FOR_S = 10.0
WAIT_POLL_S = 1.0


def wait_flow_run(flow_run_id, *, until_paused: bool = False, timeout_s: float = 3600):
    """Poll the server until the run is final (or paused, with ``until_paused``); raise unless
    it completed (or paused)."""
    from prefect.client.orchestration import get_client

    start = time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(flow_run_id)
            if run.state and (run.state.is_final() or (until_paused and run.state.is_paused())):
                break
            waited = time.monotonic() - start
            if waited > timeout_s:
                raise RuntimeError(f"flow run {run.name} still {run.state.name if run.state else '?'} "
                                   f"after {timeout_s:.0f} s (see the Prefect UI)")
            # prefect's run_deployment polls every 5 s; the demo's 12 waits mostly end within
            # seconds, so poll often at first, then once a second (each poll is the server's CPU)
            time.sleep(WAIT_POLL_FAST_S if waited < WAIT_FAST_FOR_S else WAIT_POLL_S)
    if not (run.state.is_completed() or run.state.is_paused()):
        raise RuntimeError(f"flow run {run.name} of deployment {run.deployment_id} ended {run.state.name}: "
                           f"{run.state.message} (see the Prefect UI)")
    return run


def run_deployment(name: str, parameters: dict, timeout_s: float = 3600):
    """Run a deployment through the server and the worker; its result, unless it did not complete."""
    return wait_flow_run(start_deployment(name, parameters), timeout_s=timeout_s).state.result()


def demo_truth(samples: list[dict], seed: int) -> dict[str, dict]:
    """sample_id -> the sample with every round's fields filled with valid random values:
    what the simulated annotators answer from. The transcript round keeps the drafts."""
    from pipeline.annotation.rounds import load_round, round_names
    from pipeline.synthetic.annotators import SimulatedAnnotator

    truth = {}
    for s in samples:
        s = {**s, "rows": [dict(r) for r in s["rows"]]}
        for name in round_names():
            rnd = load_round(name)
            if name == "transcript":
                continue
            draw = SimulatedAnnotator("demo-truth", error_rates={"*": 1.0}, seed=seed)
            by_index = {r["row_index"]: r for r in s["rows"]}
            for ri, values in (draw.answer_sample(rnd, s) or {}).items():
                by_index[ri].update(values)
        truth[s["sample_id"]] = s
    return truth


def annotate_round(desks, round_name: str, truth: dict[str, dict], seed: int,
                   annotators: list[str] | None = None) -> int:
    """Every annotator project of the round (of ``annotators``, default all), on each
    annotator's own desk, answered by a simulated annotator in that annotator's name; the
    desks side by side (:func:`pipeline.annotation.push.each_desk`)."""
    from pipeline.annotation.push import each_desk, parse_project_key
    from pipeline.annotation.rounds import load_round
    from pipeline.synthetic.annotators import SimulatedAnnotator

    rnd = load_round(round_name)
    posted: dict[str, int] = {}

    def answer(who: str) -> None:
        client, n = desks.client(who), 0
        for project in client.projects():
            parsed = parse_project_key(project.key or "")
            if not parsed or parsed[0] != round_name or parsed[2] != who:
                continue
            sim = SimulatedAnnotator(who.split("@")[0], error_rates={"*": ANNOTATOR_ERROR}, seed=seed)
            done = {t["data"]["sample_id"] for t in client.tasks(project.id) if t.get("total_annotations")}
            todo = {sid: s for sid, s in truth.items() if sid not in done}
            n += sim.annotate_tasks(client, project.id, rnd, todo, completed_by=desks.owner_id(who))
        posted[who] = n

    each_desk(desks, annotators or desks.people("annotator"), answer)
    return sum(posted.values())


def adjudicate_round(desks, round_name: str, truth: dict[str, dict], adjudicator: str) -> int:
    """A simulated adjudicator answers every open adjudication task of the truth's samples on
    their own desk (tasks of other samples are left alone): the truth's values, and where the
    truth has no such row (the drafts have rows it lacks: a diarization mistake), the first
    annotator's answer, so the round goes on and the rows are reported by whoever checks them."""
    from pipeline.quality.adjudication import project_key
    from pipeline.annotation.ls_config import values_to_results
    from pipeline.annotation.naming import parse_control_name
    from pipeline.annotation.rounds import load_round

    rnd = load_round(round_name)
    client, uid = desks.client(adjudicator), desks.owner_id(adjudicator)
    posted = 0
    for scenario in taxonomy.SCENARIOS:
        project = client.find_project(project_key(round_name, scenario))
        if project is None:
            continue
        for task in client.tasks(project.id):
            if task.get("total_annotations") or task["data"]["sample_id"] not in truth:
                continue
            data, sample = task["data"], truth[task["data"]["sample_id"]]
            wanted = {u["row_index"] for u in data.get("units", [])}
            values = {r["row_index"]: {f.name: r.get(f.name) for f in rnd.fields}
                      for r in sample["rows"] if r["row_index"] in wanted}
            result = values_to_results(rnd, data, values)
            lacking = {unit for unit, u in enumerate(data.get("units", [])) if u["row_index"] not in values}
            if lacking:
                full = client.request("GET", f"/api/tasks/{task['id']}/", "read an adjudication task").json()
                first = min(full.get("predictions") or [], key=lambda p: p.get("model_version") or "", default=None)
                result += [r for r in (first or {}).get("result", [])
                           if (parsed := parse_control_name(r.get("from_name", ""))) and parsed[3] in lacking]
            client.create_annotation(task["id"], result, completed_by=uid)
            posted += 1
    return posted


def run(data_root: str | Path | None = None, *, interviews: int = DEMO_INTERVIEWS, seed: int = 0,
        log: Callable[[str], None] = print) -> DemoResult:
    from ops import stack
    from pipeline.store import private_by_default

    private_by_default()  # the demo's data root, stack and desks are owner-only, called from anywhere
    base = Settings.from_env(data_root).data_root
    root = (base / "demo" if data_root is None else base).resolve()
    result = DemoResult(root)

    def step(name: str, fn):
        t0 = time.perf_counter()
        log(f"[demo] {name} ...")
        out = fn()
        result.timings[name] = time.perf_counter() - t0
        return out

    from concurrent.futures import ThreadPoolExecutor

    from pipeline.synthetic import interviews as synth
    from pipeline.labelstudio.desks import Desks
    from pipeline.annotation.rounds import load_round, round_names

    # The interviews are synthesized (espeak-ng, ffmpeg) while the stack starts: neither needs the other.
    data = DataRoot(root)  # built once: the batch folder and the desks take it
    batch_dir = data.batches_dir() / "demo"
    with ThreadPoolExecutor(4) as pool:  # the synthesis, and one per desk
        synthesized = None
        if not (batch_dir / "manifest.csv").is_file():
            synthesized = pool.submit(synth.make_batch, batch_dir, [
                {"name": n, "scenario": sc, "seed": sd + seed, "n_rows": DEMO_ROWS, "group": f"demo_{sc}"}
                for n, sc, sd in BATCH[:interviews]])
        k = max(load_round(n).annotators for n in round_names())
        annotators = [f"sim-annotator{i + 1}@example.org" for i in range(k)]
        adjudicator = "sim-adjudicator@example.org"
        desks = Desks(data)
        people = [(e, "annotator") for e in annotators] + [(adjudicator, "adjudicator")]
        # The desks start (one Label Studio per simulated person) beside the Prefect server, side
        # by side: registered first, in order (their ports), then each started on its own thread.
        for e, role in people:
            desks.register(e, role, simulated=True)
        made = [pool.submit(desks.add, e, role, secrets.token_urlsafe(18), simulated=True) for e, role in people]
        # label_studio=False: the adds start the desks (two starts of one desk would race for its port)
        os.environ.update(step("stack up (Prefect, worker)" + (" + synthesis" if synthesized else ""),
                               lambda: stack.up(root, label_studio=False, log=log)))
        step("desks of the simulated people (what outlasted the stack start)", lambda: [m.result() for m in made])
        if synthesized:
            step("synthesis (what outlasted the stack start)", synthesized.result)
    result.rounds, result.release = run_flows(desks, root, batch_dir, annotators, adjudicator, seed, step)
    result.agreement_reports = [Path(p) for out in result.rounds.values() for p in out.get("report", {}).values()
                                if str(p).endswith(".html")]
    return result


def run_flows(desks, root: Path, batch_dir: Path, annotators: list[str], adjudicator: str, seed: int,
              step: Callable = lambda name, fn: fn(), fan_out: bool = False) -> tuple[dict[str, dict], Path]:
    """A batch through the deployments of a running stack, answered by simulated annotators:
    ingest-batch, one annotation-round run per round (paused while the simulated adjudicator
    works, then resumed), build-release. Returns each round's outcome and the release's path.
    ``step(name, fn)`` runs and times each step; ``fan_out``: one ``ingest-interview`` child run
    per interview (on the stack's workers) instead of the whole batch in the batch's process.
    The CLI-only path must give the same release either way (tests/flows/test_cli_path.py fans out)."""
    from prefect.flow_runs import resume_flow_run

    from pipeline import corpus
    from pipeline.annotation.rounds import round_names

    # the demo's fan_out=False: two short interviews cost less in the batch's own process than in
    # one new flow-run process each (the fan-out pays off with several workers: docs/SCALING.md)
    step("ingest-batch", lambda: run_deployment("ingest-batch/default", {
        "batch_dir": str(batch_dir), "data_root": str(root), "annotators": annotators, "fan_out": fan_out}))
    data = DataRoot(root)
    truth = demo_truth(corpus.load_work(data), seed)
    rounds = {}
    for name in round_names():
        step(f"simulated annotators: {name}", lambda n=name: annotate_round(desks, n, truth, seed, annotators))
        # One run per round: it pauses while the simulated adjudicator works, then goes on.
        run_id = start_deployment("annotation-round/default", {
            "round_name": name, "data_root": str(root), "annotators": annotators,
            "wait_for_adjudication_s": ADJUDICATION_WAIT_S})
        fr = step(f"annotation-round: {name}", lambda: wait_flow_run(run_id, until_paused=True))
        if fr.state.is_paused():
            step(f"simulated adjudicator: {name}", lambda n=name: adjudicate_round(desks, n, truth, adjudicator))
            resume_flow_run(run_id)
            fr = step(f"annotation-round: {name}, resumed", lambda: wait_flow_run(run_id))
        out = fr.state.result()
        if out["status"] != "done":
            raise RuntimeError(f"round {name} still waits for adjudication after the simulated adjudicator")
        if not out["passed"]:
            # A handful of synthetic rows gives an unstable alpha; say so in the release's manifest
            # instead of pretending the gate passed (real rounds are adjudicated or re-annotated).
            from pipeline.quality import gates

            gates.record_override(data, name, DEMO_OVERRIDE_REASON, DEMO_OVERRIDE_BY)
            out = {**out, "overridden": True}
        rounds[name] = out

    path = step("build-release", lambda: run_deployment("build-release/default", {
        "version": DEMO_RELEASE, "data_root": str(root)}))
    return rounds, Path(path)


def demo_command(
    data_root: Path = typer.Option(None, help="Data root of the demo (default: <RESCUE_DATA_ROOT or ./data>/demo)."),
    interviews: int = typer.Option(DEMO_INTERVIEWS, min=1, max=len(BATCH),
                                   help="Synthetic interviews to generate (alternately couple and family)."),
    seed: int = typer.Option(0, help="Seed of the synthetic interviews and simulated annotators."),
) -> None:
    """DEMO: synthetic interviews -> ingest -> simulated annotators in a real Label Studio ->
    agreement -> adjudication -> gold -> a versioned release, all through the Prefect deployments."""
    typer.secho("RESCUE pipeline DEMO - synthetic interviews and SIMULATED annotators "
                "(real batches: docs/OPERATIONS.md)", bold=True)
    try:
        res = run(data_root, interviews=interviews, seed=seed)
    except Exception as exc:  # noqa: BLE001 - one clear line, details are in the Prefect UI / logs
        typer.secho(f"demo failed: {type(exc).__name__}: {exc}", fg="red", err=True)
        raise typer.Exit(1) from None
    typer.echo("\n".join(f"  {k:52s} {v:7.1f} s" for k, v in res.timings.items()))
    typer.echo(f"  {'total':52s} {sum(res.timings.values()):7.1f} s")
    for name, out in res.rounds.items():
        gate = "pass" if out["passed"] else "FAIL (overridden for the demo, recorded in the manifest)"
        typer.echo(f"  round {name:12s} agreement gate {gate}, "
                   f"{out['disagreements']} disagreeing rows adjudicated")
    typer.secho(f"\nRelease:           {res.release}", fg="green")
    for rep in sorted(set(res.agreement_reports)):
        typer.secho(f"Agreement report:  {rep}", fg="green")
    from pipeline.labelstudio.desks import Desks

    desks = Desks(DataRoot(res.data_root))
    typer.echo(f"Prefect UI: {os.environ.get('PREFECT_API_URL', '').removesuffix('/api')}\n"
               + "".join(f"Desk of {d.email} ({d.role}): {desks.public_url(d)}\n" for d in desks.all())
               + f"Stop the demo stack with: rescue stack down --data-root {res.data_root}")
