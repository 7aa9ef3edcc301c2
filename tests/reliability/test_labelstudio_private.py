"""Private state: each desk's Label Studio database and folder, its service account and file
root, the desk registry, and the local stack's state (pids, logs, Prefect home, result cache)
are owner-only; a desk's start plus a push writes nothing into the user's home (Label Studio's
request log would write ~/.config/label-studio/user_id)."""
from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from pipeline.paths import DataRoot


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _open_to_others(folder: Path) -> list[str]:
    return [f"{p} {oct(mode(p))}" for p in [folder, *folder.rglob("*")]
            if not p.is_symlink() and mode(p) & 0o077]


@pytest.mark.slow
def test_a_desk_start_and_push_leave_home_empty_and_its_files_owner_only(desk_factory, tmp_path, monkeypatch):
    from pipeline.annotation import push
    from tests.annotation.ls_samples import make_sample

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    old = os.umask(0o022)  # an ordinary login's umask: privacy must not depend on it
    try:
        email = "private-a@reliability.test"
        desks, desk = desk_factory(email)  # the person's own Label Studio, started, with their login
        root = desks.root
        media = root.media_dir() / "private.wav"
        media.parent.mkdir(parents=True, exist_ok=True)
        media.write_bytes(b"RIFF0000WAVE")
        os.chmod(media, 0o600)  # as ingest writes extracted audio
        rep = push.push_round(desks, "emotion", [make_sample("rel_private/s1", "couple", 3)], [email], k=1,
                              root=DataRoot(root), media_url=lambda s: "/data/local-files/?d=media/private.wav")
        assert rep.created == 1
        desks.client(email).export_tasks(next(iter(rep.projects.values())))
        desks.down()
    finally:
        os.umask(old)
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
    ls_dir = root.desk_label_studio_dir(desk.slug)
    assert mode(ls_dir) == 0o700 and mode(ls_dir / "label_studio.sqlite3") == 0o600
    assert _open_to_others(root.desks_dir()) == []  # registry, service account, database, file root
    assert mode(root.desks_registry()) == 0o600 and mode(root.desk_service(desk.slug)) == 0o600
    staged = root.desk_files(desk.slug) / "media" / "private.wav"
    assert staged.read_bytes() == media.read_bytes()
    assert _open_to_others(root.push_lock("emotion").parent) == []


def test_the_stack_state_is_owner_only(tmp_path):
    from ops import processes as st

    old = os.umask(0o022)
    try:
        paths = st.StackPaths(DataRoot(tmp_path))
        # left from an older version: shared modes are narrowed
        paths.home.mkdir(parents=True)
        (paths.home / "old.db").write_text("x")
        os.chmod(paths.home / "old.db", 0o644)
        st.make_private(paths)
        child = paths.home / "written-by-the-server.txt"
        pid = st.spawn(paths, "probe", [sys.executable, "-c",
                                        "import sys, os; os.makedirs(sys.argv[2]); open(sys.argv[1], 'w').write('x'); print('hello')",
                                        str(child), str(paths.home / "made-by-it")], {})
        deadline = time.monotonic() + 30
        while not child.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        st.stop(paths, "probe")
        assert pid
    finally:
        os.umask(old)
    assert child.exists() and mode(child) == 0o600 and mode(paths.home / "made-by-it") == 0o700
    assert mode(paths.log_file("probe")) == 0o600 and mode(paths.home / "old.db") == 0o600
    assert _open_to_others(DataRoot(tmp_path).stack_dir()) == []
    assert _open_to_others(paths.results) == []


def test_the_pid_file_is_owner_only(tmp_path):
    from ops import processes as st

    paths = st.StackPaths(DataRoot(tmp_path))
    st.write_pid(paths, "x", os.getpid())
    assert mode(paths.pid_file("x")) == 0o600 and mode(paths.pids) == 0o700
