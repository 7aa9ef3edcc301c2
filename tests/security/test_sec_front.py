"""Anyone who reaches a desk's front (no login: build assets are public) tries to fill its
memory. The front (the real ``pipeline.labelstudio.front`` server, in front of A's real desk) keeps Label
Studio's build files in memory; the attacker asks, unauthenticated, for one huge file under a
new query each time, for files that do not exist, for every file of the build, for one file
under other spellings of its path (the desk serves ``/static//x`` as ``/static/x``: each
spelling is a path of its own), and for the desk's API, pages and media through asset paths
that climb out of the build (the front asks the desk with no one's credentials: 401, the login
page). The cache never holds a query, a missing file or a climb, never more files or bytes than
its bounds (1,024 files and 96 MB as the front runs; scaled down here to show the eviction with
the build's ~650 files), and a file over a quarter of the bytes is served but not kept."""
from __future__ import annotations

import pytest
from attack_kit import A_EMAIL, fire, refused

pytestmark = pytest.mark.slow

HUGE = "/static/samples/opossum_snow.mp4"  # ~3 MB, the build's largest file


def _build_files() -> list[str]:
    """Every file of the installed Label Studio's static build, as the desk serves it (/static/...)."""
    from pipeline.labelstudio.server import DEFAULT_VENV

    (build,) = DEFAULT_VENV.glob("lib/python*/site-packages/label_studio/core/static_build")
    return sorted(f"/static/{p.relative_to(build)}" for p in build.rglob("*")
                  if p.is_file() and not p.name.startswith(".") and "templates" not in p.parts)


def _front(world, **bounds):
    from pipeline.labelstudio.front import FrontServer

    return FrontServer(world.url(A_EMAIL), **bounds).start()


def _port(front) -> int:
    return int(front.url.rsplit(":", 1)[1])


def test_queries_and_missing_files_add_nothing(world):
    front = _front(world)  # the bounds the front runs with
    try:
        cache = front.app.state.front.assets
        before = set(cache.paths())  # what the start check keeps (the patched editor chunk)
        reqs = [("GET", f"{HUGE}?v={i}", [], None) for i in range(60)]
        reqs += [("GET", f"/static/js/none-{i}.js", [], None) for i in range(100)]
        reqs += [("GET", f"/react-app/none-{i}.js?x={i}", [], None) for i in range(100)]
        answers = fire(_port(front), reqs)
        assert [r.status for r in answers[:60]] == [200] * 60, answers[0].describe()
        assert len({r.body for r in answers[:60]}) == 1 and len(answers[0].body) > 2_000_000
        assert not [r.describe() for r in answers[60:] if r.status == 200]
        assert set(cache.paths()) - before == {HUGE}, sorted(set(cache.paths()) - before)[:10]
        # asset paths that climb out of the build, to the desk's API, pages and media: never kept
        climbs = [f"{prefix}{up}{target}" for prefix in ("/static/", "/react-app/") for up in ("../", "%2e%2e/", "js/../../")
                  for target in ("api/projects/", "api/current-user/whoami", "user/account", "projects/",
                                 f"data/local-files/?d={world.media[world.samples[0]['sample_id']]}")]
        answers = fire(_port(front), [("GET", p, [], None) for p in climbs])
        let_in = [r.describe() for r in answers if not (refused(r) or (r.status in (301, 302) and not r.body))]
        assert not let_in, let_in
        assert set(cache.paths()) - before == {HUGE}, sorted(set(cache.paths()) - before)[:10]
    finally:
        front.stop()


def test_every_file_and_spelling_stays_within_the_bounds(world):
    entries, max_bytes = 32, 8 * 2**20
    front = _front(world, cache_entries=entries, cache_bytes=max_bytes)
    try:
        cache = front.app.state.front.assets
        files = _build_files()
        assert len(files) > 4 * entries and HUGE in files, len(files)
        spelled = [f"/static/{'/' * k}samples/opossum_snow.mp4" for k in range(1, 9)]
        spelled += [f"/static/./js/{n}" for n in ("decode-audio.wasm",)] + ["/static/js/../js/decode-audio.wasm",
                                                                           "/static/%6As/decode-audio.wasm"]
        served, peak = 0, (0, 0)
        for at in range(0, len(files), 64):  # bursts of the build, the cache looked at after each
            answers = fire(_port(front), [("GET", p, [], None) for p in files[at:at + 64]])
            served += sum(r.status == 200 for r in answers)
            peak = max(peak[0], len(cache)), max(peak[1], cache.bytes)
            assert len(cache) <= entries and cache.bytes <= max_bytes, (len(cache), cache.bytes)
        answers = fire(_port(front), [("GET", p, [], None) for p in spelled])
        assert len(cache) <= entries and cache.bytes <= max_bytes, (len(cache), cache.bytes)
        assert served >= len(files) * 9 // 10, f"only {served} of {len(files)} build files served: no real attack"
        assert peak[0] == entries, peak  # it was full, and stayed within its bounds
        # a file over a quarter of the bytes: served, never kept (under any spelling)
        assert not [p for p in cache.paths() if "opossum_snow" in p or "opossum-cuteness" in p], cache.paths()
        assert all(r.status in (200, 301, 302, 404) for r in answers), [r.describe() for r in answers]
    finally:
        front.stop()
