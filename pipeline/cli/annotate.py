"""``rescue label-studio``, ``rescue annotators`` and ``rescue annotate`` commands.

Argument parsing and printing only; the work is in :mod:`pipeline.annotation` (the desks in
:mod:`pipeline.labelstudio.desks`). No password or token is ever printed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from pipeline.cli.app import DataRoot, cli_console, narrow_table
from pipeline.paths import DataRoot as DataRootMap

console = cli_console()
label_studio_app = typer.Typer(help="Run the desks: one Label Studio per person on 127.0.0.1, data under the data root.",
                               no_args_is_help=True)
annotators_app = typer.Typer(help="People (annotators, adjudicators) and their desks.", no_args_is_help=True)
annotate_app = typer.Typer(help="Blind annotation rounds: configs, push, pull, progress.", no_args_is_help=True)



def _settings(data_root: Optional[Path]):
    from pipeline.config import Settings

    return Settings.from_env(data_root)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(1)


def _desks(settings, root: DataRootMap | None = None):
    """The desks of the command's data root (``root``: the one the command built, else built here)."""
    from pipeline.labelstudio.desks import Desks

    return Desks(root or DataRootMap(settings.data_root), settings)


def _desk_errors():
    from pipeline.labelstudio.client import LabelStudioError
    from pipeline.labelstudio.desks import DeskError
    from pipeline.labelstudio.server import LabelStudioServerError

    return (LabelStudioError, DeskError, LabelStudioServerError)


# --- label-studio: every desk, or one ---------------------------------------------------------

AnnotatorOpt = typer.Option(None, "--annotator", "-a", help="Only this person's desk (repeat); default every desk.")


@label_studio_app.command("up")
def ls_up(data_root: Optional[Path] = DataRoot, annotator: Optional[list[str]] = AnnotatorOpt,
          timeout: float = typer.Option(300.0, help="Seconds to wait for each desk's /health.")) -> None:
    """Start the desks (one Label Studio per person, 127.0.0.1; no-op for those already up) and
    each desk's front, the address its person opens (a front that cannot start is said in one
    line; that person's address is then the desk's)."""
    desks = _desks(_settings(data_root))
    if not desks.all():
        console.print("no desks yet: add people with `rescue annotators add EMAIL [--adjudicator]`")
        return
    say = lambda m: console.print(m, highlight=False)  # noqa: E731
    try:
        with console.status("starting the desks (a few seconds each)"):
            desks.up(annotator or None, timeout=timeout, log=say)
            desks.fronts_up(annotator or None, log=say)
    except _desk_errors() as exc:
        _fail(str(exc))


@label_studio_app.command("down")
def ls_down(data_root: Optional[Path] = DataRoot, annotator: Optional[list[str]] = AnnotatorOpt) -> None:
    """Stop the desks started by `up` (every desk, or one)."""
    try:
        stopped = _desks(_settings(data_root)).down(annotator or None)
    except _desk_errors() as exc:
        _fail(str(exc))
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "no desk was running", highlight=False)


@label_studio_app.command("status")
def ls_status(data_root: Optional[Path] = DataRoot) -> None:
    """Each desk's state and address; exit code 1 when one is not healthy."""
    lines = _desks(_settings(data_root)).status()
    for desk, status in lines:
        console.print(f"{desk.email} ({desk.role}): {status.describe()}", highlight=False)
    if not lines:
        console.print("no desks yet: add people with `rescue annotators add EMAIL [--adjudicator]`")
    if any(not st.healthy for _, st in lines):
        raise typer.Exit(1)


@label_studio_app.command("serve")
def ls_serve(data_root: Optional[Path] = DataRoot, annotator: Optional[list[str]] = AnnotatorOpt,
             host: Optional[str] = typer.Option(None, help="Address the desks listen on (default $RESCUE_DESK_HOST or "
                                                          "127.0.0.1; 0.0.0.0 only inside a container whose ports "
                                                          "are published on 127.0.0.1).")) -> None:
    """Run the desks in the foreground until interrupted (SIGTERM/SIGINT stops them): for containers."""
    import signal
    import threading

    from pipeline.labelstudio.desks import Desks

    settings = _settings(data_root)
    root = DataRootMap(settings.data_root)  # built once: every call below takes it
    desks = Desks(root, settings, host=host)
    try:
        desks.up(annotator or None, log=lambda m: console.print(m, highlight=False))
    except _desk_errors() as exc:
        _fail(str(exc))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(5):
        for desk, status in desks.status():
            if (not annotator or desk.email in annotator) and not status.running:
                console.print(f"desk of {desk.email} stopped; starting it again", highlight=False)
                desks.up([desk.email], log=lambda m: console.print(m, highlight=False))
    console.print(f"stopped: {', '.join(desks.down(annotator or None))}", highlight=False)


