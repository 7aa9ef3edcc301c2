"""The paper's own file shapes inside every release (``paper/``), and ``rescue release export-paper``.

A release carries, beside its Parquet configs, the files in the shapes the RESCUE authors
published and their evaluation scripts read (spec §1.1, §1.2, §7.4, §7.5)::

    paper/benchmark.jsonl            one sample per line, the benchmark_191.jsonl shape
                                     (relation copy shifted onto the row before each therapist
                                     row again; a corpus imported from the published file comes
                                     back byte for byte). Where that shape cannot carry a value,
                                     two extra fields that import-rescue reads back: the sample's
                                     duration_s, and a first-row therapist's own
                                     relation_cycle_reason / _evidence_rows (paper_format)
    paper/er.jsonl, paper/vp.jsonl   ER / VP instances in the released field order; as in the
                                     published files, ``prior_context`` holds ALL prior rows
                                     (the Parquet configs use the release's context sizes)
    paper/data/<sample_id>.json      the per-sample layout the scripts read: the benchmark line
                                     with every therapist row's own relation_cycle_reason /
                                     _evidence_rows too (the RPP script reads those). The scripts
                                     ``rglob("*.json")`` under ``--data-root``, take the sample id
                                     from the path and the couple from its folder, and resolve
                                     paths under their own checkout: copy this folder to their
                                     checkout's ``data/`` (docs/OPERATIONS.md)

Sample ids follow the grammar of :mod:`pipeline.paths` (checked again here) and every path is
checked to stay inside the release. ``clip_path`` / ``clip_duration_sec`` are written only where
a row clip exists, as a path relative to the release (``clips``); releases built by this
pipeline ship no clips, so the keys are absent. ER/VP ``instance_id`` here keeps the paper's
``<sample_id>__row<k>`` (it reveals no label for these tasks); the Parquet configs carry opaque ids.

:func:`write_paper_files` is called by the release build (into the release being written) and
by :func:`export_paper` (from an existing release, into a new folder): both write the same bytes.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import store
from pipeline.benchmark import tasks
from pipeline.benchmark.paper_format import dumps_line, release_lines
from pipeline.benchmark.tasks.common import input_row
from pipeline.paths import check_sample_id
from pipeline.rows import group_id_of, tables_to_samples

PAPER_DIR = "paper"
BENCHMARK_FILE = f"{PAPER_DIR}/benchmark.jsonl"
TASK_FILES = {"er": f"{PAPER_DIR}/er.jsonl", "vp": f"{PAPER_DIR}/vp.jsonl"}
SAMPLES_DIR = f"{PAPER_DIR}/data"
PAPER_CONTEXT = -1  # the published er.jsonl / vp.jsonl embed every prior row

# (sample_id, row_index) -> (clip path relative to the release, duration in seconds)
Clips = Mapping[tuple[str, int], tuple[str, float]]

_CURRENT_KEYS = ("timestamp", "speaker", "target", "dialogue", "background_dialogue", "tone_of_voice", "body_posture",
                 "facial_expressions", "self_directed_behavior", "interaction_behavior")


class PaperExportError(ValueError):
    """A paper-shaped file cannot be written (a path outside the release, an unknown release)."""


def paper_instance_id(sample_id: str, row_index: int) -> str:
    """The published ER/VP id (``checkpoint_id``): ``<sample_id>__row<k>``."""
    return f"{sample_id}__row{row_index}"


def sample_file(sample_id: str) -> str:
    """``paper/data/<sample_id>.json`` for a sample id that follows the grammar (else InvalidId)."""
    return f"{SAMPLES_DIR}/{check_sample_id(sample_id)}.json"


def _with_clip(rec: dict, clip: tuple[str, float] | None) -> dict:
    if clip is not None:
        rel, duration = clip
        if not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/") or "\\" in rel:
            raise PaperExportError(f"clip path {rel!r} must be relative to the release")
        rec["clip_path"], rec["clip_duration_sec"] = rel, duration
    return rec


def paper_task_records(task: str, table: pa.Table, samples: pa.Table | Iterable[dict],
                       clips: Clips | None = None) -> Iterator[dict]:
    """ER/VP instances (a task table, any context size) as the paper's JSONL records, in the
    published key order; ``clip_path`` / ``clip_duration_sec`` only where ``clips`` has the row."""
    if task not in TASK_FILES:
        raise ValueError(f"the paper released instance files only for er and vp, not {task!r}")
    clips = clips or {}
    rows = samples.to_pylist() if isinstance(samples, pa.Table) else samples
    source_file = {s["sample_id"]: s.get("source_file") for s in rows}
    for rec in table.to_pylist():
        sid = rec["sample_id"]
        out = {"sample_id": sid, "couple": (rec.get("group_id") or group_id_of(sid)).rpartition("/")[2],
               "row_index": rec["row_index"]}
        for key in _CURRENT_KEYS:
            out[key] = rec[key]
            if key == "speaker" and task == "vp":
                out["participants"] = rec["participants"]
        out["prior_context"] = [_with_clip(dict(c), clips.get((sid, c["row_index"]))) for c in rec["prior_context"]]
        if task == "er":
            out["gold_internal_emotion"] = rec["label"]
            out["gold_intensity_score"] = rec["label_intensity"]
        else:
            out["gold_viewpoints"] = rec["label"]
        _with_clip(out, clips.get((sid, rec["row_index"])))
        out.update(task=task, instance_id=paper_instance_id(sid, rec["row_index"]), scenario=rec["scenario"],
                   source_sample_id=sid, source_file=source_file.get(sid))
        yield out


class _Sink:
    """One file of a folder being built: streamed, hashed as it is written (no per-file fsync:
    the folder appears atomically as a whole)."""

    def __init__(self, root: Path, rel: str, files: dict[str, dict]):
        # ``root`` is a folder this build just created (nothing in it can be a symlink), so the check is
        # lexical: the normalised path must stay under it (sample ids are checked against the grammar too)
        self.path = root.joinpath(*rel.split("/"))
        if not os.path.normpath(self.path).startswith(os.path.normpath(root) + os.sep):
            raise PaperExportError(f"{rel} would leave the release folder {root}")
        if not self.path.parent.is_dir():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rel, self.files, self.rows, self.size = rel, files, 0, 0
        self.sha = hashlib.sha256()
        self.fh = open(self.path, "wb")

    def line(self, text: str) -> bytes:
        data = (text + "\n").encode("utf-8")
        self.fh.write(data)
        self.sha.update(data)
        self.rows += 1
        self.size += len(data)
        return data

    def close(self, rows: int | None = None) -> None:
        self.fh.close()
        self.files[self.rel] = {"sha256": self.sha.hexdigest(), "rows": self.rows if rows is None else rows,
                                "bytes": self.size}


_CTX = "\x00prior_context\x00"
_CTX_JSON = json.dumps(_CTX)  # how the placeholder reads once dumped


def _fast_records(task: str, sample: dict, inputs: list[dict], options: Mapping, clips: Clips,
                  ctx_json: list[str]) -> Iterator[str]:
    """The paper's records of one sample as JSON lines; every prior row's JSON is made once per
    sample and spliced in (a record with all prior rows repeats them: re-dumping each is slow)."""
    module = tasks._MODULES[task]
    sid = sample["sample_id"]
    couple = (sample.get("group_id") or group_id_of(sid)).rpartition("/")[2]
    for rec in module.instances(sample, inputs, 0, **options):
        k = rec["row_index"]
        out = {"sample_id": sid, "couple": couple, "row_index": k}
        for key in _CURRENT_KEYS:
            out[key] = rec[key]
            if key == "speaker" and task == "vp":
                out["participants"] = rec["participants"]
        out["prior_context"] = _CTX
        if task == "er":
            out["gold_internal_emotion"] = rec["label"]
            out["gold_intensity_score"] = rec["label_intensity"]
        else:
            out["gold_viewpoints"] = rec["label"]
        _with_clip(out, clips.get((sid, k)))
        out.update(task=task, instance_id=paper_instance_id(sid, k), scenario=sample["scenario"],
                   source_sample_id=sid, source_file=sample.get("source_file"))
        yield dumps_line(out).replace(_CTX_JSON, "[" + ", ".join(ctx_json[:k - 1]) + "]", 1)


def write_paper_files(samples: list[dict], root: str | os.PathLike, options: Mapping[str, Mapping] | None = None,
                      clips: Clips | None = None, on_step: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Write ``paper/`` under ``root`` for ``samples`` (sorted by sample_id); ``options``: the
    task options of the release (ER/VP checkpoint sampling). Returns the manifest entries
    (path relative to ``root`` -> sha256, rows, bytes). Files are streamed: memory stays flat."""
    root = Path(root)
    step = on_step or (lambda _m: None)
    clips = clips or {}
    samples = sorted(samples, key=lambda s: s["sample_id"])
    opts = tasks.default_options()
    for task, extra in (options or {}).items():
        if task in opts:
            opts[task].update(extra)
    files: dict[str, dict] = {}
    bench = _Sink(root, BENCHMARK_FILE, files)
    for s in samples:
        line, authors_line = release_lines(s)
        bench.line(line)
        one = _Sink(root, sample_file(s["sample_id"]), files)
        one.line(authors_line)
        one.close(rows=len(s["rows"]))
    bench.close()
    step("paper benchmark + per-sample files")
    sinks = {task: _Sink(root, rel, files) for task, rel in TASK_FILES.items()}
    try:
        for s in samples:
            inputs = [input_row(r) for r in s["rows"]]
            ctx_json = [dumps_line(_with_clip(dict(r), clips.get((s["sample_id"], r["row_index"])))) for r in inputs]
            for task, sink in sinks.items():
                for line in _fast_records(task, s, inputs, opts[task], clips, ctx_json):
                    sink.line(line)
    finally:
        for sink in sinks.values():
            sink.close()
    step("paper er.jsonl + vp.jsonl")
    return files


