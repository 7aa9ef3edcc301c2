"""Versioned, immutable benchmark releases: Parquet configs, manifest, dataset card, diff.

``releases/<X.Y.Z>/`` under the data root holds::

    data/<config>/<split>.parquet   configs: samples, rows, itp, rpp, stp, ssp, er, vp
    manifest.json                   sha256/rows/bytes per file, Table 6 counts, label
                                    distributions, Table 3 statistics, source hashes
    README.md                       Hugging Face dataset card (``configs:`` front matter)

Split ``test`` holds every sample not in ``dev`` (the paper evaluates on everything). With a
dev fraction, a whole couple/family group goes to ``dev`` when sha256(group_id) falls below
the fraction, so adding interviews never moves an existing sample between splits.

A build is deterministic: the same input gives byte-identical files (sorted tables, fixed
Parquet options, canonical JSON, no timestamps, no absolute paths). The directory appears
atomically (built beside it, then renamed) and is never written again.

:func:`build_or_reuse` is the release stage the CLI (``rescue release build``) and the
``build-release`` flow both call: it validates the input, and for a version that exists
already returns it unchanged (``reused=True``) when it was built from the same input and split,
or refuses (:class:`pipeline.store.AlreadyExists`, naming the version) when not.
:func:`build_release` underneath refuses any existing version. Inputs: the corpus
(:func:`load_corpus_input`, the default), a rows directory, or the paper's JSONL
(:func:`load_source` picks by the source given); the synthetic corpus comes from
:func:`pipeline.synthetic.corpus.load_synthetic`.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import schemas, store, taxonomy
from pipeline.benchmark import tasks
from pipeline.benchmark.paper_format import load_rescue_jsonl
from pipeline.config import Settings
from pipeline.paths import DataRoot, InvalidId, check_version
from pipeline.quality import gates
from pipeline.rows import group_id_of, read_rows_dir, rows_dir_paths, samples_to_tables
from pipeline.validate import validate_samples

# From the installed distribution: `import pipeline` can resolve to a namespace package
# (editable install, cwd outside the repo) in which pipeline/__init__.py never ran.
PIPELINE_VERSION = importlib.metadata.version("rescue-pipeline")
SPLITS = ("dev", "test")
LABEL_TASKS = ("itp", "rpp", "stp", "ssp")  # tasks with a categorical label


class ReleaseError(ValueError):
    """A release cannot be built or read (bad version, missing input, unknown release)."""


# --- input ------------------------------------------------------------------------------

@dataclass
class ReleaseInput:
    samples: list[dict]
    source: dict  # provenance for the manifest: kind + content hashes, never absolute paths
    problems: list = field(default_factory=list)  # Violation records (validation / import)


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


def load_corpus_input(data_root: str | os.PathLike) -> ReleaseInput:
    """The working corpus under the data root (``DataRoot.corpus_dir()``): the default input."""
    cdir = DataRoot(data_root).corpus_dir()
    if not cdir.is_dir():
        raise ReleaseError(f"no corpus yet at {cdir}: import one (`rescue import-rescue FILE`), build gold rows "
                           "(`rescue gold build`), or pass --input / --rows-dir / --synthetic")
    return load_rows_dir(cdir)


def load_source(source: str | os.PathLike | None, data_root: str | os.PathLike) -> ReleaseInput:
    """``source``: empty for the corpus, a ``.jsonl`` file in the paper's shape, or a rows directory."""
    if not source:
        return load_corpus_input(data_root)
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
    splits = pa.array([split_by_sample[s] for s in table.column("sample_id").to_pylist()], pa.string())
    return {name: table.filter(pc.equal(splits, name)) for name in SPLITS if name in set(split_by_sample.values())}


def _count_by_scenario(table: pa.Table) -> dict:
    out = {}
    for scenario in (*taxonomy.SCENARIOS, "all"):
        t = table if scenario == "all" else table.filter(pc.equal(table["scenario"], scenario))
        out[scenario] = {"instances": t.num_rows, "samples": len(pc.unique(t["sample_id"]))}
    return out


