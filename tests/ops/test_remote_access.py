"""Remote annotators reach their own desk and nothing else (docs/OPERATIONS.md, "Remote annotators").

* The example TLS proxy config (docs/examples/Caddyfile.desks) sends each desk host to exactly
  one 127.0.0.1 port, never to Prefect (4200) or anywhere else; `caddy validate` / `nginx -t`
  check it when the binary is installed (skipped, saying so, when not).
* ops/remote.py renders a Caddy site and an authorized_keys line, refusing input that would
  widen them.
* With OpenSSH installed (scripts/setup.sh installs it), a throw-away sshd on a free loopback
  port with the rendered line proves it: `ssh -N -L` reaches the permitted desk port; another
  port, the same port named `localhost`, a Unix socket, a remote command and a pty are refused;
  with the documented sshd_config block, remote forwards (-R) are too.
"""
from __future__ import annotations

import base64
import http.server
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ops.remote import authorized_keys_line, caddy_site
from pipeline.config import REPO_ROOT
from tests.helpers import free_port

CADDYFILE = REPO_ROOT / "docs" / "examples" / "Caddyfile.desks"
OPERATIONS = REPO_ROOT / "docs" / "OPERATIONS.md"
PREFECT_PORT = 4200
SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").is_file() else None)
SSH = shutil.which("ssh")
SSH_KEYGEN = shutil.which("ssh-keygen")

# ---------------------------------------------------------------------------------------
# The example Caddyfile


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("#", 1)[0].rstrip() for line in text.splitlines())


def _sites(text: str) -> dict[str, str]:
    """Top-level site blocks of a Caddyfile: address -> body (the global options block skipped)."""
    text = _strip_comments(text)
    sites, depth, head, body = {}, 0, "", []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if depth == 0:
            assert stripped.endswith("{"), f"unexpected top-level line in the Caddyfile: {stripped!r}"
            head, body = stripped[:-1].strip(), []
            depth = 1
            continue
        depth += stripped.count("{") - stripped.count("}")
        if depth == 0:
            if head:  # "" = the global options block
                assert head not in sites, f"site {head} defined twice"
                sites[head] = "\n".join(body)
        else:
            body.append(stripped)
    assert depth == 0, "unbalanced braces in the Caddyfile"
    return sites


def test_example_caddyfile_maps_each_desk_host_to_exactly_one_loopback_port():
    text = CADDYFILE.read_text()
    sites = _sites(text)
    assert len(sites) >= 2, "the example should show more than one desk"
    ports = []
    for address, body in sites.items():
        assert re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+)+(:\d+)?", address), \
            f"site {address!r}: one host name per site (no wildcard, no list, no scheme)"
        upstreams = re.findall(r"reverse_proxy\s+(.+)", body)
        assert len(upstreams) == 1, f"{address}: exactly one reverse_proxy, found {upstreams}"
        m = re.fullmatch(r"127\.0\.0\.1:(\d+)", upstreams[0].strip())
        assert m, f"{address} proxies to {upstreams[0]!r}: only a desk on 127.0.0.1:<port>"
        ports.append(int(m.group(1)))
        named = re.match(r"desk-(\d+)\.", address)
        assert named is None or int(named.group(1)) == ports[-1], \
            f"{address} is named after desk port {named.group(1)} but proxies to {ports[-1]}"
        # nothing else served under the name: no file server, no second handler, no redirect out
        for directive in ("file_server", "root ", "redir", "php_fastcgi", "respond", "handle_path"):
            assert directive not in body, f"{address} uses {directive.strip()}: a desk site only proxies"
        # each block is exactly what ops.remote renders
        assert caddy_site(address, ports[-1]).split() == f"{address} {{ {body} }}".split()
    assert len(set(ports)) == len(ports), f"two hosts share a desk port: {ports}"
    assert all(p >= 8081 for p in ports), "desk ports start at RESCUE_DESK_BASE_PORT (8081)"
    # Prefect's UI/API (and Caddy's own admin API) never appear as an upstream or a site
    for forbidden in (str(PREFECT_PORT), "2019", "8080", "8090"):
        assert not re.search(rf"(?<!\d){forbidden}(?!\d)", _strip_comments(text)), \
            f"the example mentions port {forbidden} outside comments"
    assert "prefect" not in _strip_comments(text).lower()


def test_the_docs_point_at_the_example_and_say_how_certificates_come():
    ops = OPERATIONS.read_text()
    assert "docs/examples/Caddyfile.desks" in ops
    assert "Let's Encrypt" in ops or "ACME" in ops
    assert "permitopen" in ops and "nologin" in ops and "AllowStreamLocalForwarding no" in ops


@pytest.mark.skipif(not shutil.which("caddy"), reason="caddy is not installed here (apt-get install caddy): "
                    "the example Caddyfile is checked by the parser above only")
