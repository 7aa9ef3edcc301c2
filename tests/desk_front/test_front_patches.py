"""The front's bundle patches (``pipeline.labelstudio.front.patches``) apply only to the build they were written
for, all or none per group, and the start says which: with Label Studio 1.23.2's real build every
group is applied (the served file is the desk's with exactly the group's replacements); a file
whose sha256 differs, or a group one of whose texts is missing, is served exactly as built with
one warning; a desk of another release than ``LS_VERSION`` gets a warning at start and no patch;
``RESCUE_NO_BUNDLE_PATCHES=1`` serves everything as built."""
from __future__ import annotations

import hashlib
import logging

import httpx
from front_helpers import build_dir

from pipeline.labelstudio.front import FrontServer
from pipeline.labelstudio.front.patches import BUNDLE_PATCHES, PatchGroup, Patcher, apply_group
from pipeline.labelstudio.server import LS_VERSION

WARN = logging.WARNING


def _real(group: PatchGroup) -> bytes:
    """The installed Label Studio's file the group patches."""
    prefix = "/react-app/"
    assert group.path.startswith(prefix), group.path
    return (build_dir() / group.path.removeprefix(prefix)).read_bytes()


def _patched(body: bytes, group: PatchGroup) -> bytes:
    for old, new in group.replacements:
        body = body.replace(old, new)
    return body


def _front_lines(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "rescue.front"]


def test_groups_are_tied_to_the_installed_build():
    """Every group's sha256 is that of the installed Label Studio's file, and each of its texts
    occurs there exactly once (an upgrade that changes the file fails here, not silently)."""
    assert BUNDLE_PATCHES, "no bundle patch group left"
    for group in BUNDLE_PATCHES:
        body = _real(group)
        assert hashlib.sha256(body).hexdigest() == group.sha256, group.name
        for old, new in group.replacements:
            assert body.count(old) == 1 and old != new, group.name
        assert apply_group(body, group)[1].applied


def test_apply_group_is_all_or_nothing():
    body = b"alpha beta gamma"
    sha = hashlib.sha256(body).hexdigest()
    group = PatchGroup("g", "/react-app/x.js", sha, ((b"alpha", b"A"), (b"gamma", b"G")))
    assert apply_group(body, group) == (b"A beta G", apply_group(body, group)[1])
    assert apply_group(body, group)[1].applied
    # another build: nothing applied, the reason names its sha256
    other = body + b" "
    served, outcome = apply_group(other, group)
    assert served == other and not outcome.applied
    assert outcome.reason == f"sha256 differs from the build it was written for ({hashlib.sha256(other).hexdigest()[:12]})"
    # the right build but one text missing (or twice): none of the group, never some of it
    for missing in (b"delta", b"a"):
        broken = PatchGroup("g", "/react-app/x.js", sha, ((b"alpha", b"A"), (missing, b"D"), (b"gamma", b"G")))
        served, outcome = apply_group(body, broken)
        assert served == body and not outcome.applied and "replacement 2 of 3" in outcome.reason


def test_one_warning_per_file_served_as_built(caplog):
    caplog.set_level(logging.INFO, logger="rescue.front")
    group = PatchGroup("g", "/react-app/x.js", "0" * 64, ((b"a", b"b"),))
    patcher = Patcher((group,))
    for _ in range(3):
        assert patcher.patch("/react-app/x.js", b"a") == b"a"
    assert [level for level, _ in _front_lines(caplog)] == [WARN]


