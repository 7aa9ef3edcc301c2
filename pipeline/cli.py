"""The ``rescue`` command line. Each stage adds its commands in its own section below;
all logic lives in the stage modules, the CLI only parses arguments and prints."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    name="rescue",
    help="Rebuild the RESCUE benchmark from therapy-interview videos.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold tokens or transcripts
)


@app.callback()
def _main() -> None:
    """rescue-pipeline command line."""


# --- import / validate (pipeline.rescue_format, pipeline.validate) -------------------


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

    from pipeline import corpus, rescue_format, store
    from pipeline.validate import violations_table

    console = Console()
    root = store.data_root(data_root)
    with console.status(f"reading {file.name}"):
        result = rescue_format.load_rescue_jsonl(file, fix_mojibake=fix_mojibake)
    merged = corpus.merge_into_corpus(root, result.samples)
    report = root / "reports" / f"import-{result.source_sha256[:12]}-violations.parquet"
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

    from pipeline import corpus, store
    from pipeline.validate import validate_samples

    console = Console()
    samples = corpus.load_corpus(store.data_root(data_root))
    violations = validate_samples(samples)
    console.print(f"{len(samples)} samples, {sum(len(s['rows']) for s in samples)} rows: {len(violations)} violations")
    _print_violations(console, violations)
    raise typer.Exit(1 if violations else 0)


# --- release (pipeline.release) ------------------------------------------------------

release_app = typer.Typer(help="Versioned, immutable benchmark releases (Parquet + manifest + dataset card).",
                          no_args_is_help=True)
app.add_typer(release_app, name="release")


@release_app.command("build")
def release_build(
    version: str = typer.Option(..., "--version", help="Semantic version X.Y.Z; an existing version is refused."),
    input_file: Optional[Path] = typer.Option(None, "--input", help="Samples in the paper's benchmark_191.jsonl shape."),
    rows_dir: Optional[Path] = typer.Option(None, "--rows-dir", help="Directory with samples.parquet + rows.parquet "
                                            "(default: the corpus, <data root>/corpus)."),
    synthetic: bool = typer.Option(False, "--synthetic", help="Use the synthetic RESCUE-scale corpus (demo)."),
    scale: float = typer.Option(1.0, "--scale", help="Synthetic corpus size as a multiple of RESCUE's 191 samples."),
    seed: int = typer.Option(0, "--seed", help="Synthetic corpus seed."),
    dev_fraction: float = typer.Option(0.0, "--dev-fraction", help="Share of couple/family groups in a dev split."),
    strict: bool = typer.Option(False, "--strict", help="Refuse to build when validation finds problems."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
) -> None:
    """Build releases/<version>/ from the corpus (default), a rows directory, a RESCUE JSONL file or the synthetic corpus."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from pipeline import release, store
    from pipeline.config import Settings

    console = Console()
    if sum([input_file is not None, rows_dir is not None, synthetic]) > 1:
        console.print("[red]give at most one of --input FILE.jsonl, --rows-dir DIR, --synthetic[/red]")
        raise typer.Exit(2)
    settings = Settings.from_env(data_root)
    if input_file is None and rows_dir is None and not synthetic:
        from pipeline.corpus import corpus_dir

        rows_dir = corpus_dir(settings.data_root)  # default: the working corpus
        if not rows_dir.is_dir():
            console.print(f"[red]no corpus yet at {rows_dir}[/red]: import one (`rescue import-rescue FILE`), build gold "
                          "rows (`rescue gold build`), or pass --input / --rows-dir / --synthetic")
            raise typer.Exit(1)
    steps = 3 + 6 + len(release.schemas.RELEASE_CONFIGS) + 1  # load, validate, tables, tasks, files, manifest
    try:
        with Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as progress:
            bar = progress.add_task("loading input", total=steps)
            if input_file is not None:
                inp = release.load_jsonl(input_file)
            elif rows_dir is not None:
                inp = release.load_rows_dir(rows_dir)
            else:
                inp = release.load_synthetic(scale, seed)
            progress.update(bar, advance=1, description="validating")
            release.validate(inp)
            progress.update(bar, advance=1, description="building tasks")
            result = release.build_release(
                inp, version, settings.data_root, dev_fraction=dev_fraction, settings=settings, strict=strict,
                on_step=lambda msg: progress.update(bar, advance=1, description=msg))
    except (release.ReleaseError, store.AlreadyExists) as exc:
        console.print(f"[red]release build failed:[/red] {exc}")
        raise typer.Exit(1) from None

    m = result.manifest
    table = Table(title=f"RESCUE release {version}", show_lines=False)
    table.add_column("task")
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
    console.print(f"written: {result.path}")


