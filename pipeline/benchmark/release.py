"""Versioned, immutable benchmark releases: Parquet configs, manifest, dataset card, diff.

``releases/<X.Y.Z>/`` under the data root holds::

    data/<config>/<split>.parquet   configs: samples, rows, itp, rpp, stp, ssp, er, vp
    paper/                          the same data in the paper's own shapes (benchmark.jsonl,
                                    er.jsonl, vp.jsonl, data/<sample_id>.json):
                                    :mod:`pipeline.benchmark.paper_export`
    lineage.parquet                 what made each sample: video, transcript, diarizer and
                                    segmenter digests, each round's annotators (opaque ids) and
                                    adjudicated rows (:mod:`pipeline.benchmark.release_lineage`)
    manifest.json                   sha256/rows/bytes per file (Parquet and paper/), Table 6
                                    counts, label distributions, Table 3 statistics, source
                                    hashes, annotation rounds with agreement and overrides,
                                    card options, synthetic markers, lineage (code, packages,
                                    models, settings)
    README.md                       Hugging Face dataset card (:mod:`pipeline.benchmark.card`)

Split ``test`` holds every sample not in ``dev`` (the paper evaluates on everything). With a
dev fraction, a whole couple/family group goes to ``dev`` when sha256(group_id) falls below
the fraction, so adding interviews never moves an existing sample between splits.

A build is deterministic: the same input gives byte-identical files (sorted tables, fixed
Parquet options, canonical JSON, no timestamps, no absolute paths). The directory appears
atomically (built beside it, then renamed) and is never written again.

:func:`build_or_reuse` is the release stage the CLI (``rescue release build``) and the
``build-release`` flow both call: it validates the input, and for a version that exists
already returns it unchanged (``reused=True``) when it was built from the same input, split,
file layout (:data:`RELEASE_LAYOUT`: which files a release holds) and card options, or refuses (:class:`pipeline.store.AlreadyExists`, naming the version) when not.
:func:`build_release` underneath refuses any existing version. A release is written owner-only
like everything under the data root; :func:`publish` (``rescue release publish``) shares it. Inputs: the corpus
(:func:`load_corpus_input`, the default), a rows directory, or the paper's JSONL
(:func:`load_source` picks by the source given); the synthetic corpus comes from
:func:`pipeline.synthetic.corpus.load_synthetic`.

This module is the release stage: its input, the build and the reuse. The manifest's figures are
:mod:`.release_figures`; reading a built release and the diff of two are :mod:`.release_files`
(their public names are re-exported here).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import schemas, store
from pipeline.benchmark import tasks
from pipeline.benchmark.card import CardOptions, dataset_card
from pipeline.benchmark.croissant import release_croissant
from pipeline.benchmark.paper_export import (PAPER_CONTEXT, paper_task_records,  # noqa: F401 (public here too)
                                             write_paper_files)
from pipeline.benchmark.paper_format import load_rescue_jsonl
from pipeline.benchmark.provenance import corpus_origin, synthetic_markers
from pipeline.benchmark.release_figures import annotation_rounds, count_by_scenario, label_distribution, statistics
from pipeline.benchmark.release_files import (ReleaseError, diff_releases, open_release,  # noqa: F401 (public here)
                                              read_config, release_path)
from pipeline.benchmark.release_lineage import LINEAGE_FILE, manifest_lineage, sample_lineage
from pipeline.config import Settings
from pipeline.paths import DataRoot
from pipeline.quality import gates
from pipeline.rows import group_id_of, read_rows_dir, rows_dir_paths, samples_to_tables
from pipeline.validate import private_strings, scan_release, scan_table, validate_samples

# From the installed distribution: `import pipeline` can resolve to a namespace package
# (editable install, cwd outside the repo) in which pipeline/__init__.py never ran.
PIPELINE_VERSION = importlib.metadata.version("rescue-pipeline")
SPLITS = ("dev", "test")
# What a release holds; part of "the same input" for reuse. 2: Parquet + paper/ + the full card;
# 3: and lineage.parquet with manifest.lineage.
RELEASE_LAYOUT = 3
LAYOUT_LACKS = {1: "paper/ and lineage.parquet", 2: "lineage.parquet"}  # what an older layout has not


# --- input ------------------------------------------------------------------------------

@dataclass
class ReleaseInput:
    samples: list[dict]
    source: dict  # provenance for the manifest: kind + content hashes, never absolute paths
    problems: list = field(default_factory=list)  # Violation records (validation / import)
    # the data root's own corpus: its rounds, gates and catalog tell this input's story; any other
    # input (a file, a folder) claims none of them
    from_data_root: bool = False
    origin: dict | None = None  # where the corpus's samples came from (provenance.corpus_origin)


def load_rows_dir(rows_dir: str | Path) -> ReleaseInput:
    """A gold directory with ``samples.parquet`` and ``rows.parquet`` (schemas.SAMPLES / ROWS)."""
    try:
        samples = read_rows_dir(rows_dir)
    except FileNotFoundError as exc:
        raise ReleaseError(str(exc)) from None
    source = {"kind": "rows_dir", "files": {p.name: store.sha256_file(p) for p in rows_dir_paths(rows_dir).values()}}
    return ReleaseInput(samples, source)


def load_jsonl(path: str | Path) -> ReleaseInput:
    """A file in the paper's ``benchmark_191.jsonl`` shape (via ``pipeline.benchmark.paper_format``)."""
    path = Path(path)
    if not path.is_file():
        raise ReleaseError(f"input file not found: {path}")
    result = load_rescue_jsonl(path)
    source = {"kind": "rescue_jsonl", "files": {path.name: store.sha256_file(path)},
              "skipped": result.skipped}
    return ReleaseInput(result.samples, source, list(result.violations))


