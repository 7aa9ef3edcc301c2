"""The transient family at each boundary, on real sockets and real servers: a port that refuses,
a server that answers HTTP 5xx or too slowly, a lock file held by another run, a Label Studio
whose SQLite database is locked - each raises a TransientError subclass of its boundary's own
family; HTTP 4xx and a corrupt file are not transient. (The flows retrying exactly this family
on the real Prefect engine: tests/reliability/test_prefect_hostile.py.)"""
from __future__ import annotations

import dataclasses
import fcntl
import os
import sqlite3
import time

import pytest
from http_util import answering, closed_port

from pipeline.labelstudio.client import (LabelStudioAuthError, LabelStudioClient, LabelStudioError, LabelStudioFault,
                                        LabelStudioUnavailable)
from pipeline.errors import Locked, ServerFault, TransientError, Unreachable
from pipeline.paths import DataRoot

TOKEN = "0" * 40


# --- the Label Studio client ---------------------------------------------------------------

def test_a_label_studio_that_refuses_the_connection_is_unreachable():
    with closed_port() as port:
        client = LabelStudioClient(f"http://127.0.0.1:{port}", TOKEN)
        with pytest.raises(LabelStudioUnavailable) as err:
            client.projects()
    assert isinstance(err.value, Unreachable) and isinstance(err.value, LabelStudioError)
    assert "did not answer while trying to list projects" in str(err.value) and TOKEN not in str(err.value)


