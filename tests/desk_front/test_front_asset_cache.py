"""The front's build cache is bounded: a query is no new file (40 requests of one script with
40 queries, unauthenticated, once grew the cache by 356 MB), only what the desk answers 200 is
kept, and however many files are asked for, the cache keeps at most its entries and bytes."""
from __future__ import annotations

import asyncio
import os

import httpx

from pipeline.labelstudio.front import FrontServer
from pipeline.labelstudio.front.app import AssetCache


def _cache(front: FrontServer) -> AssetCache:
    return front.app.state.front.assets


def test_queries_make_no_new_entries_and_the_desk_is_asked_once(fake_upstream):
    body = os.urandom(200_000)
    files = {"/react-app/big.js": body}
    upstream = fake_upstream(files)
    front = FrontServer(upstream).start()
    try:
        async def many():
            async with httpx.AsyncClient(base_url=front.url, timeout=60) as client:
                return await asyncio.gather(*(client.get(f"/react-app/big.js?n={i}") for i in range(40)))

        answers = asyncio.run(many())
        assert all(r.status_code == 200 and r.content == body for r in answers)
        cache = _cache(front)
        assert cache.paths() == ["/react-app/big.js"]
        assert cache.bytes <= 2 * len(body) + 1024  # the file and its gzip, once
    finally:
        front.stop()


def test_only_the_desks_own_files_are_kept_and_within_bounds(fake_upstream):
    files = {f"/static/js/part{i}.js": os.urandom(50_000) for i in range(30)}
    front = FrontServer(fake_upstream(files), cache_entries=8, cache_bytes=500_000).start()
    try:
        for path, body in files.items():
            r = httpx.get(f"{front.url}{path}", timeout=60)
            assert r.status_code == 200 and r.content == body
        for i in range(20):  # no file of the build: the desk's answer, nothing kept
            assert httpx.get(f"{front.url}/static/js/none{i}.js", timeout=60).status_code != 200
        cache = _cache(front)
        assert 0 < len(cache) <= 8 and cache.bytes <= 500_000, (len(cache), cache.bytes)
        assert all(p.startswith("/static/js/part") for p in cache.paths()), cache.paths()
        assert "/static/js/part29.js" in cache  # the latest used stay
        # an evicted file is fetched again, as it is
        assert httpx.get(f"{front.url}/static/js/part0.js", timeout=60).content == files["/static/js/part0.js"]
    finally:
        front.stop()


def test_a_real_desks_script_asked_for_with_40_queries_is_kept_once(ls_server):
    front = FrontServer(ls_server.url).start()
    try:
        script = next(p for p in ("/react-app/main.js", "/static/js/main.js") if
                      httpx.get(f"{ls_server.url}{p}", timeout=60).status_code == 200)
        for i in range(40):
            assert httpx.get(f"{front.url}{script}?x={i}", timeout=60).status_code == 200
        cache = _cache(front)
        one = AssetCache.size(cache.get(script))
        # the start check keeps the patched editor chunk; beside it, the script once
        assert len(cache) <= 1 + len(front.app.state.front.patcher.groups)
        assert cache.bytes <= one + sum(AssetCache.size(cache.get(g)) for g in front.app.state.front.patcher.groups
                                        if g in cache)
    finally:
        front.stop()