def test_example_caddyfile_validates_with_caddy(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run(["caddy", "validate", "--adapter", "caddyfile", "--config", str(CADDYFILE)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Valid configuration" in proc.stdout + proc.stderr


@pytest.mark.skipif(not shutil.which("caddy"), reason="caddy is not installed here (apt-get install caddy)")
def test_rendered_sites_validate_with_caddy(tmp_path):
    conf = tmp_path / "Caddyfile"
    conf.write_text(caddy_site("alice-example-org.annotate.example.org", 8081)
                    + caddy_site("annotate.example.org:9082", 8082))
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run(["caddy", "validate", "--adapter", "caddyfile", "--config", str(conf)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ---------------------------------------------------------------------------------------
# ops.remote


def _fake_ed25519() -> str:
    name = b"ssh-ed25519"
    blob = len(name).to_bytes(4, "big") + name + (32).to_bytes(4, "big") + bytes(range(32))
    return "ssh-ed25519 " + base64.b64encode(blob).decode() + " alice@laptop"


def test_authorized_keys_line_shape():
    line = authorized_keys_line(_fake_ed25519(), 8083, "alice@example.org")
    options, key_type, blob, comment = line.split(" ")
    assert options == 'restrict,port-forwarding,permitopen="127.0.0.1:8083",command="/bin/false"'
    assert key_type == "ssh-ed25519" and comment == "alice@example.org"
    assert "alice@laptop" not in line, "the key's own comment is replaced by the person's"
    assert "\n" not in line


@pytest.mark.parametrize("key, port, comment", [
    ("ssh-ed25519 AAAA\nssh-ed25519 BBBB", 8081, "x"),                 # a second line smuggled in
    ('command="sh" ' + "ssh-ed25519 AAAA", 8081, "x"),                 # options in front of the key
    ("ssh-dss AAAAB3NzaC1kc3M=", 8081, "x"),                            # a type OpenSSH dropped
    ("ssh-ed25519 not*base64", 8081, "x"),
    ("ssh-rsa " + _fake_ed25519().split()[1], 8081, "x"),               # blob of another type
    (_fake_ed25519(), 0, "x"), (_fake_ed25519(), 70000, "x"), (_fake_ed25519(), "8081", "x"),
    (_fake_ed25519(), 8081, 'x",permitopen="*:*'),                      # options through the comment
    (_fake_ed25519(), 8081, "two words"), (_fake_ed25519(), 8081, ""),
])
def test_authorized_keys_line_refuses_what_would_widen_it(key, port, comment):
    with pytest.raises(ValueError):
        authorized_keys_line(key, port, comment)


def test_caddy_site_shape_and_refusals():
    assert caddy_site("bob-example-org.annotate.example.org", 8082) == \
        "bob-example-org.annotate.example.org {\n\treverse_proxy 127.0.0.1:8082\n}\n"
    for host in ("*.annotate.example.org", "https://a.example.org", "a.example.org/x", "A.example.org",
                 "localhost", "a.example.org, b.example.org", "a.example.org:0", "a.example.org {"):
        with pytest.raises(ValueError):
            caddy_site(host, 8081)
    with pytest.raises(ValueError):
        caddy_site("a.example.org", 65536)


# ---------------------------------------------------------------------------------------
# A real sshd with the rendered line

_ssh_missing = [name for name, path in (("sshd", SSHD), ("ssh", SSH), ("ssh-keygen", SSH_KEYGEN)) if not path]


def _wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def _http_get(port: int, timeout: float = 10.0) -> bytes:
    """The raw answer to GET / on 127.0.0.1:port ("" when the far side closes at once)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET / HTTP/1.0\r\nHost: desk\r\n\r\n")
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (ConnectionResetError, socket.timeout):
            pass
        return b"".join(chunks)


class _Desk(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = f"desk on port {self.server.server_address[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def desks():
    """Two tiny HTTP servers on loopback: the person's desk and someone else's."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Desk) for _ in range(2)]
    for srv in servers:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield [srv.server_address[1] for srv in servers]
    for srv in servers:
        srv.shutdown()
        srv.server_close()


# The sshd_config block docs/OPERATIONS.md asks for (there under `Match User annotate`).
HARDENING = """\
AllowTcpForwarding local
AllowStreamLocalForwarding no
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
GatewayPorts no
PermitTTY no
"""


@pytest.fixture
def sshd(tmp_path):
    """Start a throw-away sshd on a free loopback port; yields start(authorized_keys_text,
    hardening) -> (port, ssh argv prefix). Every sshd started is stopped at the end."""
    if _ssh_missing:
        pytest.skip(f"OpenSSH missing here ({', '.join(_ssh_missing)}): scripts/setup.sh installs "
                    "openssh-server and openssh-client")
    user = os.environ.get("USER") or subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # sshd's privilege-separation dir
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host_key")], check=True)
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "alice@laptop",
                    "-f", str(tmp_path / "alice")], check=True)
    procs = []

    def start(keys_text: str, hardening: str = "") -> tuple[int, list[str]]:
        port = free_port()
        keys = tmp_path / f"authorized_keys.{port}"
        keys.write_text(keys_text)
        keys.chmod(0o600)
        conf = tmp_path / f"sshd_config.{port}"
        conf.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'host_key'}\n"
            f"PidFile {tmp_path / f'sshd.{port}.pid'}\nAuthorizedKeysFile {keys}\n"
            "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nLogLevel VERBOSE\n"
            f"{hardening}")
        log = open(tmp_path / f"sshd.{port}.log", "w")
        procs.append((subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)], stdout=log, stderr=log), log))
        _wait_port(port)
        client = [SSH, "-F", "/dev/null", "-p", str(port), "-i", str(tmp_path / "alice"),
                  "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                  "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}", "-o", "ConnectTimeout=10",
                  "-o", "ExitOnForwardFailure=yes", "-o", "LogLevel=ERROR"]
        return port, client + [f"{user}@127.0.0.1"]

    start.public_key = (tmp_path / "alice.pub").read_text().strip()
    start.tmp = tmp_path
    yield start
    for proc, log in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _tunnel(client: list[str], forwards: list[str]) -> subprocess.Popen:
    args = [a for fwd in forwards for a in ("-L", fwd)]
    return subprocess.Popen([*client[:-1], "-N", *args, client[-1]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def test_ssh_line_forwards_to_the_own_desk_only(sshd, desks):
    own, other = desks
    sshd_port, client = sshd(authorized_keys_line(sshd.public_key, own, "alice@example.org") + "\n")
    l_own, l_other, l_name = free_port(), free_port(), free_port()
    tunnel = _tunnel(client, [f"{l_own}:127.0.0.1:{own}", f"{l_other}:127.0.0.1:{other}",
                              f"{l_name}:localhost:{own}"])
    try:
        for port in (l_own, l_other, l_name):
            _wait_port(port)
        assert _http_get(l_own).endswith(f"desk on port {own}".encode()), "the permitted desk answers"
        assert _http_get(l_other) == b"", "another port must be refused"
        assert _http_get(l_name) == b"", "permitopen matches 127.0.0.1 literally: localhost is refused"
        assert _http_get(l_own).endswith(f"desk on port {own}".encode()), "the tunnel stays up after refusals"
        assert tunnel.poll() is None
    finally:
        _stop(tunnel)
    log = (sshd.tmp / f"sshd.{sshd_port}.log").read_text()
    assert f"to connect to host 127.0.0.1 port {other}, but the request was denied" in log, log[-3000:]
    assert f"to connect to host localhost port {own}, but the request was denied" in log, log[-3000:]


def test_ssh_line_gives_no_shell_no_command_no_pty(sshd, desks):
    own, _ = desks
    _, client = sshd(authorized_keys_line(sshd.public_key, own, "alice@example.org") + "\n")
    proc = subprocess.run([*client, "echo", "ran-a-command"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "ran-a-command" not in proc.stdout
    proc = subprocess.run([*client[:-1], "-tt", client[-1]], input="echo ran-a-shell\nexit\n",
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "ran-a-shell" not in proc.stdout
    assert "PTY allocation request failed" in proc.stderr, proc.stderr


def test_ssh_line_refuses_forwards_to_unix_sockets(sshd, desks):
    """`ssh -L PORT:/var/run/docker.sock` would be root on the host: `permitopen` limits forwards
    to Unix sockets too (OpenSSH 9.x); the sshd_config block adds AllowStreamLocalForwarding no."""
    own, _ = desks
    sock_path = sshd.tmp / "sock" / "s"
    sock_path.parent.mkdir()
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(sock_path))
    unix.listen(1)
    unix.settimeout(3)
    try:
        _, client = sshd(authorized_keys_line(sshd.public_key, own, "alice@example.org") + "\n")
        local = free_port()
        tunnel = _tunnel(client, [f"{local}:{sock_path}"])
        try:
            _wait_port(local)
            with socket.create_connection(("127.0.0.1", local), timeout=5) as s:
                s.sendall(b"x")
                try:
                    unix.accept()[0].close()
                    reached = True
                except socket.timeout:
                    reached = False
        finally:
            _stop(tunnel)
        assert not reached, "a forward to a Unix socket got through"
    finally:
        unix.close()


def test_sshd_block_stops_remote_forwards(sshd, desks):
    """`permitopen` does not limit `ssh -R` (listening on the server's loopback, e.g. on a desk
    port while that desk is down, to catch its owner's password): the sshd_config block of the
    docs (AllowTcpForwarding local) refuses it."""
    own, other = desks
    _, client = sshd(authorized_keys_line(sshd.public_key, own, "alice@example.org") + "\n", HARDENING)
    remote = free_port()
    proc = subprocess.run([*client[:-1], "-N", "-R", f"127.0.0.1:{remote}:127.0.0.1:{other}", client[-1]],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "remote port forwarding failed" in proc.stderr, proc.stderr
    # and the permitted desk still works under the block
    local = free_port()
    tunnel = _tunnel(client, [f"{local}:127.0.0.1:{own}"])
    try:
        _wait_port(local)
        assert _http_get(local).endswith(f"desk on port {own}".encode())
    finally:
        _stop(tunnel)
