"""`annotation-round`: close a round and open the next one.

1. pull (:func:`pipeline.annotation.pull.pull_round`): archive every annotator's export, then
   validate it into the long label table (problems reported, never dropped silently);
2. agreement (:func:`pipeline.quality.agreement.measure_round`): alpha/kappa per field, report files,
   the release gate; published as table artifacts, with the pull's pre-annotation acceptance
   (``round-<round>-acceptance``) and, at the end, every annotator's progress as
   ``rescue annotate status`` shows it (``round-<round>-status``, :func:`pipeline.annotation.status.status_rows`);
3. adjudication (:func:`pipeline.quality.adjudication.push_round` / ``pull_round``): disagreements
   go to the round's adjudication projects; answers already given are pulled;
4. once nothing is left unresolved: gold rows (:func:`pipeline.quality.gold.build_and_store`, merged
   into the work store, finished samples into the corpus) and the NEXT round pushed from the work store
   (:func:`pipeline.annotation.intake.open_round`).

Run it when annotators are done; run it again after adjudication. Every step is idempotent
(content-addressed archives, pushes keyed on sample_id + content hash), and every Label
Studio call retries with exponential backoff. Each task calls the same stage function as the
CLI (``rescue annotate pull``, ``rescue agreement``, ``rescue adjudicate push|pull``, ``rescue gold
build``); the flow only maps, caches, retries and reports.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE, TASK_SOURCE, CacheKeyFnPolicy

from flows import CODE_VERSION, NETWORK_RETRIES, Outcome, push_slot, report, sha256_file, summary_on_failure, tell
from pipeline.annotation import rounds
from pipeline.config import Settings
from pipeline.markdown import escape as md_escape
from pipeline.paths import DataRoot, check_name
from pipeline.quality.agreement import TooFewAnnotators


def _desks(root: DataRoot):
    from pipeline.labelstudio.desks import Desks

    return Desks(root)


# Pulls and gold read state that changes outside the run (Label Studio, the label tables): never
# cached, not even within a run (a paused run pulls the adjudication again after resuming).
@task(name="pull-round", task_run_name="pull-round-{round_name}", cache_policy=NO_CACHE, **NETWORK_RETRIES)
def pull(round_name: str, root: DataRoot, annotators: list[str] | None = None) -> dict:
    from pipeline.annotation import acceptance, pull as ls_pull

    res = ls_pull.pull_round(_desks(root), round_name, root, annotators or None)
    return {"labels": res.labels.num_rows, "problems": res.problems.to_pylist(), "summary": res.summary(),
            "not_counted": [list(n) for n in res.not_counted],
            "progress": {f"{a} / {s}": f"{d}/{t}" for (a, s), (d, t) in res.progress.items()},
            "acceptance": acceptance.summarize(acceptance.read(root, round_name) or [], by_annotator=True)}


@task(name="round-status", cache_policy=NO_CACHE, **NETWORK_RETRIES)
def progress(round_names: list[str], root: DataRoot, annotators: list[str] | None) -> list[dict]:
    """The progress table of `rescue annotate status` (the same function) for these rounds."""
    from pipeline.annotation.status import round_status, status_rows

    return status_rows(round_status(_desks(root), round_names, annotators or None))


def _agreement_key(ctx, params: dict) -> str:
    """Agreement is a function of the pulled labels and the round's definition: the second run
    of a round (after adjudication) reuses the first run's figures unless a label changed."""
    from prefect.utilities.hashing import hash_objects

    from pipeline.annotation.rounds import load_round

    labels = params["root"].labels(params["round_name"])
    content = sha256_file(labels) if labels.is_file() else "missing"
    return hash_objects("agreement", content, sha256_file(load_round(params["round_name"]).source), params,
                        CODE_VERSION, raise_on_failure=True)


