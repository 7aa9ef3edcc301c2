"""One attacker's world for the whole package (set up once, ~1 min): real desks for annotator A,
annotator B and adjudicator J under one data root; a small emotion round with media pushed to A
and B (and one sample to B alone); A and B answer with unique markers (B's answers, B's draft),
a pull, then adjudication pushed to J (whose predictions hold both annotators' answers). A then
logs in to A's own desk through the real login form and keeps A's session and token. Apart from
it, a pair of desks (the desk settings, Label Studio's stock ones) for the attacks on logins,
sessions and passwords (:func:`desk_pair`)."""
from __future__ import annotations

import secrets
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from attack_kit import (A_EMAIL, B_EMAIL, J_EMAIL, OURS, ROUND, STOCK, DeskPair, Login,  # noqa: E402,F401
                        answer_values, credential_variants, desk_state, diff, form_login)

from tests.helpers import free_port, noise_wav, require_label_studio  # noqa: E402
from pipeline.paths import DataRoot


@dataclass
class World:
    root: Path
    desks: object
    samples: list[dict]
    b_only: dict
    media: dict[str, str]                    # sample_id -> data-root-relative media path
    a: Login = None                          # A's login on A's desk (form, session, token)
    b: Login = None                          # B's own login (B answered through it)
    marks: dict[str, str] = field(default_factory=dict)   # what only B (or J) has: must never reach A
    secrets: dict[str, str] = field(default_factory=dict)  # service tokens/passwords, SECRET_KEYs
    b_ids: dict[str, list[int]] = field(default_factory=dict)  # B's ids as they are on B's desk
    j_ids: dict[str, list[int]] = field(default_factory=dict)
    a_ids: dict[str, list[int]] = field(default_factory=dict)
    a_files_at_setup: list[str] = field(default_factory=list)
    last_state: dict = field(default_factory=dict)  # B's and J's desks when last read

    def port(self, email: str) -> int:
        return self.desks.get(email).port

    def url(self, email: str) -> str:
        return self.desks.url(email)

    def forbidden(self) -> dict[str, str]:
        """Strings A must never see: B's and J's data and every desk's secrets but A's own token."""
        return {**self.marks, **self.secrets}

    def state(self) -> dict:
        """B's and J's desks as their service accounts read them."""
        with ThreadPoolExecutor(2) as pool:
            states = list(pool.map(lambda who: desk_state(self.desks.client(who)), (B_EMAIL, J_EMAIL)))
        return dict(zip((B_EMAIL, J_EMAIL), states))

    def variants(self):
        return credential_variants(self.a)

    def pushed(self) -> None:
        """After a module's own push to B's desk (a round or a part of one for its attacks): the
        state the next module's :func:`unchanged` starts from."""
        self.last_state = self.state()


def _answer(client, rnd, samples_by_id, tone: str, utterance: str) -> list[dict]:
    """Answer every task of every project of the client's desk (as the client's login)."""
    from pipeline.annotation import ls_config
    out = []
    for project in client.projects():
        for task in client.tasks(project.id):
            sample = samples_by_id[task["data"]["sample_id"]]
            values = answer_values(rnd, sample, utterance, tone)
            result = ls_config.values_to_results(rnd, task["data"], values)
            out.append(client.create_annotation(task["id"], result, lead_time=3.0))
    return out


