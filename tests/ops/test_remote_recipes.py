"""The remote recipes point at each desk's front and name neither the person nor the role; a
front that cannot start is said in one line and its person's address falls back to the desk.

No Label Studio here: the recipes come from the registry alone, and a front whose port is taken
exits before it would reach its desk. tests/ops/test_stack_fronts_auth.py starts the real stack.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess

import pytest
from typer.testing import CliRunner

from ops.cli import app
from pipeline.labelstudio.desks import Desks
from pipeline.config import REPO_ROOT, Settings
from tests.helpers import free_port
from pipeline.paths import DataRoot

PEOPLE = (("alice.smith@example.org", "annotator"), ("bob@example.org", "annotator"),
          ("carol@example.org", "adjudicator"))
CADDYFILE = REPO_ROOT / "docs" / "examples" / "Caddyfile.desks"


def _key() -> str:
    name = b"ssh-ed25519"
    blob = len(name).to_bytes(4, "big") + name + (32).to_bytes(4, "big") + bytes(range(32))
    return "ssh-ed25519 " + base64.b64encode(blob).decode() + " alice@laptop"


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("RESCUE_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("RESCUE_DESK_BASE_PORT", str(free_port()))
    monkeypatch.setenv("RESCUE_FRONT_BASE_PORT", str(free_port()))
    monkeypatch.delenv("RESCUE_DESK_PUBLIC_URL", raising=False)
    desks = Desks(DataRoot(tmp_path), Settings.from_env(tmp_path))
    for email, role in PEOPLE:
        desks.register(email, role)
    return tmp_path


def _revealing(desks: Desks) -> list[str]:
    """What a public name must not hold: e-mails, their parts, slugs, roles."""
    words = {"annotator", "adjudicator", "adjudication"}
    for d in desks.all():
        words |= {d.email, d.slug, d.email.split("@")[0], *re.split(r"[.@]", d.email.split("@")[0])}
    return sorted(words)


def test_every_desk_has_its_own_front_port_and_a_random_site_name(root):
    desks = Desks(DataRoot(root))
    all_ = desks.all()
    ports = [d.port for d in all_] + [d.front_port for d in all_]
    assert all(ports) and len(set(ports)) == len(ports), all_
    assert all(re.fullmatch(r"desk-[0-9a-f]{12}", d.site) for d in all_), all_
    assert len({d.site for d in all_}) == len(all_)
    assert all(d.front_port >= int(os.environ["RESCUE_FRONT_BASE_PORT"]) for d in all_)


def test_the_caddyfile_proxies_each_site_name_to_that_desks_front_only(root):
    out = CliRunner().invoke(app, ["stack", "remote", "caddyfile", "--domain", "annotate.example.org",
                                   "--email", "ops@example.org"])
    assert out.exit_code == 0, out.output
    sites = dict(re.findall(r"(?m)^(\S+) \{\n\treverse_proxy (\S+)\n\}", out.output))
    desks = Desks(DataRoot(root))
    assert sites == {f"{d.site}.annotate.example.org": f"127.0.0.1:{d.front_port}" for d in desks.all()}
    names = " ".join(sites)
    assert not [w for w in _revealing(desks) if w in names], names
    body = out.output.replace("ops@example.org", "")
    assert not [w for w in _revealing(desks) if w in body], body  # not even in a comment
    assert not any(f":{d.port}" in out.output for d in desks.all()), "a site points at a desk, not its front"


def test_the_ssh_line_opens_the_persons_front_only_and_is_named_by_site(root, tmp_path):
    key = tmp_path / "k.pub"
    key.write_text(_key() + "\n")
    desks = Desks(DataRoot(root))
    carol = desks.get("carol@example.org")
    out = CliRunner().invoke(app, ["annotators", "remote", carol.email, "--ssh", str(key)])
    assert out.exit_code == 0, out.output
    line = out.output.strip()
    assert f'permitopen="127.0.0.1:{carol.front_port}"' in line and line.endswith(f" {carol.site}"), line
    assert not [w for w in _revealing(desks) if w in line], line
    two = tmp_path / "two.pub"
    two.write_text(_key() + "\n" + _key() + "\n")
    refused = CliRunner().invoke(app, ["annotators", "remote", carol.email, "--ssh", str(two)])
    assert refused.exit_code == 1 and "one line" in refused.output


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) is not installed")
def test_a_key_made_by_ssh_keygen_gives_one_line_for_that_key(root, tmp_path):
    """The .pub file as ssh-keygen writes it (trailing newline, its own comment) is taken as it is."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bob@laptop", "-f", str(tmp_path / "id")],
                   check=True)
    pub = (tmp_path / "id.pub").read_text()
    assert pub.endswith("\n")
    bob = Desks(DataRoot(root)).get("bob@example.org")
    out = CliRunner().invoke(app, ["annotators", "remote", bob.email, "--ssh", str(tmp_path / "id.pub")])
    assert out.exit_code == 0, out.output
    key_type, blob = pub.split()[:2]
    assert out.output == (f'restrict,port-forwarding,permitopen="127.0.0.1:{bob.front_port}",command="/bin/false" '
                          f"{key_type} {blob} {bob.site}\n")