@task(name="agreement", task_run_name="agreement-{round_name}", cache_policy=CacheKeyFnPolicy(cache_key_fn=_agreement_key) + TASK_SOURCE)
def agreement(round_name: str, root: DataRoot) -> dict:
    from pipeline.quality import agreement as ag

    out = ag.measure_round(root, round_name)
    rep = out.report
    fields = [{"field": f.field, "metric": f.metric, "alpha": f.alpha, "threshold": f.threshold,
               "units": f.n_units, "percent_agreement": f.percent_agreement, "fleiss_kappa": f.fleiss_kappa,
               "passed": f.passed} for f in rep.fields]
    return {"passed": rep.passed, "fields": fields, "report": {k: str(v) for k, v in out.paths.items()}}


@task(name="push-adjudication", task_run_name="push-adjudication-{round_name}", **NETWORK_RETRIES)
def push_adjudication(round_name: str, root: DataRoot):
    """-> :class:`pipeline.quality.adjudication.PushSummary`"""
    from pipeline.quality import adjudication

    return adjudication.push_round(_desks(root), root, round_name)


@task(name="pull-adjudication", task_run_name="pull-adjudication-{round_name}", cache_policy=NO_CACHE,
      **NETWORK_RETRIES)
def pull_adjudication(round_name: str, root: DataRoot) -> int:
    from pipeline.quality import adjudication

    return adjudication.pull_round(_desks(root), root, round_name).rows


@task(name="gold", cache_policy=NO_CACHE)
def gold_rows(root: DataRoot) -> dict | None:
    """Gold from every pulled round; None while disagreements wait for adjudication."""
    from pipeline.quality import gold

    try:
        return gold.build_and_store(root, strict=True).summary
    except gold.UnresolvedError as exc:
        get_run_logger().info("gold waits for adjudication: %s", exc)
        return None


@task(name="push-next-round", task_run_name="push-next-round-{next_round}", **NETWORK_RETRIES)
def push_next(next_round: str, root: DataRoot, annotators: list[str] | None) -> dict:
    from pipeline.annotation import intake

    with push_slot():  # pushes serialised across hosts (flows.push_slot)
        rep = intake.open_round(_desks(root), root, next_round, annotators or None).report
    return {"round": next_round, "created": rep.created, "updated": rep.updated, "unchanged": rep.unchanged}