@release_app.command("diff")
def release_diff(
    a: str = typer.Argument(..., help="Older version."),
    b: str = typer.Argument(..., help="Newer version."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    as_json: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
) -> None:
    """What changed between two releases: samples, rows and task labels added/removed/changed."""
    import json

    from rich.console import Console
    from rich.table import Table

    from pipeline import release
    from pipeline.config import Settings

    console = Console()
    try:
        report = release.diff_releases(Settings.from_env(data_root).data_root, a, b)
    except release.ReleaseError as exc:
        console.print(f"[red]release diff failed:[/red] {exc}")
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return
    table = Table(title=f"release {a} -> {b}")
    for col in ("what", "added", "removed", "changed", "changed fields"):
        table.add_column(col)
    entries = [("samples", report["samples"]), ("rows", report["rows"])]
    entries += [(f"{t} labels", r) for t, r in report["labels"].items()]
    for name, r in entries:
        table.add_row(name, str(r["added"]), str(r["removed"]), str(r["changed"]),
                      ", ".join(f"{k} {v}" for k, v in r["changed_fields"].items()))
    console.print(table)



# --- media, transcription, diarization, turns (pipeline.media, .transcribe, .diarize, .turns)
# Heavy imports (torch, whisperx, pyannote) happen inside the commands: `rescue --help` stays fast.


def _media_settings(data_root: Optional[Path]):
    from pipeline.config import Settings
    return Settings.from_env(data_root)


def _sample_ids(data_root: Path, ids: list[str], all_: bool) -> list[str]:
    from pipeline.media import read_catalog
    if all_:
        return [r["sample_id"] for r in read_catalog(data_root).to_pylist() if r["status"] == "done"]
    if not ids:
        raise typer.BadParameter("give sample ids or --all")
    return ids


@app.command("ingest")
def ingest(
    batch_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="folder with videos + manifest.csv/.yaml"),
    data_root: Optional[Path] = typer.Option(None, help="data root (default $RESCUE_DATA_ROOT or ./data)"),
    min_duration: float = typer.Option(5.0, help="clips shorter than this (seconds) are quarantined"),
    jobs: Optional[int] = typer.Option(None, min=1, help="videos at a time (default: one per core, at most 4)"),
) -> None:
    """Probe, hash and extract 16 kHz mono WAVs for a batch; update the catalog."""
    from rich.console import Console
    from rich.table import Table
    from pipeline.media import ManifestError, ingest_batch

    console = Console()
    root = _media_settings(data_root).data_root
    try:
        report = ingest_batch(batch_dir, root, progress=True, min_duration_s=min_duration, jobs=jobs)
    except ManifestError as exc:
        console.print(f"[red]manifest error:[/red] {exc}", highlight=False)
        raise typer.Exit(2)
    table = Table(title=f"ingest {batch_dir.name} -> {root}")
    for col in ("sample_id", "outcome", "duration_s", "reason"):
        table.add_column(col)
    for row in report.rows:
        outcome = ("cached" if row["sample_id"] in report.cached else
                   "quarantined" if row["sample_id"] in report.quarantined else "done")
        table.add_row(row["sample_id"], outcome, f"{row['duration_s'] or 0:.1f}", row["reason"] or "")
    console.print(table)
    console.print(f"done {len(report.done)}, cached {len(report.cached)}, quarantined {len(report.quarantined)}")


