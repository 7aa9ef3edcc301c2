"""A data root that is a file, cannot be read, or sits on a full disk ends every ``rescue``
command that takes ``--data-root`` with one line naming the path and the problem - checked when
the command reads its arguments, before anything heavy starts. The real CLI (``ops.cli:app``, the
console script's app) runs in-process for every command; one run goes through the installed
``rescue`` script to show there is no traceback; unreadable roots and full disks are made for
real (a root without read permission for a process without root's override, a full tmpfs)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ops.cli import app

RESCUE = Path(sys.executable).with_name("rescue")


def _leaf_commands(command, path=()):
    subs = getattr(command, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _leaf_commands(sub, (*path, name))
    else:
        yield path, command


ALL = list(_leaf_commands(typer.main.get_command(app)))
# every command that takes a data root, by group (a group: a top-level command or sub-app)
WITH_ROOT = [path for path, cmd in ALL if any(p.name == "data_root" for p in cmd.params)]
GROUPS = sorted({path[0] for path in WITH_ROOT})


def test_the_command_list_is_the_cli():
    # the groups `rescue --help` lists; only commands without a data root are left out
    assert {"import-rescue", "validate", "ingest", "release", "annotate", "label-studio", "annotators",
            "stack", "demo", "voices", "gold", "adjudicate", "agreement"} <= set(GROUPS)
    without = sorted(" ".join(path) for path, cmd in ALL if tuple(path) not in set(WITH_ROOT))
    assert without == ["annotate render-configs", "models prepare-offline", "worker start"]  # a worker serves any root


def _run(args: list[str], env: dict | None = None):
    return CliRunner().invoke(app, args, env=env)


def _one_line(result, root: Path, problem: str) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    assert lines[0] == f"rescue: data root {root} {problem}", lines
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return lines[0]


@pytest.fixture(scope="module")
def a_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("roots") / "data-root-is-a-file"
    path.write_text("not a folder\n")
    return path


@pytest.mark.parametrize("group", GROUPS)
def test_a_root_that_is_a_file_is_one_line_for_every_command_of_the_group(group, a_file):
    for path in [p for p in WITH_ROOT if p[0] == group]:
        _one_line(_run([*path, "--data-root", str(a_file)]), a_file, "is a file, not a folder")


def test_the_root_from_the_environment_is_checked_and_help_still_works(a_file):
    env = {"RESCUE_DATA_ROOT": str(a_file)}
    _one_line(_run(["release", "diff", "1.0.0", "1.0.1"], env=env), a_file, "is a file, not a folder")
    assert _run(["release", "build", "--help"], env=env).exit_code == 0
    under = a_file / "sub"  # a root below a file cannot be created
    _one_line(_run(["gold", "build", f"--data-root={under}"]), under, f"cannot be created: {a_file} is a file, not a folder")


def test_a_good_root_passes_the_check(tmp_path):
    res = _run(["annotators", "list", "--data-root", str(tmp_path / "fresh")])
    assert "data root" not in res.output, res.output


def test_the_installed_script_prints_one_line_and_no_traceback(a_file):
    if not RESCUE.exists():
        pytest.skip(f"console script not installed at {RESCUE}")
    proc = subprocess.run([str(RESCUE), "release", "build", "--version", "1.0.0", "--synthetic",
                           "--data-root", str(a_file)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"rescue: data root {a_file} is a file, not a folder\n"


# --- unreadable ---------------------------------------------------------------------------------

_CHILD = """
import json, sys
from typer.testing import CliRunner
from ops.cli import app
out = {}
for path in json.loads(sys.argv[2]):
    r = CliRunner().invoke(app, [*path, "--data-root", sys.argv[1]])
    out[" ".join(path)] = [r.exit_code, r.output]
print(json.dumps(out))
"""


def test_an_unreadable_root_is_one_line_for_every_command(tmp_path):
    root = tmp_path / "locked"
    root.mkdir()
    root.chmod(0)
    try:
        cmd = [sys.executable, "-c", _CHILD, str(root), json.dumps(WITH_ROOT)]
        if os.geteuid() == 0:  # root reads anything: run the child without that override
            setpriv = shutil.which("setpriv")
            if not setpriv:
                pytest.skip("running as root and setpriv (util-linux) is not installed to drop the override")
            cmd = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        results = json.loads(proc.stdout.splitlines()[-1])
    finally:
        root.chmod(0o700)
    line = f"rescue: data root {root} cannot be read (permission denied)"
    wrong = {k: v for k, v in results.items() if v != [2, line + "\n"]}
    assert set(results) == {" ".join(p) for p in WITH_ROOT} and wrong == {}, wrong


# --- full disk ----------------------------------------------------------------------------------

@pytest.fixture()
def tmpfs(tmp_path):
    """A real, tiny tmpfs (needs the right to mount: root here; skipped elsewhere)."""
    mounted = []

    def make(size: str) -> Path:
        point = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}); "
                        "the full-disk check needs a real full disk")
        mounted.append(point)
        return point

    yield make
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _fill(point: Path) -> None:
    with open(point / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:  # ENOSPC: full
            pass


def test_a_root_on_a_full_disk_is_one_line_for_every_command(tmpfs):
    point = tmpfs("64k")
    _fill(point)
    for root in (point, point / "new-root"):  # the root itself, and a root still to be made there
        for path in WITH_ROOT:
            _one_line(_run([*path, "--data-root", str(root)]), root, "is on a full disk (0 bytes free)")


def test_a_disk_that_fills_during_a_release_build_is_one_line_and_publishes_nothing(tmpfs):
    """ENOSPC where it is raised (a write during the build), after the start check passed."""
    point = tmpfs("1600k")  # more than the 1 MiB the start check asks for, less than the release
    res = _run(["release", "build", "--version", "1.0.0", "--synthetic", "--scale", "0.05",
                "--data-root", str(point / "root")])
    assert res.exit_code == 1, res.output
    last = [line for line in res.output.splitlines() if line.strip()][-1]
    assert last.startswith(f"rescue: data root {point / 'root'} is on a disk that filled up (No space left on device")
    assert "Traceback" not in res.output
    assert list((point / "root" / "releases").iterdir()) == []  # the half-built folder is gone
