"""``rescue ingest | transcribe | diarize | segment``, ``rescue voices`` and ``rescue models``.

Each command calls its stage's one entry point (the ``ingest-batch`` flow calls the same ones):
``ingest.ingest_batch`` -> ``ingest.ingest_entry``, ``transcribe.transcribe_stage``,
``diarize.diarize_stage`` / ``diarize.diarize_file``, ``turns.segment_stage``. A command checks
its data root and builds the :class:`pipeline.paths.DataRoot` once, reads the catalog once and
hands each stage the sample's :class:`pipeline.catalog.Ingested` record. Sample ids given on
the command line are checked against the sample-id grammar first: a bad one is an error
(exit 2) before anything runs.

A result that is up to date is skipped, and the command says so; ``--redo`` makes it again. Up
to date: its key (``pipeline.media.keys``, the one the flows' cache uses: inputs' content, the
code that computes it, its models, its settings) equals the one recorded beside it. A result
made again says why, and its new key is recorded. ``rescue status --stale`` lists what is not
up to date.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.app import app, cli_console, narrow_table
from pipeline.config import DataRootError, Settings
from pipeline.paths import DataRoot, InvalidId, check_sample_id

REDO = typer.Option(False, "--redo", help="make the results again even when they are up to date")

# --- media, transcription, diarization, turns (pipeline.media.ingest, .transcribe, .diarize, .turns)
# The stage modules are imported inside the commands: they pull in ffmpeg bindings, numpy, scipy
# (and torch, whisperx, pyannote when a model runs), and `rescue --help` stays fast.


def _media_root(data_root: Optional[Path]) -> tuple[Settings, DataRoot]:
    """The settings and the data root, built once and checked once (a writable folder: the
    command's one writability probe), else an error naming it (exit 2); every stage the command
    runs takes this root."""
    from pipeline.store import prepare_data_root  # pyarrow: not for `rescue --help`
    try:
        settings = Settings.from_env(data_root)
        return settings, prepare_data_root(DataRoot(settings.data_root))
    except (DataRootError, ValueError) as exc:
        _refuse(str(exc))


def _refuse(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _checked_ids(ids: list[str]) -> list[str]:
    """Every id must follow the sample-id grammar; the first that does not ends the command (exit 2)."""
    for sid in ids:
        try:
            check_sample_id(sid)
        except InvalidId as exc:
            _refuse(str(exc))
    return ids


def _sample_ids(catalog, ids: list[str], all_: bool) -> list[str]:
    """The ids a command runs on: those given (checked), or with ``--all`` every usable one in ``catalog``."""
    if all_:
        return catalog.done()
    if not ids:
        raise typer.BadParameter("give sample ids or --all")
    return _checked_ids(ids)


@app.command("ingest")
def ingest(
    batch_dir: Path = typer.Argument(..., help="folder with videos + manifest.csv/.yaml"),
    data_root: Optional[Path] = typer.Option(None, help="data root (default $RESCUE_DATA_ROOT or ./data)"),
    min_duration: float = typer.Option(5.0, min=0.0, help="clips shorter than this (seconds) are quarantined"),
    jobs: Optional[int] = typer.Option(None, min=1, max=64, help="videos at a time (default: one per core, at most 4)"),
    allow_outside_batch: bool = typer.Option(False, "--allow-outside-batch",
                                             help="use video/subtitle files the manifest names outside the batch "
                                                  "folder (absolute paths, '..', symlinks out); refused otherwise"),
    redo: bool = REDO,
) -> None:
    """Probe, hash and extract 16 kHz mono WAVs for a batch; update the catalog. An entry whose
    result is up to date (same files, same entry, same code) is skipped (--redo makes it again).
    Limits: RESCUE_FFPROBE_TIMEOUT_S (60) and RESCUE_FFMPEG_TIMEOUT_S (3600) seconds per file."""
    from pipeline.media.manifest import ManifestError

    console = cli_console()
    _, root = _media_root(data_root)
    if jobs is not None and jobs < 1:
        _refuse(f"--jobs must be at least 1, got {jobs}")
    try:
        results, warnings = _ingest_keyed(batch_dir, root, min_duration, jobs, allow_outside_batch, redo)
    except ManifestError as exc:
        console.print(f"[red]manifest error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except (DataRootError, ValueError) as exc:
        _refuse(str(exc))
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    table = narrow_table("sample_id", "outcome", "duration_s", "reason", title=f"ingest {batch_dir.name} -> {root}")
    for res, why in results:
        shown = res.sample_id if res.sample_id.isprintable() else res.sample_id.encode("unicode_escape").decode()
        reason = res.reason or ("up to date" if res.outcome == "cached" and not why else "; ".join(why or []))
        table.add_row(shown, res.outcome, f"{res.duration_s or 0:.1f}", reason)
    console.print(table)
    count = {o: sum(r.outcome == o for r, _ in results) for o in ("done", "cached", "quarantined")}
    console.print(f"done {count['done']}, cached {count['cached']}, quarantined {count['quarantined']}")


def _ingest_keyed(batch_dir: Path, root: DataRoot, min_duration: float, jobs: Optional[int],
                  allow_outside_batch: bool, redo: bool) -> tuple[list, list[str]]:
    """``ingest.ingest_entry`` for every manifest entry whose result is not up to date, ``jobs`` at a
    time; ``[(IngestResult, why it was made or None), ...]`` in manifest order, and the manifest's
    warnings. An entry made by other code (or with ``redo``) is ingested again, not taken from
    the catalog."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor
    from pipeline import lineage
    from pipeline.catalog import Catalog, ingested
    from pipeline.media.ingest import IngestResult, default_jobs, ingest_entry
    from pipeline.media.keys import ingest_key
    from pipeline.media.manifest import find_manifest, outside_batch, read_manifest

    batch = Path(batch_dir).absolute()
    warnings: list[str] = []
    entries = read_manifest(find_manifest(batch), warnings)
    before = Catalog.read(root)
    cache = lineage.cache_for(root)

    def one(entry):
        if entry.refused:
            return ingest_entry(entry, root, batch, min_duration, allow_outside_batch, before), None
        inside = allow_outside_batch or not any(outside_batch(batch, n) for n in (entry.video, entry.subtitles) if n)
        key = ingest_key(entry.sample_id, dataclasses.asdict(entry), batch / entry.video if inside else None,
                         batch / entry.subtitles if inside and entry.subtitles else None, min_duration,
                         allow_outside_batch, cache)
        row = before.rows.get(entry.sample_id)
        usable = row is not None and row.get("status") == "done" and row.get("audio_path")
        why = lineage.reasons(root, key, root.resolve(row["audio_path"]) if usable else None, redo)
        if not why:
            return IngestResult(entry.sample_id, "cached", None, row["duration_s"], ingested(row)), None
        recorded = lineage.read_record(root, "ingest", entry.sample_id)
        catalog = before
        if redo or (recorded is not None and recorded.get("key") != key.key):
            catalog = Catalog(root, {sid: r for sid, r in before.rows.items() if sid != entry.sample_id})
        result = ingest_entry(entry, root, batch, min_duration, allow_outside_batch, catalog)
        if result.ingested is not None:
            lineage.record(root, key, why)
        return result, why

    with ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        return list(pool.map(one, entries)), warnings


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
    batch_size: int = typer.Option(8, min=1, max=1024),
    redo: bool = REDO,
) -> None:
    """Transcripts (subtitle import or WhisperX) -> DATA_ROOT/transcripts/<sample_id>.json."""
    from rich.progress import track
    from pipeline import lineage
    from pipeline.catalog import Catalog
    from pipeline.media.keys import transcribe_key
    from pipeline.media.transcribe import SubtitleError, transcribe_stage

    console = cli_console()
    settings, root = _media_root(data_root)
    ids = _checked_ids(sample_ids or [])  # bad ids end the command before the catalog is read
    catalog = Catalog.read(root)
    failed = 0
    for sid in track(_sample_ids(catalog, ids, all_), description="transcribe", console=console):
        try:
            ingested = catalog.ingested(sid)
            key = transcribe_key(ingested, backend, asr_model, align_model, device, compute_type, batch_size,
                                 settings, lineage.cache_for(root))
            why = _up_to_date(console, key, root, root.transcript(sid), redo)
            if why is None:
                continue
            tr = transcribe_stage(ingested, root, backend, asr_model, align_model, device, compute_type, batch_size)
            _made(console, key, root, why, tr.sha256, f"{tr.units} {tr.kind}s" +
                  "".join(f"\n  [yellow]{w}[/yellow]" for w in tr.warnings))
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
    num_speakers: Optional[int] = typer.Option(None, min=1, max=50),
    min_speakers: Optional[int] = typer.Option(None, min=1, max=50),
    max_speakers: Optional[int] = typer.Option(None, min=1, max=50),
    pipeline_source: Optional[str] = typer.Option(None, "--pipeline", help="pipeline dir or hub id (default: offline)"),
    device: str = typer.Option("cpu"),
    data_root: Optional[Path] = typer.Option(None),
    refine: bool = typer.Option(True, "--refine/--no-refine",
                                help="cut silences out of pyannote's turns and re-cluster them by voice print"),
    redo: bool = REDO,
) -> None:
    """Who spoke when -> standard RTTM. A sample's speaker count defaults to therapist +
    participants; enrolled voices (`rescue voices`) name their speakers."""
    from rich.progress import track
    from pipeline.media.audio import MediaError
    from pipeline.catalog import Catalog, QuarantinedAtIngest
    from pipeline import lineage
    from pipeline.media.diarize import DiarizationError, NoSpeech, diarize_file, diarize_stage, load_pipeline
    from pipeline.media.keys import diarize_key

    console = cli_console()
    if min_speakers and max_speakers and min_speakers > max_speakers:
        raise typer.BadParameter(f"--min-speakers {min_speakers} is more than --max-speakers {max_speakers}")
    settings, root = _media_root(data_root)
    items = list(targets or [])
    _checked_ids([item for item in items if not Path(item).is_file()])
    catalog = Catalog.read(root)
    if all_:
        items += _sample_ids(catalog, [], True)
    if not items:
        raise typer.BadParameter("give WAV files, sample ids or --all")
    if out is not None and len(items) > 1:
        raise typer.BadParameter("--out names one RTTM: give one target")
    model, failed, kept = None, 0, 0
    for item in track(items, description="diarize", console=console):
        try:
            key = why = None
            if not Path(item).is_file() and out is None:  # a sample's own RTTM: keyed, skipped when up to date
                ingested = catalog.ingested(item)
                key = diarize_key(ingested, root, pipeline_source, device, num_speakers, min_speakers, max_speakers,
                                  refine, settings, lineage.cache_for(root))
                why = _up_to_date(console, key, root, root.rttm(item), redo)
                if why is None:
                    kept += 1
                    continue
            if model is None:
                with console.status("loading the diarization pipeline"):
                    model = load_pipeline(pipeline_source, device, settings)
            if Path(item).is_file():
                done = diarize_file(item, root, out, num_speakers, min_speakers, max_speakers,
                                    pipeline=model, device=device, refine=refine)
            else:  # a sample id: its WAV from the catalog
                done = diarize_stage(catalog.ingested(item), root, num_speakers, pipeline=model, device=device,
                                     min_speakers=min_speakers, max_speakers=max_speakers, refine=refine, out=out)
            said = f"{done.turns} turns, {len(done.speakers)} speakers -> {done.rttm}"
            if key is not None:
                _made(console, key, root, why, done.sha256, said)
            else:
                console.print(f"{item}: {said}", highlight=False, soft_wrap=True)
        except NoSpeech as exc:
            failed += 1
            console.print(f"[red]{item}: quarantined: {exc}[/red]", highlight=False, soft_wrap=True)
        except (DiarizationError, QuarantinedAtIngest, MediaError, KeyError, FileNotFoundError) as exc:
            failed += 1
            reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # KeyError quotes itself
            console.print(f"[red]{item}: {reason}[/red]", highlight=False, soft_wrap=True)
    console.print(f"diarized {len(items) - failed - kept}, failed {failed}" + (f", up to date {kept}" if kept else ""))
    if failed:
        raise typer.Exit(1)


