"""Another local user on the host, after the demo's real runs: ``bash scripts/demo.sh`` runs
``rescue demo`` (the Prefect stack, one Label Studio and one front per simulated person, ingest,
every round with adjudication, a release). Run here the same way - the installed ``rescue``
in a process of its own, under an ordinary login's umask (022) - into a data root whose parent
others may pass through (as a home folder 0711 is). Then:

- the owner's walk: no entry under the data root has a group or other bit (files, folders,
  sockets, pid files, logs, databases, media, labels, reports, the release);
- the other user's walk (``setpriv`` to ``nobody``): every entry under the data root is tried
  (each folder listed, each file opened): one request each, counted; none succeeds;
- ``rescue release publish`` shares that one release: the other user now reads its files,
  and still nothing else.

The walks stop at nothing: a folder the other user cannot list is walked by the owner, and the
other user tries each of its entries by path (``open``/``listdir`` need no listing above)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from attack_kit import count

from ops.demo import DEMO_RELEASE as VERSION

from tests.helpers import free_port, mode, open_to_others, require_label_studio

pytestmark = pytest.mark.slow

RESCUE = Path(sys.executable).with_name("rescue")
LOGIN_UMASK = 0o022
NOBODY = 65534


# Run as the other user: each path on stdin is tried (a folder listed, anything else opened for
# reading); prints the ones that worked, one per line.
PROBE = r"""
import os, sys
for line in sys.stdin:
    p = line.rstrip("\n")
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            os.listdir(p)
        else:
            with open(p, "rb") as fh:
                fh.read(1)
        print(p)
    except OSError:
        pass
"""


def _other_user_reads(root: Path) -> list[str]:
    """What ``nobody`` can list or read of every entry under ``root`` (the walk by the owner, the
    tries by the other user); counted, one request per entry."""
    entries = [str(p) for p in [root, *root.rglob("*")] if not p.is_symlink() and
               (p.is_dir() or p.is_file())]
    count(None, len(entries))
    run = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                          "/usr/bin/python3", "-I", "-c", PROBE],
                         input="\n".join(entries), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return [str(Path(p).relative_to(root)) for p in run.stdout.splitlines()]


@pytest.fixture(scope="module")
def demo_root():
    """The demo run by the installed ``rescue`` under umask 022, its stack stopped afterwards."""
    require_label_studio()
    if not shutil.which("setpriv") or not Path("/usr/bin/python3").is_file() or os.geteuid() != 0:
        pytest.skip("the other user's walk needs setpriv, /usr/bin/python3 and root to switch users")
    home = Path(tempfile.mkdtemp(prefix="rescue-demo-home-"))
    home.chmod(0o711)  # a home folder others may pass through: the data root's own modes decide
    root = home / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RESCUE_"))}
    env.update(RESCUE_PREFECT_PORT=str(free_port()), RESCUE_DESK_BASE_PORT=str(free_port()),
               RESCUE_FRONT_BASE_PORT=str(free_port()), RESCUE_DESK_PUBLIC_URL="", COLUMNS="200")
    cmd = lambda *a: subprocess.run([str(RESCUE), *a, "--data-root", str(root)], env=env, capture_output=True,  # noqa: E731
                                    text=True, timeout=1800, umask=LOGIN_UMASK)
    try:
        demo = cmd("demo")
        assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-4000:]
        yield root, cmd, demo.stdout
    finally:
        down = cmd("stack", "down")
        shutil.rmtree(home, ignore_errors=True)
        assert down.returncode == 0, down.stdout + down.stderr


def test_after_the_demo_nothing_is_readable_by_others_but_a_published_release(demo_root):
    root, cmd, printed = demo_root
    release = root / "releases" / VERSION
    assert f"Release:           {release}" in printed, printed[-3000:]
    # the demo did write what the walk is about (a walk of an empty root proves nothing)
    for area in ("stack", "desks", "batches", "work", "annotation", "corpus", "releases"):
        assert (root / area).is_dir(), f"the demo wrote no {area}/ under {root}"
    assert (root / "stack" / "prefect-api-auth").is_file() and list(root.rglob("*.sqlite3"))
    assert list((root / "annotation").rglob("report.md")) and list(release.rglob("*.parquet"))

    assert open_to_others(root) == {}, "readable by group or others after the demo"
    assert _other_user_reads(root) == [], "another local user reads these after the demo"

    published = cmd("release", "publish", VERSION)
    assert published.returncode == 0, published.stdout + published.stderr
    tree = [release, *release.rglob("*")]
    assert {str(p.relative_to(root)): oct(mode(p)) for p in tree} == {
        str(p.relative_to(root)): "0o755" if p.is_dir() else "0o644" for p in tree}
    # the way there passable, not listable; nothing else opened
    assert open_to_others(root, skip=release) == {".": "0o711", "releases": "0o711"}
    reads = _other_user_reads(root)
    shared = {str(p.relative_to(root)) for p in tree}
    assert {r for r in reads if r in shared} == shared, "control: the other user cannot read the published release"
    assert [r for r in reads if r not in shared] == [], "another local user reads these after the publish"
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["version"] == VERSION
