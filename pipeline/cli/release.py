"""``rescue release``: versioned, immutable benchmark releases, private until ``publish``."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.app import app, cli_console, narrow_table
from pipeline.cli.data import _print_violations
from pipeline.paths import DataRoot


# --- release (pipeline.benchmark.release) ------------------------------------------------------

release_app = typer.Typer(help="Versioned, immutable benchmark releases (Parquet + manifest + dataset card).",
                          no_args_is_help=True)
app.add_typer(release_app, name="release")


@release_app.command("build")
def release_build(
    version: str = typer.Option(..., "--version", help="Semantic version X.Y.Z. An existing version built from the "
                                "same input is reused (nothing is written); from another input it is refused."),
    input_file: Optional[Path] = typer.Option(None, "--input", help="Samples in the paper's benchmark_191.jsonl shape."),
    rows_dir: Optional[Path] = typer.Option(None, "--rows-dir", help="Directory with samples.parquet + rows.parquet "
                                            "(default: the corpus, <data root>/corpus)."),
    synthetic: bool = typer.Option(False, "--synthetic", help="Use the synthetic RESCUE-scale corpus (demo)."),
    scale: float = typer.Option(1.0, "--scale", help="Synthetic corpus size as a multiple of RESCUE's 191 samples."),
    seed: int = typer.Option(0, "--seed", help="Synthetic corpus seed."),
    dev_fraction: float = typer.Option(0.0, "--dev-fraction", help="Share of couple/family groups in a dev split."),
    strict: bool = typer.Option(False, "--strict", help="Refuse to build when validation finds problems."),
    license_id: str = typer.Option("other", "--license", help="Licence id for the dataset card (e.g. cc-by-nc-4.0); "
                                   "'other' (default) names the terms with --license-name / --license-link."),
    license_name: str = typer.Option("rescue-release-terms", "--license-name", help="Name of the terms when --license other."),
    license_link: str = typer.Option("", "--license-link", help="Where the terms are (URL or a path in the release)."),
    license_text: Optional[str] = typer.Option(None, "--license-text", help="The card's licence paragraph (default: the "
                                               "terms are the maintainer's to set; the source videos' terms apply)."),
    citation: Optional[Path] = typer.Option(None, "--citation", help="A .bib file with the paper's BibTeX (default: a "
                                            "marked placeholder built from the title and arXiv id)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """Build releases/<version>/ from the corpus (default), a rows directory, a RESCUE JSONL file or the synthetic corpus."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeline import store
    from pipeline.benchmark import release
    from pipeline.config import Settings
    from pipeline.synthetic.corpus import load_synthetic

    console = cli_console()
    if sum([input_file is not None, rows_dir is not None, synthetic]) > 1:
        console.print("[red]give at most one of --input FILE.jsonl, --rows-dir DIR, --synthetic[/red]")
        raise typer.Exit(2)
    settings = Settings.from_env(data_root)
    root = DataRoot(settings.data_root)  # built once: every call below takes it
    from pipeline.benchmark.card import CardOptions

    card = CardOptions(license=license_id, license_name=license_name, license_link=license_link)
    if license_text:
        card = replace(card, license_text=license_text)
    if citation is not None:
        if not citation.is_file():
            console.print(f"[red]--citation {citation}: no such file[/red]", highlight=False)
            raise typer.Exit(2)
        card = replace(card, paper_bibtex=citation.read_text(encoding="utf-8").strip())
    steps = 3 + 6 + len(release.schemas.RELEASE_CONFIGS) + 4  # load, validate, tables, tasks, files, paper, manifest
    try:
        with Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as progress:
            bar = progress.add_task("loading input", total=steps)
            if synthetic:
                inp = load_synthetic(scale, seed)
            else:
                inp = release.load_source(input_file or rows_dir, root)
            progress.update(bar, advance=2, description="building tasks")
            result = release.build_or_reuse(
                inp, version, root, dev_fraction=dev_fraction, settings=settings, strict=strict, card=card,
                on_step=lambda msg: progress.update(bar, advance=1, description=msg))
    except (release.ReleaseError, store.AlreadyExists) as exc:
        console.print(f"[red]release build failed:[/red] {exc}")
        raise typer.Exit(1) from None
    if result.reused:
        console.print(f"release {version} already exists, built from the same input: nothing to do (reused) "
                      f"-> {result.path}", highlight=False)
        return

    m = result.manifest
    table = narrow_table("task", title=f"RESCUE release {version}")
    for col in ("couple inst.", "family inst.", "couple samp.", "family samp."):
        table.add_column(col, justify="right")
    for task, c in m["counts"].items():
        table.add_row(task.upper(), str(c["couple"]["instances"]), str(c["family"]["instances"]),
                      str(c["couple"]["samples"]), str(c["family"]["samples"]))
    console.print(table)
    st = m["statistics"]["all"]
    console.print(f"{st['samples']} samples, {st['total_turns']} rows, {st['total_duration_min']} min; splits "
                  + ", ".join(f"{k} {v}" for k, v in m["splits"]["samples"].items() if v)
                  + f"; validation problems: {m['validation']['problems']}")
    if inp.problems:
        _print_violations(console, inp.problems, limit=10)
    if m.get("synthetic"):
        console.print("[yellow]SYNTHETIC / DEMO data (the card says so):[/yellow] " + "; ".join(m["synthetic"]),
                      highlight=False)
    console.print(f"paper shapes: {len([k for k in m['files'] if k.startswith('paper/')])} files under "
                  f"{result.path / 'paper'} (benchmark.jsonl, er.jsonl, vp.jsonl, data/<sample_id>.json)", highlight=False)
    console.print(f"written: {result.path}")