def _label_distribution(task: str, table: pa.Table) -> dict:
    out = {}
    for scenario in (*taxonomy.SCENARIOS, "all"):
        t = table if scenario == "all" else table.filter(pc.equal(table["scenario"], scenario))
        if task in LABEL_TASKS:
            values = t["label"].to_pylist()
        elif task == "er":
            values = [str(v) for v in t["label_intensity"].to_pylist()]  # intensity histogram
        else:  # vp: gold viewpoints per instance
            values = [str(len(v)) for v in t["label"].to_pylist()]
        out[scenario] = dict(sorted(Counter(values).items()))
    return out


def statistics(samples_t: pa.Table, rows_t: pa.Table) -> dict:
    """The paper's Table 3: per couple / family / all (speakers count the therapist)."""
    is_t = pc.equal(rows_t["primary_speaker"], taxonomy.THERAPIST)
    per_sample = pa.table({"sample_id": rows_t["sample_id"], "end": rows_t["end_time"],
                           "t": pc.cast(is_t, pa.int64())}).group_by("sample_id").aggregate(
        [("sample_id", "count"), ("end", "max"), ("t", "sum")])
    agg = {sid: (n, end, t) for sid, n, end, t in zip(*(per_sample[c].to_pylist() for c in
                                                        ("sample_id", "sample_id_count", "end_max", "t_sum")))}
    out = {}
    meta = samples_t.select(["sample_id", "scenario", "participants", "duration_s"]).to_pylist()
    for scenario in (*taxonomy.SCENARIOS, "all"):
        n = turns = therapist = 0
        seconds = speakers = 0.0
        for m in meta:
            if scenario != "all" and m["scenario"] != scenario:
                continue
            rows, last_end, t = agg.get(m["sample_id"], (0, None, 0))
            n += 1
            turns += rows
            therapist += t
            seconds += m["duration_s"] if m["duration_s"] is not None else (last_end or 0.0)
            speakers += len(m["participants"] or []) + (1 if t else 0)
        minutes = seconds / 60
        out[scenario] = {
            "samples": n,
            "total_duration_min": round(minutes, 1),
            "total_turns": turns,
            "avg_duration_min": round(minutes / n, 2) if n else 0.0,
            "avg_turns": round(turns / n, 2) if n else 0.0,
            "avg_speakers": round(speakers / n, 2) if n else 0.0,
            "therapist_turn_share": round(therapist / turns, 4) if turns else 0.0,
        }
    return out


def build_release(
    inp: ReleaseInput,
    version: str,
    data_root: str | Path,
    *,
    dev_fraction: float = 0.0,
    settings: Settings | None = None,
    task_options: dict[str, dict] | None = None,
    strict: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> ReleaseResult:
    """Build ``releases/<version>/`` under ``data_root`` from ``inp``; an existing version is
    refused (:func:`build_or_reuse` reuses one built from the same input); see the module doc."""
    final = _release_path(data_root, version)
    if not 0.0 <= dev_fraction < 1.0:
        raise ReleaseError(f"dev fraction must be in [0, 1), got {dev_fraction}")
    if final.exists():
        raise store.AlreadyExists(f"release {version} already exists at {final}; releases are immutable - "
                                  "choose a new version")
    if not inp.samples:
        raise ReleaseError("no samples to release (the input was empty or every sample was invalid)")
    if strict and inp.problems:
        raise ReleaseError(f"{len(inp.problems)} validation problems and --strict given; first: {inp.problems[0]}")
    # Agreement gates of the annotation rounds behind this corpus: a failing round blocks the
    # release unless an override with a reason was recorded (which the manifest then carries).
    blockers = gates.release_blockers(data_root)
    if blockers:
        raise ReleaseError("agreement gates block this release:\n  " + "\n  ".join(blockers))
    # The manifest carries each round's figures and the override that lets it through (who, why,
    # when) - not the label table's hash it was checked against: that table holds Label Studio's
    # own ids and timestamps, so the same answers on another server would give another manifest.
    gate_list = [{"round": g["round"], "passed": g["passed"], "fields": g["fields"],
                  "override": {k: v for k, v in g["override"].items() if k != "labels_sha256"}
                  if g["override_valid"] else None} for g in gates.gate_records(data_root)]
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

    files: dict[str, dict] = {}
    with store.write_once_dir(final) as tmp:
        for config in schemas.RELEASE_CONFIGS:
            for split, part in _split_tables(tables[config], split_by_sample).items():
                rel = f"data/{config}/{split}.parquet"
                path = store.write_parquet(part, tmp / rel)
                files[rel] = {"sha256": store.sha256_file(path), "rows": part.num_rows, "bytes": path.stat().st_size}
            step(f"write {config}")
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
            "counts": {t: _count_by_scenario(tables[t]) for t in tasks.TASKS},
            "label_distributions": {t: _label_distribution(t, tables[t]) for t in tasks.TASKS},
            "validation": {"problems": sum(problems.values()), "by_rule": dict(sorted(problems.items()))},
            "agreement_gates": gate_list,
        }
        store.atomic_write_text(tmp / "manifest.json", store.canonical_json(manifest))
        store.atomic_write_text(tmp / "README.md", dataset_card(manifest))
        step("manifest and card")
    return ReleaseResult(final, manifest)


