"""What made a release, and each of its samples: the manifest's ``lineage`` and ``lineage.parquet``.

``manifest.lineage`` says what the build ran on:

- ``code``: the git commit of the checkout the ``pipeline`` package was imported from and
  whether it had uncommitted changes (``git rev-parse HEAD``, ``git status --porcelain``); outside
  a checkout, or without git, the digest of the package's source files
  (:func:`pipeline.lineage.package_digest`). A release is never refused for want of git.
- ``packages``: name -> installed version (``null``: not installed) of what made the data:
  this pipeline, pyarrow, torch, whisperx, pyannote.audio, prefect, and label-studio from the
  desks' own virtual environment.
- ``models``: model name -> sha256 of every model the samples' stage records name (a name with
  more than one digest among the samples: the list of them; ``named:<id>`` for a hub model that
  was not digested).
- ``settings``: per media stage, each setting's value across the samples (a list where they differ).

``lineage.parquet`` (:data:`LINEAGE`) has one row per sample: the video's sha256, the transcript's
source (the subtitle file's sha256, or the ASR model's digest), the diarizer's model digest, the
segmenter's code digest, and per annotation round the annotators who labelled it and the rows an
adjudicator settled. Annotators are opaque ids (``annotator-1``, ... numbered over the release's
rounds in the order of their e-mail addresses): no e-mail, name or desk ever reaches the file.
Only a release of the data root's own corpus has stage records and rounds; for any other input
the columns after ``sample_id`` are empty. :func:`explain` tells one sample's (or row's) story
in words (``rescue release explain``).
"""
from __future__ import annotations

import functools
import importlib.metadata
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import lineage
from pipeline.catalog import read_catalog
from pipeline.paths import DataRoot, InvalidId

LINEAGE_FILE = "lineage.parquet"
ROUND = pa.struct([
    pa.field("round", pa.string()),
    pa.field("annotators", pa.list_(pa.string())),   # opaque ids, never e-mails
    pa.field("adjudicated", pa.bool_()),              # an adjudicator settled one of its rows or more
    pa.field("adjudicated_rows", pa.list_(pa.int64())),  # their row_index
])
LINEAGE = pa.schema([
    pa.field("sample_id", pa.string(), nullable=False),
    pa.field("video_sha256", pa.string()),            # the ingested video's bytes (the catalog's)
    pa.field("transcript_source", pa.string()),       # subtitles | whisperx (null: not recorded)
    pa.field("transcript_model", pa.string()),        # the ASR model's name (whisperx)
    pa.field("transcript_sha256", pa.string()),       # the subtitle file's sha256, or the ASR model's digest
    pa.field("diarizer_model", pa.string()),
    pa.field("diarizer_sha256", pa.string()),
    pa.field("segmenter_code_sha256", pa.string()),   # the segment stage's code digest (pipeline.lineage)
    pa.field("rounds", pa.list_(ROUND)),
])
PACKAGES = ("rescue-pipeline", "pyarrow", "torch", "whisperx", "pyannote.audio", "prefect")
LABEL_STUDIO = "label-studio"
STAGES = ("ingest", "transcribe", "diarize", "segment")
# per-sample hints, not settings of the stage (the speaking order names the sample's people)
NOT_SETTINGS = {"segment": ("speaking_order",)}
# models a transcript record names besides the ASR model
NOT_ASR = ("alignment-default", "nltk_data")


# --- what the build ran on ---------------------------------------------------------------------

def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(lineage.SOURCE_ROOT), *args], capture_output=True, text=True,
                             timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def code_lineage() -> dict:
    """``{"git_commit", "dirty"}`` in a checkout of this package, else ``{"source_sha256"}``."""
    top = _git("rev-parse", "--show-toplevel")
    if top and Path(top.strip()).resolve() == lineage.SOURCE_ROOT.resolve():
        commit, status = _git("rev-parse", "HEAD"), _git("status", "--porcelain")
        if commit and status is not None:
            return {"git_commit": commit.strip(), "dirty": bool(status.strip())}
    return {"source_sha256": lineage.package_digest()}


def _label_studio_version() -> str | None:
    from pipeline.labelstudio.server import DEFAULT_VENV

    paths = [str(p) for p in sorted(Path(DEFAULT_VENV).glob("lib/python*/site-packages"))]
    for dist in importlib.metadata.distributions(name=LABEL_STUDIO, path=paths) if paths else ():
        return dist.version
    return None


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out[LABEL_STUDIO] = _label_studio_version()
    return dict(sorted(out.items()))


# --- per sample --------------------------------------------------------------------------------

def annotator_ids(root: DataRoot, rounds: Iterable[str]) -> dict[str, str]:
    """e-mail (lower-cased) -> ``annotator-N`` over the rounds' label tables, in address order."""
    people: set[str] = set()
    for name in rounds:
        path = _round_file(root.labels, name)
        if path is not None:
            names = pc.unique(pq.read_table(path, columns=["annotator"])["annotator"])
            people |= {str(a).lower() for a in names.to_pylist()}
    return {e: f"annotator-{i + 1}" for i, e in enumerate(sorted(people))}


