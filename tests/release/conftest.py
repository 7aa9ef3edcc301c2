"""Fixtures for release tests: the published RESCUE head samples and small synthetic corpora."""
from __future__ import annotations

import pytest

from pipeline.benchmark import release
from pipeline.synthetic.corpus import load_synthetic


@pytest.fixture()
def head_input(benchmark_head_path) -> release.ReleaseInput:
    """The release head (tests/conftest.py's ``benchmark_head_path``, from ../shared) as a release input."""
    inp = release.load_jsonl(benchmark_head_path)
    release.validate(inp)
    return inp


@pytest.fixture()
def small_input() -> release.ReleaseInput:
    """A few synthetic samples (couple and family): for release mechanics that need no real data."""
    inp = load_synthetic(scale=0.05, seed=3)
    release.validate(inp)
    return inp
