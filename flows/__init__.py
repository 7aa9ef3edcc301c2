"""Prefect flows: thin wrappers that map, cache, retry, limit concurrency and report.

All logic lives in ``pipeline/``; a flow only decides what runs where and how often. The
shared machinery is here so every flow resumes, retries and reports the same way:

- ``stage_resume(builder)``: the cache policy of the media stage tasks (ingest, transcript,
  diarize, segment). Its key is the stage result's key (``pipeline.media.keys``, the one the CLI
  uses: inputs' content, the digest of the code that computes it read from source, the models'
  digests, the settings that change it) plus the data root it is written to. It survives across
  flow runs, so a rerun after a crash recomputes only what did not finish, and a rerun after a
  change of code or models recomputes exactly the results it touches.
- ``RESUME``: the cache policy of the other tasks: INPUTS + TASK_SOURCE + the digest of the
  package's source (``CODE_VERSION``, read at run time, never bumped by hand). ``file_key``
  hashes a file's bytes for a task whose input is a raw path.
- ``NETWORK_RETRIES``: exponential backoff for Label Studio / network calls, and ONLY for the
  transient family (:func:`transient`: ``isinstance(exc, pipeline.errors.TransientError)``,
  raised where the fault is seen: network, timeouts, HTTP 5xx, a locked resource); a
  configuration error (no annotators, unknown round, bad parameter, HTTP 4xx) fails at once
  with its message.
- ``prefect_calls(what)``: the boundary of the flows' own calls to the Prefect server: a server
  that does not answer or answers HTTP 5xx becomes :class:`PrefectUnavailable` /
  :class:`PrefectFault` (both transient).
- ``gpu_slot(device)``: the strict global concurrency limit ``gpu`` around model inference on a GPU.
- ``push_slot()``: the strict global concurrency limit ``rescue-push`` (1 slot) around every push of
  a round from a flow: it holds across workers on several hosts, where the library's fcntl lock
  on the data root (kept for the CLI path) cannot be trusted (NFS; docs/SCALING.md).
- ``settle()``: wait for ALL futures, then sort them into done / cached / quarantined (calling
  ``.result()`` on the first failure would cancel the siblings and lose their work). A stage that
  finds its input at fault returns a :class:`Quarantine` (:func:`quarantined`: a Completed state
  named "Quarantined", one line in the log, no traceback, never cached).
- ``report()``: the per-run summary artifacts; ``summary_on_failure`` publishes them for a
  failed run too (what was done, cached, quarantined - noted with ``note()`` - and the error).
- ``tell()``: what the operator must read (a refusal's reasons, a round that waits, a quarantine),
  one line each in the run's log and in ``prefect deployment run ... --watch``. A run that ends
  itself Failed (named ``Refused``) after telling why logs no traceback (:class:`_ChosenEnd`).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import os
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pipeline  # noqa: F401  (telemetry-off defaults before Prefect loads)
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, TASK_SOURCE, CacheKeyFnPolicy
from prefect.futures import PrefectFuture, wait
from prefect.tasks import exponential_backoff

from pipeline import lineage
from pipeline.errors import ServerFault, TransientError, Unreachable
from pipeline.store import private_by_default, sha256_file

# A flow run's process (a worker's, or a `python -m` / test that imports the flows) writes
# owner-only files, whatever umask the worker was started with.
private_by_default()


class _ChosenEnd(logging.Filter):
    """Keeps a run that ENDS ITSELF in a Failed state (returns ``Failed(name="Refused", ...)``, its
    reasons already told in one line each) free of a traceback: a flow run started by a worker
    re-raises that state as ``FailedRun`` and Prefect's engine logs it to the run's log as
    "Engine execution exited with unexpected exception" with the engine's own traceback. Only
    that record with a ``FailedRun`` is dropped: an exception raised by the flow's code is
    re-raised as itself, not as ``FailedRun``, and keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from prefect.exceptions import FailedRun

        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, FailedRun) and record.getMessage().startswith("Engine execution exited"))


