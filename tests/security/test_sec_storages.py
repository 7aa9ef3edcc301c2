"""Local-files import and export storages from A's own token on A's desk: a storage is accepted
only inside A's own file root, and nothing outside it can be listed, imported, written or read
(the data root, B's desk folder, A's own desk data dir with its database and .env, / and /etc)."""
from __future__ import annotations

import hashlib
import json

import pytest
from attack_kit import fire, leaks, raw
from attack_kit import A_EMAIL, B_EMAIL, J_EMAIL

pytestmark = pytest.mark.slow

NAMES = ("desks.json", "service.json", "label_studio.sqlite3", ".env", "passwd", "sec-b-only.wav", "server.log")


def _outside(world) -> list[str]:
    root, desks = world.root, world.desks
    a, b = desks.get(A_EMAIL).slug, desks.get(B_EMAIL).slug
    a_files = desks.root.desk_files(a)
    return [str(root), str(root / "desks"), str(root / "desks" / b), str(desks.root.desk_files(b)),
            str(desks.root.desk_files(b) / "media"), str(root / "media"), str(desks.root.desk_label_studio_dir(a)),
            str(root / "desks" / a), str(desks.root.desk_label_studio_dir(b)), "/", "/etc", "/tmp", "/proc/self",
            str(a_files), f"{a_files}/media/../..", f"{a_files}/../label-studio", f"{a_files}/media/../../service.json",
            "media", "../..", f"{a_files}/media/../../../{b}/files/media", str(desks.root.desk_files(desks.get(J_EMAIL).slug))]


def _fingerprint(world) -> dict[str, str]:
    """Hashes of every file under the data root outside A's desk (databases and logs aside: the
    servers write those themselves)."""
    a_dir = world.root / "desks" / world.desks.get(A_EMAIL).slug
    out = {}
    for p in sorted(world.root.rglob("*")):
        if p.is_file() and a_dir not in p.parents and p.suffix not in (".sqlite3", ".log", ".pid") \
                and "xdg" not in p.parts and "export" not in p.parts and "-journal" not in p.name \
                and "annotation" not in p.relative_to(world.root).parts[:1]:
            out[str(p.relative_to(world.root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _scratch_project(world, headers) -> int:
    r = raw(world.port(A_EMAIL), "POST", "/api/projects/", [*headers, ("Content-Type", "application/json")],
            json.dumps({"title": "A's scratch"}))
    assert r.status == 201, r.describe()
    return json.loads(r.body)["id"]


def test_storages_only_inside_own_file_root(world, unchanged):
    headers = [*world.variants()["token"], ("Content-Type", "application/json")]
    port = world.port(A_EMAIL)
    files_before = _fingerprint(world)
    scratch = _scratch_project(world, world.variants()["token"])
    reqs = []
    # every path on the routes that create or list (import storage on the scratch project, export
    # storage on A's round project, the file listing); the validate routes (the same checks as
    # create) on every third path, alternating projects
    for n, path in enumerate(_outside(world)):
        routes = [("/api/storages/localfiles/", scratch, {"use_blob_urls": True, "recursive_scan": True}),
                  ("/api/storages/export/localfiles", world.a_project, {"can_delete_objects": True}),
                  ("/api/storages/localfiles/files", scratch, {"recursive_scan": True, "limit": 1000})]
        if n % 3 == 0:
            routes += [("/api/storages/localfiles/validate", world.a_project, {"use_blob_urls": True}),
                       ("/api/storages/export/localfiles/validate", scratch, {})]
        for route, project, extra in routes:
            reqs.append(("POST", route, headers, json.dumps({"project": project, "path": path, "title": "x", **extra})))
    # the pipeline's own storage of A's round project, re-pointed outside
    existing = json.loads(raw(port, "GET", f"/api/storages/localfiles/?project={world.a_project}", headers).body)
    assert existing, "the push registered no local storage on A's project"
    sid = existing[0]["id"]
    for path in _outside(world):
        reqs.append(("PATCH", f"/api/storages/localfiles/{sid}", headers, json.dumps({"path": path})))
        reqs.append(("POST", "/api/storages/localfiles/files", headers, json.dumps({"id": sid, "path": path})))
    answers = fire(port, reqs)
    accepted = [r.describe() for r in answers if r.status < 400]
    # a file name (or B's desk's slug) counts only when the request did not name it itself:
    # "Absolute local path \"...\" must be a subdirectory of LOCAL_FILES_DOCUMENT_ROOT" echoes the path given
    named = [f"{r.describe()} {leaks(r.text, world.forbidden(), asked=q[3] or '')}" for r, q in zip(answers, reqs)
             if any(n in r.text and n not in (q[3] or "") for n in NAMES)
             or leaks(r.text, world.forbidden(), asked=q[3] or "")]
    assert not accepted, f"{len(reqs)} requests; storages accepted outside A's file root:\n" + "\n".join(accepted)
    assert not named, "answers naming files outside A's file root:\n" + "\n".join(named)
    after = json.loads(raw(port, "GET", f"/api/storages/localfiles/?project={world.a_project}", headers).body)
    assert [s["path"] for s in after] == [s["path"] for s in existing]

    # inside A's own file root storages are accepted: they see and write only A's own things
    media = str(world.desks.root.desk_files(world.desks.get(A_EMAIL).slug) / "media")
    r = raw(port, "POST", "/api/storages/localfiles/", headers,
            json.dumps({"project": scratch, "path": media, "title": "own", "use_blob_urls": True, "recursive_scan": True}))
    assert r.status == 201, r.describe()
    own = json.loads(r.body)["id"]
    r = raw(port, "POST", f"/api/storages/localfiles/{own}/sync", headers, "{}")
    assert r.status < 400, r.describe()
    r = raw(port, "POST", "/api/storages/localfiles/files", headers, json.dumps({"id": own, "path": media}))
    listed = {f["key"].rsplit("/", 1)[-1] for f in json.loads(r.body).get("files", []) if f.get("key")}
    assert listed <= {world.media[s["sample_id"]].rsplit("/", 1)[-1] for s in world.samples}, listed
    r = raw(port, "POST", "/api/storages/export/localfiles", headers,
            json.dumps({"project": scratch, "path": media, "title": "own-export"}))
    assert r.status == 201, r.describe()
    raw(port, "POST", f"/api/storages/export/localfiles/{json.loads(r.body)['id']}/sync", headers, "{}")

    # with those storages in place, still nothing outside A's file root can be read
    from test_sec_paths import _check, path_targets
    bad, n = _check(world, port, [t for t in path_targets(world) if t.startswith("/data/")],
                    world.variants()["token"], must_refuse=False)
    assert not bad, "\n".join(bad)
    assert _fingerprint(world) == files_before, "files outside A's desk changed"