def _round_file(where, name: str) -> Path | None:
    try:
        path = where(name)
    except InvalidId:
        return None
    return path if path.is_file() else None


def _round_lineage(root: DataRoot, rounds: list[str], ids: dict[str, str], wanted: set[str]) -> dict[str, list]:
    """sample_id -> its rounds: annotators (opaque ids) and adjudicated rows."""
    out: dict[str, list] = {}
    for name in rounds:
        who: dict[str, set[str]] = {}
        settled: dict[str, set[int]] = {}
        labels, adj = _round_file(root.labels, name), _round_file(root.adjudications, name)
        if labels is not None:  # one line per (sample, annotator): a round's table has one per field and row
            t = pq.read_table(labels, columns=["sample_id", "annotator"])
            t = t.group_by(["sample_id", "annotator"]).aggregate([])
            for sid, ann in zip(t["sample_id"].to_pylist(), t["annotator"].to_pylist()):
                if sid in wanted:
                    who.setdefault(sid, set()).add(ids[str(ann).lower()])
        if adj is not None:
            t = pq.read_table(adj, columns=["sample_id", "row_index"])
            for sid, ri in zip(t["sample_id"].to_pylist(), t["row_index"].to_pylist()):
                if sid in wanted:
                    settled.setdefault(sid, set()).add(int(ri))
        for sid in sorted(set(who) | set(settled)):
            rows = sorted(settled.get(sid, ()))
            out.setdefault(sid, []).append({"round": name, "adjudicated": bool(rows), "adjudicated_rows": rows,
                                            "annotators": sorted(who.get(sid, ()), key=_id_order)})
    return out


def _round_order(name: str) -> tuple:
    """Rounds in annotation order (the round definitions'), others after them by name."""
    from pipeline.annotation.rounds import round_names

    known = list(round_names())
    return (known.index(name) if name in known else len(known), name)


def _id_order(opaque: str) -> int:
    return int(opaque.rsplit("-", 1)[1])


def _transcript(rec: dict | None, ingest: dict | None, sub_copy: Path | None) -> tuple:
    """(source, ASR model name, digest) from a transcript's record."""
    if not rec:
        return None, None, None
    backend = (rec.get("settings") or {}).get("backend")
    if backend == "subtitles":
        digest = ((ingest or {}).get("inputs") or {}).get("subtitles")
        if not digest and sub_copy is not None:
            digest = lineage.file_digest(sub_copy)
        return backend, None, digest
    models = rec.get("models") or {}
    asr = (rec.get("options") or {}).get("asr_model")
    names = [n for n in ([Path(asr).name, asr] if asr else []) if n in models]
    names = names or [n for n in models if n not in NOT_ASR and n != Path(str((rec.get("options") or {})
                                                                                .get("align_model"))).name]
    name = names[0] if names else None
    return backend, name, (models[name]["sha256"] if name else None)


def sample_lineage(root: DataRoot, sample_ids: list[str], rounds: list[str],
                   from_data_root: bool) -> tuple[pa.Table, list[dict]]:
    """The :data:`LINEAGE` table (one row per sample, in ``sample_ids`` order) and the samples'
    stage records (for :func:`manifest_lineage`)."""
    if not from_data_root:
        empty = {name: [None] * len(sample_ids) for name in LINEAGE.names}
        return pa.table({**empty, "sample_id": sample_ids, "rounds": [[]] * len(sample_ids)}, schema=LINEAGE), []
    rounds = sorted(rounds, key=_round_order)
    catalog = {r["sample_id"]: r
               for r in read_catalog(root).select(["sample_id", "sha256", "subtitle_path"]).to_pylist()}
    per_round = _round_lineage(root, rounds, annotator_ids(root, rounds), set(sample_ids))
    rows, records = [], []
    for sid in sample_ids:
        recs = {stage: lineage.read_record(root, stage, sid) for stage in STAGES}
        records.append(recs)
        cat = catalog.get(sid) or {}
        sub = root.resolve(cat["subtitle_path"]) if cat.get("subtitle_path") else None
        source, asr, digest = _transcript(recs["transcribe"], recs["ingest"], sub)
        diar = next(iter(((recs["diarize"] or {}).get("models") or {}).items()), (None, {}))
        rows.append({"sample_id": sid, "video_sha256": cat.get("sha256"), "transcript_source": source,
                     "transcript_model": asr, "transcript_sha256": digest, "diarizer_model": diar[0],
                     "diarizer_sha256": diar[1].get("sha256"),
                     "segmenter_code_sha256": (recs["segment"] or {}).get("code_digest"),
                     "rounds": per_round.get(sid, [])})
    return pa.Table.from_pylist(rows, schema=LINEAGE), records


def _values(values: list) -> object:
    """One value where the samples agree, else the distinct ones (in first-seen order)."""
    distinct = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    return distinct[0] if len(distinct) == 1 else distinct


