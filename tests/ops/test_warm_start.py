"""The stack's flow-run starter (ops.warm_start), without a Prefect server: a flow run's command
is forked from the starter, with the command's own arguments, environment (Prefect's settings
read again from it) and stdio; it ends as its child ends, a signal included; a command killed
outright takes its child with it; code changed on disk makes the starter step aside (the engine
runs itself) and start again once the runs forked from the old code have ended; a run asked for
while the starter still imports waits for it, or takes its request back after the wait and runs
the engine itself, never both; without a starter the command is the engine itself."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ops import warm_start
from pipeline.config import REPO_ROOT

pytestmark = pytest.mark.slow  # the starter imports Prefect, the flows and torch once

COMMAND = [sys.executable, "-m", "ops.warm_start", "prefect.engine"]


def _wait_for(log: Path, text: str, count: int = 1, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = log.read_text() if log.exists() else ""
        if seen.count(text) >= count:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} x{count} not in the starter's log within {timeout} s:\n{seen[-3000:]}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):  # gone, also between the two looks
        return False


def _serve(where: Path) -> tuple[subprocess.Popen, str, Path]:
    sock, log = str(where / "s.sock"), where / "starter.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ops.warm_start", "serve", "--socket", sock], cwd=REPO_ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, sock, log


@pytest.fixture(scope="module")
def starter(tmp_path_factory):
    proc, sock, log = _serve(tmp_path_factory.mktemp("starter"))
    try:
        _wait_for(log, "ready on")
        yield sock, log
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _command(sock: str | None, *args: str, **env: str) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if k != warm_start.SOCKET_ENV}
    full.update({"PREFECT__FLOW_RUN_ID": "", **env, **({warm_start.SOCKET_ENV: sock} if sock else {})})
    return subprocess.Popen([*COMMAND, *args], cwd=REPO_ROOT, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_run_is_forked_with_its_arguments_environment_and_stdio(starter):
    sock, log = starter
    before = log.read_text().count("as pid")
    proc = _command(sock, "not-a-run-id")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "Invalid flow run id" in err and "'not-a-run-id'" in err, err  # the engine's own words, on our stderr
    assert log.read_text().count("as pid") == before + 1  # it was the starter's child
    # Prefect's settings come from the run's environment, not the starter's: its log level hides the error
    quiet = _command(sock, "not-a-run-id", PREFECT_LOGGING_LEVEL="CRITICAL")
    out, err = quiet.communicate(timeout=120)
    assert quiet.returncode == 1 and "Invalid flow run id" not in err, err


def _hanging_api() -> tuple[socket.socket, str]:
    """An API that accepts connections and never answers: the engine waits on it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    return srv, f"http://127.0.0.1:{srv.getsockname()[1]}/api"


def _child_pid(log: Path, before: int) -> int:
    seen = _wait_for(log, "as pid", before + 1, timeout=60)
    return int(seen.rsplit("as pid", 1)[1].split()[0])


def test_a_signal_reaches_the_run_and_a_killed_command_takes_its_run_along(starter):
    sock, log = starter
    srv, url = _hanging_api()
    try:
        run_id = "5b7e2a9c-6a2e-4b7c-9d7e-3f1c2a4b5d6e"
        before = log.read_text().count("as pid")
        # a run outlives the wait for the starter's answer: that wait ends once it is answered
        proc = _command(sock, PREFECT__FLOW_RUN_ID=run_id, PREFECT_API_URL=url, **{warm_start.WAIT_ENV: "0.5"})
        child = _child_pid(log, before)
        time.sleep(2)
        assert proc.poll() is None and _alive(child), proc.stderr.read() if proc.poll() is not None else ""
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGTERM  # ended as its run ended: by the signal
        assert not _alive(child)

        before = log.read_text().count("as pid")
        proc = _command(sock, PREFECT__FLOW_RUN_ID=run_id, PREFECT_API_URL=url)
        child = _child_pid(log, before)
        proc.kill()  # no chance to forward anything: the starter sees its connection close
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        srv.close()