@label_studio_app.command("migrate-to-desks")
def ls_migrate(data_root: Optional[Path] = DataRoot,
               adjudicator: Optional[list[str]] = typer.Option(
                   None, "--adjudicator", metavar="EMAIL", help="A person who adjudicates (repeat): each gets the adjudication "
                                               "projects on their own desk. Needed when there are any.")) -> None:
    """Move a data root's single shared Label Studio (rounds in progress) to one desk per person:
    projects, tasks, annotations and drafts, nothing lost (see pipeline.labelstudio.migrate)."""
    from pipeline.annotation.status import round_history
    from pipeline.labelstudio import migrate

    settings = _settings(data_root)
    root = DataRootMap(settings.data_root)  # built once: every call below takes it
    try:
        report = migrate.migrate_to_desks(root, adjudicator or (),
                                          log=lambda m: console.print(m, highlight=False),
                                          history=round_history(root))
    except (*_desk_errors(), migrate.MigrationError) as exc:
        _fail(str(exc))
    console.print(report.summary(), highlight=False, soft_wrap=True)  # one line: people and grep read it


# --- annotators ----------------------------------------------------------------------------

@annotators_app.command("add")
def annotators_add(
    email: str = typer.Argument(..., help="The person's e-mail (their login)."),
    data_root: Optional[Path] = DataRoot,
    adjudicator: bool = typer.Option(False, "--adjudicator", help="This person adjudicates (never annotates)."),
    password_env: str = typer.Option("RESCUE_ANNOTATOR_PASSWORD",
                                     help="Environment variable holding the password; prompted when unset."),
    password_stdin: bool = typer.Option(False, "--password-stdin",
                                        help="Read the password from the first line of stdin (e.g. from a file "
                                             "only you can read: `< pw.txt`)."),
    simulated: bool = typer.Option(False, "--simulated",
                                   help="A program answers at this desk, not a person (demos, benches); releases "
                                        "then say the round's answers were simulated. Recorded once."),
    desk_base_port: Optional[int] = typer.Option(None, envvar="RESCUE_DESK_BASE_PORT", show_envvar=True,
                                                 min=1, max=65535, show_default="8081",
                                                 help="A new desk takes the first free port from here (kept in "
                                                      "the registry: later starts use the same port)."),
    front_base_port: Optional[int] = typer.Option(None, envvar="RESCUE_FRONT_BASE_PORT", show_envvar=True,
                                                  min=1, max=65535, show_default="desk base port + 100",
                                                  help="A new desk's front takes the first free port from here "
                                                       "(kept in the registry)."),
) -> None:
    """Make a person and their desk (their own Label Studio), and set their password (never printed;
    at least 12 characters). Adding someone again sets their new password, ends their sessions and
    replaces their API tokens."""
    for name, port in (("RESCUE_DESK_BASE_PORT", desk_base_port), ("RESCUE_FRONT_BASE_PORT", front_base_port)):
        if port is not None:  # where the settings and the registry read them
            os.environ[name] = str(port)
    settings = _settings(data_root)
    root = DataRootMap(settings.data_root)  # built once: every call below takes it
    desks = _desks(settings, root)
    if password_stdin:  # never an argument: a command line is readable by every local account
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = os.environ.get(password_env) or typer.prompt(f"password for {email}", hide_input=True,
                                                                confirmation_prompt=True)
    try:
        with console.status(f"making the desk of {email} (a few seconds)"):
            desk = desks.add(email, "adjudicator" if adjudicator else "annotator", password, simulated=simulated)
    except _desk_errors() as exc:
        _fail(str(exc))
    console.print(f"{desk.role} {desk.email} ready: {desks.public_url(desk)}", highlight=False)