@pytest.fixture(scope="package")
def world(tmp_path_factory):
    from pipeline.annotation import ls_config, pull, push
    from pipeline.labelstudio.client import LabelStudioClient
    from pipeline.labelstudio.desks import Desks
    from pipeline.annotation.rounds import load_round
    from pipeline.quality import adjudication
    from tests.annotation.ls_samples import make_sample

    require_label_studio()
    root = tmp_path_factory.mktemp("security") / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
        desks = Desks(DataRoot(root))
    passwords = {e: secrets.token_urlsafe(12) for e in (A_EMAIL, B_EMAIL, J_EMAIL)}
    roles = {A_EMAIL: "annotator", B_EMAIL: "annotator", J_EMAIL: "adjudicator"}
    for email, role in roles.items():  # ports and slugs one after another, the servers side by side
        desks.register(email, role)
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda e: desks.add(e, roles[e], passwords[e], timeout=400), roles))

        rnd = load_round(ROUND)
        samples = [make_sample(f"synthetic/couple_90{i}", "couple", 5, seed=i) for i in (1, 2, 3)]
        b_only = make_sample("synthetic/couple_977", "couple", 5, seed=7)
        media = {s["sample_id"]: f"media/sec-shared-{i}.wav" for i, s in enumerate(samples, 1)}
        media[b_only["sample_id"]] = "media/sec-b-only.wav"
        for rel in media.values():
            noise_wav(root / rel)
        url_of = lambda s: f"/data/local-files/?d={media[s['sample_id']]}"  # noqa: E731
        push.push_round(desks, ROUND, samples, [A_EMAIL, B_EMAIL], root=DataRoot(root), media_url=url_of)
        push.push_round(desks, ROUND, [b_only], [B_EMAIL], root=DataRoot(root), media_url=url_of, k=1)

        w = World(root, desks, samples, b_only, media)
        tag = secrets.token_hex(4)
        w.marks = {"B's answer marker": f"bobanswer{tag}", "B's draft marker": f"bobdraft{tag}",
                   "B's e-mail": B_EMAIL, "J's e-mail": J_EMAIL, "B's desk slug": desks.get(B_EMAIL).slug,
                   "B-only sample": b_only["sample_id"], "B-only media": "sec-b-only.wav",
                   "adjudication project key": "rescue-adjudication"}
        w.a_marker = f"aliceanswer{tag}"
        by_id = {s["sample_id"]: s for s in [*samples, b_only]}

        # B answers through B's own login (form -> token); B also keeps a draft
        w.b = form_login(desks.url(B_EMAIL), B_EMAIL, passwords[B_EMAIL])
        b_client = LabelStudioClient(desks.url(B_EMAIL), w.b.token)
        b_anns = _answer(b_client, rnd, by_id, w.marks["B's answer marker"], "accusation")
        b_project = b_client.projects()[0]
        b_tasks = b_client.tasks(b_project.id)
        draft_task = b_tasks[-1]
        draft_values = answer_values(rnd, by_id[draft_task["data"]["sample_id"]], "defense", w.marks["B's draft marker"])
        draft = b_client._json("POST", f"/api/tasks/{draft_task['id']}/drafts", "save a draft", json={
            "result": ls_config.values_to_results(rnd, draft_task["data"], draft_values), "lead_time": 2.0})
        b_client.close()

        # A answers through A's own login (the same form); A is the attacker from here on
        w.a = form_login(desks.url(A_EMAIL), A_EMAIL, passwords[A_EMAIL])
        a_client = LabelStudioClient(desks.url(A_EMAIL), w.a.token)
        a_anns = _answer(a_client, rnd, by_id, w.a_marker, "disclosure")
        w.a_project = a_client.projects()[0].id
        w.a_tasks = [t["id"] for t in a_client.tasks(w.a_project)]
        a_client.close()

        w.first_pull = pull.pull_round(desks, ROUND, DataRoot(root))
        w.adjudication = adjudication.push_round(desks, DataRoot(root), ROUND, [*samples, b_only])

        j = desks.client(J_EMAIL)
        j_projects = [p.id for p in j.projects()]
        j_tasks = [t["id"] for p in j_projects for t in j.tasks(p)]
        j_preds = [p["id"] for t in j_tasks for p in j._json("GET", "/api/predictions/", "preds", params={"task": t})]
        bs = desks.client(B_EMAIL)
        b_preds = [p["id"] for t in b_tasks for p in bs._json("GET", "/api/predictions/", "preds", params={"task": t["id"]})]
        w.b_ids = {"project": [b_project.id], "task": [t["id"] for t in b_tasks], "annotation": [a["id"] for a in b_anns],
                   "draft": [draft["id"]], "prediction": b_preds,
                   "user": [desks.owner_id(B_EMAIL)]}
        w.j_ids = {"project": j_projects, "task": j_tasks, "prediction": j_preds, "user": [desks.owner_id(J_EMAIL)]}
        w.a_ids = {"project": [w.a_project], "task": w.a_tasks, "annotation": [a["id"] for a in a_anns]}

        for email in (A_EMAIL, B_EMAIL, J_EMAIL):
            svc = desks.service(email)
            who = email.split("@")[0]
            w.secrets[f"{who}'s desk service token"] = svc["LABEL_STUDIO_USER_TOKEN"]
            w.secrets[f"{who}'s desk service password"] = svc["LABEL_STUDIO_PASSWORD"]
            env = root / "desks" / desks.get(email).slug / "label-studio" / ".env"
            if env.is_file():
                for line in env.read_text().splitlines():
                    if line.startswith("SECRET_KEY="):
                        w.secrets[f"{who}'s SECRET_KEY"] = line.split("=", 1)[1].strip().strip("'\"")
        w.secrets["B's password"] = passwords[B_EMAIL]
        w.secrets["J's password"] = passwords[J_EMAIL]
        w.secrets["B's API token"] = w.b.token
        w.passwords = passwords
        files = root / "desks" / desks.get(A_EMAIL).slug / "files"
        w.a_files_at_setup = sorted(str(p.relative_to(files)) for p in files.rglob("*") if p.is_file())
        w.state_at_setup = w.last_state = w.state()
        yield w
    finally:
        desks.down()
        desks.close()


