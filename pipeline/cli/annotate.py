"""``rescue label-studio``, ``rescue annotators`` and ``rescue annotate`` commands.

Argument parsing and printing only; the work is in the sibling modules. The API token is
never printed.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from pipeline.cli.app import DataRoot
from pipeline.paths import DataRoot as DataRootMap

console = Console()
label_studio_app = typer.Typer(help="Run the local Label Studio server (127.0.0.1, data under the data root).",
                               no_args_is_help=True)
annotators_app = typer.Typer(help="Annotator logins in Label Studio.", no_args_is_help=True)
annotate_app = typer.Typer(help="Blind annotation rounds: configs, push, pull, progress.", no_args_is_help=True)



def _settings(data_root: Optional[Path]):
    from pipeline.config import Settings

    return Settings.from_env(data_root)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(1)


def _client(settings):
    from pipeline.annotation.client import LabelStudioClient, LabelStudioError

    try:
        return LabelStudioClient.from_settings(settings)
    except LabelStudioError as exc:
        _fail(str(exc))


def _server(settings, port: Optional[int] = None):
    from pipeline.annotation.server import LabelStudioServer, default_server

    server = default_server(settings)
    if port:
        server = LabelStudioServer(server.data_dir, port=port, media_root=server.media_root)
    return server


# --- label-studio up / down / status -----------------------------------------------------------

@label_studio_app.command("up")
def ls_up(data_root: Optional[Path] = DataRoot,
          port: Optional[int] = typer.Option(None, help="Port (default $RESCUE_LABEL_STUDIO_PORT or 8080)."),
          timeout: float = typer.Option(300.0, help="Seconds to wait for /health.")) -> None:
    """Start Label Studio (no-op when it already runs); admin and token from LABEL_STUDIO_* env vars."""
    from pipeline.annotation.server import LabelStudioServerError

    server = _server(_settings(data_root), port)
    try:
        with console.status(f"starting Label Studio on {server.url} (first start: about a minute)"):
            status = server.start(timeout=timeout)
    except LabelStudioServerError as exc:
        _fail(str(exc))
    console.print(status.describe(), highlight=False)


@label_studio_app.command("down")
def ls_down(data_root: Optional[Path] = DataRoot, port: Optional[int] = typer.Option(None)) -> None:
    """Stop the Label Studio server started by `up`."""
    server = _server(_settings(data_root), port)
    console.print("stopped" if server.stop() else "Label Studio was not running")


@label_studio_app.command("status")
def ls_status(data_root: Optional[Path] = DataRoot, port: Optional[int] = typer.Option(None)) -> None:
    """Whether the server runs and answers; exit code 1 when it is not healthy."""
    status = _server(_settings(data_root), port).status()
    console.print(status.describe(), highlight=False)
    if not status.healthy:
        raise typer.Exit(1)


# --- annotators ----------------------------------------------------------------------------

@annotators_app.command("add")
def annotators_add(
    email: str = typer.Argument(..., help="The annotator's e-mail (their login)."),
    data_root: Optional[Path] = DataRoot,
    password_env: str = typer.Option("RESCUE_ANNOTATOR_PASSWORD",
                                     help="Environment variable holding the password; prompted when unset."),
) -> None:
    """Create a Label Studio login for an annotator and set their password (never printed)."""
    from pipeline.annotation.client import LabelStudioError
    from pipeline.annotation.server import LabelStudioServerError

    if "@" not in email:
        _fail(f"{email!r} is not an e-mail address")
    settings = _settings(data_root)
    password = os.environ.get(password_env) or typer.prompt(f"password for {email}", hide_input=True,
                                                            confirmation_prompt=True)
    try:
        user = _client(settings).create_user(email)
        _server(settings).set_password(email, password)
    except (LabelStudioError, LabelStudioServerError) as exc:
        _fail(str(exc))
    console.print(f"annotator {email} ready (Label Studio user {user['id']})", highlight=False)


@annotators_app.command("list")
def annotators_list(data_root: Optional[Path] = DataRoot) -> None:
    """Registered annotators (every Label Studio login except the pipeline's admin)."""
    from pipeline.annotation.client import LabelStudioError
    from pipeline.annotation.push import list_annotators

    try:
        for email in list_annotators(_client(_settings(data_root))):
            console.print(email, highlight=False)
    except LabelStudioError as exc:
        _fail(str(exc))


# --- annotate --------------------------------------------------------------------------------

@annotate_app.command("render-configs")
def render_configs(check: bool = typer.Option(False, help="Only report configs that differ; exit 1 if any.")) -> None:
    """Regenerate annotation_schemas/label_studio/*.xml from the round definitions."""
    from pipeline.annotation import ls_config

    if check:
        stale = ls_config.stale_configs()
        for p in stale:
            console.print(f"stale: {p}", highlight=False)
        if stale:
            raise typer.Exit(1)
        console.print("all Label Studio configs match the round definitions")
        return
    rendered = ls_config.render_all(write=True)
    console.print(f"{len(rendered)} configs written to {ls_config.CONFIG_DIR}", highlight=False)


@annotate_app.command("push")
def annotate_push(
    round_name: str = typer.Argument(..., metavar="ROUND", help="transcript | emotion | viewpoints | relation | strategy"),
    data_root: Optional[Path] = DataRoot,
    samples: Optional[Path] = typer.Option(None, help="Samples table to push instead of the interviews in annotation."),
    rows: Optional[Path] = typer.Option(None, help="Rows or draft-rows table to push with --samples."),
    annotator: Optional[list[str]] = typer.Option(None, "--annotator", "-a", help="Annotator e-mail (repeat); default all."),
    k: Optional[int] = typer.Option(None, "-k", help="Annotators per sample (default: the round's)."),
    prelabel: str = typer.Option("input", help="input (values in the rows) | none | model"),
    prelabel_url: Optional[str] = typer.Option(None, help="OpenAI-compatible base URL for --prelabel model."),
    prelabel_model: Optional[str] = typer.Option(None, help="Model name for --prelabel model."),
) -> None:
    """Push a round to every annotator's project (idempotent; safe to re-run).

    By default the interviews in annotation (the work store); the first round (transcript)
    first admits every segmented interview (`rescue segment`) that is not there yet."""
    from rich.progress import Progress

    from pipeline.annotation import push
    from pipeline.annotation.client import LabelStudioError
    from pipeline.annotation.prelabel import ModelPrelabeler
    from pipeline.annotation import intake

    settings = _settings(data_root)
    if (samples is None) != (rows is None):
        _fail("give --samples and --rows together (or neither: the interviews in annotation)")
    sample_list = None
    if samples is not None:
        try:
            sample_list = push.load_samples(samples, rows)
        except FileNotFoundError as exc:
            _fail(str(exc))
    if prelabel == "model":
        if not (prelabel_url and prelabel_model):
            _fail("--prelabel model needs --prelabel-url and --prelabel-model")
        labeler = ModelPrelabeler(prelabel_url, prelabel_model)
        kwargs = {"prelabel": labeler, "prelabel_source": labeler.source}
    elif prelabel in ("input", "none"):
        labeler = None
        kwargs = {"prelabel": push.input_values if prelabel == "input" else None, "prelabel_source": prelabel}
    else:
        _fail(f"--prelabel must be input, none or model, not {prelabel!r}")
    media = DataRootMap(settings.data_root).media_dir()
    try:
        with Progress(console=console, transient=True) as progress:
            bar = progress.add_task(f"pushing {round_name}", total=None)
            on_chunk = lambda done, total: progress.update(bar, completed=done, total=total)  # noqa: E731
            if sample_list is None:
                opened = intake.open_round(_client(settings), settings.data_root, round_name, annotator or None,
                                           k=k, on_chunk=on_chunk, **kwargs)
                report = opened.report
                if opened.admitted.added:
                    console.print(f"{len(opened.admitted.added)} segmented interviews admitted to annotation",
                                  highlight=False)
                for sid in opened.admitted.empty:
                    console.print(f"[yellow]not admitted[/yellow]: {sid}: segmenting left no row (nothing to "
                                  "annotate; check its transcript and diarization)", highlight=False)
            else:
                report = push.push_round(
                    _client(settings), round_name, sample_list, annotator or None, k=k,
                    data_root=settings.data_root, media_dir=media if media.is_dir() else None,
                    media_url=push.catalog_media_urls(settings.data_root), on_chunk=on_chunk, **kwargs)
    except (push.PushError, LabelStudioError, KeyError, FileNotFoundError) as exc:
        _fail(str(exc).strip("'\""))
    console.print(report.summary(), highlight=False)
    for who, sid in report.changed_after_annotation:
        console.print(f"  [yellow]changed after annotation[/yellow]: {sid} ({who})", highlight=False)
    if labeler and labeler.failures:
        console.print(f"  [yellow]{len(labeler.failures)} samples without model pre-annotation[/yellow]")


@annotate_app.command("pull")
def annotate_pull(
    round_name: str = typer.Argument(..., metavar="ROUND"),
    data_root: Optional[Path] = DataRoot,
    annotator: Optional[list[str]] = typer.Option(None, "--annotator", "-a", help="Only these annotators (repeat)."),
    show: int = typer.Option(20, help="Problems to print."),
) -> None:
    """Archive the round's exports, then validate them into the long label table."""
    from pipeline.annotation import pull
    from pipeline.annotation.client import LabelStudioError

    settings = _settings(data_root)
    try:
        with console.status(f"pulling {round_name}"):
            result = pull.pull_round(_client(settings), round_name, settings.data_root, annotators=annotator or None)
    except (LabelStudioError, KeyError, ValueError) as exc:
        _fail(str(exc).strip("'\""))
    console.print(result.summary(), highlight=False)
    console.print(f"labels: {DataRootMap(settings.data_root).labels(round_name)}", highlight=False)
    for p in result.problems.to_pylist()[:show]:
        where = f"{p['sample_id']} row {p['row_index']}" if p["row_index"] is not None else p["sample_id"]
        console.print(f"  [red]{where}[/red] {p['annotator']} {p['field'] or ''}: {p['problem']}", highlight=False)
    if result.problems.num_rows > show:
        console.print(f"  ... {result.problems.num_rows - show} more in "
                      f"{DataRootMap(settings.data_root).label_problems(round_name)}", highlight=False)


@annotate_app.command("acceptance")
def annotate_acceptance(
    round_name: str = typer.Argument(..., metavar="ROUND"),
    data_root: Optional[Path] = DataRoot,
    rebuild: bool = typer.Option(False, help="Recompute the table from the archived exports and their "
                                             "predictions first (no Label Studio needed)."),
    by_annotator: bool = typer.Option(False, "--by-annotator", help="One line per annotator and field."),
) -> None:
    """What annotators did with the pre-filled values (kept / changed / cleared / added), per
    prediction source and field, from the table the pull wrote (or, with --rebuild, the archive)."""
    from pipeline.annotation import acceptance
    from pipeline.annotation.pull import rebuild_acceptance
    from pipeline.paths import InvalidId

    settings = _settings(data_root)
    try:
        if rebuild:
            done = rebuild_acceptance(settings.data_root, round_name)
            if not done.states:
                _fail(f"round {round_name}: no archived export with its predictions under "
                      f"{DataRootMap(settings.data_root).exports_dir(round_name)} (`rescue annotate pull` archives them)")
            console.print(f"rebuilt from {done.states} archived export states: {len(done.lines)} lines -> "
                          f"{done.path}", highlight=False)
            for path in done.without_predictions:
                console.print(f"[yellow]no predictions archived[/yellow] beside {path} (pulled before they were); "
                              "its state counts only if a later pull archived one", highlight=False)
        lines = acceptance.read(settings.data_root, round_name)
    except (KeyError, InvalidId, ValueError) as exc:
        _fail(str(exc).strip("'\""))
    if lines is None:
        _fail(f"no acceptance table for round {round_name}: `rescue annotate pull {round_name}` writes it "
              "(or --rebuild from the archive)")
    rows = acceptance.summarize(lines, by_annotator=by_annotator)
    if not rows:
        console.print("no task of this round carried a prediction yet")
        return
    table = Table(*rows[0].keys())
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(table)


@annotate_app.command("status")
def annotate_status(
    data_root: Optional[Path] = DataRoot,
    round_name: Optional[list[str]] = typer.Option(None, "--round", "-r", help="Only these rounds (repeat)."),
    annotator: Optional[list[str]] = typer.Option(None, "--annotator", "-a", help="Only these annotators (repeat)."),
) -> None:
    """Per round and annotator: rows done / total, skipped, drafts, last activity, project URL."""
    from pipeline.annotation.client import LabelStudioError
    from pipeline.annotation.pull import missing_tasks
    from pipeline.annotation.status import STATUS_COLUMNS, round_status, status_rows

    settings = _settings(data_root)
    try:
        client = _client(settings)
        lines = round_status(client, round_name or None, annotator or None)
        gone = [m for m in missing_tasks(client, settings.data_root, round_name or None)
                if not annotator or m[2] in annotator]
    except LabelStudioError as exc:
        _fail(str(exc))
    table = Table(*STATUS_COLUMNS)
    for row in status_rows(lines):  # the same rows the annotation-round run publishes
        table.add_row(*row.values())
    console.print(table if lines else "no annotation projects yet")
    for rnd, scenario, who, sid in gone:  # pushed, then deleted in Label Studio: never dropped in silence
        console.print(f"[yellow]missing task[/yellow]: {rnd} {scenario} {who}: {sid} was pushed but is gone from "
                      "Label Studio (deleted); `rescue annotate push` recreates it", highlight=False)


@annotate_app.command("gate")
def annotate_gate(
    data_root: Optional[Path] = DataRoot,
    host: str = typer.Option("127.0.0.1", help="Address annotators reach (e.g. the machine's LAN address)."),
    port: int = typer.Option(8090, help="Port of the gate."),
) -> None:
    """Serve the annotators' gate to Label Studio (blind rounds): give annotators this address, never
    Label Studio's own; each sees only their own projects (see pipeline.annotation.proxy)."""
    import uvicorn

    from pipeline.annotation.proxy import make_app

    settings = _settings(data_root)
    if not settings.label_studio_token:
        _fail("set LABEL_STUDIO_USER_TOKEN (the gate asks Label Studio who owns what with it)")
    console.print(f"annotators' gate on http://{host}:{port} -> {settings.label_studio_url}", highlight=False)
    uvicorn.run(make_app(settings.label_studio_url, settings.label_studio_token.value), host=host, port=port,
                log_level="warning")
