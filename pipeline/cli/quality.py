"""``rescue agreement``, ``rescue adjudicate`` and ``rescue gold``."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.app import app, cli_console


# --- agreement, adjudication, gold: pipeline.quality.{agreement,adjudication,gold}, one stage function each ---

adjudicate_app = typer.Typer(help="Adjudication of disagreements in Label Studio.", no_args_is_help=True)
gold_app = typer.Typer(help="Gold rows from the annotation rounds.", no_args_is_help=True)
app.add_typer(adjudicate_app, name="adjudicate")
app.add_typer(gold_app, name="gold")


@app.command("agreement")
def agreement_cmd(
    round_name: str = typer.Argument(..., metavar="ROUND", help="Annotation round (e.g. emotion)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Label table (default: the round's pulled labels)."),
    override: Optional[str] = typer.Option(None, "--override", help="Release this round although it is below "
                                           "threshold; the reason is recorded."),
    by: Optional[str] = typer.Option(None, "--by", help="Who decides the override."),
) -> None:
    """Krippendorff alpha / kappa per field; writes the report (beside the labels) and the gate record."""

    from pipeline.paths import DataRoot
    from pipeline.quality import agreement, gates

    console = cli_console()
    root = DataRoot.from_env(data_root)
    try:
        out = agreement.measure_round(root, round_name, labels)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    rep = out.report
    for table in _agreement_tables(round_name, rep.fields):
        console.print(table)
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    console.print("reading: Krippendorff (2004) - alpha >= .800 reliable, >= .667 tentative, below unreliable",
                  highlight=False)
    for f in rep.fields:
        for w in f.warnings:
            console.print(f"  [yellow]warning[/yellow] {f.field}: {w}", highlight=False)
    for t in rep.text_fields:
        console.print(f"  free text {t.field} ({t.measure}): {fmt(t.value)} over {t.n_units} units - {t.reading}",
                      highlight=False)
    for issue in rep.issues[:10]:
        console.print(f"  [yellow]{issue['kind']}[/yellow] {issue['message']}", highlight=False)
    if len(rep.issues) > 10:
        console.print(f"  ... and {len(rep.issues) - 10} more issues (see the report)")
    console.print(f"report: {out.paths['html']}", highlight=False)
    if override is not None:
        try:
            rec = gates.record_override(root, round_name, override, by or "")
        except (ValueError, FileNotFoundError) as exc:
            console.print(f"[red]override refused:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from None
        console.print(f"override recorded by {rec['by']}: {rec['reason']}", highlight=False)
    elif not rep.passed:
        existing = gates.current_override(root, round_name)
        if existing:
            console.print(f"below threshold, released under the override recorded by {existing['by']} "
                          f"({existing.get('recorded_at')}): {existing['reason']}", highlight=False)
            return
        console.print("[red]below threshold: this round blocks a release[/red] (adjudicate / re-annotate, or "
                      "--override REASON --by NAME)")
        raise typer.Exit(3)


def _adjudication_samples(samples: Optional[Path], rows: Optional[Path], root) -> list[dict] | None:
    """The samples given on the command line (either table defaults to the corpus's); None: the stage's
    default (the work store and the corpus, ``corpus.load_annotated``)."""
    if not (samples or rows):
        return None
    from pipeline.annotation.push import load_samples
    from pipeline.rows import rows_dir_paths

    corpus_tables = rows_dir_paths(root.corpus_dir())
    return load_samples(samples or corpus_tables["samples"], rows or corpus_tables["rows"])


def _agreement_tables(round_name: str, fields) -> list:
    """The gate per field, then the counts behind it: two tables that fit 80 columns (a field's
    name folds rather than being cut)."""
    from pipeline.cli.app import narrow_table
    from pipeline.quality.measures import band

    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    gate = narrow_table("field", title=f"agreement - round {round_name}")
    gate.add_column("alpha [95% CI]", no_wrap=True)
    gate.add_column("reading", no_wrap=True)
    gate.add_column("needs", justify="right", no_wrap=True)
    gate.add_column("gate", no_wrap=True)
    counts = narrow_table("field", title="units behind each alpha (paired: labelled twice or more; "
                                         "agree: observed agreement)")
    for col in ("metric", "units", "paired", "differ", "agree", "Fleiss"):
        counts.add_column(col, justify="left" if col == "metric" else "right", no_wrap=True)
    for f in fields:
        ci = "" if f.ci_low is None else f" [{f.ci_low:.2f}, {f.ci_high:.2f}]"
        verdict = {True: "[green]pass[/green]", False: "[red]FAIL[/red]", None: "[yellow]undefined[/yellow]"}[f.passed]
        gate.add_row(f.field, fmt(f.alpha) + ci, band(f.alpha) or "undefined", f"{f.threshold:.3f}", verdict)
        counts.add_row(f.field, f.metric, str(f.n_units), str(f.n_pairable), str(f.n_disagreeing),
                       fmt(f.percent_agreement), fmt(f.fleiss_kappa))
    return [gate, counts]


@adjudicate_app.command("push")
def adjudicate_push(
    round_name: str = typer.Argument(..., metavar="ROUND"),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    samples: Optional[Path] = typer.Option(None, help="Samples table the round was pushed from (default: the "
                                           "interviews in annotation and the corpus)."),
    rows: Optional[Path] = typer.Option(None, help="Rows table the round was pushed from (default: the corpus's, "
                                        "with --samples)."),
) -> None:
    """Put every disagreement of a pulled round into the adjudication projects on every adjudicator's desk."""

    from pipeline.labelstudio.client import LabelStudioError
    from pipeline.labelstudio.desks import DeskError, Desks
    from pipeline.config import Settings
    from pipeline.paths import DataRoot
    from pipeline.quality import adjudication

    console = cli_console()
    settings = Settings.from_env(data_root)
    root = DataRoot(settings.data_root)
    try:
        summary = adjudication.push_round(Desks(root, settings), root, round_name,
                                          _adjudication_samples(samples, rows, root))
    except (FileNotFoundError, KeyError, ValueError, LabelStudioError, DeskError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    console.print(f"round {round_name}: {summary.disagreements} disagreeing rows; tasks {summary.tasks_created} new, "
                  f"{summary.tasks_updated} refreshed, {summary.tasks_unchanged} unchanged; projects "
                  + ", ".join(f"{k}={v}" for k, v in summary.projects.items()), highlight=False)


@adjudicate_app.command("pull")
def adjudicate_pull(
    round_name: str = typer.Argument(..., metavar="ROUND"),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """Fetch the adjudicators' answers and store them (<data root>/annotation/adjudications/ROUND.parquet)."""

    from pipeline.labelstudio.client import LabelStudioError
    from pipeline.labelstudio.desks import DeskError, Desks
    from pipeline.config import Settings
    from pipeline.paths import DataRoot
    from pipeline.quality import adjudication

    console = cli_console()
    settings = Settings.from_env(data_root)
    root = DataRoot(settings.data_root)
    try:
        out = adjudication.pull_round(Desks(root, settings), root, round_name)
    except (KeyError, ValueError, LabelStudioError, DeskError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    for line in out.ignored:
        console.print(f"[yellow]not counted[/yellow]: {line}", highlight=False)
    console.print(f"round {round_name}: {out.rows} adjudicated rows ({out.table.num_rows} values) -> {out.path}",
                  highlight=False)


@gold_app.command("build")
def gold_build(
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    rounds: Optional[list[str]] = typer.Option(None, "--round", help="Rounds to use (default: every pulled round)."),
    allow_unresolved: bool = typer.Option(False, "--allow-unresolved", help="Build even where a disagreement has "
                                          "no adjudication (first annotator's value; marked in the provenance)."),
) -> None:
    """Gold rows (majority / median / adjudicator, with provenance), validated and merged into the corpus."""

    from pipeline.paths import DataRoot
    from pipeline.quality import gold

    console = cli_console()
    try:
        out = gold.build_and_store(DataRoot.from_env(data_root), round_names=rounds or None,
                                   strict=not allow_unresolved)
    except (FileNotFoundError, gold.UnresolvedError, KeyError, ValueError) as exc:
        console.print(f"[red]gold build refused:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    s = out.summary
    console.print(f"gold: {s['samples']} samples, {s['rows']} rows, {s['values']} values from rounds "
                  f"{', '.join(s['rounds'])}; " + ", ".join(f"{k} {v}" for k, v in s["methods"].items()), highlight=False)
    console.print(f"corpus: {s['corpus']['added']} added, {s['corpus']['replaced']} replaced, "
                  f"{s['corpus']['unchanged']} unchanged; {s['violations']} violations; provenance: "
                  f"{out.provenance_path}", highlight=False)
    if s["violations"]:
        for v in out.violations[:10]:
            console.print(f"  [red]{v}[/red]", highlight=False)
        raise typer.Exit(1)