def _release_path(data_root: str | os.PathLike, version: str) -> Path:
    try:
        return DataRoot(data_root).release(check_version(version))
    except InvalidId as exc:
        raise ReleaseError(f"{exc} (semantic versioning X.Y.Z)") from None


def _jsonable(obj):
    return json.loads(json.dumps(obj))


def build_or_reuse(
    inp: ReleaseInput,
    version: str,
    data_root: str | os.PathLike,
    *,
    dev_fraction: float = 0.0,
    settings: Settings | None = None,
    strict: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> ReleaseResult:
    """The release stage: validate ``inp`` and build ``version`` - or, when that version exists
    already, return it untouched (``reused=True``) if it was built from the same input (source
    hashes) and dev fraction, and raise :class:`pipeline.store.AlreadyExists` naming the version
    if not. A rerun after a crash or a repeated command is therefore a no-op that says so."""
    final = _release_path(data_root, version)
    validate(inp)
    manifest_path = final / "manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        same_source = manifest.get("source") == _jsonable(inp.source)
        same_split = manifest.get("splits", {}).get("dev_fraction") == dev_fraction
        if same_source and same_split:
            return ReleaseResult(final, manifest, reused=True)
        what = "input" if not same_source else f"dev fraction ({manifest.get('splits', {}).get('dev_fraction')})"
        raise store.AlreadyExists(f"release {version} already exists at {final}, built from a different {what}; "
                                  "releases are immutable - choose a new version")
    return build_release(inp, version, data_root, dev_fraction=dev_fraction, settings=settings, strict=strict,
                         on_step=on_step)


# --- dataset card -----------------------------------------------------------------------

def _md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def dataset_card(manifest: dict) -> str:
    """README.md with Hugging Face ``configs:`` front matter; every number comes from the manifest."""
    by_config: dict[str, list[tuple[str, str]]] = {}
    for rel in sorted(manifest["files"]):
        _, config, name = rel.split("/")
        by_config.setdefault(config, []).append((name.removesuffix(".parquet"), rel))
    yaml = ["---", "pretty_name: RESCUE", "license: other", "language:", "- en", "configs:"]
    for config in schemas.RELEASE_CONFIGS:
        if config not in by_config:
            continue
        yaml += [f"- config_name: {config}", "  data_files:"]
        for split, rel in by_config[config]:
            yaml += [f"  - split: {split}", f"    path: {rel}"]
    yaml.append("---")

    st = manifest["statistics"]
    cols = [*taxonomy.SCENARIOS, "all"]
    stat_rows = [
        ["Samples"] + [st[c]["samples"] for c in cols],
        ["Total duration (min)"] + [st[c]["total_duration_min"] for c in cols],
        ["Total turns"] + [st[c]["total_turns"] for c in cols],
        ["Avg. duration / sample (min)"] + [st[c]["avg_duration_min"] for c in cols],
        ["Avg. turns / sample"] + [st[c]["avg_turns"] for c in cols],
        ["Avg. speakers / sample (incl. therapist)"] + [st[c]["avg_speakers"] for c in cols],
        ["Therapist turn share"] + [f"{100 * st[c]['therapist_turn_share']:.1f}%" for c in cols],
    ]
    counts = manifest["counts"]
    count_rows = [[t.upper()] + [counts[t][c]["instances"] for c in taxonomy.SCENARIOS]
                  + [counts[t][c]["samples"] for c in taxonomy.SCENARIOS] for t in tasks.TASKS]
    ctx = manifest["task_settings"]["context_size"]
    files = _md_table(["file", "rows", "bytes", "sha256"],
                      [[f"`{k}`", v["rows"], v["bytes"], f"`{v['sha256'][:16]}…`"] for k, v in sorted(manifest["files"].items())])
    dist = []
    for task in LABEL_TASKS:
        for scenario in taxonomy.SCENARIOS:
            d = manifest["label_distributions"][task][scenario]
            total = sum(d.values()) or 1
            dist.append([task.upper(), scenario, ", ".join(f"{k} {v} ({100 * v / total:.1f}%)" for k, v in
                                                          sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))])
    splits = manifest["splits"]
    body = f"""
# RESCUE {manifest['version']}

Relation-aware multi-party emotional support conversations from couple and family therapy
interviews, rebuilt by `rescue-pipeline` {manifest['pipeline_version']}. Six benchmark tasks:
intervention timing (ITP), relation pattern (RPP), support target (STP), support strategy
(SSP), emotion recognition (ER) and viewpoint prediction (VP).

## Configs

`samples` (one line per interview clip), `rows` (one line per annotated turn; the relation
label sits on the therapist row it annotates, `relation_cycle_*`), and one config per task.
Every task table has `sample_id`, `scenario`, `row_index`, `instance_id`, its inputs, and the
gold in the columns starting with `label`. Context rows (`prior_context`) carry input fields
only: no emotion, viewpoint, strategy, relation or utterance-type annotation.

```python
from datasets import load_dataset
ds = load_dataset("path/to/releases/{manifest['version']}", "itp")
```

## Statistics (paper Table 3 shape)

{_md_table(["Statistic", *cols], stat_rows)}

## Task instances (paper Table 6 shape)

{_md_table(["Task", "Couple inst.", "Family inst.", "Couple samp.", "Family samp."], count_rows)}

Context sizes: {", ".join(f"{t.upper()} {'all prior rows' if v < 0 else v}" for t, v in ctx.items())}.

## Label distributions

{_md_table(["Task", "Scenario", "Labels"], dist)}

## Splits

`test` holds every sample not in `dev` (the paper evaluates on all samples). Dev fraction:
{splits['dev_fraction']}; whole couple/family groups are assigned by sha256 of the group id, so
a sample never moves between splits when interviews are added. Samples per split:
{", ".join(f"{k} {v}" for k, v in splits['samples'].items())}.

## Construction notes

- Task instances follow the RESCUE paper's scripts (balanced ITP with `even_sample`, ER/VP
  checkpoints with `pick_evenly`, ER early cutoff 0.3 and 5-word minimum).
- ITP `prior_context` ends with the decision row, as in the scripts (it also appears as
  `decision_after_row`).
- STP candidate targets list each label once (the scripts can repeat the group label).
- No clip paths or absolute paths are released; timestamps are `start-end` seconds.
- Validation problems recorded at build time: {manifest['validation']['problems']}.

## Files

{files}
"""
    return "\n".join(yaml) + "\n" + body