def manifest_lineage(records: list[dict]) -> dict:
    """``manifest.lineage``: code, packages, models (name -> sha256) and settings (per stage)."""
    digests: dict[str, list[str]] = {}
    settings: dict[str, dict[str, list]] = {}
    for recs in records:
        for stage, rec in recs.items():
            if not rec:
                continue
            for name, model in (rec.get("models") or {}).items():
                digests.setdefault(name, [])
                if model.get("sha256") not in digests[name]:
                    digests[name].append(model.get("sha256"))
            for key, value in (rec.get("settings") or {}).items():
                if key not in NOT_SETTINGS.get(stage, ()):
                    settings.setdefault(stage, {}).setdefault(key, []).append(value)
    return {"code": code_lineage(), "packages": package_versions(),
            "models": {n: d[0] if len(d) == 1 else sorted(d) for n, d in sorted(digests.items())},
            "settings": {s: {k: _values(v) for k, v in sorted(settings[s].items())} for s in STAGES if s in settings}}


# --- a sample's story ----------------------------------------------------------------------------

class ExplainError(ValueError):
    """No such sample or row in the release, or a release without lineage."""


def _code_text(code: dict) -> str:
    if "git_commit" in code:
        return f"git commit {code['git_commit']}" + (" with uncommitted changes" if code.get("dirty") else "")
    if "source_sha256" in code:
        return f"pipeline source sha256 {code['source_sha256']} (not built from a git checkout)"
    return "not recorded"


def explain(release_dir: str | Path, manifest: dict, sample_id: str, row: int | None = None) -> list[str]:
    """One sample's (and with ``row``, one row's) story in lines of words: where its video and
    transcript came from, the models and code that cut it into rows, who annotated it in each
    round and what an adjudicator settled."""
    release_dir = Path(release_dir)
    path = release_dir / LINEAGE_FILE
    if not path.is_file():
        raise ExplainError(f"release {manifest.get('version')} has no {LINEAGE_FILE} (built before releases "
                           "recorded their lineage)")
    table = pq.read_table(path, filters=[("sample_id", "=", sample_id)])
    if not table.num_rows:
        raise ExplainError(f"release {manifest.get('version')}: no sample {sample_id!r} in {LINEAGE_FILE}")
    rec = table.to_pylist()[0]
    from pipeline.benchmark.release_files import read_config

    if row is not None:
        rows = read_config(release_dir, "rows").select(["sample_id", "row_index", "start_time", "end_time",
                                                       "primary_speaker"])
        rows = rows.filter(pc.equal(rows["sample_id"], sample_id))
    lines = [f"release {manifest.get('version')}, sample {sample_id}" + (f", row {row}" if row is not None else "")]
    if row is not None:
        match = [r for r in rows.to_pylist() if r["row_index"] == row]
        if not match:
            have = sorted(rows["row_index"].to_pylist())
            raise ExplainError(f"release {manifest.get('version')}: sample {sample_id!r} has no row {row} "
                               f"(rows {have[0]}-{have[-1]})" if have else f"sample {sample_id!r} has no rows")
        r = match[0]
        lines.append(f"  video span: {r['start_time']:.2f}-{r['end_time']:.2f} s of the video "
                     f"(spoken by {r['primary_speaker']})")
    if rec["video_sha256"]:
        lines.append(f"  video: sha256 {rec['video_sha256']}")
    elif manifest.get("origin") is not None:
        lines.append("  video: not ingested here (no catalog line: imported into the corpus, or placed there by hand)")
    else:
        lines.append(f"  video: not recorded (built from a {(manifest.get('source') or {}).get('kind', 'file')} "
                     "input, not the data root's corpus)")
    if rec["transcript_source"] == "subtitles":
        lines.append(f"  transcript: from the subtitle file, sha256 {rec['transcript_sha256']}")
    elif rec["transcript_source"]:
        lines.append(f"  transcript: {rec['transcript_source']} with ASR model {rec['transcript_model']}, "
                     f"sha256 {rec['transcript_sha256']}")
    else:
        lines.append("  transcript: not recorded")
    lines.append(f"  diarizer: model {rec['diarizer_model']}, sha256 {rec['diarizer_sha256']}"
                 if rec["diarizer_model"] else "  diarizer: not recorded")
    lines.append(f"  segmenter: code sha256 {rec['segmenter_code_sha256']}" if rec["segmenter_code_sha256"]
                 else "  segmenter: not recorded")
    for rnd in rec["rounds"] or []:
        who = ", ".join(rnd["annotators"]) or "nobody recorded"
        if row is None:
            settled = (f"adjudicated rows {', '.join(map(str, rnd['adjudicated_rows']))}" if rnd["adjudicated"]
                       else "not adjudicated")
        else:
            settled = ("adjudicated (an adjudicator settled this row)" if row in rnd["adjudicated_rows"]
                       else "not adjudicated")
        lines.append(f"  round {rnd['round']}: annotators {who}; {settled}")
    if not rec["rounds"]:
        lines.append("  annotation: no round of this data root labelled it (its labels came with the input)")
    built = manifest.get("lineage") or {}
    lines.append(f"  release built from: {_code_text(built.get('code') or {})}")
    return lines
