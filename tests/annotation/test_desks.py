"""Desks: one real Label Studio per person (pipeline.labelstudio.desks). Two annotators and one
adjudicator get three servers, shared by this module's tests (a desk takes ~30 s to start)."""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
import stat
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, pull, push
from pipeline.labelstudio.client import LabelStudioError
from pipeline.labelstudio.desks import DeskError, Desks
from pipeline.annotation.rounds import load_round
from pipeline.config import Settings
from pipeline.paths import DataRoot
from pipeline.quality import adjudication
from tests.helpers import free_port, require_label_studio

pytestmark = pytest.mark.slow

A, B, J = "desk-a@rescue.test", "desk-b@rescue.test", "desk-judge@rescue.test"
ROUND = "emotion"


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Real desks under a fresh data root: A and B annotate, J adjudicates (started side by side)."""
    require_label_studio()
    root = tmp_path_factory.mktemp("desks") / "data"
    settings = dataclasses.replace(Settings.from_env(root), desk_base_port=free_port(), desk_url="http://127.0.0.1:{port}",
                                   desk_public_url="")
    desks = Desks(DataRoot(root), settings)
    passwords = {e: secrets.token_urlsafe(12) for e in (A, B, J)}
    roles = {A: "annotator", B: "annotator", J: "adjudicator"}
    for e in (A, B, J):  # registered one after the other (ports in order), started side by side
        desks.register(e, roles[e])
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda e: desks.add(e, roles[e], passwords[e], timeout=400), (A, B, J)))
        yield desks, passwords
    finally:
        desks.down()
        desks.close()


def _media(root: DataRoot, name: str, payload: bytes) -> str:
    path = root.media_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"RIFF" + payload + b"WAVEfmt ")
    os.chmod(path, 0o600)
    return f"/data/local-files/?d=media/{name}"


@pytest.fixture(scope="module")
def pushed(world):
    """Round emotion: s1 and s2 to A and B; s3 to A only. Each sample has its own WAV."""
    desks, _ = world
    root = desks.root
    samples = {sid: make_sample(f"desks/{sid}", "couple", 4) for sid in ("s1", "s2", "s3")}
    urls = {f"desks/{sid}": _media(root, f"{sid}.wav", sid.encode() * 64) for sid in samples}
    url = lambda s: urls[s["sample_id"]]  # noqa: E731
    both = push.push_round(desks, ROUND, [samples["s1"], samples["s2"]], [A, B], root=DataRoot(root), media_url=url)
    only_a = push.push_round(desks, ROUND, [samples["s3"]], [A], k=1, root=DataRoot(root), media_url=url)
    return samples, both, only_a


def _login(url: str, email: str, password: str) -> httpx.Client | None:
    """Label Studio's login form as a browser sends it (csrftoken cookie + field); the logged-in
    client, else None."""
    client = httpx.Client(base_url=url, timeout=30, follow_redirects=False)
    client.get("/user/login/").raise_for_status()
    token = client.cookies.get("csrftoken")
    assert token, "the login page set no csrftoken"
    r = client.post("/user/login/", data={"csrfmiddlewaretoken": token, "email": email, "password": password},
                    headers={"Referer": f"{url}/user/login/"})
    if r.status_code in (302, 303) and "/user/login" not in r.headers.get("location", "") \
            and client.cookies.get("sessionid"):
        return client
    assert r.status_code == 200, (r.status_code, r.headers)  # the form again, with its error
    client.close()
    return None


def _logged_in(client: httpx.Client) -> bool:
    r = client.get("/api/current-user/whoami")
    return r.status_code == 200


def test_each_person_has_a_server_of_their_own_with_private_state(world):
    desks, passwords = world
    root = desks.root
    listed = {d.email: d for d in desks.all()}
    assert {e: d.role for e, d in listed.items()} == {A: "annotator", B: "annotator", J: "adjudicator"}
    assert desks.people("annotator") == [A, B] and desks.people("adjudicator") == [J]
    assert len({d.port for d in listed.values()}) == 3 and len({desks.url(e) for e in listed}) == 3
    statuses = {e: desks.server(e).status() for e in listed}
    assert all(s.healthy and s.version == "1.23.2" for s in statuses.values())
    assert len({s.pid for s in statuses.values()}) == 3 and len({s.data_dir for s in statuses.values()}) == 3
    # each server's own SECRET_KEY (sessions of one mean nothing on another), in its own data dir
    keys = {}
    for e, d in listed.items():
        env = root.desk_label_studio_dir(d.slug) / ".env"
        assert mode(env) & 0o077 == 0, oct(mode(env))
        keys[e] = [line for line in env.read_text().splitlines() if line.startswith("SECRET_KEY=")]
        assert len(keys[e]) == 1 and len(keys[e][0]) > len("SECRET_KEY=") + 20
    assert len({k[0] for k in keys.values()}) == 3
    # registry and service accounts owner-only, in owner-only folders; no token in the registry
    registry = root.desks_registry()
    assert mode(registry) == 0o600 and mode(root.desks_dir()) == 0o700
    text = registry.read_text()
    for e, d in listed.items():
        service = root.desk_service(d.slug)
        assert mode(service) == 0o600 and mode(service.parent) == 0o700
        secret = json.loads(service.read_text())
        assert secret["LABEL_STUDIO_USER_TOKEN"] not in text and secret["LABEL_STUDIO_PASSWORD"] not in text
        assert passwords[e] not in text and passwords[e] not in service.read_text()
        assert mode(root.desk_label_studio_dir(d.slug)) == 0o700
        assert mode(root.desk_label_studio_dir(d.slug) / "label_studio.sqlite3") == 0o600
    assert len({json.loads(root.desk_service(d.slug).read_text())["LABEL_STUDIO_USER_TOKEN"]
                for d in listed.values()}) == 3
    # each desk's people: its service account and its owner, nobody else
    for e in listed:
        assert sorted(u["email"] for u in desks.client(e).users()) == sorted([e, "pipeline@rescue.invalid"])


def test_a_password_opens_its_own_desk_only(world):
    desks, passwords = world
    session = _login(desks.url(A), A, passwords[A])
    assert session is not None and _logged_in(session)
    try:
        assert _login(desks.url(A), A, "not-" + passwords[A]) is None  # the form checks the password
        assert _login(desks.url(B), A, passwords[A]) is None  # A has no login on B's desk
        assert _login(desks.url(B), B, passwords[B]) is not None
        # A's session cookie is worth nothing on B's desk (another server, another SECRET_KEY)
        with httpx.Client(base_url=desks.url(B), timeout=30, cookies={"sessionid": session.cookies["sessionid"]}) as other:
            assert not _logged_in(other)
    finally:
        session.close()


def test_a_push_puts_each_project_and_its_media_on_its_annotators_desk_only(world, pushed):
    desks, _ = world
    root = desks.root
    samples, both, only_a = pushed
    assert (both.created, only_a.created) == (4, 1)
    owners = {e: sorted((p.key, push.parse_project_key(p.key)[2]) for p in desks.client(e).projects())
              for e in (A, B, J)}
    assert owners == {A: [(push.project_key(ROUND, "couple", A), A)], B: [(push.project_key(ROUND, "couple", B), B)],
                      J: []}
    tasks = {e: sorted(t["data"]["sample_id"] for t in desks.client(e).tasks(
        desks.client(e).find_project(push.project_key(ROUND, "couple", e)).id)) for e in (A, B)}
    assert tasks == {A: ["desks/s1", "desks/s2", "desks/s3"], B: ["desks/s1", "desks/s2"]}
    # each desk's file root: the media of its own tasks (a link or a private copy), nothing else
    for e, want in ((A, {"s1.wav", "s2.wav", "s3.wav"}), (B, {"s1.wav", "s2.wav"}), (J, set())):
        files = root.desk_files(desks.get(e).slug)
        found = {p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file()} if files.exists() else set()
        assert found == {f"media/{n}" for n in want}, (e, found)
        for n in want:
            source, staged = root.media_dir() / n, files / "media" / n
            assert os.path.samefile(source, staged) or staged.read_bytes() == source.read_bytes()
            assert mode(staged) & 0o077 == 0
    # the projects' local storage is the desk's own file root, and the server serves the media
    client = desks.client(B)
    pid = client.find_project(push.project_key(ROUND, "couple", B)).id
    storages = client._json("GET", "/api/storages/localfiles", "list storages", params={"project": pid})
    files_b = root.desk_files(desks.get(B).slug).resolve()
    assert storages and all(os.path.realpath(s["path"]).startswith(str(files_b)) for s in storages)
    served = client.request("GET", "/data/local-files/", "read a media file", params={"d": "media/s1.wav"})
    assert served.content == (root.media_dir() / "s1.wav").read_bytes()
    with pytest.raises(LabelStudioError, match="HTTP 404"):  # s3 is not B's: not in B's file root
        client.request("GET", "/data/local-files/", "read a media file", params={"d": "media/s3.wav"})


def _answer(desks, email, sample, author, utterance_type=None):
    rnd = load_round(ROUND)
    client = desks.client(email)
    pid = client.find_project(push.project_key(ROUND, "couple", email)).id
    task = client.find_tasks(pid, "sample_id", sample["sample_id"])[0]
    values = push.input_values(rnd, sample)
    if utterance_type:
        first = min(values)
        values[first] = {**values[first], "utterance_type": utterance_type}
    return client.create_annotation(task["id"], ls_config.values_to_results(rnd, task["data"], values),
                                    completed_by=author)


def test_only_the_desk_owners_answers_count(world, pushed):
    desks, _ = world
    samples, _, _ = pushed
    x = desks.client(A).create_user("x-on-a@rescue.test")  # a login made on A's desk (e.g. through the API)
    foreign = _answer(desks, A, samples["s1"], x["id"])
    own = _answer(desks, A, samples["s2"], desks.owner_id(A))
    _answer(desks, B, samples["s1"], desks.owner_id(B))
    result = pull.pull_round(desks, ROUND, DataRoot(desks.root), annotators=[A, B])
    lines = result.labels.to_pylist()
    by = {(r["annotator"], r["sample_id"]) for r in lines}
    assert (A, "desks/s2") in by and (B, "desks/s1") in by
    assert (A, "desks/s1") not in by  # X's answer in A's project is not A's
    assert not any(r["annotator"] == "x-on-a@rescue.test" for r in lines)
    assert {r["annotation_id"] for r in lines if r["annotator"] == A} == {own["id"]}
    problems = [p["problem"] for p in result.problems.to_pylist() if p["annotator"] == A]
    assert f"annotation {foreign['id']} by x-on-a@rescue.test on {A}'s desk ({desks.url(A)}): not the desk's " \
           "owner; not counted" in problems, problems
    assert result.progress[(A, "couple")][0] == 1  # only s2 is done


def test_roles_are_explicit_and_one_per_person(world, pushed, tmp_path):
    desks, _ = world
    samples, _, _ = pushed
    rnd = load_round(ROUND)
    # B disagrees with A on s2 (A answered it above, or answers now)
    for who, kind in ((A, None), (B, "defense" if push.input_values(rnd, samples["s2"])[min(
            push.input_values(rnd, samples["s2"]))].get("utterance_type") != "defense" else "request")):
        client = desks.client(who)
        pid = client.find_project(push.project_key(ROUND, "couple", who)).id
        if not client.find_tasks(pid, "sample_id", "desks/s2")[0].get("total_annotations"):
            _answer(desks, who, samples["s2"], desks.owner_id(who), kind)
    labels = pull.pull_round(desks, ROUND, DataRoot(desks.root), annotators=[A, B]).labels
    s12 = [samples["s1"], samples["s2"]]
    # without an adjudicator (another data root: A and B only), a disagreement has nowhere to go
    lone = Desks(DataRoot(tmp_path / "other"), dataclasses.replace(desks.settings, desk_base_port=free_port()))
    lone.register(A, "annotator")
    lone.register(B, "annotator")
    with pytest.raises(adjudication.NoAdjudicator, match="nobody is an adjudicator"):
        adjudication.push(lone, rnd, labels, s12)
    # here the adjudication project goes to J's desk only
    summary = adjudication.push(desks, rnd, labels, s12)
    assert summary.disagreements > 0 and list(summary.projects) == [f"couple/{J}"]
    key = adjudication.project_key(ROUND, "couple")
    assert desks.client(J).find_project(key) is not None
    assert desks.client(A).find_project(key) is None and desks.client(B).find_project(key) is None
    # one role per person: an adjudicator cannot be made an annotator, nor an annotator an adjudicator
    with pytest.raises(DeskError, match="already has a desk as adjudicator"):
        desks.register(J, "annotator")
    with pytest.raises(DeskError, match="already has a desk as annotator"):
        desks.register(A, "adjudicator")
    assert desks.people("annotator") == [A, B] and desks.people("adjudicator") == [J]
    assert sorted(push.parse_project_key(p.key)[2] for e in (A, B) for p in desks.client(e).projects()) == [A, B]
