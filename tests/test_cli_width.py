"""The release commands on an 80-column terminal: tables fit, nothing is cut."""
from __future__ import annotations

from tests.cli_width import assert_tables_fit, at_80_columns


def test_release_build_and_diff_fit_80_columns(tmp_path, benchmark_head_path):
    built = at_80_columns("release", "build", "--version", "0.1.0", "--synthetic", "--scale", "0.05",
                          "--data-root", str(tmp_path))
    assert_tables_fit(built)
    assert "couple inst." in built and "family samp." in built
    at_80_columns("release", "build", "--version", "0.2.0", "--input", str(benchmark_head_path),
                  "--data-root", str(tmp_path))
    diff = at_80_columns("release", "diff", "0.1.0", "0.2.0", "--data-root", str(tmp_path))
    assert_tables_fit(diff)
    assert "changed fields" in diff
