"""Project-wide test fixtures. Each area keeps its own fixtures in tests/<area>/conftest.py."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO_ROOT.parent / "shared" / "data" / "rescue"
BENCHMARK_HEAD = SHARED_DATA / "benchmark_head.jsonl"


@pytest.fixture(scope="session")
def benchmark_head_path() -> Path:
    """The first three samples of the published release (read from ../shared, never copied)."""
    if not BENCHMARK_HEAD.exists():
        pytest.skip(f"real-data test: {BENCHMARK_HEAD} is not present on this machine "
                    "(the published release's head is only available beside the project checkout)")
    return BENCHMARK_HEAD
