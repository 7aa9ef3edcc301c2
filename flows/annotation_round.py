"""`annotation-round`: pull a finished round -> validate -> agreement -> adjudication -> next round.

Pull archives the raw Label Studio export before parsing (append-only); invalid results
are reported, never dropped silently; agreement is computed per field and published as
table artifacts; disagreements go to an adjudication project; once the round is adjudicated
the next round's tasks are pushed. Label Studio calls retry with exponential backoff.
"""
from __future__ import annotations

from prefect import flow, get_run_logger, task

from flows import NETWORK_RETRIES, Outcome, report
from pipeline.config import Settings


@task(name="pull-round", **NETWORK_RETRIES)
def pull(round_name: str, data_root: str):
    from pipeline.annotation import pull as ls_pull

    return ls_pull.pull_round(round_name, Settings.from_env(data_root))


@task(name="agreement")
def agreement(round_name: str, labels, data_root: str):
    from pipeline import agreement as ag

    return ag.round_report(round_name, labels, Settings.from_env(data_root))


@task(name="push-adjudication", **NETWORK_RETRIES)
def push_adjudication(round_name: str, report_, data_root: str):
    from pipeline import adjudication

    return adjudication.push_adjudication(round_name, report_, Settings.from_env(data_root))


@task(name="push-next-round", **NETWORK_RETRIES)
def push_next(round_name: str, data_root: str):
    from pipeline.annotation import push

    return push.push_next_round(round_name, Settings.from_env(data_root))


@flow(name="annotation-round", log_prints=True)
def annotation_round_flow(round_name: str, data_root: str | None = None, push_next_round: bool = True) -> dict:
    """Close ``round_name``: pull, validate, measure agreement, adjudicate, open the next round."""
    root = str(Settings.from_env(data_root).data_root.resolve())
    labels = pull(round_name, root)
    rep = agreement(round_name, labels, root)
    adj = push_adjudication(round_name, rep, root)
    nxt = push_next(round_name, root) if push_next_round else None
    report(f"round-{round_name}", f"Round {round_name}", [Outcome(round_name, result=rep)],
           extra_markdown=f"Adjudication: {adj}\n\nNext round: {nxt}")
    get_run_logger().info("round %s closed", round_name)
    return {"adjudication": adj, "next": nxt}
