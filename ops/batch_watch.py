"""``rescue batch watch [RUN]``: follow an ``ingest-batch`` run and the interviews it fans out.

``prefect deployment run 'ingest-batch/default' --watch`` follows the batch run alone: while its
children (one ``ingest-interview`` run per interview, :mod:`flows.ingest_batch`) do the work it
prints heartbeats. This command reads the batch run and its children from the Prefect server
and shows a progress bar of the interviews done, served from the cache and quarantined, then
ends with each interview's status and, for a quarantined one, its manifest line and reason
(the batch's own ``ingest-batch-items`` table). A batch run without children (``fan_out=false``)
is followed through its own ``segment[<id>]`` task runs.

RUN: a flow run's name or id; by default the latest ``ingest-batch`` run. The server: the one
``PREFECT_API_URL`` names (``eval "$(rescue stack env)"``), else the local stack of the data root.
Exit status: 0 when the batch run ended Completed (quarantines included: the batch went on), 1
when it ended otherwise (Refused, Failed, Crashed, Cancelled) or RUN is not an ingest-batch run.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import typer

BATCH_FLOW = "ingest-batch"
STATUSES = ("done", "cached", "quarantined")

cli = typer.Typer(help="Batches of interviews on the Prefect server: follow one as it runs.", no_args_is_help=True)


class WatchError(RuntimeError):
    """What makes the watch impossible (no such run, not a batch run): one line."""


@dataclass
class Progress:
    """Where a batch stands: each interview seen so far with its status and reason."""

    total: int | None = None                            # interviews in the batch (its manifest), when known
    items: dict[str, tuple[str, str]] = field(default_factory=dict)   # item -> (status, reason)

    def counts(self) -> dict[str, int]:
        return {s: sum(st == s for st, _ in self.items.values()) for s in STATUSES}


@contextlib.contextmanager
def prefect_client(data_root: Path | None):
    """A Prefect client for the server of the operator's environment (``PREFECT_API_URL``), else
    for the local stack of ``data_root`` (its port and API auth string, read, never made here)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    if os.environ.get("PREFECT_API_URL"):
        with get_client(sync_client=True) as client:
            yield client
        return
    from ops.prefect_setup import api_url, auth_file
    from pipeline.config import Settings
    from pipeline.paths import DataRoot

    auth = auth_file(DataRoot(Settings.from_env(data_root).data_root.resolve()))
    values = {PREFECT_API_URL: api_url()}
    if auth.is_file():
        values[PREFECT_API_AUTH_STRING] = auth.read_text().strip()
    with temporary_settings(values), get_client(sync_client=True) as client:
        yield client


def find_run(client, run: str | None):
    """The ``ingest-batch`` flow run named or numbered ``run``; the latest one when None."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterName
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.exceptions import ObjectNotFound

    batch_flows = FlowFilter(name=FlowFilterName(any_=[BATCH_FLOW]))
    if run is None:
        runs = client.read_flow_runs(flow_filter=batch_flows, sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=1)
        if not runs:
            raise WatchError(f"no {BATCH_FLOW} run on the Prefect server at {_api()}")
        return runs[0]
    try:
        found = client.read_flow_run(uuid.UUID(run))
        if client.read_flow(found.flow_id).name != BATCH_FLOW:
            raise WatchError(f"flow run {run} is a run of {client.read_flow(found.flow_id).name}, "
                             f"not of {BATCH_FLOW}")
        return found
    except ValueError:  # not an id: a name
        runs = client.read_flow_runs(flow_filter=batch_flows, limit=1,
                                     flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run])))
    except ObjectNotFound:
        runs = []
    if not runs:
        raise WatchError(f"no {BATCH_FLOW} run named {run!r} on the Prefect server at {_api()} "
                         f"(`prefect flow-run ls --flow-name {BATCH_FLOW}` lists them)")
    return runs[0]


def _api() -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value() or "?")


def manifest_size(parent) -> int | None:
    """How many interviews the batch's manifest lists (None when it cannot be read from here)."""
    from pipeline.media.manifest import ManifestError, find_manifest, read_manifest

    batch_dir = (parent.parameters or {}).get("batch_dir")
    if not batch_dir:
        return None
    try:
        return len(read_manifest(find_manifest(Path(str(batch_dir))), []))
    except (ManifestError, OSError):
        return None


def _paged(read, **kwargs) -> list:
    out, offset = [], 0
    while True:
        page = read(**kwargs, limit=200, offset=offset)
        out += page
        if len(page) < 200:
            return out
        offset += 200


def _items_of(tasks) -> dict[str, tuple[str, str]]:
    """Each interview's status from its stage task runs (named ``<stage>[<id>]``): quarantined
    when a stage says so, done or cached once its segment task has ended Completed."""
    stages: dict[str, dict[str, object]] = {}
    for t in tasks:
        stage, _, rest = t.name.partition("[")
        if rest.endswith("]") and t.state is not None:
            stages.setdefault(rest[:-1], {})[stage] = t.state
    out = {}
    for item, states in stages.items():
        bad = next((s for s in states.values()
                    if s.name == "Quarantined" and not (s.message or "").startswith("not run")), None)
        if bad is not None:
            out[item] = ("quarantined", bad.message or "")
        elif "segment" in states and states["segment"].is_completed():
            out[item] = ("cached" if all(s.name == "Cached" for s in states.values()) else "done", "")
    return out


