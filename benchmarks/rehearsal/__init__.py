"""The RESCUE rehearsal, cut by job; ``benchmarks/bench_rehearsal.py`` is its command line and
says what it does. Each module imports only from those above it here (and this file's ``say``
and ``REPO``):

- ``database``: a PostgreSQL database of the Prefect server's own, created and dropped.
- ``sampler``: every process the bench started, sampled from /proc (``Sampler``): CPU per stage
  (``attribute_cpu``) and per step of the human half (``Steps``), peak memory per kind of process.
- ``stack``: the workers beyond the first, and the flow runs' own records: the machine half's
  per-stage figures (``measure``).
- ``faults``: ``--faults``: four faults, each injected once and recovered as docs/OPERATIONS.md says.
- ``simulation``: the human half: simulated annotators answering on their desks, the
  adjudicator, one ``annotation-round`` run per round, then ``build-release``.
- ``checks``: the checks against truth.json, a release compared with a reference, alpha verdicts.
- ``report``: the figures and checks, printed.
- ``run``: the rehearsal from the data root to the last line, and stopping all it started.
"""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def say(text: str = "") -> None:
    print(text, flush=True)


def batch_params(args, batch, root, annotators: list[str]) -> dict:
    """The ingest-batch run's parameters (the batch, and its rerun after the faults)."""
    params = {"batch_dir": str(batch), "data_root": str(root), "backend": "subtitles", "push": True,
              "annotators": annotators, "chunk_size": args.chunk_size}
    if getattr(args, "max_in_flight", None) is not None:
        params["max_in_flight"] = args.max_in_flight
    return params
