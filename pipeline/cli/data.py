"""``rescue import-rescue`` and ``rescue validate``: the paper's JSONL into the corpus, V1-V13 over it."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.app import app, cli_console
from pipeline.paths import DataRoot


# --- import / validate (pipeline.benchmark.paper_format, pipeline.validate) -------------------


def _print_violations(console, violations, limit: int = 20) -> None:
    for v in violations[:limit]:
        console.print(f"  [red]{v}[/red]", markup=True, highlight=False)
    if len(violations) > limit:
        console.print(f"  ... and {len(violations) - limit} more (see the report file)")


@app.command("import-rescue")
def import_rescue(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="A benchmark_191.jsonl-shaped file."),
    data_root: Optional[Path] = typer.Option(None, help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    fix_mojibake: bool = typer.Option(False, help="Repair UTF-8-read-as-Latin-1 text instead of keeping it verbatim."),
) -> None:
    """Import the paper's JSONL into the corpus, reporting every problem by sample and row."""

    from pipeline import corpus, store
    from pipeline.benchmark import paper_format
    from pipeline.validate import violations_table

    console = cli_console()
    root = DataRoot.from_env(data_root)
    with console.status(f"reading {file.name}"):
        result = paper_format.load_rescue_jsonl(file, fix_mojibake=fix_mojibake)
    merged = corpus.merge_into_corpus(root, result.samples)
    report = root.import_report(result.source_sha256)
    store.write_parquet(violations_table(result.violations + result.quirks), report)
    rows = sum(len(s["rows"]) for s in result.samples)
    console.print(f"[bold]{file.name}[/bold]: {len(result.samples)} samples ({rows} rows) imported, "
                  f"{result.skipped} skipped; corpus: {len(merged.added)} added, {len(merged.replaced)} replaced, "
                  f"{len(merged.unchanged)} unchanged")
    console.print(f"{len(result.violations)} violations, {len(result.quirks)} documented release quirks -> {report}")
    _print_violations(console, result.violations)


@app.command("validate")
def validate_corpus(
    data_root: Optional[Path] = typer.Option(None, help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """Check every corpus sample against V2-V11; exit 1 if anything is wrong."""

    from pipeline import corpus
    from pipeline.validate import validate_samples

    console = cli_console()
    samples = corpus.load_corpus(DataRoot.from_env(data_root))
    violations = validate_samples(samples)
    console.print(f"{len(samples)} samples, {sum(len(s['rows']) for s in samples)} rows: {len(violations)} violations")
    _print_violations(console, violations)
    raise typer.Exit(1 if violations else 0)


# --- synthetic data (pipeline.synthetic) -------------------------------------------------

synth_app = typer.Typer(help="Synthetic data for tests, benchmarks and rehearsals (never real labels).",
                        no_args_is_help=True)
app.add_typer(synth_app, name="synth")


@synth_app.command("batch")
def synth_batch(
    scale: float = typer.Option(..., "--scale", min=0.001, max=4.0, help="Size as a multiple of RESCUE (1 = 191 interviews, 1,064.8 min)."),
    out: str = typer.Option(..., "--out", help="Batch name: written to <data root>/batches/<name>/."),
    seed: int = typer.Option(0, "--seed", help="Same seed, same bytes."),
    max_rows: Optional[int] = typer.Option(None, "--max-rows", min=4, help="Cut every interview to this many consecutive rows in which every listed voice speaks "
                                              "(more only where no such run exists; smoke runs)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, max=64, help="Interviews rendered at once (default: one per core, at most 4)."),
    data_root: Optional[Path] = typer.Option(None, help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """A RESCUE-shaped interview batch (videos, subtitles, manifest.csv) and its truth.json."""
    import json
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeline.paths import InvalidId
    from pipeline.synthetic import batch

    console = cli_console()
    root = DataRoot.from_env(data_root)
    started = time.monotonic()
    try:
        n = len(batch.plan_batch(scale, seed, max_rows))
        with Progress(TextColumn("interviews"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("render", total=n)
            result = batch.generate_batch(root, out, scale, seed, max_rows, jobs,
                                          on_done=lambda _sid: bar.advance(task))
    except (batch.BatchError, InvalidId, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    wall = time.monotonic() - started
    size = sum(p.stat().st_size for p in result.folder.iterdir() if p.is_file())
    truth = json.loads(result.truth.read_text())
    t, spec = result.totals, truth["spec"]
    console.print(f"[bold]{result.folder}[/bold]: {t['interviews']} interviews ({t['couple']} couple, {t['family']} family), "
                  f"{t['rows']} rows, {t['minutes']} min (RESCUE at scale {scale:g}: {spec['interviews']} interviews, "
                  f"{spec['rows']} rows, {spec['minutes']} min)", highlight=False)
    console.print(f"bad files: {', '.join(f'{k} {v}' for k, v in t['faults'].items())}; interruptions "
                  f"{t['interruptions']}, backchannels {t['backchannels']} ({t['overlapped_backchannels']} over speech)",
                  highlight=False)
    console.print("expected agreement (Krippendorff alpha implied by the annotators' error rates; "
                  + ", ".join(f"{a['name']} {a['error_rates']['*']:g}" for a in truth["annotators"]) + " base):",
                  highlight=False)
    for rnd, fields in truth["expected_agreement"].items():
        shown = [f"{f}={v['alpha']:.3f}{'' if v['exact'] else '~'}" for f, v in fields.items() if v["alpha"] is not None]
        console.print(f"  {rnd}: {', '.join(shown) or '-'}", highlight=False)
    console.print(f"manifest {result.manifest.name}, truth {result.truth.name}; {size / 1e6:.1f} MB on disk; "
                  f"generated in {wall:.1f} s", highlight=False)
