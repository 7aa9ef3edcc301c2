"""A desk's Label Studio inherits no Label Studio setting from the environment: it reads ~160
of them (as LABEL_STUDIO_X, HEARTEX_X or plain X), and e.g. DATABASE_NAME would make every desk
open the same database, SECRET_KEY make one session cookie valid on all."""
from __future__ import annotations

from pipeline.labelstudio.server import CREDENTIAL_VARS, LabelStudioServer


def test_a_desk_server_takes_its_settings_from_us_only(tmp_path, monkeypatch):
    for name in ("DATABASE_NAME", "LABEL_STUDIO_DATABASE_NAME", "HEARTEX_DATABASE_NAME", "SECRET_KEY",
                 "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT", "HOST", "DEBUG", "LABEL_STUDIO_USER_TOKEN"):
        monkeypatch.setenv(name, "/tmp/shared")
    service = {"LABEL_STUDIO_USERNAME": "svc@rescue.invalid", "LABEL_STUDIO_PASSWORD": "pw",
               "LABEL_STUDIO_USER_TOKEN": "ab" * 20}
    server = LabelStudioServer(tmp_path / "ls", media_root=tmp_path / "files", credentials=service)
    env = server._env()
    for name in ("DATABASE_NAME", "LABEL_STUDIO_DATABASE_NAME", "HEARTEX_DATABASE_NAME", "SECRET_KEY", "HOST", "DEBUG"):
        assert name not in env, name
    assert env["LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT"] == str((tmp_path / "files").resolve())
    assert {v: env[v] for v in CREDENTIAL_VARS} == service  # the desk's service account, not the environment's
    assert env["LABEL_STUDIO_BASE_DATA_DIR"] == str((tmp_path / "ls").resolve())