@app.command("transcribe")
def transcribe_cmd(
    sample_ids: list[str] = typer.Argument(None, help="catalogued sample ids"),
    all_: bool = typer.Option(False, "--all", help="every ingested sample"),
    data_root: Optional[Path] = typer.Option(None),
    backend: str = typer.Option("auto", help="auto | subtitles | whisperx"),
    asr_model: Optional[str] = typer.Option(None, help="WhisperX: CTranslate2 model dir or name (large-v3)"),
    align_model: Optional[str] = typer.Option(None, help="WhisperX: wav2vec2 alignment model dir or hub id"),
    device: str = typer.Option("cpu"),
    compute_type: str = typer.Option("int8"),
    batch_size: int = typer.Option(8),
) -> None:
    """Transcripts (subtitle import or WhisperX) -> DATA_ROOT/transcripts/<sample_id>.json."""
    from rich.console import Console
    from rich.progress import track
    from pipeline.transcribe import SubtitleError, transcribe_sample

    console = Console()
    root = _media_settings(data_root).data_root
    failed = 0
    for sid in track(_sample_ids(root, sample_ids, all_), description="transcribe", console=console):
        try:
            tr = transcribe_sample(sid, root, backend, asr_model, align_model, device, compute_type, batch_size)
            console.print(f"{sid}: {len(tr.units)} {tr.kind}s" + "".join(f"\n  [yellow]{w}[/yellow]" for w in tr.warnings),
                          highlight=False)
        except (SubtitleError, ValueError, KeyError, FileNotFoundError) as exc:
            failed += 1
            console.print(f"[red]{sid}: {exc}[/red]", highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


@app.command("diarize")
def diarize_cmd(
    targets: list[str] = typer.Argument(None, help="WAV files and/or catalogued sample ids"),
    all_: bool = typer.Option(False, "--all", help="every ingested sample"),
    out: Optional[Path] = typer.Option(None, help="RTTM to write, for ONE target (default: a sample's "
                                       "DATA_ROOT/diarization/<sample_id>.rttm, a file's <file>.rttm)"),
    num_speakers: Optional[int] = typer.Option(None),
    min_speakers: Optional[int] = typer.Option(None),
    max_speakers: Optional[int] = typer.Option(None),
    pipeline_source: Optional[str] = typer.Option(None, "--pipeline", help="pipeline dir or hub id (default: offline)"),
    device: str = typer.Option("cpu"),
    data_root: Optional[Path] = typer.Option(None),
    refine: bool = typer.Option(True, "--refine/--no-refine",
                                help="cut silences out of pyannote's turns and re-cluster them by voice print"),
) -> None:
    """Who spoke when -> standard RTTM. A sample's speaker count defaults to therapist +
    participants; enrolled voices (`rescue voices`) name their speakers."""
    from rich.console import Console
    from rich.progress import track
    from pipeline import voices
    from pipeline.diarize import DiarizationError, diarize_audio, diarize_sample, load_pipeline, write_rttm
    from pipeline.media import MediaError, load_wav
    from pipeline.turns import rttm_path

    console = Console()
    settings = _media_settings(data_root)
    items = list(targets or [])
    if all_:
        items += _sample_ids(settings.data_root, [], True)
    if not items:
        raise typer.BadParameter("give WAV files, sample ids or --all")
    if out is not None and len(items) > 1:
        raise typer.BadParameter("--out names one RTTM: give one target")
    with console.status("loading the diarization pipeline"):
        model = load_pipeline(pipeline_source, device, settings)
    failed = 0
    for item in track(items, description="diarize", console=console):
        path = Path(item)
        try:
            if path.is_file():
                turns = diarize_audio(path, num_speakers, min_speakers, max_speakers, pipeline=model,
                                      device=device, refine=refine)
                if voices.voices_dir(settings.data_root).is_dir():
                    turns, _ = voices.name_speakers(load_wav(path), turns, model, settings.data_root)
                target = write_rttm(turns, out or path.with_suffix(".rttm"), uri=path.stem)
            else:  # a sample id: its WAV from the catalog
                turns = diarize_sample(item, settings.data_root, num_speakers, pipeline=model, device=device,
                                       min_speakers=min_speakers, max_speakers=max_speakers, write=out is None,
                                       refine=refine)
                target = write_rttm(turns, out, uri=path.name) if out else rttm_path(settings.data_root, item)
            console.print(f"{item}: {len(turns)} turns, {len({t.speaker for t in turns})} speakers -> {target}",
                          highlight=False, soft_wrap=True)
        except (DiarizationError, MediaError, KeyError, FileNotFoundError) as exc:
            failed += 1
            reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # KeyError quotes itself
            console.print(f"[red]{item}: {reason}[/red]", highlight=False, soft_wrap=True)
    console.print(f"diarized {len(items) - failed}, failed {failed}")
    if failed:
        raise typer.Exit(1)


@app.command("segment")
def segment_cmd(
    sample_ids: list[str] = typer.Argument(None),
    all_: bool = typer.Option(False, "--all"),
    data_root: Optional[Path] = typer.Option(None),
    max_pause: float = typer.Option(1.5, help="a longer pause starts a new row"),
    max_row: float = typer.Option(30.0, help="rows longer than this are split at a sentence end"),
) -> None:
    """Transcript + RTTM -> draft rows (DATA_ROOT/drafts/<sample_id>.parquet)."""
    from rich.console import Console
    from pipeline.turns import SegmenterConfig, segment_sample

    console = Console()
    root = _media_settings(data_root).data_root
    cfg = SegmenterConfig(max_pause_s=max_pause, max_row_s=max_row)
    for sid in _sample_ids(root, sample_ids, all_):
        try:
            table = segment_sample(sid, root, cfg)
            console.print(f"{sid}: {table.num_rows} draft rows", highlight=False)
        except (FileNotFoundError, KeyError) as exc:
            console.print(f"[red]{sid}: {exc} (run `rescue transcribe` / `rescue diarize` first)[/red]", highlight=False)


voices_app = typer.Typer(help="Enrolled voices: diarized speakers named by voice (pipeline.voices).",
                         no_args_is_help=True)
app.add_typer(voices_app, name="voices")


@voices_app.command("enroll")
def voices_enroll(
    name: str = typer.Argument(..., help="the speaker's name as rows show it, e.g. Therapist or a participant"),
    files: list[Path] = typer.Argument(..., help="clean recordings of this one voice (any audio/video ffmpeg reads)"),
    data_root: Optional[Path] = typer.Option(None),
    pipeline_source: Optional[str] = typer.Option(None, "--pipeline", help="the diarization pipeline whose "
                                                  "embedding model makes the print (default: offline)"),
    device: str = typer.Option("cpu"),
) -> None:
    """Store NAME's voice print (DATA_ROOT/voices/NAME.json); replaces an earlier one."""
    from rich.console import Console
    from pipeline.diarize import load_pipeline
    from pipeline.voices import VoiceError, enroll

    settings = _media_settings(data_root)
    try:
        voice = enroll(name, files, settings.data_root, load_pipeline(pipeline_source, device, settings))
    except VoiceError as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]{exc}[/red]", highlight=False)
        raise typer.Exit(1)
    Console().print(f"{voice.name}: {voice.seconds:.1f} s of speech from {len(files)} file(s), model {voice.model}",
                    highlight=False)