@pytest.fixture(scope="module")
def unchanged(world):
    """Asserts, after the module's last test, that B's and J's desks are exactly as before its first.

    B's and J's state is read once per module (at its end): "before" is the state read at the
    end of the previous module (or at set-up), since nothing but the tests touches the desks.
    A change shows as an error in the teardown of the module's last test; the next module
    starts from the changed state, so each module answers for its own attacks."""
    before = world.last_state
    yield
    after = world.state()
    world.last_state = after
    for who in before:
        assert after[who] == before[who], f"{who}'s desk changed during the attacks of this module: " \
                                          f"{diff(before[who], after[who])[:10]}"


@pytest.fixture(scope="package")
def desk_pair(tmp_path_factory):
    """Two desks of their own for the attacks that change logins, sessions or passwords (the
    world's must stay as they are for the other modules): OURS runs the desk settings, STOCK
    Label Studio's own (``RESCUE_LS_STOCK_SETTINGS=1``), each with one annotator's login."""
    from pipeline.labelstudio.desks import Desks
    from pipeline.labelstudio.server import STOCK_SETTINGS_VAR

    require_label_studio()
    root = tmp_path_factory.mktemp("security-pair") / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
        desks = Desks(DataRoot(root))
    pair = DeskPair(desks, {e: secrets.token_urlsafe(12) for e in (OURS, STOCK)})
    for email in (OURS, STOCK):
        desks.register(email, "annotator")

    try:
        for email in (OURS, STOCK):  # one after the other: the variable is read when a server starts
            with pytest.MonkeyPatch.context() as mp:
                if email == STOCK:
                    mp.setenv(STOCK_SETTINGS_VAR, "1")
                else:
                    mp.delenv(STOCK_SETTINGS_VAR, raising=False)
                desks.add(email, "annotator", pair.passwords[email], timeout=400)
            pid = desks.server(email).status().pid
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert (b"DJANGO_SETTINGS_MODULE=rescue_desk_settings" in environ) == (email == OURS), email
        yield pair
    finally:
        desks.down()
        desks.close()


def pytest_sessionfinish(session):
    """In a pytest-xdist worker: its attack counts go to the controller, which prints them all
    (tests/conftest.py). Run in one process, tests/conftest.py reads them from attack_kit."""
    from attack_kit import COUNTS
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["attack_counts"] = dict(COUNTS)
