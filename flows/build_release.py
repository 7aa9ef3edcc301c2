"""`build-release`: the corpus of gold rows (or a paper-format JSONL) -> a versioned, immutable release.

The stage is :func:`pipeline.benchmark.release.build_or_reuse`, the same one ``rescue release
build`` calls; this flow picks the input, calls it, and publishes the summary. A rerun after a
crash is safe: a release that already exists with the same source hashes is returned as it is
(``reused``; releases are write-once), a different source under an existing version is an error
naming the version. A release the stage refuses (a gate below its threshold, a missing input, a
version built from other data) is no crash: the run ends in a Failed state named ``Refused``, with
each reason (and the exact override command of each gate) as one log line, no traceback.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from prefect import flow, get_run_logger, task
from prefect.states import Failed

from flows import Outcome, report, tell
from pipeline.config import Settings
from pipeline.paths import DataRoot

# pipeline.benchmark.release (polars, pyarrow, the task builders) is imported inside the task: every flow
# run is a new process, and its start should not pay for imports the flow body does not need yet.


def load_input(source: str, root: DataRoot):
    """``source``: a rows directory (samples.parquet + rows.parquet), a RESCUE .jsonl, or
    ``synthetic`` / ``synthetic:<scale>``; default: the corpus under the data root (gold rows
    are merged into it). Returns a :class:`pipeline.benchmark.release.ReleaseInput`."""
    from pipeline.benchmark import release
    from pipeline.synthetic.corpus import load_synthetic

    if source.startswith("synthetic"):
        return load_synthetic(scale=float(source.split(":", 1)[1]) if ":" in source else 1.0)
    return release.load_source(source, root)


@dataclass(frozen=True)
class Refused:
    """Why the stage would not build the release (its error's words, one reason a line)."""

    reasons: list[str]


@task(name="build-release")
def build(source: str, version: str, root: DataRoot, dev_fraction: float, card: dict | None = None):
    """-> :class:`pipeline.benchmark.release.ReleaseResult`, or :class:`Refused` when the stage says no
    (an expected answer, not a crash: no traceback); ``card``: CardOptions fields (licence, citation)."""
    from pipeline import store
    from pipeline.benchmark import release
    from pipeline.benchmark.card import CardOptions

    try:
        return release.build_or_reuse(load_input(source, root), version, root, dev_fraction=dev_fraction,
                                      settings=Settings.from_env(root.root), card=CardOptions(**(card or {})))
    except (release.ReleaseError, store.AlreadyExists) as exc:
        return Refused([line.strip() for line in str(exc).splitlines() if line.strip()])


@flow(name="build-release", log_prints=True, persist_result=True)
def build_release_flow(version: str, source: str = "", dev_fraction: float = 0.0,
                       data_root: str | None = None, license: str = "other", license_name: str = "rescue-release-terms",
                       license_link: str = ""):
    """Build release ``version`` (X.Y.Z) from ``source`` (default: the corpus under the data root);
    ``license*``: the dataset card's licence (as ``rescue release build --license ...``)."""
    from pipeline.paths import check_version

    check_version(version)
    root = DataRoot(Settings.from_env(data_root).data_root.resolve())  # built once, handed to the task
    out = build(source, version, root, dev_fraction,
                {"license": license, "license_name": license_name, "license_link": license_link})
    if isinstance(out, Refused):
        tell("release.refused", [f"release {version} refused: {reason}" for reason in out.reasons], logging.ERROR)
        report("build-release", f"Release {version} refused", [],
               extra_markdown="Nothing was written. Each reason, and what to do:\n\n"
                              + "\n".join(f"- {r}" for r in out.reasons))
        return Failed(name="Refused", message=f"release {version} refused: " + " | ".join(out.reasons))
    manifest = out.manifest
    counts = [{"task": t, **c} if isinstance(c, dict) else {"task": t, "count": c}
              for t, c in manifest.get("counts", {}).items()]
    report("build-release", f"Release {version}",
           [Outcome(version, "cached" if out.reused else "done", result=str(out.path))],
           extra_markdown=f"Release at `{out.path.name}` under the data root's releases/"
                          f"{' (reused: built before from the same input)' if out.reused else ''}; "
                          f"{manifest.get('validation', {}).get('problems', 0)} validation problems.",
           tables={"task-counts": counts})
    get_run_logger().info("release %s at %s%s", version, out.path, " (reused)" if out.reused else "")
    return str(out.path)