def load_corpus_input(root: DataRoot) -> ReleaseInput:
    """The working corpus under the data root (``DataRoot.corpus_dir()``): the default input."""
    cdir = root.corpus_dir()
    if not cdir.is_dir():
        raise ReleaseError(f"no corpus yet at {cdir}: import one (`rescue import-rescue FILE`), build gold rows "
                           "(`rescue gold build`), or pass --input / --rows-dir / --synthetic")
    inp = load_rows_dir(cdir)
    inp.from_data_root = True
    inp.origin = corpus_origin(root, [s["sample_id"] for s in inp.samples])
    return inp


def load_source(source: str | os.PathLike | None, root: DataRoot) -> ReleaseInput:
    """``source``: empty for the corpus, a ``.jsonl`` file in the paper's shape, or a rows directory."""
    if not source:
        return load_corpus_input(root)
    path = Path(source)
    return load_jsonl(path) if path.suffix == ".jsonl" else load_rows_dir(path)


def validate(inp: ReleaseInput) -> None:
    """Add V1-V12 violations of the samples to ``inp.problems`` (import problems stay)."""
    known = {(v.sample_id, v.row_index, v.rule, v.message) for v in inp.problems}
    for v in validate_samples(inp.samples):
        if (v.sample_id, v.row_index, v.rule, v.message) not in known:
            inp.problems.append(v)


# --- splits -----------------------------------------------------------------------------

def split_of(group_id: str, dev_fraction: float) -> str:
    """``dev`` iff sha256(group_id) as a number in [0, 1) is below the fraction; else ``test``."""
    if dev_fraction <= 0:
        return "test"
    h = int.from_bytes(hashlib.sha256(group_id.encode("utf-8")).digest()[:8], "big") / 2**64
    return "dev" if h < dev_fraction else "test"


# --- build ------------------------------------------------------------------------------

@dataclass
class ReleaseResult:
    path: Path
    manifest: dict
    reused: bool = False  # the version existed already, built from the same input: nothing was written


def _sorted(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys])


