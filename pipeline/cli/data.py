"""``rescue import-rescue`` and ``rescue validate``: the paper's JSONL into the corpus, V1-V13 over it."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.app import app


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
    from rich.console import Console

    from pipeline import corpus, store
    from pipeline.benchmark import paper_format
    from pipeline.paths import DataRoot
    from pipeline.validate import violations_table

    console = Console()
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
    from rich.console import Console

    from pipeline import corpus
    from pipeline.paths import DataRoot
    from pipeline.validate import validate_samples

    console = Console()
    samples = corpus.load_corpus(DataRoot.from_env(data_root))
    violations = validate_samples(samples)
    console.print(f"{len(samples)} samples, {sum(len(s['rows']) for s in samples)} rows: {len(violations)} violations")
    _print_violations(console, violations)
    raise typer.Exit(1 if violations else 0)