@app.command("segment")
def segment_cmd(
    sample_ids: list[str] = typer.Argument(None),
    all_: bool = typer.Option(False, "--all"),
    data_root: Optional[Path] = typer.Option(None),
    max_pause: float = typer.Option(1.5, min=0.0, help="a longer pause starts a new row"),
    max_row: float = typer.Option(30.0, min=1.0, help="rows longer than this are split at a sentence end"),
    speaking_order: Optional[str] = typer.Option(
        None, "--speaking-order", metavar="yes|no",
        help="yes: the participants are listed in the order they first speak, and voices are named in that "
             "order (the manifest's speaking_order column); no: neutral voice labels (Speaker 1, ...), which "
             "annotators name once per voice in the transcript round. Default: the manifest's column"),
    redo: bool = REDO,
) -> None:
    """Transcript + RTTM -> draft rows (DATA_ROOT/drafts/<sample_id>.parquet) and the interview's
    voices (DATA_ROOT/draft-voices/<sample_id>.parquet)."""
    from pipeline import lineage
    from pipeline.catalog import Catalog, QuarantinedAtIngest
    from pipeline.media.keys import segment_key
    from pipeline.media.turns import SegmenterConfig, segment_stage

    console = cli_console()
    hint = _yes_no(speaking_order, "--speaking-order")
    _, root = _media_root(data_root)
    cfg = SegmenterConfig(max_pause_s=max_pause, max_row_s=max_row)
    failed = 0
    ids = _checked_ids(sample_ids or [])  # bad ids end the command before anything is read or written
    catalog = Catalog.read(root)
    for sid in _sample_ids(catalog, ids, all_):
        try:
            ingested = catalog.ingested(sid)
            key = segment_key(ingested, root, cfg, hint, lineage.cache_for(root))
            why = _up_to_date(console, key, root, root.drafts(sid), redo)
            if why is None:
                continue
            done = segment_stage(ingested, root, cfg, speaking_order=hint)
            _made(console, key, root, why, done.drafts_sha256, f"{done.rows} draft rows")
        except QuarantinedAtIngest as exc:
            failed += 1
            console.print(f"[red]{exc}[/red]", highlight=False, soft_wrap=True)
        except (FileNotFoundError, KeyError) as exc:
            failed += 1
            console.print(f"[red]{sid}: {exc} (run `rescue transcribe` / `rescue diarize` first)[/red]", highlight=False)
    if failed:
        raise typer.Exit(1)


