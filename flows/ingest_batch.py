"""`ingest-batch`: a batch folder (videos + manifest) -> draft turns in Label Studio.

Each interview goes through ingest -> transcript + diarize -> segment (:mod:`flows.ingest_interview`,
which says what each stage calls). Then the drafts of every interview that made it are pushed
as the first round, once, here (``push_drafts``: idempotent, keyed on sample_id + content hash,
never on Label Studio ids, and holding the ``rescue-push`` limit across hosts).

Fan-out: run from a deployment, the batch submits one ``ingest-interview`` flow run per
interview with ``run_deployment`` (``ingest-interview/default`` on ``rescue-cpu``, ``/gpu`` on
``rescue-gpu`` for ``device=cuda``), so every worker polling the pool, on any host, takes
interviews; it then waits for all of them and reports each one's outcome with a link to its
run. Prefect's own work pools do the distribution: no Dask or Ray cluster to run beside them
(docs/SCALING.md). Outside a deployment (a direct call, the CLI path, the demo), with
``fan_out=False``, or when no ``ingest-interview`` deployment is registered, the same task
chain runs in this flow's thread pool, at most ``max_workers`` interviews at a time.

A bad interview is quarantined with its reason and the rest go on - a child run that fails or
crashes (its worker killed) too; a manifest entry whose sample id breaks the grammar is
quarantined before anything runs. Each quarantine is one WARNING line naming the interview, its
manifest line and the reason (the run's log and ``--watch``: :func:`flows.tell`), and the run
ends Completed, named "Completed (N quarantined)". A ``batch_dir`` without a readable manifest
is one ERROR line naming it, and the run ends Failed, named "Refused" (no traceback).
``rescue batch watch`` (:mod:`ops.batch_watch`) follows a batch's children as they end.

Every stage is cached in the shared result storage under its result's key
(:mod:`pipeline.media.keys`: inputs' content, the code that computes it, its models,
its settings), so a rerun after a crash redoes only what did not finish, and a rerun after a
change of code or models redoes exactly the results it touched: the summary lists each result
made again and why (``pipeline/media/turns.py changed``, ``model diarization-offline changed``).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.states import Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner

from flows import (NETWORK_RETRIES, RESUME, Outcome, note, push_slot, report, settle, submit_window, summary_on_failure,
                   tell)
from flows.ingest_interview import KEY_STAGE, STAGES, submit_interview
from pipeline import lineage
from pipeline.config import Settings
from pipeline.media import voices
from pipeline.media.manifest import ManifestEntry, ManifestError, find_manifest, longest_first, read_manifest
from pipeline.media.turns import Segmented
from pipeline.paths import DataRoot
from pipeline.store import prepare_data_root

CHILD_DEPLOYMENT = "ingest-interview/default"     # rescue-cpu
CHILD_GPU_DEPLOYMENT = "ingest-interview/gpu"     # rescue-gpu
POLL_S = 1.0  # per poll, one query for the children that ended since
# children queued or running at once: enough to keep 8 hosts x 4 slots busy (docs/SCALING.md)
MAX_IN_FLIGHT = 32
# interviews per child run: two halve the runs' starts and the server's share per interview
# (the RESCUE rehearsal at scale 0.25, 2 workers on 2 cores: machine half 288 -> 249-260 s, server
# 1.05 -> 0.74-0.86 CPU s an interview), and a killed worker takes at most two unfinished ones
CHUNK_SIZE = 2


@task(name="push-transcript-round", cache_policy=RESUME, **NETWORK_RETRIES)
def push_drafts(drafted: list[Segmented], root: DataRoot, annotators: list[str] | None,
                redraft: list[str] | None = None) -> dict:
    """The first round for this batch's segmented interviews (:func:`pipeline.annotation.intake.open_round`:
    admitted to the work store, then pushed). ``drafted`` (the segment results, with their drafts'
    sha256) is the cache key; pushing is idempotent on its own, the cache just skips the round trip.
    ``redraft``: re-drafted interviews whose new drafts replace answered old ones; ``held`` says,
    one line each, which re-drafted interviews kept their old drafts (:mod:`pipeline.annotation.redraft`)."""
    from pipeline.annotation import intake
    from pipeline.labelstudio.desks import Desks

    ids = sorted(d.sample_id for d in drafted)
    with push_slot():  # across hosts; the fcntl lock inside holds only on one
        opened = intake.open_round(Desks(root), root, intake.first_round(), annotators or None, sample_ids=ids,
                                   redraft=redraft or ())
    rep = opened.report
    return {"round": opened.round, "created": rep.created, "projects": sorted(rep.projects),
            "annotators": list(rep.annotators), "held": opened.admitted.held_lines(),
            "redrafted": [f"{sid} ({who}): {n} answered tasks archived, pushed anew" for who, sid, n in rep.replaced]}


def recomputed(root: DataRoot, outcomes: list[Outcome]) -> list[dict]:
    """Each stage result this run made (its task ran, not served from the cache) and why, from
    the record the task kept beside it."""
    rows = []
    for o in outcomes:
        for task_name in o.executed:
            stage = KEY_STAGE.get(task_name)
            if stage is None:
                continue
            rec = lineage.read_record(root, stage, o.item) or {}
            rows.append({"item": o.item, "stage": stage, "why": "; ".join(rec.get("recomputed_because") or ["?"])})
    return rows


def _child_deployment(fan_out: bool | None, device: str, logger) -> str | None:
    """The per-interview deployment to fan out to, or None for the in-process chain.

    ``fan_out=None`` (the default) fans out when this run comes from a deployment (a worker
    runs it) and the child deployment is registered; ``True`` insists; ``False`` never."""
    from prefect.context import FlowRunContext
    from prefect.exceptions import ObjectNotFound

    if fan_out is False:
        return None
    ctx = FlowRunContext.get()
    if fan_out is None and not (ctx and ctx.flow_run and ctx.flow_run.deployment_id):
        return None
    name = CHILD_GPU_DEPLOYMENT if str(device).startswith("cuda") else CHILD_DEPLOYMENT
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(name)
        except ObjectNotFound:
            if fan_out:
                raise ValueError(f"flow parameter fan_out=True: no deployment {name!r} on the Prefect server; "
                                 f"register prefect.yaml's deployments (`rescue stack register`)") from None
            logger.warning("no deployment %r registered: the interviews run in this flow run "
                           "(`rescue stack register` enables the fan-out)", name)
            return None
    return name


def _ui_link(flow_run_id) -> str:
    from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL

    ui = PREFECT_UI_URL.value() or str(PREFECT_API_URL.value() or "").removesuffix("/api")
    return f"{ui}/runs/flow-run/{flow_run_id}"


def _fan_out(name: str, entries: list[ManifestEntry], params: dict, logger,
             chunk_size: int = CHUNK_SIZE, max_in_flight: int = MAX_IN_FLIGHT) -> list[Outcome]:
    """One child flow run of deployment ``name`` per entry (or per ``chunk_size`` entries); wait
    for ALL of them (a failed or crashed child never cancels its siblings), then read each
    one's outcome. Cancelling the batch run cancels the unfinished ones
    (:func:`_cancel_children_if_cancelled`)."""
    from prefect.context import FlowRunContext

    parent = FlowRunContext.get().flow_run
    started = {}
    try:
        return _submit_and_wait(name, entries, params, logger, chunk_size, parent, started, max_in_flight)
    except BaseException:  # e.g. Prefect's TerminationSignal: the runner stops this run
        _cancel_children_if_cancelled(parent, started, logger)
        raise


def _cancel_children_if_cancelled(parent, started: dict, logger) -> list:
    """When THIS batch run is being cancelled (an operator's `prefect flow-run cancel` or the UI),
    set its unfinished child runs to Cancelling now: their workers stop a running one and drop a
    queued one. Prefect's server does the same once the batch has reached Cancelled (its
    cancellation-cleanup service, every 20 s, for subflows linked by ``as_subflow=True``); doing
    it here as the batch stops keeps workers from starting queued children in between. Finished
    children are left alone (their results stay); any other ending of the batch (a crash, a
    worker shut down) leaves the children running, as before."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Cancelling

    if not started:
        return []
    cancelled = []
    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(parent.id).state
            if not state or not (state.is_cancelling() or state.is_cancelled()):
                return []
            ids = list(started)
            for i in range(0, len(ids), 200):
                for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(
                        id=FlowRunFilterId(any_=ids[i:i + 200])), limit=200):
                    if run.state and not run.state.is_final() and not run.state.is_cancelling():
                        client.set_flow_run_state(run.id, Cancelling(
                            message=f"The parent flow run was cancelled: batch run {parent.name}"))
                        cancelled.append(run.name)
        logger.info("batch run cancelled: %d unfinished child runs set to Cancelling", len(cancelled))
    except Exception as exc:  # noqa: BLE001 - Prefect's cleanup service still cancels them
        logger.warning("cancelling the child runs failed (%s: %s); Prefect's cancellation cleanup "
                       "cancels them once this run is Cancelled", type(exc).__name__, exc)
    return cancelled


