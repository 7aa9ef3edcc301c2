"""Warm flow-run starts: each flow run of the local stack's pool is still its own process running
Prefect's engine (``python -m prefect.engine``), but it is forked from a process that has already
imported Prefect, the flows and the models' libraries (torch, pyannote) instead of importing them
again - a few CPU seconds per flow run on 2 cores, and the diarization libraries' ~5 s on ingest.

Two halves, one module (this one imports only the standard library at the top, so that the
worker's command stays cheap):

- ``python -m ops.warm_start serve --socket PATH`` (the stack's ``flow-run-starter`` process,
  :func:`ops.stack.up`): listens on an owner-only Unix socket at once and imports what every flow
  run needs (:func:`preload`); a request that comes before the imports are done waits for them
  (``RESCUE_WARM_START_WAIT_S``, 15 s, then its command runs the engine itself; it is never run
  twice). Each request forks ONE child, which takes the request's stdin/stdout/
  stderr (passed as file descriptors), environment and working directory, refreshes Prefect's
  settings from that environment and runs ``prefect.engine`` as ``__main__``.
- ``python -m ops.warm_start prefect.engine`` (the pool's flow-run command,
  :func:`ops.prefect_setup.engine_command`): what the worker starts. It hands its stdio, env and
  cwd to the starter, forwards SIGTERM/SIGINT/SIGHUP to the child, and ends as the child ended
  (exit code, or the same signal), so the worker, its cancellation and the sweeper see one flow-run
  process as before. Killed outright, its connection closes and the starter kills the child.

Whenever the starter is not there (not started, restarting, another host) or the code it imported
or the models it loaded changed on disk since (a file under the repository's ``flows``/``pipeline``/
``ops``, or the pipeline's folder), the command runs ``python -m prefect.engine`` itself, exactly as
without this module; a starter that finds its files stale says so, lets the runs it forked from
them end, and starts again with the new ones. The socket lives in the data root's
owner-only ``stack/`` folder (or an owner-only folder under the temp dir when that path is too
long for a socket), and the starter serves only its own user (SO_PEERCRED).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "RESCUE_WARM_START_SOCKET"   # where the command finds the starter (the stack sets it)
ENGINE = "prefect.engine"
# How long a flow run waits for a starter that is still importing before running the engine
# itself: about what a cold engine start costs on a small host.
WAIT_ENV, DEFAULT_WAIT_S = "RESCUE_WARM_START_WAIT_S", 15.0
MODELS_ENV = "RESCUE_WARM_START_MODELS"   # 0: the starter loads no model (each run loads its own)
_HEADER = struct.Struct("!I")


# --- the worker's command -----------------------------------------------------------------

def _engine_itself() -> None:
    """The flow run as without the starter: this process becomes ``python -m prefect.engine``."""
    os.execv(sys.executable, [sys.executable, "-m", ENGINE, *sys.argv[2:]])


class _Lines:
    """The starter's answers on one connection, a line at a time (two may come in one read)."""

    def __init__(self, conn: socket.socket):
        self.conn, self.buf = conn, b""

    def read(self) -> str:
        while b"\n" not in self.buf:
            chunk = self.conn.recv(64)
            if not chunk:
                return ""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().strip()


def _wait_s() -> float:
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def _ask(conn: socket.socket, lines: _Lines) -> str:
    """The starter's answer to a request: ``P <pid>`` (forked) or anything else (run the engine
    itself). A starter still importing holds the request; past :func:`_wait_s` the command takes
    it back (``C``) and the starter confirms, or answers that it had forked just before: never both."""
    conn.settimeout(_wait_s())
    try:
        return lines.read()
    except TimeoutError:
        pass
    finally:
        conn.settimeout(None)  # the run's end, later, may take hours
    conn.sendall(b"C\n")
    return lines.read()


