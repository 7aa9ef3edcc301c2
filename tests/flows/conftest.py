"""Fixtures of the orchestration tests: a REAL local stack (Prefect server + process worker on
127.0.0.1, free ports) under a temporary data root with its own PREFECT_HOME and result
storage, started once per session through `ops.stack`; and REAL desks (one Label Studio per
person, :mod:`pipeline.labelstudio.desks`) for the data roots the flows annotate.

A flow run reads ``Desks(<its data_root>)``: each data root a test annotates has its people
registered there (:func:`desks_of`), on a port range of its own, and their desks are stopped
when the test module is done with them (each desk is a Label Studio of ~300 MB)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator
from unittest import mock

import pytest

from pipeline.config import REPO_ROOT, Settings
from tests.helpers import free_port, require_label_studio
from pipeline.paths import DataRoot

DESK_START_TIMEOUT_S = 400  # a busy 2-core host


@contextmanager
def desks_of(root: Path, people: Iterable[tuple[str, str]]) -> Iterator:
    """Real desks of ``people`` (``(email, role)``) under data root ``root``, started side by side,
    each with its owner's login; every desk of ``root`` is stopped at exit.

    What ``rescue annotators add`` does (``Desks.add``) but the password: the tests never log in
    as the person (the simulated people answer through the desk's service account, in the
    owner's name), and setting one costs a Label Studio management command (~20 s) per person.
    Ports: from a free port of their own (``RESCUE_DESK_BASE_PORT`` of this data root), so data
    roots registered one after the other never share one."""
    from pipeline.labelstudio.desks import Desks
    require_label_studio()
    people = list(people)
    settings = dataclasses.replace(Settings.from_env(root), desk_base_port=free_port())
    desks = Desks(DataRoot(root), settings)
    try:
        for email, role in people:
            desks.register(email, role)
        desks.up([e for e, _ in people], timeout=DESK_START_TIMEOUT_S, log=lambda *_: None)
        for email, _ in people:
            desks.client(email).create_user(email)
        yield desks
    finally:
        desks.down()
        desks.close()


@pytest.fixture(scope="session")
def open_desks():
    """:func:`desks_of`, for the test modules: ``with open_desks(root, [(email, role), ...]) as desks``."""
    return desks_of


class Stack:
    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env

    def prefect(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """The real `prefect` CLI against this stack's server."""
        return subprocess.run([str(Path(sys.executable).with_name("prefect")), *args], cwd=REPO_ROOT,
                              env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout)

    def rescue(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(Path(sys.executable).with_name("rescue")), *args], cwd=REPO_ROOT,
                              env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout)

    @contextmanager
    def prefect_settings(self):
        """This process's Prefect client settings pointed at the stack's server and result storage."""
        from prefect.settings import (PREFECT_API_AUTH_STRING, PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH,
                                       temporary_settings)

        with temporary_settings({PREFECT_API_URL: self.env["PREFECT_API_URL"],
                                 PREFECT_API_AUTH_STRING: self.env["PREFECT_API_AUTH_STRING"],
                                 PREFECT_RESULTS_LOCAL_STORAGE_PATH: self.env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"]}):
            yield


def crash_a_silent_run(stack) -> None:
    """The stack's zombie automation, with a 35-s window (the registered one waits 300 s), on
    ``stack``'s server: a Running flow run that sent two heartbeats and then fell silent (as if
    its host died) must be set Crashed by the server, with the automation's message."""
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.events.clients import PrefectEventsClient
    from prefect.events.schemas.events import Event
    from prefect.states import Running

    from ops import prefect_setup as st

    @flow(name="zombie-probe")
    def probe():
        pass

    async def heartbeat(run_id):  # what a flow run's heartbeat thread sends
        async with PrefectEventsClient() as events:
            await events.emit(Event(event="prefect.flow-run.heartbeat",
                                    resource={"prefect.resource.id": f"prefect.flow-run.{run_id}"}))

    auto = st.zombie_automation(35).model_copy(update={"name": "zombie-probe-35s"})
    with stack.prefect_settings(), get_client(sync_client=True) as client:
        auto_id = client.create_automation(auto)
        try:
            run = client.create_flow_run(probe, name="zombie-probe")
            client.set_flow_run_state(run.id, Running(), force=True)
            for _ in range(2):  # the triggers service loads a new automation on its change event
                time.sleep(5)
                asyncio.run(heartbeat(run.id))  # two beats, then silence

            deadline = time.monotonic() + 150
            while not (state := client.read_flow_run(run.id).state).is_crashed():
                assert time.monotonic() < deadline, f"still {state.name} after the window"
                time.sleep(2)
            assert "no heartbeat for 35 s" in state.message, state.message
        finally:
            client.delete_automation(auto_id)


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Stack:
    """The stack on a data root with no desks of its own yet (``ops.stack.up`` starts those
    registered there: tests/flows/test_stack.py registers one). No Label Studio variable: flow
    runs reach the desks of their data root through its registry."""
    from ops import stack as st

    root = tmp_path_factory.mktemp("stack-data")
    env = {
        "RESCUE_DATA_ROOT": str(root),
        "RESCUE_PREFECT_PORT": str(free_port()),
        "RESCUE_DESK_BASE_PORT": str(free_port()),
        "RESCUE_WARM_START": "1",  # every flow test's runs forked from the starter (ops.warm_start)
    }
    try:
        with mock.patch.dict(os.environ, env):
            env.update(st.up(root, worker_limit=4))
            env.update(st.worker_env(Settings.from_env(root)))
    except BaseException:
        with mock.patch.dict(os.environ, env):
            st.down(root)
        raise
    yield Stack(root, env)
    with mock.patch.dict(os.environ, env):
        st.down(root)