def _submit_and_wait(name: str, entries: list[ManifestEntry], params: dict, logger, chunk_size: int,
                     parent, started: dict, max_in_flight: int = MAX_IN_FLIGHT) -> list[Outcome]:
    """:func:`_fan_out`'s work; ``started`` (child run id -> its sample ids) fills as it submits,
    at most ``max_in_flight`` children not yet ended at a time: every worker's poll reads every
    Scheduled run of its pool, so queuing a whole batch at once made each poll's cost grow with
    the batch (191 queued: 157 ms of the server's time a poll, 32 queued: 55 ms)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import TERMINAL_STATES
    from prefect.deployments import run_deployment

    size = max(1, chunk_size)
    chunks = [entries[i:i + size] for i in range(0, len(entries), size)]

    def submit(chunk: list[ManifestEntry]) -> None:
        ids = [e.sample_id for e in chunk]
        label = ids[0] if len(ids) == 1 else f"{ids[0]}+{len(ids) - 1}"
        param = dataclasses.asdict(chunk[0]) if chunk_size <= 1 else [dataclasses.asdict(e) for e in chunk]
        # idempotency key: a retried parent finds its children instead of starting them twice
        run = run_deployment(name, parameters={**params, "entry": param}, timeout=0,
                             flow_run_name=f"{parent.name}:{label}", as_subflow=True,
                             idempotency_key=f"{parent.id}:{label}", tags=["rescue", "ingest"])
        started[run.id] = ids

    def waiting_runs(ended_only: bool):
        """The children not known to have ended, read in pages of the API's size; ``ended_only``:
        only those that have ended since (the server filters, so a poll reads what changed, not
        every waiting child: at 191 children that read cost the server half a core)."""
        waiting = [i for i in started if i not in final]
        state = FlowRunFilterState(type=FlowRunFilterStateType(any_=sorted(TERMINAL_STATES))) if ended_only else None
        for i in range(0, len(waiting), 200):
            yield from client.read_flow_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=waiting[i:i + 200]), state=state), limit=200)

    window = max(1, max_in_flight)
    logger.info("%d child flow runs of %s to run, at most %d queued or running at a time", len(chunks), name, window)
    final, said, submitted = {}, time.monotonic(), 0
    with get_client(sync_client=True) as client:
        while True:
            while submitted < len(chunks) and len(started) - len(final) < window:
                submit(chunks[submitted])
                submitted += 1
            if len(final) == len(started) == len(chunks):
                break
            for run in waiting_runs(ended_only=True):
                if run.state and run.state.is_final():
                    final[run.id] = run
            if len(final) < len(started):
                if time.monotonic() - said > 60:  # e.g. no worker serves the pool: say so, keep waiting
                    states = Counter(run.state.name if run.state else "?" for run in waiting_runs(ended_only=False)
                                     if not (run.state and run.state.is_final()))
                    logger.info("%d of %d child runs finished, %d not submitted yet; waiting: %s (runs stay "
                                "Scheduled until a worker of the deployment's pool is free)", len(final),
                                len(chunks), len(chunks) - submitted, dict(states))
                    said = time.monotonic()
                time.sleep(POLL_S)

    outcomes = []
    for run_id, items in started.items():
        run, link = final[run_id], _ui_link(run_id)
        try:  # a quarantined child ends Completed, named for it, its items' reasons in its result
            res, unread = run.state.result(raise_on_failure=False), None
        except Exception as exc:  # noqa: BLE001 - named, not handled
            res, unread = None, f"{type(exc).__name__}: {exc}"
        res = res if isinstance(res, dict) and "items" in res else None
        if run.state.is_completed() and res is None:
            outcomes += [Outcome(item, "quarantined", f"{run.name}: its result is not readable here "
                                 f"({unread or 'not a result of ingest-interview'}); the result storage must be shared "
                                 f"by every worker (docs/SCALING.md)", flow_run=link, worker=_run_worker(run))
                         for item in items]
        elif run.state.is_completed():
            outcomes += [Outcome(o["item"], o["status"], o["reason"], o["result"], o["executed"], o["cached"],
                                 flow_run=link, worker=res["worker"]) for o in res["items"]]
        else:
            msg = (run.state.message or "").strip()  # a child of older code ended Failed "InterviewQuarantined: ..."
            reason = msg.split("InterviewQuarantined: ", 1)[1] if "InterviewQuarantined: " in msg else \
                f"child flow run {run.name} ended {run.state.name}: {msg}"
            worker = res["worker"] if res else _run_worker(run)
            outcomes += [Outcome(item, "quarantined", reason[:500], flow_run=link, worker=worker) for item in items]
    return outcomes


def _run_worker(run) -> str:
    """Where a child run ran when its own result does not say (it crashed, its result is not
    readable): its pool, host and flow-run pid from Prefect's record, never a bare pid."""
    host, _, pid = str(run.infrastructure_pid or "").rpartition(":")
    if not pid:
        return f"not started by a worker of pool {run.work_pool_name or '?'}"
    return f"a worker of pool {run.work_pool_name or '?'}" + (f"@{host}" if host else "") + f" (flow-run pid {pid})"


