"""The human half: the generator's simulated annotators answer every round on their own desks
(``answer_round``); one ``annotation-round`` run per round pulls, measures agreement and pauses
for the simulated adjudicator; then ``build-release`` (``human_half``)."""
from __future__ import annotations

from pathlib import Path

from . import say
from .faults import FAULT_DESK_ROUND, FAULT_SERVER_BEFORE, Faults
from .sampler import Steps

RELEASE_VERSION = "1.0.0"
ADJUDICATOR = "sim-adjudicator@example.org"
ADJUDICATION_WAIT_S = 900      # a round's run pauses at most this long for the adjudicator (<= 900: polled every second)
OVERRIDE_BY = "bench_rehearsal"
OVERRIDE_REASON = ("REHEARSAL: simulated annotators with planted per-field error rates "
                   "(benchmarks/bench_rehearsal.py); their agreement is measured against theory, not gated")


def person_email(name: str) -> str:
    return f"{name}@example.org"


def truth_samples(truth: dict) -> dict[str, dict]:
    """sample_id -> the generator's truth of each interview without a planted fault: what the
    simulated annotators and the adjudicator answer from."""
    return {e["sample_id"]: {"sample_id": e["sample_id"], "scenario": e["scenario"],
                             "participants": e["participants"], "rows": e["rows"]}
            for e in truth["interviews"] if not e["fault"]}


def simulated_annotators(truth: dict) -> dict:
    """e-mail -> the generator's simulated annotator (its per-field error rates and seed)."""
    from pipeline.synthetic.annotators import SimulatedAnnotator

    return {person_email(a["name"]): SimulatedAnnotator(a["name"], a["error_rates"], seed=a["seed"])
            for a in truth["annotators"]}