# --- reading and diff -------------------------------------------------------------------

def open_release(data_root: str | os.PathLike, version: str) -> Path:
    path = _release_path(data_root, version)
    if not (path / "manifest.json").is_file():
        raise ReleaseError(f"no release {version!r} under {DataRoot(data_root).releases_dir()}")
    return path


def read_config(release_path: str | Path, config: str) -> pa.Table:
    """All splits of one config, concatenated and sorted like the build."""
    release_path = Path(release_path)
    parts = [pq.ParquetFile(p).read() for p in sorted((release_path / "data" / config).glob("*.parquet"))]
    if not parts:
        raise ReleaseError(f"{release_path}: no files for config {config!r}")
    return pa.concat_tables(parts)


def _fingerprints(table: pa.Table, key: list[str], columns: list[str] | None = None) -> dict[tuple, dict]:
    cols = columns or [c for c in table.column_names if c not in key]
    out = {}
    for rec in table.select(key + cols).to_pylist():
        out[tuple(rec[k] for k in key)] = {c: rec[c] for c in cols}
    return out


def _compare(a: dict[tuple, dict], b: dict[tuple, dict], examples: int) -> dict:
    added = sorted(set(b) - set(a))
    removed = sorted(set(a) - set(b))
    changed, fields = [], Counter()
    for k in sorted(set(a) & set(b)):
        diff = [c for c in b[k] if a[k].get(c) != b[k][c]]
        if diff:
            changed.append(k)
            fields.update(diff)
    show = lambda keys: ["/".join(str(p) for p in k) for k in keys[:examples]]  # noqa: E731
    return {"added": len(added), "removed": len(removed), "changed": len(changed),
            "changed_fields": dict(sorted(fields.items())),
            "examples": {"added": show(added), "removed": show(removed), "changed": show(changed)}}


