"""Fixtures for release tests: the published RESCUE head samples and small synthetic corpora."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.benchmark import release
from pipeline.synthetic.corpus import load_synthetic

REPO = Path(__file__).resolve().parents[2]
HEAD = REPO.parent / "shared" / "data" / "rescue" / "benchmark_head.jsonl"


@pytest.fixture(scope="session")
def head_path() -> Path:
    if not HEAD.exists():
        pytest.skip(f"published RESCUE sample file not found at {HEAD} (needs the shared data checkout)")
    return HEAD


@pytest.fixture()
def head_input(head_path) -> release.ReleaseInput:
    inp = release.load_jsonl(head_path)
    release.validate(inp)
    return inp


@pytest.fixture()
def small_input() -> release.ReleaseInput:
    """A few synthetic samples (couple and family): for release mechanics that need no real data."""
    inp = load_synthetic(scale=0.05, seed=3)
    release.validate(inp)
    return inp