@voices_app.command("list")
def voices_list(data_root: Optional[Path] = typer.Option(None)) -> None:
    """Enrolled voices: name, seconds of speech, model."""
    from rich.console import Console
    from pipeline.voices import load_voices

    console = Console()
    enrolled = load_voices(_media_settings(data_root).data_root)
    for v in enrolled:
        console.print(f"{v.name}\t{v.seconds:.1f} s\t{v.model}\t{len(v.sources)} file(s)", highlight=False)
    if not enrolled:
        console.print("no enrolled voices")


@voices_app.command("remove")
def voices_remove(name: str, data_root: Optional[Path] = typer.Option(None)) -> None:
    """Delete NAME's voice print."""
    from pipeline.voices import remove
    if not remove(name, _media_settings(data_root).data_root):
        raise typer.BadParameter(f"no enrolled voice named {name!r}")
    typer.echo(f"removed {name}")


models_app = typer.Typer(help="Local model directories (no model hub needed).", no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("prepare-offline")
def models_prepare_offline(
    models_dir: Optional[Path] = typer.Option(None, help="default: $RESCUE_MODELS_DIR or ./models"),
    test_models: bool = typer.Option(True, help="also build the tiny WhisperX + alignment test models"),
) -> None:
    """Assemble the offline pyannote pipeline (+ tiny test models); idempotent."""
    from rich.console import Console
    from pipeline.models import prepare_all

    console = Console()
    target = models_dir or _media_settings(None).models_dir
    with console.status(f"preparing models in {target}"):
        built = prepare_all(target, test_models=test_models)
    for name, path in built.items():
        console.print(f"{name}: {path}")



# --- Label Studio and annotation rounds (pipeline.annotation) ------------------------
from pipeline.annotation import cli as _annotation_cli  # noqa: E402  (commands live beside their logic)

app.add_typer(_annotation_cli.label_studio_app, name="label-studio")
app.add_typer(_annotation_cli.annotators_app, name="annotators")
app.add_typer(_annotation_cli.annotate_app, name="annotate")


# --- agreement, adjudication, gold (pipeline.agreement, pipeline.gold) ---------------

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
    """Krippendorff alpha / kappa per field; writes the report beside the labels and the gate record."""
    from rich.console import Console
    from rich.table import Table

    from pipeline import agreement, store

    console = Console()
    root = store.data_root(data_root)
    try:
        out = agreement.measure_round(root, round_name, labels)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    rep = out["report"]
    table = Table(title=f"agreement - round {round_name}")
    for col in ("field", "metric", "alpha", "threshold", "units", "pairable", "% agree", "Fleiss", "gate"):
        table.add_column(col, justify="left" if col in ("field", "metric", "gate") else "right")
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    for f in rep.fields:
        gate = {True: "[green]pass[/green]", False: "[red]FAIL[/red]", None: "[yellow]undefined[/yellow]"}[f.passed]
        table.add_row(f.field, f.metric, fmt(f.alpha), f"{f.threshold:.3f}", str(f.n_units), str(f.n_pairable),
                      fmt(f.percent_agreement), fmt(f.fleiss_kappa), gate)
    console.print(table)
    for issue in rep.issues[:10]:
        console.print(f"  [yellow]{issue['kind']}[/yellow] {issue['message']}", highlight=False)
    if len(rep.issues) > 10:
        console.print(f"  ... and {len(rep.issues) - 10} more issues (see the report)")
    console.print(f"report: {out['paths']['html']}", highlight=False)
    if override is not None:
        try:
            rec = agreement.record_override(root, round_name, override, by or "")
        except (ValueError, FileNotFoundError) as exc:
            console.print(f"[red]override refused:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from None
        console.print(f"override recorded by {rec['by']}: {rec['reason']}", highlight=False)
    elif not rep.passed:
        console.print("[red]below threshold: this round blocks a release[/red] (adjudicate / re-annotate, or "
                      "--override REASON --by NAME)")
        raise typer.Exit(3)


def _adjudication_samples(root: Path, samples: Optional[Path], rows: Optional[Path]) -> list[dict]:
    from pipeline import corpus

    if samples or rows:
        from pipeline.annotation.push import load_samples

        cdir = corpus.corpus_dir(root)
        return load_samples(samples or cdir / "samples.parquet", rows or cdir / "rows.parquet")
    return corpus.load_corpus(root)


@adjudicate_app.command("push")
def adjudicate_push(
    round_name: str = typer.Argument(..., metavar="ROUND"),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    samples: Optional[Path] = typer.Option(None, help="Samples table the round was pushed from (default: corpus)."),
    rows: Optional[Path] = typer.Option(None, help="Rows table the round was pushed from (default: corpus)."),
) -> None:
    """Put every disagreement of a pulled round into the round's adjudication projects."""
    import pyarrow.parquet as pq
    from rich.console import Console

    from pipeline import adjudication, store
    from pipeline.annotation.client import LabelStudioClient, LabelStudioError
    from pipeline.annotation.pull import labels_path
    from pipeline.annotation.rounds import load_round
    from pipeline.config import Settings

    console = Console()
    settings = Settings.from_env(data_root)
    root = store.data_root(data_root)
    path = labels_path(root, round_name)
    try:
        rnd = load_round(round_name)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no labels; run `rescue annotate pull {round_name}` first")
        summary = adjudication.push(LabelStudioClient.from_settings(settings), rnd, pq.read_table(path),
                                    _adjudication_samples(root, samples, rows))
    except (FileNotFoundError, KeyError, LabelStudioError) as exc:
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
    """Fetch the adjudicators' answers and store them beside the round's labels."""
    from rich.console import Console

    from pipeline import adjudication, store
    from pipeline.annotation.client import LabelStudioClient, LabelStudioError
    from pipeline.config import Settings

    console = Console()
    root = store.data_root(data_root)
    try:
        table, path = adjudication.pull_and_store(LabelStudioClient.from_settings(Settings.from_env(data_root)),
                                                  root, round_name)
    except (KeyError, LabelStudioError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    rows = len(set(zip(table.column("sample_id").to_pylist(), table.column("row_index").to_pylist())))
    console.print(f"round {round_name}: {rows} adjudicated rows ({table.num_rows} values) -> {path}", highlight=False)


@gold_app.command("build")
def gold_build(
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    rounds: Optional[list[str]] = typer.Option(None, "--round", help="Rounds to use (default: every pulled round)."),
    allow_unresolved: bool = typer.Option(False, "--allow-unresolved", help="Build even where a disagreement has "
                                          "no adjudication (first annotator's value; marked in the provenance)."),
) -> None:
    """Gold rows (majority / median / adjudicator, with provenance), validated and merged into the corpus."""
    from rich.console import Console

    from pipeline import gold, store

    console = Console()
    try:
        out = gold.build_and_store(store.data_root(data_root), round_names=rounds or None, strict=not allow_unresolved)
    except (FileNotFoundError, gold.UnresolvedError, KeyError) as exc:
        console.print(f"[red]gold build refused:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    s = out["summary"]
    console.print(f"gold: {s['samples']} samples, {s['rows']} rows, {s['values']} values from rounds "
                  f"{', '.join(s['rounds'])}; " + ", ".join(f"{k} {v}" for k, v in s["methods"].items()), highlight=False)
    console.print(f"corpus: {s['corpus']['added']} added, {s['corpus']['replaced']} replaced, "
                  f"{s['corpus']['unchanged']} unchanged; {s['violations']} violations; provenance: "
                  f"{out['dir'] / 'provenance.parquet'}", highlight=False)
    if s["violations"]:
        for v in out["violations"][:10]:
            console.print(f"  [red]{v}[/red]", highlight=False)
        raise typer.Exit(1)



# --- orchestration: stack, demo (flows/) ---------------------------------------------
from pipeline import demo as _demo, stack as _stack  # noqa: E402  (commands live beside their logic)

app.add_typer(_stack.cli, name="stack")
app.command("demo")(_demo.demo_command)


if __name__ == "__main__":  # pragma: no cover
    app()