def _up_to_date(console, key, root: DataRoot, output: Path, redo: bool) -> list[str] | None:
    """None when the result ``key`` names is up to date (said, and skipped); else why it is made."""
    from pipeline import lineage

    why = lineage.reasons(root, key, output, redo)
    if not why:
        console.print(f"{key.sample_id}: {key.stage} up to date, skipped (--redo makes it again)", highlight=False)
        return None
    return why


def _made(console, key, root: DataRoot, why: list[str], output_sha256: str | None, said: str) -> None:
    from pipeline import lineage

    from rich.markup import escape

    lineage.record(root, key, why, output_sha256)
    console.print(f"{key.sample_id}: {said} [dim](made: {escape('; '.join(why))})[/dim]", highlight=False,
                  soft_wrap=True)


@app.command("status")
def status_cmd(
    sample_ids: list[str] = typer.Argument(None, help="catalogued sample ids (default: every one)"),
    data_root: Optional[Path] = typer.Option(None),
    stale: bool = typer.Option(False, "--stale", help="whether each result is up to date: fresh, stale (and why) "
                                                      "or missing, by the key of what made it"),
    as_json: bool = typer.Option(False, "--json", help='a JSON list of {"sample_id", "stage", "state", "why"}'),
) -> None:
    """Per sample and media stage (ingest, transcribe, diarize, segment): whether its result is
    there; with --stale, whether it is up to date (fresh), was made by other code, models,
    settings or inputs than those of now (stale, and what changed), or is missing."""
    import json
    from pipeline.catalog import Catalog
    from pipeline.media.keys import StageState, output_of, stage_states, STAGES

    root = DataRoot.from_env(data_root)
    ids = _checked_ids(sample_ids or []) or None
    catalog = Catalog.read(root)
    missing = [sid for sid in ids or [] if sid not in catalog.rows]
    if missing:
        _refuse(f"not in the catalog of {root}: {', '.join(missing)}")
    if stale:
        states = stage_states(root, ids)
    else:
        states = []
        for sid in ids or sorted(catalog.rows):
            for stage in STAGES:
                path = output_of(stage, root, catalog.rows[sid])
                states.append(StageState(sid, stage, "made" if path is not None and path.exists() else "missing"))
    if as_json:
        typer.echo(json.dumps([s.as_dict() for s in states], indent=1))
        return
    console = cli_console()
    if not states:
        console.print(f"no samples in the catalog of {root}", highlight=False)
        return
    table = narrow_table("sample_id", "stage", "state", *(("why",) if stale else ()),
                         title=f"{'up to date? ' if stale else ''}{root}")
    colour = {"fresh": "green", "made": "green", "stale": "yellow", "missing": "red"}
    for s in states:
        table.add_row(s.sample_id, s.stage, f"[{colour[s.state]}]{s.state}[/]", *(("; ".join(s.why),) if stale else ()))
    console.print(table)
    counts = {k: sum(s.state == k for s in states) for k in ("fresh", "made", "stale", "missing")}
    console.print(", ".join(f"{n} {k}" for k, n in counts.items() if n), highlight=False)