def _split_tables(table: pa.Table, split_by_sample: dict[str, str]) -> dict[str, pa.Table]:
    names = set(split_by_sample.values())
    if len(names) == 1:  # one split (the default): the table itself, not a copy
        return {names.pop(): table}
    splits = pa.array([split_by_sample[s] for s in table.column("sample_id").to_pylist()], pa.string())
    return {name: table.filter(pc.equal(splits, name)) for name in SPLITS if name in set(split_by_sample.values())}


def build_release(
    inp: ReleaseInput,
    version: str,
    root: DataRoot,
    *,
    dev_fraction: float = 0.0,
    settings: Settings | None = None,
    task_options: dict[str, dict] | None = None,
    strict: bool = False,
    on_step: Callable[[str], None] | None = None,
    card: CardOptions | None = None,
) -> ReleaseResult:
    """Build ``releases/<version>/`` under ``root`` from ``inp``; an existing version is
    refused (:func:`build_or_reuse` reuses one built from the same input); see the module doc."""
    final = release_path(root, version)
    if not 0.0 <= dev_fraction < 1.0:
        raise ReleaseError(f"dev fraction must be in [0, 1), got {dev_fraction}")
    if final.exists():
        raise store.AlreadyExists(f"release {version} already exists at {final}; releases are immutable - "
                                  "choose a new version")
    if not inp.samples:
        raise ReleaseError("no samples to release (the input was empty or every sample was invalid)")
    if strict and inp.problems:
        raise ReleaseError(f"{len(inp.problems)} validation problems and --strict given; first: {inp.problems[0]}")
    leaks = [v for v in inp.problems if v.rule == "V16"]
    if leaks:  # absolute paths and URLs never reach a release, strict or not
        raise ReleaseError(f"{len(leaks)} absolute paths or URLs would reach the release (V16); fix the source "
                           "first:\n  " + "\n  ".join(str(v) for v in leaks[:10]))
    # Agreement gates of the annotation rounds behind this corpus: a failing round blocks the
    # release unless an override with a reason was recorded (which the manifest then carries).
    blockers = gates.release_blockers(root) if inp.from_data_root else []
    if blockers:
        raise ReleaseError("agreement gates block this release:\n  " + "\n  ".join(blockers))
    # The manifest carries each round's figures and the override that lets it through (who, why,
    # when) - not the label table's hash it was checked against: that table holds Label Studio's
    # own ids and timestamps, so the same answers on another server would give another manifest.
    gate_list = [{"round": g["round"], "passed": g["passed"], "fields": g["fields"],
                  "override": {k: v for k, v in g["override"].items() if k != "labels_sha256"}
                  if g["override_valid"] else None}
                 for g in (gates.gate_records(root) if inp.from_data_root else [])]
    rounds = annotation_rounds(root, gate_list)
    card = card or CardOptions()
    step = on_step or (lambda _msg: None)

    samples = sorted(inp.samples, key=lambda s: s["sample_id"])
    ids = [s["sample_id"] for s in samples]
    if len(set(ids)) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise ReleaseError(f"sample_id {dup!r} occurs more than once in the input")
    samples_t, rows_t = samples_to_tables(samples)
    rows_t = _sorted(rows_t, ["sample_id", "row_index"])
    split_by_sample = {s["sample_id"]: split_of(s.get("group_id") or group_id_of(s["sample_id"]), dev_fraction)
                       for s in samples}
    step("samples and rows")

    opts = tasks.default_options()
    for task, extra in (task_options or {}).items():
        opts[task].update(extra)
    tables: dict[str, pa.Table] = {"samples": samples_t, "rows": rows_t}
    tables.update(tasks.build_all(samples, settings, opts, on_task=lambda t: step(f"task {t}")))
    lineage_t, stage_records = sample_lineage(root, ids, [r["round"] for r in rounds], inp.from_data_root)

    # The last guard before the release appears (V16): no file may hold an absolute path or a URL
    # other than those the maintainer put in the card on purpose (licence link, citations). Every
    # file is scanned once: Parquet as it is written and the manifest and card from memory (what the
    # build holds is not read back), paper/ from disk.
    chosen = [card.license_link, *private_strings(card.paper_bibtex), *private_strings(card.license_text)]
    allow = [u for u in chosen if u]
    hits: list[str] = []
    files: dict[str, dict] = {}
    with store.write_once_dir(final) as tmp:
        for config in schemas.RELEASE_CONFIGS:
            for split, part in _split_tables(tables[config], split_by_sample).items():
                rel = f"data/{config}/{split}.parquet"
                data = _parquet_bytes(part)  # hashed here, never read back
                store.atomic_write_bytes(tmp / rel, data)
                files[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "rows": part.num_rows, "bytes": len(data)}
                hits += scan_table(part, rel, allow)
            step(f"write {config}")
        data = _parquet_bytes(lineage_t)
        store.atomic_write_bytes(tmp / LINEAGE_FILE, data)
        files[LINEAGE_FILE] = {"sha256": hashlib.sha256(data).hexdigest(), "rows": lineage_t.num_rows,
                               "bytes": len(data)}
        hits += scan_table(lineage_t, LINEAGE_FILE, allow)
        paper_files = write_paper_files(samples, tmp, opts, on_step=step)
        files.update(paper_files)
        split_counts = Counter(split_by_sample.values())
        problems = Counter(v.rule for v in inp.problems)
        manifest = {
            "name": "RESCUE",
            "version": version,
            "pipeline_version": PIPELINE_VERSION,
            "source": inp.source,
            "task_settings": {"context_size": tasks.context_sizes(settings), "options": opts},
            "splits": {"method": "sha256(group_id) < dev_fraction -> dev, else test", "dev_fraction": dev_fraction,
                       "samples": {s: split_counts.get(s, 0) for s in SPLITS}},
            "files": files,
            "statistics": statistics(samples_t, rows_t),
            "counts": {t: count_by_scenario(tables[t]) for t in tasks.TASKS},
            "label_distributions": {t: label_distribution(t, tables[t]) for t in tasks.TASKS},
            "validation": {"problems": sum(problems.values()), "by_rule": dict(sorted(problems.items()))},
            "agreement_gates": gate_list,
            "annotation": {"rounds": rounds},
            "paper": {"samples": len(samples), "context_size": PAPER_CONTEXT,
                      "files": sorted(k for k in paper_files if not k.startswith("paper/data/"))},
            "layout": RELEASE_LAYOUT,
            "card": card.to_manifest(),
            "synthetic": synthetic_markers(inp.source, samples, rounds, inp.origin),
            "lineage": manifest_lineage(stage_records),
        }
        if inp.origin is not None:
            manifest["origin"] = inp.origin
        held = {"manifest.json": store.canonical_json(manifest), "README.md": dataset_card(manifest),
                "croissant.json": store.canonical_json(release_croissant(manifest))}
        for rel, text in held.items():
            store.atomic_write_text(tmp / rel, text)
        step("manifest and card")
        hits += scan_release(tmp, allow=allow, held=held, skip=[k for k in files if k.startswith("data/")] + [LINEAGE_FILE])
        if hits:
            where = list(dict.fromkeys(h.split(": ", 1)[0] for h in hits))
            more = f" and {len(where) - 20} more" if len(where) > 20 else ""
            raise ReleaseError(f"{len(hits)} absolute paths or URLs in the built release (nothing was published), "
                               f"in {', '.join(where[:20])}{more}:\n  " + "\n  ".join(hits[:10]))
        step("release scan")
    return ReleaseResult(final, manifest)