def command() -> int:
    """Run this flow run in a child of the starter; fall back to the engine itself."""
    path = os.environ.get(SOCKET_ENV, "")
    # The handlers come first, so that no signal falls between asking the starter and knowing
    # the child: one that comes before the child is known is passed on as soon as it is.
    child, pending = [0], []

    def forward(signum, _frame):
        if not child[0]:
            pending.append(signum)
            return
        try:
            os.kill(child[0], signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lines = _Lines(conn)
    try:
        conn.connect(path)
        payload = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[2:]}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, 1, 2])
        conn.sendall(payload)
        said = _ask(conn, lines)
    except OSError:
        said = ""
    if not said.startswith("P "):  # no starter, or a stale one: the engine itself, as before
        conn.close()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if pending:  # asked to stop before anything ran: stop as the engine would have
            os.kill(os.getpid(), pending[0])
        _engine_itself()
    child[0] = int(said.split()[1])
    for signum in pending:
        forward(signum, None)
    end = ""
    while not end:
        try:
            end = lines.read() or "X 1"  # the starter died: its children die with it
        except InterruptedError:
            continue
    kind, value = end.split()[:2]
    if kind == "S":  # ended by a signal: end the same way
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), int(value))
    return int(value) if kind == "X" else 1


# --- the starter ------------------------------------------------------------------------------

def socket_path(stack_dir) -> str:
    """The starter's socket: in ``stack_dir`` when the path fits a Unix socket's name (107 bytes),
    else in an owner-only folder under the temp dir named after ``stack_dir``."""
    import hashlib
    import tempfile
    from pathlib import Path

    here = Path(stack_dir) / "flow-run-starter.sock"
    if len(os.fsencode(here)) < 100:
        return str(here)
    digest = hashlib.sha256(os.fsencode(stack_dir)).hexdigest()[:16]
    short = Path(tempfile.gettempdir()) / f"rescue-{os.getuid()}-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    st = short.lstat()
    if st.st_uid != os.getuid() or (st.st_mode & 0o077) or not short.is_dir() or short.is_symlink():
        raise OSError(f"{short} is not an owner-only folder of this user")
    return str(short / "flow-run-starter.sock")


def preload() -> None:
    """What every flow run imports, imported once here: Prefect's engine, the flows (and the
    pipeline through them), and the diarization libraries; and the default diarization pipeline,
    loaded (``RESCUE_WARM_START_MODELS=0`` leaves it to each run): a run of the same environment
    finds it in :func:`pipeline.media.diarize.load_pipeline`'s cache, shared copy-on-write."""
    import importlib
    from pathlib import Path

    import prefect.deployments.steps  # noqa: F401  (the deployments' pull step)
    import prefect.engine  # noqa: F401
    import prefect.flow_engine  # noqa: F401
    import prefect._internal.metrics  # noqa: F401

    repo = Path(__file__).resolve().parents[1]
    for path in sorted((repo / "flows").glob("*.py")):
        importlib.import_module("flows" if path.stem == "__init__" else f"flows.{path.stem}")
    try:
        import torch
        import pyannote.audio  # noqa: F401
    except ImportError:  # a host without the diarization extras: the flows still run
        return
    if os.environ.get(MODELS_ENV) == "0":
        return
    from pipeline.media import diarize

    # One torch thread in this (the loading) thread: no OpenMP thread pool is ever made in the
    # starter, so each forked run makes its own, with its own thread count (see _child).
    torch.set_num_threads(1)
    before = _threads()
    try:
        diarize.load_pipeline(None, "cpu")  # the key a run of this environment asks for
    except Exception as exc:  # noqa: BLE001 - no models here: each run loads (or fails on) its own
        print(f"flow-run starter: the diarization pipeline is not preloaded: {type(exc).__name__}: {exc}",
              flush=True)
        return
    added = _threads() - before
    print(f"flow-run starter: the diarization pipeline is loaded ({added} thread(s) added)", flush=True)


