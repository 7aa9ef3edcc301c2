"""Shared fixtures of the agreement tests: a small synthetic corpus as the known truth."""
from __future__ import annotations

import pytest

from pipeline import synth_corpus


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


# --- a real Label Studio server for the end-to-end tests ------------------------------------
# (tests/annotation has its own; conftest fixtures do not cross directories, so this area
# starts one more server per session - about 35 s on an idle machine.)


@pytest.fixture(scope="session")
def ls_client(tmp_path_factory):
    import os
    import secrets
    import socket

    from pipeline.annotation.client import LabelStudioClient
    from pipeline.annotation.server import DEFAULT_VENV, LabelStudioServer

    if not (DEFAULT_VENV / "bin" / "label-studio").exists():
        pytest.fail("Label Studio is not installed: run scripts/setup.sh (scripts/setup.d/30-label-studio.sh)")
    creds = {"LABEL_STUDIO_USERNAME": "admin@agreement.test", "LABEL_STUDIO_PASSWORD": secrets.token_urlsafe(16),
             "LABEL_STUDIO_USER_TOKEN": secrets.token_hex(20)}
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path_factory.mktemp("agreement-ls")
    server = LabelStudioServer(root / "label-studio", port=port, media_root=root)
    server.start(timeout=400)
    client = LabelStudioClient(server.url, creds["LABEL_STUDIO_USER_TOKEN"])
    try:
        yield client
    finally:
        client.close()
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