def _parquet_bytes(table: pa.Table) -> memoryview:
    """The Parquet file of ``table`` as :func:`pipeline.store.write_parquet` writes it (same options)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **store.PARQUET_OPTIONS)
    return memoryview(sink.getvalue())  # no copy


def _jsonable(obj):
    return json.loads(json.dumps(obj))


def build_or_reuse(
    inp: ReleaseInput,
    version: str,
    root: DataRoot,
    *,
    dev_fraction: float = 0.0,
    settings: Settings | None = None,
    strict: bool = False,
    on_step: Callable[[str], None] | None = None,
    card: CardOptions | None = None,
) -> ReleaseResult:
    """The release stage: validate ``inp`` and build ``version`` - or, when that version exists
    already, return it untouched (``reused=True``) if it was built from the same input (source
    hashes) and dev fraction, and raise :class:`pipeline.store.AlreadyExists` naming the version
    if not. A rerun after a crash or a repeated command is therefore a no-op that says so."""
    final = release_path(root, version)
    validate(inp)
    manifest_path = final / "manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        same_source = manifest.get("source") == _jsonable(inp.source)
        same_split = manifest.get("splits", {}).get("dev_fraction") == dev_fraction
        same_layout = manifest.get("layout") == RELEASE_LAYOUT
        same_card = manifest.get("card") == _jsonable((card or CardOptions()).to_manifest())
        missing = [rel for rel in manifest.get("files", {}) if not (final / rel).is_file()]
        if same_source and same_split and same_layout and same_card and not missing:
            return ReleaseResult(final, manifest, reused=True)
        if not same_source:
            what = "input"
        elif not same_split:
            what = f"dev fraction ({manifest.get('splits', {}).get('dev_fraction')})"
        elif not same_layout:
            old = manifest.get("layout", 1)
            what = (f"file layout (layout {old}, now {RELEASE_LAYOUT}: without {LAYOUT_LACKS.get(old, 'files now made')}"
                    + (f"; `rescue release export-paper {version} DIR` writes the paper files from it)" if old < 2
                       else ")"))
        elif not same_card:
            what = "dataset card configuration (licence or citation)"
        else:
            what = f"set of files ({len(missing)} listed in its manifest are missing, e.g. {missing[0]})"
        raise store.AlreadyExists(f"release {version} already exists at {final}, built from a different {what}; "
                                  "releases are immutable - choose a new version")
    return build_release(inp, version, root, dev_fraction=dev_fraction, settings=settings, strict=strict,
                         on_step=on_step, card=card)


# --- sharing a release --------------------------------------------------------------------

@dataclass(frozen=True)
class Published:
    """What :func:`publish` did: the release made readable, the folders above it opened for
    passing through (``--x``), and entries of the data root that others can read already."""

    path: Path
    opened: tuple[Path, ...]
    readable_elsewhere: tuple[Path, ...]


def publish(root: DataRoot, version: str) -> Published:
    """Make release ``version`` readable by group and others (files 0644, folders 0755): the one
    step that shares anything under the data root, which is otherwise owner-only. The folders
    from the data root down to ``releases/`` get the search bit only, so others reach the release
    by its path and nothing else. Entries of the data root (and other releases) that group or
    others can already read - a root written before it was private - are listed, not changed."""
    path = open_release(root, version)
    base = root.root.absolute()
    opened = store.publish_tree(path, base)
    elsewhere = [p for folder in (base, path.parent) for p in sorted(folder.iterdir())
                 if p != path and p != path.parent and not p.is_symlink() and p.stat().st_mode & 0o044]
    return Published(path, tuple(opened), tuple(elsewhere))


# --- the paper's er.jsonl / vp.jsonl shapes (spec §7.4, §7.5): pipeline.benchmark.paper_export ---------

def write_paper_task_jsonl(task: str, table: pa.Table, samples: pa.Table | Iterable[dict], path: str | Path) -> int:
    """One task table (any context size) as the paper's ER/VP JSONL at ``path``; returns the count."""
    lines = [json.dumps(r, ensure_ascii=False) for r in paper_task_records(task, table, samples)]
    store.atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)