def _threads() -> int:
    """This process's threads (Linux; 0 elsewhere)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


class _Preload:
    """:func:`preload` in a thread of Linux's lowest CPU class (SCHED_IDLE, which is per thread):
    its ~10 CPU s then take only what the stack's start and the first flow runs leave, instead of
    slowing them on a small host. The main thread, which forks the flow runs, keeps its class (an
    unprivileged process could not take it back). Once a flow run waits for it, :meth:`hurry`
    moves the thread back to the normal class where the system allows it."""

    def __init__(self):
        import threading

        self.failed: list[BaseException] = []
        self.tid = 0
        self.thread = threading.Thread(target=self._run, name="preload", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import threading

        self.tid = threading.get_native_id()
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):  # not Linux, or not allowed: at normal priority
            pass
        try:
            preload()
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            self.failed.append(exc)

    def hurry(self) -> None:
        try:
            if self.tid and os.sched_getscheduler(self.tid) == os.SCHED_IDLE:
                os.sched_setscheduler(self.tid, os.SCHED_OTHER, os.sched_param(0))
        except (AttributeError, OSError):  # gone already, or not allowed: it finishes at idle priority
            pass

    def done(self) -> bool:
        """True once the preload thread has ended (none of its work is mid-way when a run is
        forked); raises what the preload raised."""
        if self.thread.is_alive():
            return False
        self.thread.join()
        if self.failed:
            raise self.failed[0]
        return True


def _loaded_files() -> dict[str, int]:
    """What the forked runs would take from this process, with modification times: the
    repository's modules it imported, and every file of the models it loaded."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    tops = tuple(str(repo / d) + os.sep for d in ("flows", "pipeline", "ops"))
    files = [f for mod in list(sys.modules.values()) if (f := getattr(mod, "__file__", None)) and f.startswith(tops)]
    diarize = sys.modules.get("pipeline.media.diarize")
    for source, *_ in getattr(diarize, "_PIPELINES", {}):
        where = Path(source)
        files += [str(f) for f in (where.rglob("*") if where.is_dir() else [where]) if f.is_file()]
    out = {}
    for f in files:
        try:
            out[f] = os.stat(f).st_mtime_ns
        except OSError:
            out[f] = -1
    return out


def _stale(files: dict[str, int]) -> bool:
    for f, mtime in files.items():
        try:
            if os.stat(f).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
    if len(head) != _HEADER.size or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise OSError("incomplete request")
    size, data = _HEADER.unpack(head)[0], b""
    while len(data) < size:
        chunk = conn.recv(min(65536, size - len(data)))
        if not chunk:
            raise OSError("incomplete request")
        data += chunk
    return json.loads(data), fds