@flow(name="annotation-round", log_prints=True, persist_result=True)
@summary_on_failure(lambda p: f"round-{p.get('round_name')}", lambda p: f"Round {p.get('round_name')}")
def annotation_round_flow(round_name: str, data_root: str | None = None, open_next: bool = True,
                          annotators: list[str] | None = None, wait_for_adjudication_s: int = 0) -> dict:
    """Close ``round_name`` (pull, validate, agreement, adjudication) and, when everything is
    resolved, build gold rows and push the next round. ``annotators``: whose projects are
    pulled and who gets the next round (default: every annotator with a desk).

    With disagreements left to adjudicate the run ends "waiting" (run it again when the
    adjudicator is done), or, with ``wait_for_adjudication_s`` > 0, PAUSES until it is resumed
    (the Resume button in the Prefect UI, or ``prefect.flow_runs.resume_flow_run``), then pulls
    the adjudication and carries on: one run per round instead of two. A pause that is not
    resumed in time fails the run; nothing is lost, run it again after adjudication."""
    from prefect.flow_runs import pause_flow_run
    from prefect.states import Completed

    logger = get_run_logger()
    root = DataRoot(Settings.from_env(data_root).data_root.resolve())  # built once, handed to every task
    try:
        nxt = rounds.next_round(check_name(round_name, "round"))
    except ValueError as exc:  # a configuration error: named by the flow parameter, never retried
        raise ValueError(f"flow parameter round_name={round_name!r}: {exc}") from None
    if annotators is not None and (not isinstance(annotators, list) or not all(isinstance(a, str) and a
                                                                               for a in annotators)):
        raise ValueError(f"flow parameter annotators={annotators!r}: give a list of annotators' e-mails, "
                         "or leave it out for every annotator")
    pulled = pull(round_name, root, annotators)
    for who, sid, what in pulled["not_counted"]:  # a desk holding what the push did not give it: each named
        logger.warning("round %s: %s, %s: %s", round_name, who, sid, what)
    try:
        agr = agreement(round_name, root)
    except TooFewAnnotators as exc:  # name the flow parameter that decides whose labels were pulled
        raise TooFewAnnotators(f"{exc} (flow parameter annotators={annotators!r}"
                               + (": pull the missing ones too)" if annotators else
                                  ": every annotator with a project was pulled)")) from None
    adj = push_adjudication(round_name, root)
    adjudicated = pull_adjudication(round_name, root) if adj.disagreements else 0
    gold = gold_rows(root)
    if gold is None and wait_for_adjudication_s > 0:
        logger.info("round %s: %d disagreeing rows wait for adjudication; resume this run when they are done "
                    "(waiting at most %d s)", round_name, adj.disagreements, wait_for_adjudication_s)
        # The paused run asks the server whether it was resumed: four times a second for short
        # waits (a resume is picked up within a quarter second: one cheap read per poll), every
        # 10 s for long ones (a person adjudicating for hours)
        pause_flow_run(timeout=wait_for_adjudication_s, poll_interval=0.25 if wait_for_adjudication_s <= 900 else 10)
        adjudicated = pull_adjudication(round_name, root)
        gold = gold_rows(root)
    opened = push_next(nxt, root, annotators) if gold is not None and open_next and nxt else None

    # Where every annotator stands, in this round and the one just opened.
    status_table = progress([round_name] + ([nxt] if opened else []), root, annotators)
    status = "done" if gold is not None else "waiting"
    lines = [md_escape(pulled["summary"]), "",  # sample ids and problems: annotators' text
             *([f"Not counted ({len(pulled['not_counted'])}; every one in table `problems`, earlier labels kept):"]
               + [f"- {md_escape(f'{who}, {sid}: {what}')}" for who, sid, what in pulled["not_counted"][:50]] + [""]
               if pulled["not_counted"] else []),
             f"Agreement gate: **{'pass' if agr['passed'] else 'FAIL'}**; report: `{Path(agr['report'].get('html', '')).name}`",
             f"Disagreeing rows: {adj.disagreements} ({adjudicated} adjudicated)",
             f"Gold: {gold['rows']} rows" if gold else "Gold: waiting for adjudication - run this flow again when done",
             f"Next round `{nxt}`: {opened['created']} new tasks" if opened else "No round opened.",
             f"Progress per annotator: table `round-{round_name}-status`; what annotators did with the "
             f"pre-filled drafts: table `round-{round_name}-acceptance` (also in the agreement report)."]
    report(f"round-{round_name}", f"Round {round_name}", [Outcome(round_name, "done" if gold else "cached",
                                                                  reason="" if gold else "waiting for adjudication")],
           extra_markdown="\n".join(lines),
           tables={"agreement": agr["fields"], "problems": pulled["problems"][:500], "status": status_table,
                   "acceptance": pulled["acceptance"]})
    logger.info("round %s: %s", round_name, status)
    result = {"round": round_name, "status": status, "passed": agr["passed"], "disagreements": adj.disagreements,
              "gold": gold, "next": opened, "report": agr["report"]}
    if gold is not None:
        return result
    # Nothing moved on: the run's state says so by name (Completed, exit 0 with --watch), and the
    # log's last line is the next step
    waiting = (f"{adj.disagreements - adjudicated} of {adj.disagreements} disagreeing rows open on the "
               "adjudicator's desk" if adj.disagreements else "gold waits for an earlier round's adjudication")
    step = (f"round {round_name}: awaiting adjudication ({waiting}); next: when it is done, run this round again "
            f"(`prefect deployment run 'annotation-round/default' --param round_name={round_name} --watch`)")
    tell("round.awaiting-adjudication", [step])
    return Completed(name="Awaiting adjudication", message=step, data=result)