def test_the_caddy_site_of_one_person_is_that_fronts_block_of_the_whole_file(root):
    desks = Desks(DataRoot(root))
    bob = desks.get("bob@example.org")
    one = CliRunner().invoke(app, ["annotators", "remote", bob.email, "--caddy", "annotate.example.org"])
    assert one.exit_code == 0, one.output
    assert one.output == f"{bob.site}.annotate.example.org {{\n\treverse_proxy 127.0.0.1:{bob.front_port}\n}}\n"
    whole = CliRunner().invoke(app, ["stack", "remote", "caddyfile", "--domain", "annotate.example.org"])
    assert one.output in whole.output


def test_remote_says_what_is_missing_in_one_line(root, tmp_path):
    none = CliRunner().invoke(app, ["annotators", "remote", "bob@example.org"])
    assert none.exit_code == 2 and "--ssh KEY.pub, --caddy DOMAIN" in none.output
    nobody = CliRunner().invoke(app, ["annotators", "remote", "eve@example.org", "--caddy", "annotate.example.org"])
    assert nobody.exit_code == 1 and "eve@example.org has no desk" in nobody.output
    bad = CliRunner().invoke(app, ["annotators", "remote", "bob@example.org", "--caddy", "*.example.org"])
    assert bad.exit_code == 1 and "one lower-case DNS name" in bad.output
    missing = CliRunner().invoke(app, ["annotators", "remote", "bob@example.org", "--ssh", str(tmp_path / "no.pub")])
    assert missing.exit_code == 1 and "no.pub" in missing.output


def test_the_public_address_takes_the_site_name(root, monkeypatch):
    monkeypatch.setenv("RESCUE_DESK_PUBLIC_URL", "https://{site}.annotate.example.org")
    desks = Desks(DataRoot(root))
    listed = json.loads(CliRunner().invoke(app, ["annotators", "list", "--json"]).output)
    assert [p["url"] for p in listed] == [f"https://{d.site}.annotate.example.org" for d in desks.all()]
    assert [p["desk_url"] for p in listed] == [desks.url(d) for d in desks.all()]


def test_a_registry_from_before_fronts_gets_front_ports_and_sites_once(root):
    reg = Desks(DataRoot(root)).root.desks_registry()
    old = json.loads(reg.read_text())
    for e in old["desks"]:
        del e["front_port"], e["site"]
    reg.write_text(json.dumps(old))
    desks = Desks(DataRoot(root))
    assert all(d.front_port == 0 and d.site == "" for d in desks.all())
    given = desks.registered_fronts()
    assert all(d.front_port and d.site for d in given) and desks.all() == given  # written back
    assert desks.registered_fronts() == given  # and kept
    assert not {d.front_port for d in given} & {d.port for d in given}


def test_a_front_that_cannot_start_is_one_line_and_the_address_falls_back_to_the_desk(root):
    desks = Desks(DataRoot(root))
    alice = desks.get("alice.smith@example.org")
    said: list[str] = []
    with socket.socket() as taken:  # something else holds alice's front port
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", alice.front_port))
        taken.listen()
        got = desks.fronts_up([alice.email], log=said.append)
    assert got == {alice.email: None}, (got, said)
    assert len(said) == 1 and said[0].startswith(f"front of {alice.email}: not started (") \
        and said[0].endswith(f"their address is the desk's: {desks.url(alice)}"), said
    assert "\n" not in said[0]
    assert desks.front_url(alice) is None and desks.public_url(alice) == desks.url(alice)
    listed = json.loads(CliRunner().invoke(app, ["annotators", "list", "--json"]).output)
    assert listed[0] == {"email": alice.email, "role": "annotator", "url": desks.url(alice),
                         "desk_url": desks.url(alice)}


def test_the_example_caddyfile_names_sites_not_people(root):
    text = "\n".join(line.split("#", 1)[0] for line in CADDYFILE.read_text().splitlines())
    hosts = re.findall(r"(?m)^(\S+) \{", text)
    assert hosts and all(re.fullmatch(r"desk-[0-9a-f]{12}\.annotate\.example\.org", h) for h in hosts), hosts
    assert "adjudicator" not in CADDYFILE.read_text() and "@example.org (" not in CADDYFILE.read_text()
