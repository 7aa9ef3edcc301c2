"""Shared fixtures of the agreement tests: a small synthetic corpus as the known truth."""
from __future__ import annotations

import pytest

from pipeline.synthetic import corpus as synth_corpus


@pytest.fixture(scope="session")
def truth_samples() -> list[dict]:
    """About 20 samples / 700 rows in the RESCUE row shape, valid under V1-V12."""
    return synth_corpus.generate(scale=0.1, seed=5)


def _draft_of(samples: list[dict]) -> list[dict]:
    """The samples as the transcript round gets them: timing, speaker, target and text only."""
    keep = ("row_index", "start_time", "end_time", "primary_speaker", "target", "dialogue_cleaned",
            "background_dialogue")
    return [{**{k: v for k, v in s.items() if k != "rows"}, "rows": [{k: r[k] for k in keep} for r in s["rows"]]}
            for s in samples]


@pytest.fixture(scope="session")
def draft_of():
    return _draft_of

# The Label Studio server (ls_client) is the session-wide one of tests/conftest.py.