def _run_with_file_touched(sock: str, path: Path) -> None:
    """A run asked for while ``path`` looks changed on disk (its time is put back after): the
    engine itself runs it."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    try:
        proc = _command(sock, "not-a-run-id")
        out, err = proc.communicate(timeout=120)
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert proc.returncode == 1 and "Invalid flow run id" in err, err


def test_changed_code_runs_the_engine_itself_and_restarts_the_starter(starter):
    sock, log = starter
    target = Path(warm_start.__file__)
    srv, url = _hanging_api()
    run_id = "5b7e2a9c-6a2e-4b7c-9d7e-3f1c2a4b5d6e"
    try:
        before = log.read_text().count("as pid")
        running = _command(sock, PREFECT__FLOW_RUN_ID=run_id, PREFECT_API_URL=url)  # forked from the old code
        child = _child_pid(log, before)
        _run_with_file_touched(sock, target)
        seen = _wait_for(log, "the code or models changed on disk")
        assert seen.count("as pid") == before + 1  # the new request was not forked from the old code
        time.sleep(2)
        # the run forked from the old code goes on, its command still waiting on it: the starter
        # starts again only once it has ended
        assert running.poll() is None and _alive(child) and log.read_text().count("ready on") == 1
        proc = _command(sock, "not-a-run-id")  # meanwhile a run starts the engine itself
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1 and "Invalid flow run id" in err, err
        running.send_signal(signal.SIGTERM)
        running.communicate(timeout=60)
        assert running.returncode == -signal.SIGTERM  # its command still heard how its run ended
    finally:
        srv.close()
    seen = _wait_for(log, "ready on", 2)  # started again, with the code as it is now
    assert seen.count("as pid") == before + 1


def test_a_run_asked_for_while_the_starter_imports_waits_for_it_or_takes_its_request_back(tmp_path):
    proc, sock, log = _serve(tmp_path)
    try:
        _wait_for(log, "listening on", timeout=60)
        # the imports take seconds: this request is held (a wait longer than the default 15 s, which
        # a loaded 2-core machine's imports can pass, so it is the waiting path that is tested here)
        early = _command(sock, "not-a-run-id", **{warm_start.WAIT_ENV: "240"})
        out, err = early.communicate(timeout=300)
        assert early.returncode == 1 and "Invalid flow run id" in err, err
        seen = log.read_text()
        assert seen.index("listening on") < seen.index("ready on") < seen.index("as pid")
        assert seen.count("as pid") == 1  # it waited, and was forked from the imports
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    (tmp_path / "again").mkdir()
    proc, sock, log = _serve(tmp_path / "again")  # a starter that will be slower than the run's wait
    try:
        _wait_for(log, "listening on", timeout=60)
        impatient = _command(sock, "not-a-run-id", **{warm_start.WAIT_ENV: "0.2"})
        out, err = impatient.communicate(timeout=300)
        assert impatient.returncode == 1 and "Invalid flow run id" in err, err  # the engine itself ran it
        _wait_for(log, "ready on", timeout=300)
        time.sleep(1)
        assert "as pid" not in log.read_text()  # taken back before the fork: it ran once, not twice
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_without_a_starter_the_command_is_the_engine_itself(tmp_path):
    proc = _command(str(tmp_path / "none.sock"), "not-a-run-id")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Invalid flow run id" in err, err
    proc = _command(None, "not-a-run-id")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Invalid flow run id" in err, err


def test_a_long_stack_folder_gets_an_owner_only_socket_folder(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "stack"
    path = Path(warm_start.socket_path(deep))
    assert len(os.fsencode(path)) < 108 and path.parent.stat().st_mode & 0o077 == 0
    assert warm_start.socket_path(tmp_path) == str(tmp_path / "flow-run-starter.sock")


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's; elsewhere the preload runs at normal priority")
def test_the_preload_runs_at_idle_priority_and_the_forking_thread_keeps_its_class(monkeypatch):
    import threading

    seen, go = [], threading.Event()

    def slow():
        seen.append(os.sched_getscheduler(0))
        go.wait(30)
        seen.append(os.sched_getscheduler(0))
    monkeypatch.setattr(warm_start, "preload", slow)
    loading = warm_start._Preload()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [os.SCHED_IDLE] and not loading.done()  # the imports take only CPU nobody else wants
    loading.hurry()  # a run waits for them: the normal class from now on
    go.set()
    loading.thread.join(30)
    assert loading.done() and seen == [os.SCHED_IDLE, os.SCHED_OTHER]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # flow runs forked from here run at normal priority

    def broken():
        raise ImportError("no module named flows.gone")
    monkeypatch.setattr(warm_start, "preload", broken)
    loading = warm_start._Preload()
    loading.thread.join(30)
    with pytest.raises(ImportError, match="flows.gone"):  # a failed preload stops the starter, as before
        loading.done()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_ready_starter_forks_from_a_normal_priority_thread(starter):
    sock, _ = starter
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and sock.encode() in (p / "cmdline").read_bytes() and b"serve" in (p / "cmdline").read_bytes()]
    assert len(pids) == 1, pids
    assert os.sched_getscheduler(pids[0]) == os.SCHED_OTHER  # its main thread, which forks each run


def test_a_changed_model_file_makes_the_starter_step_aside_like_changed_code(starter):
    from pipeline.config import Settings
    from pipeline.media.diarize import default_pipeline_dir

    sock, log = starter
    seen = log.read_text()
    # the diarization pipeline was loaded once, in the starter, and made no thread (no OpenMP pool)
    # that a run forked from it would inherit half-alive
    assert "the diarization pipeline is loaded (0 thread(s) added)" in seen, seen
    model = next(f for f in sorted(default_pipeline_dir(Settings.from_env()).rglob("*")) if f.is_file())
    before, ready = seen.count("as pid"), seen.count("ready on")
    _run_with_file_touched(sock, model)
    seen = _wait_for(log, "ready on", ready + 1)  # loaded again, from the files as they are now
    assert seen.count("as pid") == before  # a run never gets a model its files no longer hold
