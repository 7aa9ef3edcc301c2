"""File-system facts of the desks and the set-up's own controls (the markers the other tests look
for are really where they should be, so their absence elsewhere means something)."""
from __future__ import annotations

import json
import stat

import pytest
from attack_kit import A_EMAIL, B_EMAIL, J_EMAIL

pytestmark = pytest.mark.slow


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_registry_and_service_accounts_are_owner_only(world):
    desks = world.desks
    registry = desks.root.desks_registry()
    assert _mode(registry) == 0o600 and _mode(registry.parent) == 0o700
    for email in (A_EMAIL, B_EMAIL, J_EMAIL):
        service = desks.root.desk_service(desks.get(email).slug)
        assert _mode(service) == 0o600, f"{service}: mode {oct(_mode(service))}"
        assert _mode(service.parent) == 0o700, f"{service.parent}: mode {oct(_mode(service.parent))}"
        ls_dir = desks.root.desk_label_studio_dir(desks.get(email).slug)
        assert _mode(ls_dir) == 0o700
        assert _mode(ls_dir / "label_studio.sqlite3") == 0o600


def test_each_desk_has_its_own_secret_key(world):
    keys = {}
    for email in (A_EMAIL, B_EMAIL, J_EMAIL):
        env = world.desks.root.desk_label_studio_dir(world.desks.get(email).slug) / ".env"
        assert env.is_file(), f"{env} missing: where does this desk keep its SECRET_KEY?"
        assert _mode(env) == 0o600
        lines = [ln for ln in env.read_text().splitlines() if ln.startswith("SECRET_KEY=")]
        assert len(lines) == 1
        keys[email] = lines[0].split("=", 1)[1].strip().strip("'\"")
        assert len(keys[email]) >= 32
    assert len(set(keys.values())) == 3, "two desks share a SECRET_KEY"


def test_file_root_holds_only_own_media(world):
    a_files = world.desks.root.desk_files(world.desks.get(A_EMAIL).slug)
    own = {world.media[s["sample_id"]] for s in world.samples}
    assert set(world.a_files_at_setup) == own, world.a_files_at_setup
    now = {str(p.relative_to(a_files)) for p in a_files.rglob("*") if p.is_file()}
    assert {p for p in now if p.endswith(".wav")} == own
    for p in now - own:  # only what A's own export storages wrote there (A's own annotations)
        text = (a_files / p).read_text(errors="replace")
        assert world.marks["B's answer marker"] not in text and B_EMAIL not in text
    # the file root is neither the data root nor holds the desk's data dir or service account
    assert not (a_files / "label-studio").exists() and not list(a_files.rglob("*.sqlite3"))
    assert not list(a_files.rglob("service.json")) and not list(a_files.rglob("desks.json"))
    b_files = world.desks.root.desk_files(world.desks.get(B_EMAIL).slug)
    assert (b_files / world.media[world.b_only["sample_id"]]).is_file()  # control: B has it, A not


def test_the_markers_are_where_they_belong(world):
    """Controls: B's desk holds B's answers and draft, J's desk holds B's answers as predictions."""
    b, j = world.state_at_setup[B_EMAIL], world.state_at_setup[J_EMAIL]
    b_text, j_text = json.dumps(b), json.dumps(j)
    assert world.marks["B's answer marker"] in b_text and world.marks["B's draft marker"] in b_text
    assert world.marks["B's answer marker"] in j_text  # adjudication predictions, blind to who answered
    assert B_EMAIL not in j_text and A_EMAIL not in j_text and "Annotator " in j_text
    assert world.b_ids["draft"] and world.b_ids["annotation"] and world.j_ids["prediction"]
    labels = world.first_pull.labels.to_pylist()
    assert {r["annotator"] for r in labels} == {A_EMAIL, B_EMAIL}
    assert any(world.marks["B's answer marker"] in str(r.get("value")) for r in labels
               if r["annotator"] == B_EMAIL)