@annotators_app.command("list")
def annotators_list(data_root: Optional[Path] = DataRoot,
                    as_json: bool = typer.Option(False, "--json",
                                                 help='JSON list of {"email", "role", "url", "desk_url"}.')) -> None:
    """Everyone with a desk: e-mail, role, the address they open (their front's while it runs,
    else their desk's) and, for operators, the desk's own address."""
    import json

    try:
        desks = _desks(_settings(data_root))
        people = [{"email": d.email, "role": d.role, "url": desks.public_url(d), "desk_url": desks.url(d)}
                  for d in desks.all()]
    except _desk_errors() as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(people))
        return
    for p in people:
        console.print(f"{p['email']}  {p['role']}  {p['url']}  (desk: {p['desk_url']})", highlight=False,
                      soft_wrap=True)


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
    redraft: Optional[list[str]] = typer.Option(
        None, "--redraft", metavar="SAMPLE", help="Re-drafted interview whose new drafts replace the answered old "
                                                  "ones (repeat); its answered tasks are archived, then pushed anew."),
) -> None:
    """Push a round to every annotator's project (idempotent; safe to re-run).

    By default the interviews in annotation (the work store); the first round (transcript)
    first admits every segmented interview (`rescue segment`) that is not there yet. An
    interview segmented again since keeps its old drafts while it has answers (one line says
    so), unless named with --redraft."""
    from rich.progress import Progress

    from pipeline.annotation import push
    from pipeline.annotation.prelabel import ModelPrelabeler
    from pipeline.annotation import intake

    settings = _settings(data_root)
    root = DataRootMap(settings.data_root)  # built once: every call below takes it
    if (samples is None) != (rows is None):
        _fail("give --samples and --rows together (or neither: the interviews in annotation)")
    if redraft and samples is not None:
        _fail("--redraft replaces drafts of interviews in annotation; it does not go with --samples")
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
    try:
        with Progress(console=console, transient=True) as progress:
            bar = progress.add_task(f"pushing {round_name}", total=None)
            on_chunk = lambda done, total: progress.update(bar, completed=done, total=total)  # noqa: E731
            if sample_list is None:
                opened = intake.open_round(_desks(settings, root), root, round_name, annotator or None,
                                           k=k, on_chunk=on_chunk, redraft=redraft or (), **kwargs)
                report = opened.report
                if opened.admitted.added:
                    console.print(f"{len(opened.admitted.added)} segmented interviews admitted to annotation",
                                  highlight=False)
                for sid in opened.admitted.empty:
                    console.print(f"[yellow]not admitted[/yellow]: {sid}: segmenting left no row (nothing to "
                                  "annotate; check its transcript and diarization)", highlight=False)
                for line in opened.admitted.held_lines():  # one line each, never wrapped
                    console.print(f"[yellow]kept old drafts[/yellow]: {line}", highlight=False, soft_wrap=True)
                for sid in opened.admitted.redrafted:
                    console.print(f"re-drafted: {sid}: its new drafts replace the old", highlight=False, soft_wrap=True)
                for sid in opened.admitted.redraft_unchanged:
                    console.print(f"--redraft {sid}: its drafts are those in annotation already", highlight=False,
                                  soft_wrap=True)
            else:
                report = push.push_round(
                    _desks(settings, root), round_name, sample_list, annotator or None, k=k,
                    root=root,
                    media_url=push.catalog_media_urls(root), on_chunk=on_chunk, **kwargs)
    except (push.PushError, *_desk_errors(), KeyError, FileNotFoundError) as exc:
        _fail(str(exc).strip("'\""))
    console.print(report.summary(), highlight=False, soft_wrap=True)  # one line: people and grep read it
    for who, sid in report.changed_after_annotation:
        console.print(f"  [yellow]changed after annotation[/yellow]: {sid} ({who})", highlight=False)
    for who, sid, n in report.replaced:
        console.print(f"  replaced: {sid} ({who}): {n} answered task{'s' if n != 1 else ''} archived, pushed anew",
                      highlight=False, soft_wrap=True)
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

    settings = _settings(data_root)
    root = DataRootMap(settings.data_root)  # built once: every call below takes it
    try:
        with console.status(f"pulling {round_name}"):
            result = pull.pull_round(_desks(settings, root), round_name, root, annotators=annotator or None)
    except (*_desk_errors(), KeyError, ValueError) as exc:
        _fail(str(exc).strip("'\""))
    from rich.markup import escape

    console.print(escape(result.summary()), highlight=False)
    console.print(f"labels: {root.labels(round_name)}", highlight=False)
    for _, _, line in result.replaced:  # answers to drafts --redraft replaced: archived, one line per sample
        console.print(f"  [yellow]replaced drafts[/yellow] {escape(line)}", highlight=False, soft_wrap=True)
    # What was not counted first (a task or answer the push did not give that desk), then the rest;
    # one line each, the annotator's own text escaped (it is theirs to write).
    first = set(result.not_counted)
    problems = result.problems.to_pylist()
    problems.sort(key=lambda p: (p["annotator"], p["sample_id"], p["problem"]) not in first)
    for p in problems[:show]:
        where = f"{p['sample_id']} row {p['row_index']}" if p["row_index"] is not None else p["sample_id"]
        # one line each, never wrapped: read by people and grep alike
        console.print(f"  [red]{escape(where)}[/red] {escape(p['annotator'])} {escape(p['field'] or '')}: "
                      f"{escape(p['problem'])}", highlight=False, soft_wrap=True)
    if len(problems) > show:
        console.print(f"  ... {len(problems) - show} more in "
                      f"{root.label_problems(round_name)}", highlight=False)


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
    root = DataRootMap(settings.data_root)  # built once: every call below takes it
    try:
        if rebuild:
            done = rebuild_acceptance(root, round_name)
            if not done.states:
                _fail(f"round {round_name}: no archived export with its predictions under "
                      f"{root.exports_dir(round_name)} (`rescue annotate pull` archives them)")
            console.print(f"rebuilt from {done.states} archived export states: {len(done.lines)} lines -> "
                          f"{done.path}", highlight=False)
            for path in done.without_predictions:
                console.print(f"[yellow]no predictions archived[/yellow] beside {path} (pulled before they were); "
                              "its state counts only if a later pull archived one", highlight=False)
        lines = acceptance.read(root, round_name)
    except (KeyError, InvalidId, ValueError) as exc:
        _fail(str(exc).strip("'\""))
    if lines is None:
        _fail(f"no acceptance table for round {round_name}: `rescue annotate pull {round_name}` writes it "
              "(or --rebuild from the archive)")
    rows = acceptance.summarize(lines, by_annotator=by_annotator)
    if not rows:
        console.print("no task of this round carried a prediction yet")
        return
    table = narrow_table(*rows[0].keys())
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(table)