def _child(request: dict, fds: list[int], keep_closed: list[int]) -> None:
    """In the forked child: become the flow run's engine process. Never returns."""
    code = 1
    try:
        for fd in keep_closed:
            try:
                os.close(fd)
            except OSError:
                pass
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        torch, threads = sys.modules.get("torch"), os.environ.get("OMP_NUM_THREADS", "")
        if torch is not None and threads.isdigit() and int(threads) > 0:
            torch.set_num_threads(int(threads))  # the run's threads: OpenMP read the starter's at import
        sys.argv = [ENGINE, *request.get("argv", [])]
        import runpy

        import prefect.context
        import prefect.logging.configuration

        prefect.context.refresh_global_settings_context()  # the flow run's environment, not the starter's
        prefect.logging.configuration.setup_logging(incremental=False)
        try:
            runpy.run_module(ENGINE, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - as an uncaught exception ends a process
            import traceback

            traceback.print_exc()
            code = 1
        import atexit
        import threading

        # what the interpreter does at exit: wait for non-daemon threads, then the atexit
        # handlers (Prefect sends its queued logs and events there)
        getattr(threading, "_shutdown", lambda: None)()
        atexit._run_exitfuncs()
        import logging

        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def serve(path: str) -> int:
    """Listen at once on ``path``; preload; then fork one engine child per request. Requests that
    come while the preload runs wait for it (their commands take them back after :func:`_wait_s`)."""
    import selectors
    import time

    t0 = time.monotonic()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    old = os.umask(0o077)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.umask(old)
    listener.listen(16)
    loading = _Preload()
    files: dict[str, int] | None = None   # the imported code and its mtimes, once the preload is done
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, socket.socket] = {}   # child pid -> its command's connection
    conns: dict[socket.socket, int] = {}
    waiting: dict[socket.socket, tuple[dict, list[int]]] = {}   # requests held until the preload is done
    print(f"flow-run starter: listening on {path}; importing", flush=True)

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = children.pop(pid, None)
            if conn is None:
                continue
            end = f"S {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"X {os.waitstatus_to_exitcode(status)}"
            try:
                conn.sendall(end.encode() + b"\n")
            except OSError:
                pass
            if conns.pop(conn, None) is not None:
                sel.unregister(conn)
            conn.close()

    def drop(conn: socket.socket, answer: bytes) -> None:
        """A held request not forked: its command runs the engine itself."""
        _, fds = waiting.pop(conn)
        sel.unregister(conn)
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(answer)
        except OSError:
            pass
        conn.close()

    def start(conn: socket.socket) -> None:
        request, fds = waiting.pop(conn)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, fds, [listener.fileno(), wake_r, wake_w, conn.fileno(),
                                  *(c.fileno() for c in (*conns, *waiting))])
        for fd in fds:
            os.close(fd)
        children[pid], conns[conn] = conn, pid
        try:
            conn.sendall(f"P {pid}\n".encode())
        except OSError:  # its command is gone: the EOF below ends the run
            pass
        run_id = request["env"].get("PREFECT__FLOW_RUN_ID") or " ".join(request.get("argv", []))
        print(f"flow-run starter: flow run {run_id} as pid {pid}", flush=True)

    restart = False
    while not stopping and not (restart and not children):
        if files is None and loading.done():
            files = _loaded_files()
            print(f"flow-run starter: ready on {path} after {time.monotonic() - t0:.1f} s ({len(files)} files "
                  "imported or loaded)", flush=True)
        elif files is None and waiting:
            loading.hurry()  # a flow run waits: the imports at normal priority from now on
        if files is not None and waiting:
            if _stale(files):
                # The code or models changed: these requests, and every one until the runs forked from the
                # old code have ended, run the engine themselves; then the starter starts again.
                print("flow-run starter: the code or models changed on disk; starting again with them once its "
                      f"{len(children)} run(s) have ended", flush=True)
                for conn in list(waiting):
                    drop(conn, b"F stale\n")
                sel.unregister(listener)
                listener.close()
                os.unlink(path)
                restart = True
            for conn in list(waiting):
                start(conn)
        for key, _ in sel.select(timeout=5 if files is not None else 0.1):
            if key.data == "wake":
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
            elif key.data == "accept":
                conn, _ = listener.accept()
                uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
                try:
                    if uid != os.getuid():
                        raise OSError(f"a request from uid {uid}")
                    waiting[conn] = _recv_request(conn)
                except (OSError, ValueError) as exc:
                    print(f"flow-run starter: refused: {exc}", flush=True)
                    conn.close()
                    continue
                sel.register(conn, selectors.EVENT_READ, "conn")
            elif key.fileobj in waiting:  # a held request's command took it back (C), or is gone
                drop(key.fileobj, b"F cancelled\n")
            else:  # a command's connection: EOF means the command is gone (killed): so is its run
                conn = key.fileobj
                try:
                    gone = not conn.recv(64)
                except OSError:
                    gone = True
                if gone and conn in conns:
                    try:
                        os.kill(conns.pop(conn), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    sel.unregister(conn)
        reap()
    if restart and not stopping:
        os.execv(sys.executable, [sys.executable, "-m", "ops.warm_start", "serve", "--socket", path])
    if not restart:
        listener.close()
        os.unlink(path)
    for conn in list(waiting):
        drop(conn, b"F stopping\n")
    for pid in list(children):  # the stack stops: its runs with it (as the worker's own children)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        import argparse

        ap = argparse.ArgumentParser(prog="python -m ops.warm_start serve", description=serve.__doc__)
        ap.add_argument("--socket", required=True)
        return serve(ap.parse_args(argv[1:]).socket)
    if argv[:1] == [ENGINE]:
        return command()
    print("usage: python -m ops.warm_start serve --socket PATH | prefect.engine [FLOW_RUN_ID]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