if not any(isinstance(f, _ChosenEnd) for f in logging.getLogger("prefect.flow_runs").filters):
    logging.getLogger("prefect.flow_runs").addFilter(_ChosenEnd())

GPU_LIMIT = os.environ.get("RESCUE_GPU_LIMIT", "gpu")
PUSH_LIMIT = os.environ.get("RESCUE_PUSH_LIMIT", "rescue-push")


def __getattr__(name: str):
    # CODE_VERSION: the digest of the package's source, made on first use (once per process)
    if name == "CODE_VERSION":
        return f"rescue-pipeline-{lineage.package_digest()}"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


RESUME = INPUTS + TASK_SOURCE + CacheKeyFnPolicy(cache_key_fn=lambda ctx, params: __getattr__("CODE_VERSION"))


def stage_resume(builder: Callable[[dict], "lineage.StageKey"]):
    """The cache policy of a media stage task: ``builder(params)`` makes the stage result's key
    from the task's parameters (with the function the CLI calls); the data root
    (parameter ``root``) is part of it, since the result is written there."""
    from prefect.utilities.hashing import hash_objects

    def key(ctx, params: dict) -> str | None:
        if any(isinstance(v, Quarantine) for v in params.values()):  # an earlier stage quarantined it: no key
            return None
        return hash_objects(ctx.task.name, builder(params).key, str(params["root"]), raise_on_failure=True)

    return CacheKeyFnPolicy(cache_key_fn=key)


QUARANTINED = "Quarantined"  # the name of a Completed state that quarantined its item


@dataclass(frozen=True)
class Quarantine:
    """What a stage task returns for an item it could not make (its input is at fault): the
    stage and the reason. The task ends Completed, named :data:`QUARANTINED` (one INFO line,
    never an ERROR or a traceback); the next stages pass it on without running
    (:func:`quarantined`), and :func:`settle` reports the item quarantined with this reason."""

    sample_id: str
    stage: str
    reason: str


def quarantined(q: Quarantine, message: str | None = None):
    """The state a stage task returns for ``q``: Completed, named :data:`QUARANTINED`, and never
    cached (a quarantine is no result to reuse: the next run tries the item again)."""
    from prefect.states import Completed
    from prefect.transactions import get_transaction

    txn = get_transaction()
    if txn is not None:
        txn.write_on_commit = False
    return Completed(name=QUARANTINED, message=message or f"{q.stage}: {q.reason}", data=q)


def transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry a task whose error is a :class:`TransientError`
    (raised by the boundary that saw the fault), and nothing else."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            state.result(raise_on_failure=True)
        except BaseException as err:  # noqa: BLE001 - classified, not handled
            exc = err
    return isinstance(exc, TransientError)


NETWORK_RETRIES: dict[str, Any] = dict(
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=1),  # 1 s, 2 s, 4 s
    retry_jitter_factor=0.5,
    retry_condition_fn=transient,
)


class PrefectUnavailable(RuntimeError, Unreachable):
    """The Prefect server did not answer (stopped, restarting, wrong PREFECT_API_URL)."""


class PrefectFault(RuntimeError, ServerFault):
    """The Prefect server answered with a server error (HTTP 5xx, e.g. its database locked)."""


@contextlib.contextmanager
def prefect_calls(what: str):
    """Around the flows' own calls to the Prefect server (a concurrency slot, creating a limit):
    the server not answering or answering HTTP 5xx - seen in the error or what it was raised
    from, since Prefect wraps it (``ConcurrencySlotAcquisitionError`` from ``httpx.ConnectError``)
    - becomes :class:`PrefectUnavailable` / :class:`PrefectFault`; anything else passes unchanged."""
    import httpx

    try:
        yield
    except TransientError:
        raise
    except Exception as exc:
        seen, cause = set(), exc
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            if isinstance(cause, httpx.TransportError):
                raise PrefectUnavailable(f"the Prefect server did not answer while trying to {what} "
                                         f"({type(cause).__name__}); is it running? (`rescue stack status`)") from exc
            if isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code >= 500:
                raise PrefectFault(f"the Prefect server failed to {what} (HTTP {cause.response.status_code})") from exc
            cause = cause.__cause__ or cause.__context__
        raise


