"""Reading built releases (:mod:`pipeline.benchmark.release`): where a version lives, its configs,
and what changed from one release to another. :class:`ReleaseError`, the error of every release
step, is defined here, in the lowest of the release modules.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.benchmark import tasks
from pipeline.paths import DataRoot, InvalidId, check_version


# when an agreement override was recorded: the manifest and the card carry it, and it is the one
# thing two builds of the same data may not share
_RECORDED_AT = re.compile(rb'"?recorded_at"?:\s*"?[0-9T:+\-]+"?')


def comparable_files(release: Path) -> dict[str, bytes]:
    """A release's files by relative path, as bytes, the override's recording time masked: what
    two builds of the same data (CLI and flows, a clean and a faulted run) must share exactly."""
    out = {}
    for f in sorted(p for p in Path(release).rglob("*") if p.is_file()):
        data = f.read_bytes()
        if f.name in ("manifest.json", "README.md"):
            data = _RECORDED_AT.sub(b"recorded_at: <time>", data)
        out[f.relative_to(release).as_posix()] = data
    return out


class ReleaseError(ValueError):
    """A release cannot be built or read (bad version, missing input, unknown release)."""


def release_path(root: DataRoot, version: str) -> Path:
    """Where release ``version`` lives under the data root (the version checked: X.Y.Z)."""
    try:
        return root.release(check_version(version))
    except InvalidId as exc:
        raise ReleaseError(f"{exc} (semantic versioning X.Y.Z)") from None


def open_release(root: DataRoot, version: str) -> Path:
    path = release_path(root, version)
    if not (path / "manifest.json").is_file():
        raise ReleaseError(f"no release {version!r} under {root.releases_dir()}")
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
    changed, fields, detail = [], Counter(), []
    for k in sorted(set(a) & set(b)):
        diff = [c for c in b[k] if a[k].get(c) != b[k][c]]
        if diff:
            changed.append(k)
            fields.update(diff)
            if len(detail) < examples:  # which sample/row, which fields and their values: the first few, by key
                detail.append({"key": "/".join(str(p) for p in k), "fields": diff,
                               "values": {c: {"old": a[k].get(c), "new": b[k][c]} for c in diff}})
    show = lambda keys: ["/".join(str(p) for p in k) for k in keys[:examples]]  # noqa: E731
    return {"added": len(added), "removed": len(removed), "changed": len(changed),
            "changed_fields": dict(sorted(fields.items())),
            "examples": {"added": show(added), "removed": show(removed), "changed": show(changed),
                         "changed_fields": detail}}


def diff_releases(root: DataRoot, a: str, b: str, examples: int = 10) -> dict:
    """What changed from release ``a`` to ``b``: samples, rows and task labels."""
    pa_, pb = open_release(root, a), open_release(root, b)
    out = {"from": a, "to": b}
    out["samples"] = _compare(_fingerprints(read_config(pa_, "samples"), ["sample_id"]),
                              _fingerprints(read_config(pb, "samples"), ["sample_id"]), examples)
    out["rows"] = _compare(_fingerprints(read_config(pa_, "rows"), ["sample_id", "row_index"]),
                           _fingerprints(read_config(pb, "rows"), ["sample_id", "row_index"]), examples)
    labels = {}
    for task in tasks.TASKS:
        ta, tb = read_config(pa_, task), read_config(pb, task)
        label_cols = [c for c in tb.column_names if c.startswith("label")]
        # keyed by sample and row (one instance per row and task; readable, unlike the opaque id)
        labels[task] = _compare(_fingerprints(ta, ["sample_id", "row_index"], label_cols),
                                _fingerprints(tb, ["sample_id", "row_index"], label_cols), examples)
    out["labels"] = labels
    return out
