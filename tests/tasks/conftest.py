"""Fixtures for the task-builder tests: the first three published RESCUE samples."""
from __future__ import annotations

import pytest

from pipeline.benchmark.paper_format import load_rescue_jsonl


@pytest.fixture(scope="session")
def head_samples(benchmark_head_path) -> list[dict]:
    """The release head in our sample shape, through the real importer (skips where ../shared is absent)."""
    return load_rescue_jsonl(benchmark_head_path).samples