def file_key(param: str):
    """A cache_key_fn: the CONTENT of the file named by parameter ``param``, the other
    parameters (e.g. the data root the result was written to) and the code version."""
    from prefect.utilities.hashing import hash_objects

    def key(ctx, params: dict) -> str:
        path = Path(params[param])
        content = sha256_file(path) if path.is_file() else f"missing:{path}"
        rest = {k: v for k, v in params.items() if k != param}
        return hash_objects(ctx.task.name, content, rest, __getattr__("CODE_VERSION"), raise_on_failure=True)

    return key


def file_resume(param: str):
    """RESUME for a task whose input is a raw file path: key on the file's bytes, not its name."""
    return CacheKeyFnPolicy(cache_key_fn=file_key(param)) + TASK_SOURCE


@contextlib.contextmanager
def gpu_slot(device: str):
    """Hold one slot of the global `gpu` limit while a model runs on a GPU (cache hits take none;
    CPU work takes none either: the limit guards GPU memory, and one slot for the whole server
    would otherwise run CPU diarization one interview at a time across every worker).

    Strict: a missing limit is an error rather than silently unthrottled inference.
    ``RESCUE_GPU_LIMIT=`` (empty) turns it off, e.g. for a server-less local test harness.
    """
    if not GPU_LIMIT or not str(device).startswith("cuda"):
        yield
        return
    from prefect.concurrency.sync import concurrency

    stack = contextlib.ExitStack()
    with prefect_calls(f"take a slot of the {GPU_LIMIT!r} limit"):
        stack.enter_context(concurrency(GPU_LIMIT, occupy=1, lease_duration=60, strict=True))
    with stack:
        yield


@contextlib.contextmanager
def push_slot():
    """Hold the one slot of the global ``rescue-push`` limit while a flow pushes a round to Label
    Studio: two pushes at once (two batches, a batch and a round's next push, on any host) never
    create a second project or a second copy of a task. The lease is renewed while the push runs
    and expires 60 s after a holder dies, so a killed worker cannot block pushes for good.

    Strict: the push never runs unthrottled. A server that lacks the limit (registered before it
    existed, a test harness) gets it created with its one slot, as `rescue stack register` does.
    ``RESCUE_PUSH_LIMIT=`` (empty) turns it off (the fcntl lock inside the push still holds on
    one host)."""
    if not PUSH_LIMIT:
        yield
        return
    from prefect.concurrency._asyncio import ConcurrencySlotAcquisitionError
    from prefect.concurrency.sync import concurrency

    stack = contextlib.ExitStack()
    with prefect_calls(f"take a slot of the {PUSH_LIMIT!r} limit"):
        try:
            stack.enter_context(concurrency(PUSH_LIMIT, occupy=1, lease_duration=60, strict=True))
        except ConcurrencySlotAcquisitionError as exc:
            if exc.__cause__ is not None:  # the server did not answer or failed: not a missing limit
                raise
            ensure_infrastructure([], "", 0, push_limit=PUSH_LIMIT)
            stack.enter_context(concurrency(PUSH_LIMIT, occupy=1, lease_duration=60, strict=True))
    with stack:
        yield


# --- settling mapped work -------------------------------------------------------------

@dataclass
class Outcome:
    """What happened to one item (an interview) across its chain of tasks."""

    item: str
    status: str = "done"           # done | cached | quarantined
    reason: str = ""
    result: Any = None
    executed: list[str] = field(default_factory=list)   # task names that really ran
    cached: list[str] = field(default_factory=list)     # task names served from cache
    flow_run: str = ""     # the child flow run that did it (fan-out): its UI link
    worker: str = ""       # where it ran (fan-out): worker name and host
    source: str = ""       # where the item comes from, e.g. "manifest.csv line 3"


def _reason(state) -> str:
    from prefect.exceptions import FailedRun

    try:
        state.result(raise_on_failure=True)
    except FailedRun:  # a task that returned its own Failed state (an expected problem): its message says it
        return (state.message or state.name)[:500]
    except BaseException as exc:  # noqa: BLE001 - we report, not handle
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
    return state.message or state.name