def _entries(child) -> list[str]:
    entry = (child.parameters or {}).get("entry")
    entries = entry if isinstance(entry, list) else [entry]
    return [str(e.get("sample_id")) for e in entries if isinstance(e, dict)]


class Follower:
    """Reads a batch run's progress from the server; a child that has ended is read once."""

    def __init__(self, client, parent):
        self.client, self.parent = client, parent
        self.ended: dict = {}         # child run id -> its items' (status, reason)
        self.total = manifest_size(parent)

    def poll(self) -> Progress:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId

        client = self.client
        self.parent = client.read_flow_run(self.parent.id)
        children = _paged(client.read_flow_runs, flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[self.parent.id])))
        progress = Progress(self.total)
        if not children:  # the batch runs its interviews itself (fan_out=false)
            tasks = _paged(client.read_task_runs, flow_run_filter=FlowRunFilter(id=FlowRunFilterId(
                any_=[self.parent.id])))
            progress.items.update(_items_of(tasks))
            return progress
        for child in children:
            if child.id not in self.ended and child.state is not None and child.state.is_final():
                tasks = _paged(client.read_task_runs,
                               flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[child.id])))
                items = _items_of(tasks)
                why = f"child flow run {child.name} ended {child.state.name}: {(child.state.message or '').strip()}"
                self.ended[child.id] = {i: items.get(i) or ("quarantined", why) for i in _entries(child)}
            progress.items.update(self.ended.get(child.id, {}))
        return progress

    def summary_rows(self) -> list[dict] | None:
        """The batch's own table (item, source, status, reason), once it has published it."""
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterId

        arts = self.client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[f"{BATCH_FLOW}-items"])),
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[self.parent.id])))
        if not arts:
            return None
        data = arts[0].data
        return data if isinstance(data, list) else json.loads(data)


def watch(client, run: str | None, console, interval_s: float = 2.0) -> int:
    """Follow the batch run until it ends; print each interview's status; its exit status."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

    parent = find_run(client, run)
    batch_dir = (parent.parameters or {}).get("batch_dir", "?")
    console.print(f"{BATCH_FLOW} run {parent.name} ({parent.id}): batch {escape(str(batch_dir))}",
                  highlight=False, soft_wrap=True)
    follower = Follower(client, parent)
    columns = (TextColumn("interviews"), BarColumn(), MofNCompleteColumn(),
               TextColumn("done {task.fields[done]}, cached {task.fields[cached]}, "
                          "quarantined {task.fields[quarantined]}"), TimeElapsedColumn())
    with Bar(*columns, console=console) as bar:
        task = bar.add_task("batch", total=follower.total, done=0, cached=0, quarantined=0)
        while True:
            progress = follower.poll()
            ended = follower.parent.state is not None and follower.parent.state.is_final()
            total = progress.total if progress.total is not None else (len(progress.items) if ended else None)
            bar.update(task, completed=len(progress.items), total=total, **progress.counts())
            if ended:
                break
            time.sleep(interval_s)
    state = follower.parent.state
    rows = follower.summary_rows()
    if rows is None:  # ended before it published its table (refused, crashed): what was seen
        rows = [{"item": i, "status": s, "source": "", "reason": r} for i, (s, r) in sorted(progress.items.items())]
    counts = {s: sum(r.get("status") == s for r in rows) for s in STATUSES}
    console.print(f"{BATCH_FLOW} run {follower.parent.name} ended {state.name}: {counts['done']} done, "
                  f"{counts['cached']} cached, {counts['quarantined']} quarantined", highlight=False, soft_wrap=True)
    if not state.is_completed() and state.message:
        console.print(escape(state.message.strip()), highlight=False, soft_wrap=True)
    width = max((len(str(r.get("item", ""))) for r in rows), default=0)
    for r in rows:
        line = f"  {str(r.get('item', '')):<{width}}  {r.get('status', '?')}"
        if r.get("status") == "quarantined":  # as the batch's log says it
            line += (f" ({r['source']})" if r.get("source") else "") + f": {r.get('reason') or '?'}"
        console.print(escape(line), highlight=False, soft_wrap=True)
    return 0 if state.is_completed() else 1


@cli.command("watch")
def watch_command(
    run: Optional[str] = typer.Argument(None, help=f"The {BATCH_FLOW} flow run's name or id (default: the latest)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root of the local stack, when "
                                             "PREFECT_API_URL is not set (default $RESCUE_DATA_ROOT or ./data)."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between two reads of the server."),
) -> None:
    """Follow a batch's interviews (its child runs) with a progress bar of those done, cached and
    quarantined; end with each interview's status and, when quarantined, its manifest line and
    reason. Exit 0 when the batch run ended Completed, else 1."""
    from rich.console import Console

    from flows import PrefectFault, PrefectUnavailable, prefect_calls

    console = Console()
    try:
        with prefect_calls("read the batch's flow runs"), prefect_client(data_root) as client:
            code = watch(client, run, console, interval)
    except (WatchError, PrefectUnavailable, PrefectFault) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)