def status_view(desks: list[tuple[str, str, bool, str]], lines: list | None) -> list:
    """What `rescue annotate status` prints, narrow enough for 80 columns (a longer e-mail or
    address wraps): per desk (``(email, role, healthy, public URL)``) its state and its person's
    own address in full, then that annotator's projects: the rows of
    :func:`pipeline.annotation.status.status_rows` less the annotator (the desk line says it)
    and the project link (too long for 80 columns: the round's name links to it where the
    terminal shows links; it is the desk's address + ``/projects/<id>/data``). ``lines`` None:
    the desks only."""
    from rich.padding import Padding
    from rich.text import Text

    from pipeline.annotation.status import STATUS_COLUMNS, status_rows

    shown = [c for c in STATUS_COLUMNS if c not in ("annotator", "project")]
    per: dict[str, list[dict]] = {}
    for row in status_rows(lines or []):  # the same rows the annotation-round run publishes
        per.setdefault(row["annotator"], []).append(row)
    out = []
    for email, role, healthy, url in desks:
        head = Text(f"desk {email} ({role}): {'up' if healthy else 'DOWN'} at ")
        head.append(url, style=f"link {url}")
        out.append(head)
        if per.get(email):
            table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
            for c in shown:  # headers on two lines; a value too long for its column wraps, never is cut
                table.add_column(c.replace(" ", "\n"), overflow="fold",
                                 justify="right" if c in ("rows done", "skipped", "samples done", "drafts") else "left")
            for row in per[email]:
                table.add_row(Text(row["round"], style=f"link {row['project']}"), *(row[c] for c in shown[1:]))
            out.append(Padding(table, (0, 0, 0, 2)))
    if lines == []:
        out.append("no annotation projects yet")
    return out


@annotate_app.command("status")
def annotate_status(
    data_root: Optional[Path] = DataRoot,
    round_name: Optional[list[str]] = typer.Option(None, "--round", "-r", help="Only these rounds (repeat)."),
    annotator: Optional[list[str]] = typer.Option(None, "--annotator", "-a", help="Only these annotators (repeat)."),
) -> None:
    """Each desk's state and address (the person's own); under each annotator, per round:
    rows done / total, skipped, samples done, drafts, last activity (the round links to its
    project). Fits 80 columns; a longer e-mail or address wraps."""
    from pipeline.annotation.pull import missing_tasks
    from pipeline.annotation.status import round_status

    settings = _settings(data_root)
    root = DataRootMap(settings.data_root)  # built once: every call below takes it
    desks = _desks(settings, root)
    states = [(desk.email, desk.role, st.healthy, desks.public_url(desk)) for desk, st in desks.status()]
    down = [email for email, _, healthy, _ in states if not healthy]
    if down:
        for line in status_view(states, None):
            console.print(line, highlight=False)
        _fail(f"desks down: {', '.join(down)}; start them with `rescue label-studio up`")
    try:
        lines = round_status(desks, round_name or None, annotator or None)
        gone = [m for m in missing_tasks(desks, root, round_name or None)
                if not annotator or m[2] in annotator]
    except _desk_errors() as exc:
        _fail(str(exc))
    for line in status_view(states, lines):
        console.print(line, highlight=False)
    for rnd, scenario, who, sid in gone:  # pushed, then deleted in Label Studio: never dropped in silence
        console.print(f"[yellow]missing task[/yellow]: {rnd} {scenario} {who}: {sid} was pushed but is gone from "
                      "Label Studio (deleted); `rescue annotate push` recreates it", highlight=False, soft_wrap=True)