def answer_round(desks, round_name: str, samples: dict[str, dict], sims: dict, twice: str | None = None) -> dict:
    """Every simulated annotator answers every open task of the round on their own desk, through
    its HTTP API as the browser would post it (side by side: one desk each). ``twice``: this
    annotator submits their first task a second time (a double click: part of --faults).
    Returns the counts: tasks seen, annotations posted, and the task posted twice."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.annotation.ls_config import values_to_results
    from pipeline.annotation.push import parse_project_key
    from pipeline.annotation.rounds import load_round

    rnd = load_round(round_name)

    def one(who: str) -> dict:
        sim, client, uid = sims[who], desks.client(who), desks.owner_id(who)
        out = {"tasks": 0, "annotations": 0, "twice": None}
        for project in client.projects():
            parsed = parse_project_key(project.key or "")
            if not parsed or parsed[0] != rnd.name or parsed[2] != who:
                continue
            for task in client.tasks(project.id):
                out["tasks"] += 1
                sample = samples.get(task["data"].get("sample_id"))
                if sample is None or task.get("total_annotations"):
                    continue  # not one of the truth's, or answered before this (a rerun)
                answers = sim.answer_sample(rnd, sample)
                if answers is None:
                    continue
                result = values_to_results(rnd, task["data"], answers)
                client.create_annotation(task["id"], result, completed_by=uid, lead_time=sim.lead_time_s)
                out["annotations"] += 1
                if who == twice and out["twice"] is None:
                    client.create_annotation(task["id"], result, completed_by=uid, lead_time=sim.lead_time_s)
                    out["annotations"] += 1
                    out["twice"] = f"{who}: task {task['id']} ({sample['sample_id']}) submitted twice"
        return out

    with ThreadPoolExecutor(len(sims)) as pool:
        per = list(pool.map(one, sorted(sims)))
    return {"tasks": sum(p["tasks"] for p in per), "annotations": sum(p["annotations"] for p in per),
            "twice": next((p["twice"] for p in per if p["twice"]), None)}


def human_half(root: Path, desks, truth: dict, annotators: list[str], steps: Steps, run_kinds: dict,
               timeout_s: float, faults: "Faults | None" = None) -> dict:
    """The five rounds as the docs say (docs/OPERATIONS.md): the annotators answer on their desks;
    one `annotation-round` run per round pulls, measures agreement, puts the disagreements on the
    adjudicator's desk and pauses; the adjudicator answers; the run is resumed, pulls the
    adjudication, builds gold and pushes the next round. Then `build-release`."""
    import pyarrow.parquet as pq
    from prefect.flow_runs import resume_flow_run

    from ops.demo import adjudicate_round, start_deployment, wait_flow_run
    from pipeline.annotation.rounds import round_names
    from pipeline.paths import DataRoot
    from pipeline.quality import gates

    data = DataRoot(root)
    samples, sims = truth_samples(truth), simulated_annotators(truth)
    rounds = {}
    log = lambda *_: None  # noqa: E731 - the stack's own lines are not the bench's

    def close_round(name: str) -> tuple[dict, int]:
        """One annotation-round run: to its pause, the adjudicator, resumed, to its end."""
        run_id = start_deployment("annotation-round/default", {
            "round_name": name, "data_root": str(root), "annotators": annotators,
            "wait_for_adjudication_s": ADJUDICATION_WAIT_S})
        run_kinds[str(run_id)] = "annotation-round"
        killer = (faults.kill_desk_during_pull(run_id) if faults and name == FAULT_DESK_ROUND
                  and "desk" not in faults.events else None)
        try:
            fr = steps.run(f"{name}: annotation-round (pull, agreement; to its pause, or its end)",
                           lambda: wait_flow_run(run_id, until_paused=True, timeout_s=timeout_s))
        finally:
            if killer:
                killer.done.set()
                killer.join(timeout=5)
        adjudicated = 0
        if fr.state.is_paused():
            adjudicated = steps.run(f"{name}: adjudicator answers on the adjudication desk",
                                    lambda: adjudicate_round(desks, name, samples, ADJUDICATOR))
            steps.count(annotations=adjudicated)
            resume_flow_run(run_id)
            fr = steps.run(f"{name}: annotation-round resumed (adjudication in, gold, next round out)",
                           lambda: wait_flow_run(run_id, timeout_s=timeout_s))
        return fr.state.result(), adjudicated

    for name in round_names():
        if faults and name == FAULT_SERVER_BEFORE:
            steps.run("FAULT: Prefect server stopped, then `rescue stack up`", lambda: faults.restart_server(log))
        answered = steps.run(f"{name}: 3 annotators answer on their desks",
                             lambda n=name: answer_round(desks, n, samples, sims, faults.twice(n) if faults else None))
        steps.count(tasks=answered["tasks"], annotations=answered["annotations"])
        try:
            out, adjudicated = close_round(name)
        except RuntimeError as exc:
            desk = (faults.events.get("desk") or {}) if faults else {}
            if not desk.get("injected") or desk.get("recovered"):
                raise
            say(f"  round {name}: the run failed as the desk was down ({exc}); recovering")
            faults.events["desk"]["failed_run"] = str(exc)[:300]
            steps.run("FAULT recovery: `rescue label-studio up --annotator EMAIL`", faults.recover_desk)
            out, adjudicated = close_round(name)
            faults.events["desk"]["recovered"] = True
        if faults:
            faults.saw_twice(name, answered, data)
        if out["status"] != "done":
            raise RuntimeError(f"round {name}: still waits for adjudication after the adjudicator answered")
        if not out["passed"]:  # recorded as an operator would, and carried by the release's manifest
            gates.record_override(DataRoot(root), name, OVERRIDE_REASON, OVERRIDE_BY)
        problems = data.label_problems(name)
        rounds[name] = {"passed": out["passed"], "overridden": not out["passed"], "tasks": answered["tasks"],
                        "twice": answered["twice"],
                        "annotations": answered["annotations"], "adjudications": adjudicated,
                        "disagreements": out["disagreements"], "gold_rows": (out.get("gold") or {}).get("rows"),
                        "label_lines": pq.read_metadata(data.labels(name)).num_rows,
                        "problems": pq.read_metadata(problems).num_rows if problems.is_file() else 0,
                        "next": out.get("next")}
    run_id = start_deployment("build-release/default", {"version": RELEASE_VERSION, "data_root": str(root)})
    run_kinds[str(run_id)] = "build-release"
    fr = steps.run("build-release", lambda: wait_flow_run(run_id, timeout_s=timeout_s))
    return {"rounds": rounds, "release": fr.state.result()}