def submit_window(items: Iterable[tuple[str, Any]], submit: Callable[[Any], list[tuple[str, PrefectFuture]]],
                  window: int) -> dict[str, list[tuple[str, PrefectFuture]]]:
    """``submit(item)`` for every ``(key, item)``, with at most ``window`` items' chains unfinished
    at once: each chain's tasks wait for their upstream ones inside the task runner's threads, so
    submitting every chain at once would let the first chains' waiting tasks hold the threads
    (one item at a time) or, with more threads, run more items at once than asked. The chains,
    for :func:`settle`; give the runner ``window`` times a chain's length in threads."""
    chains: dict[str, list[tuple[str, PrefectFuture]]] = {}
    open_keys: list[str] = []
    for key, item in items:
        if len(open_keys) >= max(1, window):
            wait([f for _, f in chains[open_keys.pop(0)]])
        chains[key] = submit(item)
        open_keys.append(key)
    return chains


def settle(chains: dict[str, list[tuple[str, PrefectFuture]]]) -> list[Outcome]:
    """Wait for every future of every item; an item is quarantined by its first task that failed
    or returned a :class:`Quarantine` (in the chain's order).

    ``chains`` maps an item (interview id) to its ``(stage name, future)`` pairs in order.
    """
    wait([f for futures in chains.values() for _, f in futures])
    outcomes = []
    for item, futures in chains.items():
        out = Outcome(item)
        for name, fut in futures:
            state = fut.state
            if state.is_completed() and state.name == QUARANTINED:
                if out.status != "quarantined":
                    q = fut.result()
                    out.status, out.reason = "quarantined", f"{q.stage}: {q.reason}"
            elif state.is_completed():
                (out.cached if state.name == "Cached" else out.executed).append(name)
            elif out.status != "quarantined":
                out.status = "quarantined"
                out.reason = f"{name}: {_reason(state)}" if state.is_failed() or state.is_crashed() \
                    else f"{name}: not run ({state.name})"
        if out.status != "quarantined":
            out.result = futures[-1][1].result() if futures else None
            out.status = "cached" if not out.executed else "done"
        outcomes.append(out)
    return sorted(outcomes, key=lambda o: o.item)


def report(key: str, title: str, outcomes: Iterable[Outcome], extra_markdown: str = "",
           tables: dict[str, list[dict]] | None = None, error: BaseException | None = None) -> dict[str, int]:
    """One markdown summary + one table per run (artifact keys: lowercase, digits, dashes)."""
    outcomes = list(outcomes)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("done", "cached", "quarantined")}
    lines = [f"# {title}" + (" - FAILED" if error else ""), "",
             f"**{counts['done']}** done, **{counts['cached']}** cached, "
             f"**{counts['quarantined']}** quarantined", ""]
    if error is not None:
        text = str(error).strip().replace("|", "/") or type(error).__name__
        lines += ["## Error", "", f"**{type(error).__name__}**: {text[:2000]}", "",
                  "Everything done before the error is kept (cached): fix the cause and run it again.", ""]
    bad = [o for o in outcomes if o.status == "quarantined"]
    if bad and any(o.source for o in bad):  # e.g. the manifest line to fix
        lines += ["## Quarantined", "", "| item | source | reason |", "|---|---|---|"]
        lines += [f"| {o.item} | {o.source or '-'} | {o.reason.replace('|', '/')} |" for o in bad]
    elif bad:
        lines += ["## Quarantined", "", "| item | reason |", "|---|---|"]
        lines += [f"| {o.item} | {o.reason.replace('|', '/')} |" for o in bad]
    if extra_markdown:
        lines += ["", extra_markdown]
    create_markdown_artifact(key=f"{key}-summary", markdown="\n".join(lines), description=title)
    fanned = any(o.flow_run for o in outcomes)  # child-run columns only when there were children
    sourced = any(o.source for o in outcomes)
    create_table_artifact(key=f"{key}-items", table=[
        {"item": o.item, **({"source": o.source} if sourced else {}), "status": o.status, "reason": o.reason,
         "executed": ",".join(o.executed), "cached": ",".join(o.cached),
         **({"flow_run": o.flow_run, "worker": o.worker} if fanned else {})} for o in outcomes])
    for name, rows in (tables or {}).items():
        if rows:
            create_table_artifact(key=f"{key}-{name}", table=rows)
    return counts


