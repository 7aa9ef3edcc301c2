"""The set-up's registered template Prefect database (ops.prefect_setup.seed_database,
ops.stack.make_registered_template): a new data root starts from it, and skips registering,
only while the fingerprint of what registration depends on is unchanged."""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
import yaml

from ops import prefect_setup as ps
from ops.processes import StackPaths
from pipeline.config import REPO_ROOT
from pipeline.paths import DataRoot


def _tree(root: Path) -> Path:
    for rel, text in {"prefect.yaml": "deployments: []\n", "flows/a.py": "x = 1\n", "ops/b.py": "",
                      "pipeline/c/d.py": "y = 2\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_fingerprint_follows_the_code_the_interpreter_and_the_variables(tmp_path, monkeypatch):
    monkeypatch.setattr(ps, "REPO_ROOT", _tree(tmp_path))
    base = ps.registration_fingerprint("/venv/bin/python")
    assert ps.registration_fingerprint("/venv/bin/python") == base  # stable
    assert ps.registration_fingerprint("/other/bin/python") != base
    for rel in ("prefect.yaml", "flows/a.py", "pipeline/c/d.py"):
        old = (tmp_path / rel).read_text()
        (tmp_path / rel).write_text(old + "# changed\n")
        assert ps.registration_fingerprint("/venv/bin/python") != base, rel
        (tmp_path / rel).write_text(old)
    (tmp_path / "flows" / "new.py").write_text("")
    assert ps.registration_fingerprint("/venv/bin/python") != base  # a new module counts too
    (tmp_path / "flows" / "new.py").unlink()
    monkeypatch.setenv("RESCUE_GPU_SLOTS", "2")
    assert ps.registration_fingerprint("/venv/bin/python") != base


def _templates(tmp_path, monkeypatch) -> tuple[Path, Path]:
    folder = tmp_path / "templates"
    folder.mkdir()
    empty, registered = folder / "prefect.db", folder / "registered.db"
    for db, what in ((empty, "empty"), (registered, "registered")):
        with sqlite3.connect(db) as con:
            con.execute("create table which (what text)")
            con.execute("insert into which values (?)", (what,))
    monkeypatch.setattr(ps, "PREFECT_TEMPLATE_DB", empty)
    monkeypatch.setattr(ps, "REGISTERED_TEMPLATE_DB", registered)
    monkeypatch.setattr(ps, "REGISTERED_STAMP", registered.with_suffix(".fingerprint"))
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)
    return empty, registered


def _seeded(paths: StackPaths) -> str:
    with sqlite3.connect(paths.home / "prefect.db") as con:
        return con.execute("select what from which").fetchone()[0]


def _paths(root: Path) -> StackPaths:
    paths = StackPaths(DataRoot(root))
    paths.home.mkdir(parents=True)
    return paths


def test_a_new_data_root_starts_registered_only_from_a_template_of_the_same_fingerprint(tmp_path, monkeypatch):
    _, registered = _templates(tmp_path, monkeypatch)
    stamp = registered.with_suffix(".fingerprint")
    engine = sys.executable

    _, was = ps.seed_database(_paths(tmp_path / "no-stamp"), engine)
    assert not was and _seeded(StackPaths(DataRoot(tmp_path / "no-stamp"))) == "empty"

    stamp.write_text("0" * 64 + "\n")  # made from other code
    paths = _paths(tmp_path / "stale")
    assert ps.seed_database(paths, engine)[1] is False and _seeded(paths) == "empty"

    stamp.write_text(ps.registration_fingerprint(engine) + "\n")
    paths = _paths(tmp_path / "fresh")
    assert ps.seed_database(paths, engine)[1] is True and _seeded(paths) == "registered"
    assert (paths.home / "prefect.db").stat().st_mode & 0o077 == 0  # owner-only, as every stack file

    other = _paths(tmp_path / "other-python")  # another interpreter: its workers' command differs
    assert ps.seed_database(other, "/elsewhere/bin/python")[1] is False and _seeded(other) == "empty"

    assert ps.seed_database(paths, engine) == ({}, False)  # an existing database is never replaced
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://db/prefect")
    assert ps.seed_database(_paths(tmp_path / "operator-db"), engine) == ({}, False)


def test_saving_keeps_a_consistent_copy_and_its_stamp(tmp_path, monkeypatch):
    _, registered = _templates(tmp_path, monkeypatch)
    db = tmp_path / "server.db"
    con = sqlite3.connect(db)
    con.execute("pragma journal_mode=wal")
    con.execute("create table which (what text)")
    con.execute("insert into which values ('just registered')")
    con.commit()  # still in the write-ahead log while this connection is open
    ps.save_registered_template(db, sys.executable)
    con.close()
    with sqlite3.connect(f"file:{registered}?mode=ro", uri=True) as check:
        assert check.execute("select what from which").fetchone()[0] == "just registered"
        assert check.execute("pragma journal_mode").fetchone()[0] == "delete"  # no -wal beside it
    assert registered.with_suffix(".fingerprint").read_text().strip() == ps.registration_fingerprint(sys.executable)


def test_the_set_up_template_holds_what_the_stack_registers():
    """The template scripts/setup.sh made for this checkout: every deployment of prefect.yaml,
    both pools with the workers' command, the zombie automation and the limits."""
    db = ps.REGISTERED_TEMPLATE_DB
    if not db.is_file():
        pytest.skip(f"{db} is not there: scripts/setup.sh makes it")
    if not ps.registered_template_matches(sys.executable):
        pytest.skip("the registered template was made from other code: scripts/setup.sh makes it again")
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    want = {(d["entrypoint"].rsplit(":", 1)[1], d["name"]) for d in spec["deployments"]}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        flows = dict(con.execute("select id, name from flow"))
        deployments = {(flows[f], n) for f, n in con.execute("select flow_id, name from deployment")}
        pools = {n: t for n, t in con.execute("select name, base_job_template from work_pool")}
        automations = [n for (n,) in con.execute("select name from automation")]
        limits = {n for (n,) in con.execute("select name from concurrency_limit_v2")}
    assert {name for _, name in deployments} == {name for _, name in want}
    assert {f.replace("_", "-").removesuffix("-flow") for f, _ in want} == {f for f, _ in deployments}
    assert {ps.WORK_POOL, ps.GPU_WORK_POOL} <= set(pools)
    assert f"{sys.executable} -m ops.warm_start prefect.engine" in pools[ps.WORK_POOL]
    assert automations == [ps.ZOMBIE_AUTOMATION]
    assert {ps.GPU_LIMIT_NAME, "rescue-push"} <= limits


@pytest.mark.parametrize("server_csrf", [None, "true"])
def test_the_stack_clients_skip_the_csrf_and_version_requests_unless_the_server_wants_tokens(
        tmp_path, monkeypatch, server_csrf):
    """Prefect reads the stack's variables as these settings (a misspelt name would be ignored):
    no CSRF-token request per client unless the server's CSRF protection is on, no version check."""
    from prefect.settings.models.root import Settings as PrefectSettings

    if server_csrf:
        monkeypatch.setenv("PREFECT_SERVER_CSRF_PROTECTION_ENABLED", server_csrf)
    else:
        monkeypatch.delenv("PREFECT_SERVER_CSRF_PROTECTION_ENABLED", raising=False)
    for name, value in ps.prefect_env(DataRoot(tmp_path / "data")).items():
        monkeypatch.setenv(name, value)
    settings = PrefectSettings()
    assert settings.client.server_version_check_enabled is False
    assert settings.client.csrf_support_enabled is bool(server_csrf)
    assert settings.server.api.csrf_protection_enabled is bool(server_csrf)
