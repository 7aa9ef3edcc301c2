"""A desk runs Label Studio's settings less its request-log middleware (the telemetry hook that
parses every request body once more) and with its task counters counted in SQL, only on the
Label Studio version that was written for, all or nothing; ``RESCUE_LS_STOCK_SETTINGS=1`` runs
Label Studio's own settings. Checked both ways on real servers: the same import gives the same
tasks and counters, and only the stock one runs the hook (it writes its server id under the XDG
config folder)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline.labelstudio.client import LabelStudioClient
from pipeline.labelstudio.server import (DEFAULT_VENV, DESK_SETTINGS, LS_VERSION, STOCK_SETTINGS_VAR,
                                        LabelStudioServer, installed_version)
from tests.helpers import free_port, require_label_studio

CREDS = {"LABEL_STUDIO_USERNAME": "svc@rescue.invalid", "LABEL_STUDIO_PASSWORD": "pw-x",
         "LABEL_STUDIO_USER_TOKEN": "cd" * 20}
CONFIG = ('<View><Text name="text" value="$text"/>'
          '<Choices name="mood" toName="text"><Choice value="calm"/><Choice value="tense"/></Choices></View>')


def _mood(mood: str) -> list[dict]:
    return [{"from_name": "mood", "to_name": "text", "type": "choices", "value": {"choices": [mood]}}]


TASKS = [{"data": {"text": text, "n": i}, "predictions": [{"model_version": "m1", "result": _mood(mood)}]}
         for i, (text, mood) in enumerate([("Row 1 · Ann → Bob: \"fine\" ✓", "calm"), ("ça ne va pas", "tense"),
                                           ("<b>not markup</b> & more", "calm")])]
TASKS += [{"data": {"text": "nothing on it", "n": 3}},  # no prediction, no annotation
          {"data": {"text": "answered twice, once skipped", "n": 4},
           "annotations": [{"result": _mood("tense")}, {"result": [], "was_cancelled": True}],
           "predictions": [{"model_version": "m1", "result": _mood("calm")}, {"model_version": "m0", "result": []}]}]
COUNTS = [(0, 0, 1), (0, 0, 1), (0, 0, 1), (0, 0, 0), (1, 1, 2)]  # (annotations, cancelled, predictions) per task


def _fake_venv(root: Path, version: str | None) -> Path:
    venv = root / f"venv-{version}"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if version:
        (site / f"label_studio-{version}.dist-info").mkdir()
    return venv


def _settings(venv: Path, tmp_path: Path) -> dict:
    env = LabelStudioServer(tmp_path / "ls", venv=venv, credentials=CREDS)._env()
    return {k: env[k] for k in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "PYTHONDONTWRITEBYTECODE") if k in env}


def test_the_desk_settings_apply_to_their_own_version_only(tmp_path, monkeypatch):
    monkeypatch.delenv(STOCK_SETTINGS_VAR, raising=False)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # a desk may inherit it; here: only ours
    ours = {"PYTHONPATH": str(DESK_SETTINGS.parent), "DJANGO_SETTINGS_MODULE": "rescue_desk_settings",
            "PYTHONDONTWRITEBYTECODE": "1"}  # the folder is in the repository: nothing compiled into it
    assert _settings(_fake_venv(tmp_path, LS_VERSION), tmp_path) == ours
    assert _settings(_fake_venv(tmp_path, "1.24.0"), tmp_path) == {}  # another version: its own settings
    assert _settings(_fake_venv(tmp_path, None), tmp_path) == {}
    monkeypatch.setenv(STOCK_SETTINGS_VAR, "1")
    assert _settings(_fake_venv(tmp_path, LS_VERSION + "-again"), tmp_path) == {}
    assert _settings(tmp_path / f"venv-{LS_VERSION}", tmp_path) == {}  # asked for: the stock ones
    # the folder holds that one module: nothing else of ours becomes importable in Label Studio
    assert sorted(p.name for p in DESK_SETTINGS.parent.iterdir() if p.suffix == ".py") == [
        "rescue_desk_counters.py", "rescue_desk_guard.py", DESK_SETTINGS.name]


def test_the_installed_label_studio_is_the_one_the_desk_settings_were_written_for(tmp_path):
    """Fails when the pin moves without the settings module being checked against the new version
    (until then every desk silently runs the stock settings)."""
    require_label_studio()
    assert installed_version(LabelStudioServer(tmp_path / "ls", credentials=CREDS).venv) == LS_VERSION
    assert f'WRITTEN_FOR = "{LS_VERSION}"' in DESK_SETTINGS.read_text()


def test_the_desk_settings_refuse_a_label_studio_without_the_middleware(tmp_path, monkeypatch):
    """All or nothing: should the middleware be gone (another version), the settings fail to load
    instead of quietly running something that is neither ours nor Label Studio's. The settings'
    folder, in the repository, gets no bytecode even where the environment allows it."""
    require_label_studio()
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    server = LabelStudioServer(tmp_path / "ls", credentials=CREDS)
    env = {**server._env(), "LATEST_VERSION_CHECK": "false"}
    package = next(DEFAULT_VENV.glob("lib/python3*/site-packages/label_studio"))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import core.settings.base as b; "
             "b.MIDDLEWARE.remove('core.middleware.ContextLogMiddleware') if sys.argv[2] == 'gone' else None; "
             "import django; django.setup(); from django.conf import settings; "
             "print('MW', [m for m in settings.MIDDLEWARE if 'ContextLog' in m], len(settings.MIDDLEWARE)); "
             "import tasks.functions as f, rescue_desk_counters as c; print('COUNTERS', f.update_tasks_counters.__module__); "
             "c.check(f.update_tasks_counters.replaces)\n"
             "try: c.check(c.replacement)\nexcept Exception as e: print('REFUSED', type(e).__name__)")
    (tmp_path / "ls").mkdir()
    runs = {how: subprocess.run([str(DEFAULT_VENV / "bin" / "python"), "-c", probe, str(package), how], env=env,
                                cwd=tmp_path / "ls", capture_output=True, text=True, timeout=300)
            for how in ("there", "gone")}
    assert runs["there"].returncode == 0, runs["there"].stderr[-2000:]
    assert "MW [] " in runs["there"].stdout  # loaded, without the middleware
    assert "COUNTERS rescue_desk_counters" in runs["there"].stdout  # the counters replaced
    assert "REFUSED ImproperlyConfigured" in runs["there"].stdout  # and only ever the code they were written for
    assert runs["gone"].returncode != 0
    assert "ContextLogMiddleware is not in Label Studio's MIDDLEWARE" in runs["gone"].stderr
    assert not (DESK_SETTINGS.parent / "__pycache__").exists()  # imported there, compiled nowhere


def _import_and_list(client: LabelStudioClient) -> list[dict]:
    project = client.ensure_project("desk-settings-probe", "desk settings probe", CONFIG, model_version="m1")
    ids = client.import_tasks(project.id, TASKS)
    assert len(ids) == len(TASKS)
    listed = client.tasks(project.id, fields="all")
    return sorted(({"data": t["data"], "predictions": [p["result"] for p in t["predictions"]],
                    "counts": (t["total_annotations"], t["cancelled_annotations"], t["total_predictions"])}
                   for t in listed), key=lambda t: t["data"]["n"])


def test_the_same_import_gives_the_same_tasks_both_ways(ls_server, ls_client, tmp_path, monkeypatch):
    monkeypatch.setenv(STOCK_SETTINGS_VAR, "1")
    stock = LabelStudioServer(tmp_path / "stock", port=free_port(), media_root=tmp_path, credentials=CREDS)
    stock.start(timeout=400)
    try:
        client = LabelStudioClient(stock.url, CREDS["LABEL_STUDIO_USER_TOKEN"])
        try:
            stock_tasks = _import_and_list(client)
        finally:
            client.close()
        ours = _import_and_list(ls_client)
        assert ours == stock_tasks
        assert [t["data"]["text"] for t in ours] == [t["data"]["text"] for t in TASKS]
        assert [t["counts"] for t in ours] == COUNTS  # the import's counters, both ways
        assert [t["predictions"] for t in ours] == [[p["result"] for p in t.get("predictions", [])] for t in TASKS]
        # the request-log middleware ran on the stock server only (it writes its server id there)
        assert list((stock.data_dir / "xdg").rglob("user_id"))
        assert not list((ls_server.data_dir / "xdg").rglob("user_id"))
        assert not (DESK_SETTINGS.parent / "__pycache__").exists()  # the desk wrote no bytecode into the tree
    finally:
        stock.stop()