def test_a_label_studio_too_slow_to_answer_is_unreachable():
    with answering(200, delay_s=2.0) as server:
        client = LabelStudioClient(server.url, TOKEN, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(LabelStudioUnavailable) as err:
            client.users()
        assert time.monotonic() - started < 1.8  # the client's timeout, not the server's answer
    assert isinstance(err.value, Unreachable) and "ReadTimeout" in str(err.value)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_from_label_studio_is_a_transient_fault(status):
    with answering(status) as server:
        with pytest.raises(LabelStudioFault) as err:
            LabelStudioClient(server.url, TOKEN).users()
    assert isinstance(err.value, ServerFault) and isinstance(err.value, LabelStudioError)
    assert f"(HTTP {status})" in str(err.value) and server.paths == ["GET /api/users/"]


@pytest.mark.parametrize("status,kind", [(400, LabelStudioError), (404, LabelStudioError),
                                         (401, LabelStudioAuthError), (403, LabelStudioAuthError)])
def test_a_refusal_from_label_studio_is_not_transient(status, kind):
    with answering(status) as server:
        with pytest.raises(kind) as err:
            LabelStudioClient(server.url, TOKEN).users()
    assert not isinstance(err.value, TransientError) and f"HTTP {status}" in str(err.value)


def test_the_client_goes_on_once_the_server_answers_again():
    with answering(503) as server:
        client = LabelStudioClient(server.url, TOKEN)
        with pytest.raises(LabelStudioFault):
            client.users()
        assert client.users() == []  # the same client, the next answer (200)


# --- the push ------------------------------------------------------------------------------

def _desks(tmp_path, url: str):
    """Two annotators' desks on a fresh data root, every one reached at ``url`` (no server started)."""
    from pipeline.labelstudio.desks import Desks
    from pipeline.config import Settings

    settings = dataclasses.replace(Settings.from_env(tmp_path), desk_url=url)
    desks = Desks(DataRoot(tmp_path), settings)
    people = ["ann@rescue.test", "bo@rescue.test"]
    for email in people:
        desks.register(email, "annotator")
    return desks, people


def _sample() -> dict:
    from tests.annotation.ls_samples import make_sample

    return make_sample("synthetic/transient_001", "couple", 4)


def test_a_push_stopped_by_a_desk_that_does_not_answer_is_interrupted(tmp_path):
    from pipeline.annotation import push

    with closed_port() as port:
        desks, people = _desks(tmp_path, f"http://127.0.0.1:{port}")
        with pytest.raises(push.PushInterrupted) as err:
            push.push_round(desks, "transcript", [_sample()], people)
    assert isinstance(err.value, push.PushError) and isinstance(err.value, TransientError)
    assert "stopped before importing" in str(err.value) and "did not answer" in str(err.value)


def test_a_push_stopped_by_a_server_error_is_interrupted_and_a_refusal_is_not(tmp_path):
    from pipeline.annotation import push

    with answering(then=503) as server:
        desks, people = _desks(tmp_path / "a", server.url)
        with pytest.raises(push.PushInterrupted) as err:
            push.push_round(desks, "transcript", [_sample()], people)
    assert "HTTP 503" in str(err.value) and isinstance(err.value, TransientError)
    with answering(then=400) as server:
        desks, people = _desks(tmp_path / "b", server.url)
        with pytest.raises(LabelStudioError) as err:
            push.push_round(desks, "transcript", [_sample()], people)
    assert "HTTP 400" in str(err.value) and not isinstance(err.value, TransientError)


# --- the flows' own calls to the Prefect server ------------------------------------------------

@pytest.fixture
def prefect_at(monkeypatch):
    """``prefect_at(url)``: Prefect's client pointed at ``url`` (no retries of its own), and a push
    limit of a new name (Prefect keeps one slot service per limit name, with its first client)."""
    import contextlib
    import uuid

    import flows
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    monkeypatch.setattr(flows, "PUSH_LIMIT", f"transient-probe-{uuid.uuid4().hex[:8]}")

    @contextlib.contextmanager
    def at(url: str):
        with temporary_settings({PREFECT_API_URL: f"{url}/api", PREFECT_CLIENT_MAX_RETRIES: 0}):
            yield

    return at


def test_a_prefect_server_that_refuses_the_connection_is_unreachable(prefect_at):
    from flows import PrefectUnavailable, push_slot

    pushed = []
    with closed_port() as port, prefect_at(f"http://127.0.0.1:{port}"):
        with pytest.raises(PrefectUnavailable) as err:
            with push_slot():
                pushed.append(1)
    assert not pushed and isinstance(err.value, Unreachable)
    assert "did not answer while trying to take a slot" in str(err.value)


def test_a_prefect_server_error_is_a_transient_fault(prefect_at):
    from flows import PrefectFault, push_slot

    pushed = []
    with answering(then=500) as server, prefect_at(server.url):
        with pytest.raises(PrefectFault) as err:
            with push_slot():
                pushed.append(1)
    assert not pushed and server.paths and isinstance(err.value, ServerFault) and "HTTP 500" in str(err.value)


def test_a_prefect_refusal_is_not_transient(prefect_at):
    """HTTP 4xx from the server: Prefect's own error, unchanged, and no limit created in its place."""
    from prefect.concurrency._asyncio import ConcurrencySlotAcquisitionError

    from flows import push_slot

    with answering(then=422) as server, prefect_at(server.url):
        with pytest.raises(ConcurrencySlotAcquisitionError) as err:
            with push_slot():
                pass
    assert not isinstance(err.value, TransientError) and "422" in str(err.value)
    assert len(server.paths) == 1, server.paths  # its first call refused; no limit looked up or made


# --- a lock held by another run --------------------------------------------------------------

def test_a_migration_while_another_holds_the_lock_is_locked(tmp_path):
    from pipeline.annotation.status import round_history
    from pipeline.labelstudio import migrate
    from pipeline.labelstudio.server import DB_NAME
    from pipeline.paths import DataRoot

    root = DataRoot(tmp_path)
    old = root.label_studio_dir() / DB_NAME  # an old shared Label Studio to migrate
    old.parent.mkdir(parents=True)
    sqlite3.connect(old).close()
    lock = root.desks_dir() / "migration.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)) as held:  # the other run
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(migrate.MigrationLocked) as err:
            migrate.migrate_to_desks(DataRoot(tmp_path), log=lambda m: None, history=round_history(root))
    assert isinstance(err.value, Locked) and isinstance(err.value, migrate.MigrationError)
    assert "another migration" in str(err.value)


# --- Label Studio's own SQLite database locked --------------------------------------------------

@pytest.mark.slow
def test_a_label_studio_whose_database_is_locked_answers_a_transient_fault(ls_server, ls_client):
    """Another process holds Label Studio's SQLite database (an exclusive transaction): Label
    Studio waits 5 s for it, then answers HTTP 500 - a transient fault; once the lock is let go
    the same call succeeds."""
    ls_client.projects()  # the token known, the server warm
    db = ls_server.data_dir / "label_studio.sqlite3"
    holder = sqlite3.connect(db, timeout=30)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(LabelStudioFault) as err:
            ls_client.projects()
    finally:
        holder.rollback()
        holder.close()
    assert isinstance(err.value, ServerFault) and "(HTTP 500)" in str(err.value)
    assert isinstance(ls_client.projects(), list)


# --- what is not transient ---------------------------------------------------------------------

def test_a_corrupt_media_file_is_not_transient(tmp_path):
    from pipeline.media.audio import MediaError, probe

    bad = tmp_path / "corrupt.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(2000))
    with pytest.raises(MediaError) as err:
        probe(bad)
    assert not isinstance(err.value, TransientError) and "corrupt.mp4" in str(err.value)