def test_the_real_build_is_patched_and_the_start_says_so(ls_server, caplog, monkeypatch):
    """Through a front of the real Label Studio 1.23.2: each group applied at start and the
    file served is the desk's with exactly the group's replacements; with
    RESCUE_NO_BUNDLE_PATCHES=1 the file is served as built."""
    assert ls_server.version() == LS_VERSION
    caplog.set_level(logging.INFO, logger="rescue.front")
    front = FrontServer(ls_server.url).start()
    try:
        assert front.report.version_ok and front.report.release == LS_VERSION
        assert front.report.applied() == [g.name for g in BUNDLE_PATCHES]
        for group in BUNDLE_PATCHES:
            built = httpx.get(f"{ls_server.url}{group.path}", timeout=60).content
            assert hashlib.sha256(built).hexdigest() == group.sha256  # what Label Studio serves
            served = httpx.get(f"{front.url}{group.path}", timeout=60).content
            assert served != built and served == _patched(built, group)
            for old, new in group.replacements:
                assert old not in served and served.count(new) == 1
            assert (logging.INFO, f"bundle patch group {group.name} ({group.path}): applied") in _front_lines(caplog)
        assert not [m for level, m in _front_lines(caplog) if level >= WARN]
    finally:
        front.stop()
    monkeypatch.setenv("RESCUE_NO_BUNDLE_PATCHES", "1")
    plain = FrontServer(ls_server.url).start()
    try:
        assert plain.report.applied() == []
        for group in BUNDLE_PATCHES:
            assert httpx.get(f"{plain.url}{group.path}", timeout=60).content == _real(group)
    finally:
        plain.stop()


def test_another_build_is_served_as_built_with_one_warning(fake_upstream, caplog):
    caplog.set_level(logging.INFO, logger="rescue.front")
    files = {g.path: _real(g) + b"\n// another build\n" for g in BUNDLE_PATCHES}  # the texts are all still there
    front = FrontServer(fake_upstream(files)).start()
    try:
        assert front.report.version_ok and front.report.applied() == []
        for group in BUNDLE_PATCHES:
            sha = hashlib.sha256(files[group.path]).hexdigest()
            for query in ("", "?v=1", "?v=2"):  # a query is no other file
                assert httpx.get(f"{front.url}{group.path}{query}", timeout=60).content == files[group.path]
            warnings = [m for level, m in _front_lines(caplog) if level >= WARN and group.path in m]
            assert warnings == [f"bundle patch group {group.name} ({group.path}): not applied: "
                                f"sha256 differs from the build it was written for ({sha[:12]})"]
    finally:
        front.stop()


def test_a_group_with_a_missing_text_is_not_applied_at_all(fake_upstream, caplog):
    caplog.set_level(logging.INFO, logger="rescue.front")
    real = BUNDLE_PATCHES[0]
    body = _real(real)
    broken = PatchGroup(real.name, real.path, real.sha256, (*real.replacements, (b"no such text /*x*/", b"")))
    front = FrontServer(fake_upstream({real.path: body}), patches=(broken,)).start()
    try:
        assert front.report.applied() == []
        assert httpx.get(f"{front.url}{real.path}", timeout=60).content == body  # not one replacement of it
        n = len(broken.replacements)
        assert [m for level, m in _front_lines(caplog) if level >= WARN] == [
            f"bundle patch group {real.name} ({real.path}): not applied: replacement {n} of {n} occurs 0 times, not once"]
    finally:
        front.stop()


def test_another_release_gets_a_warning_and_no_patches(fake_upstream, caplog):
    caplog.set_level(logging.INFO, logger="rescue.front")
    files = {g.path: _real(g) for g in BUNDLE_PATCHES}  # even the exact build: the release decides first
    front = FrontServer(fake_upstream(files, release="1.22.0")).start()
    try:
        assert front.report.release == "1.22.0" and not front.report.version_ok
        assert front.report.applied() == []
        for group in BUNDLE_PATCHES:
            assert httpx.get(f"{front.url}{group.path}", timeout=60).content == files[group.path]
        warnings = [m for level, m in _front_lines(caplog) if level >= WARN]
        assert len(warnings) == 1 and "1.22.0" in warnings[0] and LS_VERSION in warnings[0] \
            and "no bundle patch" in warnings[0], warnings
    finally:
        front.stop()