def diff_releases(data_root: str | Path, a: str, b: str, examples: int = 10) -> dict:
    """What changed from release ``a`` to ``b``: samples, rows and task labels."""
    pa_, pb = open_release(data_root, a), open_release(data_root, b)
    out = {"from": a, "to": b}
    out["samples"] = _compare(_fingerprints(read_config(pa_, "samples"), ["sample_id"]),
                              _fingerprints(read_config(pb, "samples"), ["sample_id"]), examples)
    out["rows"] = _compare(_fingerprints(read_config(pa_, "rows"), ["sample_id", "row_index"]),
                           _fingerprints(read_config(pb, "rows"), ["sample_id", "row_index"]), examples)
    labels = {}
    for task in tasks.TASKS:
        ta, tb = read_config(pa_, task), read_config(pb, task)
        label_cols = [c for c in tb.column_names if c.startswith("label")]
        labels[task] = _compare(_fingerprints(ta, ["instance_id"], label_cols),
                                _fingerprints(tb, ["instance_id"], label_cols), examples)
    out["labels"] = labels
    return out


# --- the paper's er.jsonl / vp.jsonl shapes (spec §7.4, §7.5) -----------------------------

_CURRENT_KEYS = ("timestamp", "speaker", "target", "dialogue", "background_dialogue", "tone_of_voice", "body_posture",
                 "facial_expressions", "self_directed_behavior", "interaction_behavior")


def paper_task_records(task: str, table: pa.Table, samples: pa.Table | Iterable[dict]) -> Iterator[dict]:
    """ER/VP instances as the paper's JSONL records (key order of the release).

    Deviation: ``clip_path`` / ``clip_duration_sec`` are left out; row clips are not
    released and the paper's values were absolute local paths.
    """
    if task not in ("er", "vp"):
        raise ValueError(f"the paper released instance files only for er and vp, not {task!r}")
    rows = samples.to_pylist() if isinstance(samples, pa.Table) else samples
    source_file = {s["sample_id"]: s.get("source_file") for s in rows}
    for rec in table.to_pylist():
        sid = rec["sample_id"]
        out = {"sample_id": sid, "couple": rec["group_id"].rpartition("/")[2], "row_index": rec["row_index"]}
        for key in _CURRENT_KEYS:
            out[key] = rec[key]
            if key == "speaker" and task == "vp":
                out["participants"] = rec["participants"]
        out["prior_context"] = rec["prior_context"]
        if task == "er":
            out["gold_internal_emotion"] = rec["label"]
            out["gold_intensity_score"] = rec["label_intensity"]
        else:
            out["gold_viewpoints"] = rec["label"]
        out.update(task=task, instance_id=rec["instance_id"], scenario=rec["scenario"], source_sample_id=sid,
                   source_file=source_file.get(sid))
        yield out


def write_paper_task_jsonl(task: str, table: pa.Table, samples: pa.Table | Iterable[dict], path: str | Path) -> int:
    lines = [json.dumps(r, ensure_ascii=False) for r in paper_task_records(task, table, samples)]
    store.atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)
