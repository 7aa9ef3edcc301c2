"""`build-release`: the corpus of gold rows (or a paper-format JSONL) -> a versioned, immutable release.

The logic is :func:`pipeline.benchmark.release.build_release`; this flow loads the input, builds, and
publishes the summary. A rerun after a crash is safe: a release that already exists with the
same source hashes counts as done (releases are write-once; a different source under an
existing version is an error).
"""
from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, get_run_logger, task

from flows import report, Outcome
from pipeline.config import Settings

# pipeline.benchmark.release (polars, pyarrow, the task builders) is imported inside the task: every flow
# run is a new process, and its start should not pay for imports the flow body does not need yet.


def load_input(source: str, data_root: Path):
    """``source``: a rows directory (samples.parquet + rows.parquet), a RESCUE .jsonl, or
    ``synthetic`` / ``synthetic:<scale>``; default: the corpus under the data root (gold rows
    are merged into it). Returns a :class:`pipeline.benchmark.release.ReleaseInput`."""
    from pipeline.benchmark import release
    from pipeline.corpus import corpus_dir

    if source.startswith("synthetic"):
        scale = float(source.split(":", 1)[1]) if ":" in source else 1.0
        return release.load_synthetic(scale=scale)
    path = Path(source) if source else corpus_dir(data_root)
    if path.suffix == ".jsonl":
        return release.load_jsonl(path)
    return release.load_rows_dir(path)


@task(name="build-release")
def build(source: str, version: str, data_root: str, dev_fraction: float) -> dict:
    from pipeline import store
    from pipeline.benchmark import release

    root = Path(data_root)
    inp = load_input(source, root)
    release.validate(inp)
    existing = store.release_dir(root, version) / "manifest.json"
    if existing.is_file():
        manifest = json.loads(existing.read_text())
        if manifest.get("source") == json.loads(json.dumps(inp.source)):
            return {"path": str(existing.parent), "manifest": manifest, "reused": True}
        raise store.AlreadyExists(f"release {version} already exists at {existing.parent} from a different "
                                  "source; releases are immutable - choose a new version")
    result = release.build_release(inp, version, root, dev_fraction=dev_fraction,
                                   settings=Settings.from_env(root))
    return {"path": str(result.path), "manifest": result.manifest, "reused": False}


@flow(name="build-release", log_prints=True, persist_result=True)
def build_release_flow(version: str, source: str = "", dev_fraction: float = 0.0,
                       data_root: str | None = None) -> str:
    """Build release ``version`` (X.Y.Z) from ``source`` (default: the corpus under the data root)."""
    root = Settings.from_env(data_root).data_root.resolve()
    out = build(source, version, str(root), dev_fraction)
    manifest = out["manifest"]
    counts = [{"task": t, **c} if isinstance(c, dict) else {"task": t, "count": c}
              for t, c in manifest.get("counts", {}).items()]
    report("build-release", f"Release {version}",
           [Outcome(version, "cached" if out["reused"] else "done", result=out["path"])],
           extra_markdown=f"Release at `{Path(out['path']).name}` under the data root's releases/; "
                          f"{manifest.get('validation', {}).get('problems', 0)} validation problems.",
           tables={"task-counts": counts})
    get_run_logger().info("release %s at %s", version, out["path"])
    return out["path"]