def refuse_batch(batch_dir: str, exc: ManifestError):
    """A ``batch_dir`` with no readable manifest: one ERROR line naming the parameter (the run's
    log and ``--watch``), the summary artifact, and the run Failed, named "Refused", with that
    line as its message - no traceback: nothing ran, and the operator's fix is the parameter."""
    line = f"flow parameter batch_dir={batch_dir!r}: {exc}"
    tell("batch.refused", [line], logging.ERROR)
    report("ingest-batch", f"Batch {Path(str(batch_dir)).name}", [], error=ManifestError(line))
    return Failed(name="Refused", message=line)


@flow(name="ingest-batch", log_prints=True, persist_result=True)
@summary_on_failure("ingest-batch", lambda p: f"Batch {Path(str(p.get('batch_dir'))).name}")
def ingest_batch_flow(batch_dir: str, data_root: str | None = None, backend: str = "auto",
                      asr_model: str | None = None, align_model: str | None = None,
                      diarization: str | None = None, device: str = "cpu", max_workers: int = 2,
                      push: bool = True, annotators: list[str] | None = None,
                      allow_outside_batch: bool = False, fan_out: bool | None = None,
                      chunk_size: int = CHUNK_SIZE, max_in_flight: int = MAX_IN_FLIGHT,
                      redraft: list[str] | None = None) -> dict:
    """Ingest every interview of ``batch_dir`` (manifest.csv/yaml + videos) and push the drafts.

    backend: auto (subtitles when the manifest gives them, else WhisperX) | subtitles | whisperx.
    diarization: pyannote pipeline directory or hub id (default: the offline one under the models dir).
    allow_outside_batch: use manifest files outside ``batch_dir`` (absolute, ``..``, symlinks out);
    refused unread otherwise.
    fan_out: one ``ingest-interview`` flow run per ``chunk_size`` interviews on the pool's workers
    (default: when run from a deployment and that deployment exists); False: in this run,
    ``max_workers`` at a time. Either way the largest videos go first
    (:func:`pipeline.media.manifest.longest_first`).
    chunk_size: interviews per ``ingest-interview`` run (default 2); they share one process and
    its start, each with its own task runs, cache and quarantine; 1 for one run per interview.
    max_in_flight: child runs queued or running at a time (default 32); more are submitted as
    these end. Set it to at least the pool's slots (workers x their ``--limit``).
    redraft: sample ids segmented again whose new drafts replace old ones that already have
    answers (their answered tasks are archived and pushed anew); without it such an interview
    keeps its old drafts and the summary says so, one line each.
    """
    logger = get_run_logger()
    # built and checked once (the run's one writability probe), handed to every stage
    root = prepare_data_root(DataRoot(Settings.from_env(data_root).data_root.resolve()))
    batch = Path(batch_dir).resolve()
    manifest_warnings: list[str] = []
    try:
        manifest = find_manifest(batch)
        entries = read_manifest(manifest, manifest_warnings)
    except ManifestError as exc:  # a configuration error: one line naming the flow parameter, never retried
        return refuse_batch(batch_dir, exc)
    for warning in manifest_warnings:
        logger.warning(warning)
    logger.info("%d interviews in %s", len(entries), batch.name)
    # a refused entry (sample id outside the grammar) never reaches a task; its id is shown escaped
    refused = [Outcome(e.sample_id.encode("unicode_escape").decode("ascii"), "quarantined", f"manifest: {e.refused}")
               for e in entries if e.refused]
    good = longest_first([e for e in entries if not e.refused], batch, allow_outside_batch)

    enrolled = voices.fingerprint(root)  # enrolling a voice re-runs diarization (names by voice)
    options = dict(backend=backend, asr_model=asr_model, align_model=align_model, diarization=diarization,
                   device=device, voices=enrolled, allow_outside_batch=allow_outside_batch)
    child = _child_deployment(fan_out, device, logger) if good else None
    if child:
        outcomes = _fan_out(child, good, {"batch_dir": str(batch), "data_root": str(root), **options}, logger,
                            chunk_size, max_in_flight)
    else:
        with ThreadPoolTaskRunner(max_workers=max(1, max_workers) * len(STAGES)) as runner:
            outcomes = settle(submit_window(((e.sample_id, e) for e in good),
                                            lambda e: submit_interview(runner, e, batch, root, **options), max_workers))
    outcomes = sorted(outcomes + refused, key=lambda o: o.item)
    kind = "line" if manifest.suffix == ".csv" else "item"  # read_manifest's own numbering
    lines = {e.sample_id.encode("unicode_escape").decode("ascii") if e.refused else e.sample_id:
             f"{manifest.name} {kind} {e.line}" for e in entries}
    for o in outcomes:
        o.source = lines.get(o.item, "")
    note(outcomes)  # shown in the summary even if the push below fails

    drafted = [o.result for o in outcomes if o.status != "quarantined"]
    pushed = push_drafts(drafted, root, annotators, redraft) if push and drafted else None
    extra = (f"Round `{pushed['round']}` in Label Studio: {pushed['created']} new tasks in "
             f"{len(pushed['projects'])} projects" if pushed else "Nothing pushed.")
    said = [f"kept old drafts: {x}" for x in (pushed or {}).get("held") or []] + \
        [f"re-drafted: {x}" for x in (pushed or {}).get("redrafted") or []]
    if said:  # re-drafted interviews, one line each: in the log, as events and in the summary
        tell("redraft", said)
        extra += "\n\n## Re-drafted\n\n" + "\n".join(f"- {x}" for x in said)
    remade = recomputed(root, outcomes)
    extra += ("\n\n## Made again\n\n| item | stage | why |\n|---|---|---|\n" +
              "\n".join(f"| {r['item']} | {r['stage']} | {r['why'].replace('|', '/')} |" for r in remade)
              if remade else "\n\nEvery result was up to date: nothing was made again.")
    if child:
        extra += (f"\n\n## Child flow runs ({child})\n\n| item | status | worker | run |\n|---|---|---|---|\n" +
                  "\n".join(f"| {o.item} | {o.status} | {o.worker} | [{o.flow_run.rsplit('/', 1)[-1]}]({o.flow_run}) |"
                            for o in outcomes if o.flow_run))
    counts = report("ingest-batch", f"Batch {batch.name}", outcomes, extra_markdown=extra,
                    tables={"recomputed": remade})
    result = {"counts": counts, "pushed": pushed, "fan_out": child, "recomputed": remade,
              "quarantined": {o.item: o.reason for o in outcomes if o.status == "quarantined"},
              "items": {o.item: {"status": o.status, "source": o.source, "executed": o.executed,
                                 "cached": o.cached, "flow_run": o.flow_run, "worker": o.worker}
                        for o in outcomes}}
    bad = [o for o in outcomes if o.status == "quarantined"]
    if not bad:
        return result
    # one WARNING line an interview, in this run's log and in `prefect deployment run ... --watch`
    tell("batch.quarantined", [f"{o.item} quarantined ({o.source or 'not in the manifest'}): {o.reason}" for o in bad])
    # Completed all the same (the rest went on), but the state's name says so in the run list
    return Completed(name=f"Completed ({len(bad)} quarantined)", data=result,
                     message=f"{len(bad)} of {len(outcomes)} interviews quarantined: " +
                     "; ".join(f"{o.item} ({o.source})" for o in bad[:20]) + (" ..." if len(bad) > 20 else ""))