def read_release_samples(release_path: str | os.PathLike) -> list[dict]:
    """The samples of a release (every split of ``samples`` and ``rows``), in the input shape."""
    release_path = Path(release_path)

    def read(config: str) -> pa.Table:
        parts = [pq.ParquetFile(p).read() for p in sorted((release_path / "data" / config).glob("*.parquet"))]
        if not parts:
            raise PaperExportError(f"{release_path}: no files for config {config!r}")
        return pa.concat_tables(parts)

    return sorted(tables_to_samples(read("samples"), read("rows")), key=lambda s: s["sample_id"])


def export_paper(release_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, dict]:
    """``rescue release export-paper``: the ``paper/`` files of an existing release, written to
    ``out_dir/paper/`` (``out_dir`` must not exist yet; it appears atomically). Same bytes as the
    release's own ``paper/`` (same samples, same task options from its manifest)."""
    release_path = Path(release_path)
    manifest_path = release_path / "manifest.json"
    if not manifest_path.is_file():
        raise PaperExportError(f"{release_path} is not a release (no manifest.json)")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    options = manifest.get("task_settings", {}).get("options") or {}
    samples = read_release_samples(release_path)
    with store.write_once_dir(out_dir) as tmp:
        files = write_paper_files(samples, tmp, options)
    return files
