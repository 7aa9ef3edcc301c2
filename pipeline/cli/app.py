"""The ``rescue`` Typer app and the options every command shares.

Every command that takes ``--data-root`` checks the root before it starts (:func:`root_problem`):
a root that is a file, cannot be read or created, or sits on a full disk ends the command with
one line naming the path and the problem (exit 2), and a disk that fills up while the command
runs ends it with one line too (exit 1), never a traceback. Every command runs with the umask
0077 (:func:`pipeline.store.private_by_default`).
"""
from __future__ import annotations

import errno
import functools
import os
from pathlib import Path

import typer

app = typer.Typer(
    name="rescue",
    help="Rebuild the RESCUE benchmark from therapy-interview videos.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold tokens or transcripts
)

# Below this many free bytes a disk counts as full: nothing the pipeline writes would fit.
MIN_FREE_BYTES = 1 << 20
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def root_problem(root: Path) -> str | None:
    """What makes ``root`` unusable as a data root, worded to follow "data root X" (``None``:
    nothing): a file or other non-folder, a folder that cannot be read, a missing root whose
    nearest existing parent is not a writable folder, or a disk with less than
    :data:`MIN_FREE_BYTES` free. It only looks (creating and write-testing the root is
    :func:`pipeline.store.prepare_data_root`'s, once, in a command that runs a stage), so read-only commands and
    read-only roots keep working."""
    try:
        if root.is_symlink() and not root.exists():
            return f"is a broken link (to {os.readlink(root)})"
        if root.exists():
            if not root.is_dir():
                return "is a file, not a folder" if root.is_file() else "is not a folder"
            if not os.access(root, os.R_OK | os.X_OK):
                return "cannot be read (permission denied)"
            on_disk = root
        else:
            on_disk = next(p for p in root.absolute().parents if p.exists())
            if not on_disk.is_dir():
                return f"cannot be created: {on_disk} is a file, not a folder"
            if not os.access(on_disk, os.W_OK | os.X_OK):
                return f"cannot be created: {on_disk} is not writable (permission denied)"
    except PermissionError:
        return "cannot be reached (permission denied on a folder above it)"
    except OSError as exc:
        return f"cannot be checked: {exc.strerror or exc}"
    try:
        st = os.statvfs(on_disk)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    # A file system with no blocks at all (/proc, /sys) is not a disk that filled up: whether
    # a root can be made there is for check_data_root to find out, and name.
    if st.f_blocks and free < MIN_FREE_BYTES:
        return f"is on a full disk ({free} bytes free)"
    return None


def _fail(root: Path, problem: str, code: int) -> None:
    typer.echo(f"rescue: data root {root} {problem}", err=True)
    raise typer.Exit(code)


def _root_from_args(args: list[str], opts: list[str]) -> Path:
    """The data root a command's own arguments name (the last ``--data-root``), else the default,
    resolved as the command resolves it (:meth:`pipeline.config.Settings.from_env`)."""
    from pipeline.config import Settings

    value = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in opts and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(tuple(o + "=" for o in opts)):
            value = arg.split("=", 1)[1]
    return Settings.from_env(value).data_root


def _guard(command, opts: list[str]) -> None:
    """Check the root when ``command`` reads its arguments (before its options are converted,
    so an unreadable root is our one line, not a usage box) and turn a full disk while it runs
    into one line."""
    parse_args, callback = command.parse_args, command.callback
    state = {}

    def checked_parse_args(ctx, args):
        if not ctx.resilient_parsing and not set(args) & set(ctx.help_option_names):
            try:
                root = state["root"] = _root_from_args(args, opts)
            except ValueError as exc:  # a setting the root's resolution reads is malformed
                typer.echo(f"rescue: {exc}", err=True)
                raise typer.Exit(2) from None
            problem = root_problem(root)
            if problem:
                _fail(root, problem, 2)
        return parse_args(ctx, args)

    @functools.wraps(callback)
    def run(*args, **params):
        try:
            return callback(*args, **params)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            where = f" writing {exc.filename}" if exc.filename else ""
            _fail(state.get("root", "?"), f"is on a disk that filled up ({exc.strerror}{where}); nothing more was written", 1)

    command.parse_args, command.callback = checked_parse_args, run


def _guard_roots(command) -> None:
    """Put every command below ``command`` that takes ``--data-root`` behind :func:`_guard`. The
    command objects are built afresh for each run, so this changes nothing beyond it."""
    for sub in getattr(command, "commands", {}).values():
        _guard_roots(sub)
    opts = next((p.opts for p in getattr(command, "params", []) if p.name == "data_root"), None)
    if opts and command.callback is not None and not getattr(command, "_root_guarded", False):
        _guard(command, opts)
        command._root_guarded = True


@app.callback()
def _main(ctx: typer.Context) -> None:
    """rescue-pipeline command line."""
    from pipeline.store import private_by_default

    # Owner-only, whatever the operator's umask: what the command writes and the processes it
    # starts (Prefect, workers, desks) inherit it. Put back after, for a caller in the same process.
    previous = private_by_default()
    ctx.call_on_close(lambda: os.umask(previous))
    # Runs before the chosen command parses its options: guard it (and every other) from here.
    _guard_roots(ctx.command)


DataRoot = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data).")


def cli_console(stderr: bool = False):
    """The commands' console: a path or a sentence stays one line at any width (people and grep
    read it), tables still fit the terminal. Made per command, so it takes the terminal's width
    as it is then. (rich is imported here, not at start-up.)"""
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True)


def narrow_table(*columns: str, title: str | None = None, **options):
    """A rich table for an 80-column terminal: no side borders, one space between columns, and
    columns that fold a long value onto the next line rather than cut it."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1, 0, 0), pad_edge=False,
                  **options)
    for name in columns:
        table.add_column(name, overflow="fold")
    return table