def _yes_no(value: Optional[str], option: str) -> Optional[bool]:
    """yes/no (as the manifest's column reads them) -> bool; None stays None; else exit 2."""
    if value is None:
        return None
    word = value.strip().lower()
    if word in ("yes", "true", "1", "y"):
        return True
    if word in ("no", "false", "0", "n"):
        return False
    raise typer.BadParameter(f"expected yes or no, got {value!r}", param_hint=option)


voices_app = typer.Typer(help="Enrolled voices: diarized speakers named by voice (pipeline.media.voices).",
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
    """Store NAME's voice print (DATA_ROOT/voices/NAME.json; a name with spaces gets a safe file
    name); replaces an earlier one."""
    from pipeline.media.diarize import load_pipeline
    from pipeline.media.voices import VoiceError, enroll

    from pipeline.store import private_areas

    settings, root = _media_root(data_root)
    private_areas(root, "voices")
    try:
        voice = enroll(name, files, root, load_pipeline(pipeline_source, device, settings))
    except VoiceError as exc:
        cli_console(stderr=True).print(f"[red]{exc}[/red]", highlight=False)
        raise typer.Exit(1)
    cli_console().print(f"{voice.name}: {voice.seconds:.1f} s of speech from {len(files)} file(s), model {voice.model}",
                    highlight=False)


@voices_app.command("list")
def voices_list(data_root: Optional[Path] = typer.Option(None)) -> None:
    """Enrolled voices: name, seconds of speech, model."""
    from pipeline.media.voices import load_voices

    console = cli_console()
    enrolled = load_voices(_media_root(data_root)[1])
    for v in enrolled:
        console.print(f"{v.name}\t{v.seconds:.1f} s\t{v.model}\t{len(v.sources)} file(s)", highlight=False)
    if not enrolled:
        console.print("no enrolled voices")


@voices_app.command("remove")
def voices_remove(name: str, data_root: Optional[Path] = typer.Option(None)) -> None:
    """Delete NAME's voice print."""
    from pipeline.media.voices import remove
    if not remove(name, _media_root(data_root)[1]):
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
    from pipeline.media.models import prepare_offline_diarization
    from pipeline.synthetic.test_models import prepare_test_models

    console = cli_console()
    target = models_dir or Settings.from_env().models_dir  # no data root needed
    with console.status(f"preparing models in {target}"):
        built = prepare_test_models(target) if test_models else {
            "diarization": prepare_offline_diarization(target)}
    for name, path in built.items():
        console.print(f"{name}: {path}")