def _change(old, new, limit: int = 80) -> str:
    """A changed value on one line, ``old -> new`` in JSON (strings quoted, so an empty one shows).
    Long texts are cut round the part that changed (the common start and end become ``...``)."""
    import json

    if isinstance(old, str) and isinstance(new, str) and max(len(old), len(new)) > limit:
        start = 0
        while start < min(len(old), len(new)) and old[start] == new[start]:
            start += 1
        end = 0
        while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
            end += 1
        start = max(0, start - 20)  # some context before the change
        end = max(0, end - 20)

        def cut(text: str) -> str:
            middle = text[start:len(text) - end]
            if len(middle) > limit:
                middle = middle[:limit] + "\u2026"
            return ("\u2026" if start else "") + middle + ("\u2026" if end else "")

        old, new = cut(old), cut(new)
    return f"{json.dumps(old, ensure_ascii=False, default=str)} -> {json.dumps(new, ensure_ascii=False, default=str)}"


@release_app.command("diff")
def release_diff(
    a: str = typer.Argument(..., help="Older version."),
    b: str = typer.Argument(..., help="Newer version."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    as_json: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
    examples: int = typer.Option(10, "--examples", min=0, help="List the first N changed/added/removed per table."),
) -> None:
    """What changed between two releases: samples, rows and task labels added/removed/changed,
    and the first N by sample and row (each changed field with its old and new value)."""
    import json


    from pipeline.benchmark import release

    console = cli_console()
    try:
        report = release.diff_releases(DataRoot.from_env(data_root), a, b, examples=examples)
    except release.ReleaseError as exc:
        console.print(f"[red]release diff failed:[/red] {exc}")
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
        return
    table = narrow_table("what", "added", "removed", "changed", "changed fields", title=f"release {a} -> {b}")
    entries = [("samples", report["samples"]), ("rows", report["rows"])]
    entries += [(f"{t} labels", r) for t, r in report["labels"].items()]
    for name, r in entries:
        table.add_row(name, str(r["added"]), str(r["removed"]), str(r["changed"]),
                      ", ".join(f"{k} {v}" for k, v in r["changed_fields"].items()))
    console.print(table)

    def where(name: str, key: str) -> str:  # keys are "sample_id" or "sample_id/row_index"
        if name == "samples":
            return f"sample {key}"
        sid, _, row = key.rpartition("/")
        return f"sample {sid} row {row}"

    for name, r in entries:
        ex = r["examples"]
        lists = (("changed", [f"{where(name, d['key'])}: " + "; ".join(
                      f"{f} {_change(d['values'][f]['old'], d['values'][f]['new'])}" for f in d["fields"])
                      for d in ex["changed_fields"]]),
                 ("added", [where(name, k) for k in ex["added"]]), ("removed", [where(name, k) for k in ex["removed"]]))
        for what, lines in lists:
            if not r[what]:
                continue
            # one line per item, never wrapped: the output is read by people and grep alike
            console.print(f"{name} {what}: {r[what]}" + (f", the first {len(lines)}:" if lines else ""),
                          highlight=False, soft_wrap=True)
            for line in lines:
                console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
            if r[what] > len(lines):
                console.print(f"  ... and {r[what] - len(lines)} more (--examples N, or --json)", highlight=False,
                              soft_wrap=True)


@release_app.command("explain")
def release_explain(
    version: str = typer.Argument(..., help="An existing release version X.Y.Z."),
    sample_id: str = typer.Argument(..., help="A sample of the release (its sample_id)."),
    row: Optional[int] = typer.Argument(None, help="A row of the sample (its row_index): its video span too."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """What made a sample (or one row) of a release, in words: its video span, the video's and
    transcript's digests, the diarizer's model and segmenter's code digests, who annotated it in
    each round (opaque ids) and what an adjudicator settled, and the code the release was built from."""
    import json


    from pipeline.benchmark import release
    from pipeline.benchmark.release_lineage import ExplainError, explain

    console = cli_console()
    try:
        path = release.open_release(DataRoot.from_env(data_root), version)
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        lines = explain(path, manifest, sample_id, row)
    except (release.ReleaseError, ExplainError) as exc:
        console.print(f"[red]release explain failed:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    for line in lines:  # one line each, never wrapped: digests are read whole and grepped
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@release_app.command("export-paper")
def release_export_paper(
    version: str = typer.Argument(..., help="An existing release version X.Y.Z."),
    out_dir: Path = typer.Argument(..., help="A new folder; the files land in OUT_DIR/paper/."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """Write a release's data in the paper's shapes (benchmark.jsonl, er.jsonl, vp.jsonl, data/<sample>.json)."""

    from pipeline import store
    from pipeline.benchmark import paper_export, release

    console = cli_console()
    try:
        path = release.open_release(DataRoot.from_env(data_root), version)
        files = paper_export.export_paper(path, out_dir)
    except (release.ReleaseError, paper_export.PaperExportError, store.AlreadyExists) as exc:
        console.print(f"[red]export-paper failed:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    samples = sum(1 for k in files if k.startswith(paper_export.SAMPLES_DIR + "/"))
    console.print(f"release {version}: {len(files)} files ({samples} per-sample files) -> {Path(out_dir) / 'paper'}",
                  highlight=False)


@release_app.command("publish")
def release_publish(
    version: str = typer.Argument(..., help="An existing release version X.Y.Z."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """Share a release: make releases/<version>/ readable by everyone on this host (files 0644,
    folders 0755). Everything else under the data root stays owner-only; a release is private
    until this step."""

    from pipeline.benchmark import release

    console = cli_console()
    try:
        done = release.publish(DataRoot.from_env(data_root), version)
    except release.ReleaseError as exc:
        console.print(f"[red]release publish failed:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    console.print(f"published: {done.path} (files 0644, folders 0755)", highlight=False)
    for folder in done.opened:
        console.print(f"  {folder}: others may now pass through it to the release (search bit only)", highlight=False)
    if done.readable_elsewhere:
        console.print(f"[yellow]readable by others already (written before the data root was private; "
                      f"`chmod -R go-rwx` each to close it):[/yellow] "
                      + ", ".join(str(p) for p in done.readable_elsewhere), highlight=False)