_RUN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("rescue_run", default=None)


def tell(what: str, lines: Iterable[str], level: int = logging.WARNING) -> None:
    """Say ``lines`` to the operator where they look: the run's log, and one event each, which
    ``prefect deployment run ... --watch`` prints (the line as the event's resource name, the event
    named ``rescue.<what>``). For what a person must do next: a refusal's reasons, a round that waits."""
    from prefect import get_run_logger
    from prefect.events import emit_event
    from prefect.runtime import flow_run

    logger = get_run_logger()
    related = [{"prefect.resource.id": f"prefect.flow-run.{flow_run.id}", "prefect.resource.role": "flow-run"}] \
        if flow_run.id else []
    for i, line in enumerate(lines):
        logger.log(level, "%s", line)
        emit_event(event=f"rescue.{what}", resource={"prefect.resource.id": f"rescue.{what}.{flow_run.id}.{i}",
                                                     "prefect.resource.name": line}, related=related)
    _flush_events()


def _flush_events(timeout_s: float = 5.0) -> None:
    """Wait (at most ``timeout_s``) until the events emitted so far are sent: ``--watch`` stops
    at the run's final state, and a line told just before the run ends (a refusal) was otherwise
    still queued in this process when the server recorded that state."""
    import threading

    from prefect.events.worker import EventsWorker

    sender = threading.Thread(target=EventsWorker.instance().wait_until_empty, daemon=True)
    sender.start()
    sender.join(timeout_s)


def note(outcomes: Iterable[Outcome] | None = None, extra_markdown: str | None = None) -> None:
    """Tell :func:`summary_on_failure` what the run has done so far (shown if it fails later)."""
    run = _RUN.get()
    if run is None:
        return
    if outcomes is not None:
        run["outcomes"] = list(outcomes)
    if extra_markdown is not None:
        run["extra"] = extra_markdown


def artifact_key(text: str) -> str:
    """An artifact key (lowercase letters, digits, dashes) from any text."""
    import re

    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", str(text).lower())).strip("-")[:60] or "run"


def summary_on_failure(key: str | Callable[[dict], str], title: Callable[[dict], str]):
    """Decorate a flow function (under ``@flow``): when it raises, publish its summary artifacts
    (``report``) with what it ``note()``-d and the error, then re-raise. ``key`` and ``title``
    may be functions of the flow's parameters."""
    def deco(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            run = {"outcomes": [], "extra": ""}
            token = _RUN.set(run)
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                try:
                    bound = sig.bind_partial(*args, **kwargs)
                    bound.apply_defaults()
                    params = dict(bound.arguments)
                    report(artifact_key(key(params) if callable(key) else key), title(params), run["outcomes"],
                           run["extra"], error=exc)
                except Exception:  # noqa: BLE001 - the run's own error matters more
                    pass
                raise
            finally:
                _RUN.reset(token)
        return wrapper
    return deco


def ensure_infrastructure(pools: Iterable[str], gpu_limit: str, gpu_slots: int,
                          push_limit: str = PUSH_LIMIT) -> list[str]:
    """Create the process work pools, the global GPU limit and the push limit (1 slot) if missing
    (one client, one process: `rescue stack register` calls this instead of several `prefect` CLI runs)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    made = []
    with get_client(sync_client=True) as client:
        for pool in pools:
            try:
                client.read_work_pool(pool)
            except ObjectNotFound:
                try:
                    client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
                    made.append(f"pool {pool}")
                except ObjectAlreadyExists:  # a worker starting at the same time made it
                    pass
        for name, slots in ((gpu_limit, gpu_slots), (push_limit, 1)):
            if not name:
                continue
            try:
                client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                try:
                    client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))
                    made.append(f"limit {name}={slots}")
                except ObjectAlreadyExists:
                    pass
    return made
