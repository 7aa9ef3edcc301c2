"""Remote access to the desks: the two ways docs/OPERATIONS.md ("Remote annotators") describes.

Every person's desk (their own Label Studio server) listens on 127.0.0.1 on its own port, and
so does its front (``pipeline.labelstudio.front``: the comfort layer a person opens; it holds no security role,
the desk authenticates). A person far away reaches exactly their front's port, and nothing else
on the host, through either

* a TLS reverse proxy with one site per desk (:func:`caddy_site`, one block of a Caddyfile such
  as ``docs/examples/Caddyfile.desks``), or
* SSH restricted to that port (:func:`authorized_keys_line`, one line of the ``authorized_keys``
  of a shell-less account).

Pure functions (no I/O): they refuse input that could widen what a line or block allows (a
second key, options smuggled in through the comment, a wildcard host, a port out of range).
:func:`caddyfile` and :func:`desk_ssh_line` render the recipes for the desks of a registry:
each names a desk by its random site name (``desk-3f9a1c2b7e01``) and its front's port, never
by the person's e-mail or role (a public host name ends up in certificate transparency logs).
``rescue stack remote caddyfile`` prints the whole Caddyfile (:data:`cli`), ``rescue annotators
remote EMAIL --ssh KEY.pub --caddy DOMAIN`` one person's line and site (:func:`annotators_remote`).
"""
from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from pathlib import Path

import typer

# Key types OpenSSH accepts in authorized_keys (9.x); DSA is gone, certificates are not wanted here.
_KEY_TYPES = frozenset({
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
})
# A DNS name (labels of letters, digits and inner hyphens), optionally with the port the proxy
# listens on for that desk (the one-port-per-desk variant: annotate.example.org:9081).
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST_RE = re.compile(rf"(?P<name>{_LABEL}(?:\.{_LABEL})+)(?::(?P<port>[0-9]{{1,5}}))?")
_COMMENT_RE = re.compile(r"[A-Za-z0-9@._+-]{1,100}")

# What a desk key may do: nothing (`restrict`: no pty, no agent or X11 forwarding, no
# ~/.ssh/rc, no port forwarding) except forwarding to 127.0.0.1:<port>; a command or shell
# asked for runs /bin/false instead, even on an account that has a shell.
_FORCED_COMMAND = "/bin/false"


def _port(port: int, what: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{what} must be a TCP port number (1-65535), not {port!r}")
    return port


def authorized_keys_line(public_key: str, port: int, comment: str) -> str:
    """One ``authorized_keys`` line that lets ``public_key`` forward to 127.0.0.1:``port`` only.

    ``public_key`` is the person's public key as ``ssh-keygen`` writes it (``TYPE BASE64
    [comment]``; its own comment is dropped); ``comment`` names the person (letters, digits,
    ``@._+-``). The line is::

        restrict,port-forwarding,permitopen="127.0.0.1:8081",command="/bin/false" ssh-ed25519 AAAA... alice

    ``restrict`` switches off pty allocation, agent and X11 forwarding, ``~/.ssh/rc`` and port
    forwarding; ``port-forwarding`` then allows local forwards (``ssh -L``) again, and
    ``permitopen`` limits them to that one address - the person must write ``127.0.0.1``, not
    ``localhost``. ``command`` answers any shell or command with /bin/false (``ssh -N`` asks for
    none). ``permitopen`` also refuses forwards to Unix sockets, but not remote forwards
    (``ssh -R``, a listener on the server): switch those off in sshd_config for the account
    (``AllowTcpForwarding local``; the block in docs/OPERATIONS.md).
    """
    _port(port, "the desk's port")
    if not isinstance(public_key, str) or "\n" in public_key or "\r" in public_key or "\0" in public_key:
        raise ValueError("the public key must be one line of text")
    fields = public_key.split()
    if len(fields) < 2:
        raise ValueError("not a public key: expected 'TYPE BASE64 [comment]' as in the .pub file")
    key_type, blob = fields[0], fields[1]
    if key_type not in _KEY_TYPES:
        raise ValueError(f"key type {key_type!r} is not accepted (one of: {', '.join(sorted(_KEY_TYPES))}); "
                         "give the .pub file's line without options in front")
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the public key's second field is not base64") from None
    # The blob starts with its own type name (uint32 length + name): a mismatch is a pasted mix-up.
    if len(raw) < 4 or raw[4:4 + int.from_bytes(raw[:4], "big")] != key_type.encode():
        raise ValueError(f"the key data does not belong to a {key_type} key")
    if not isinstance(comment, str) or not _COMMENT_RE.fullmatch(comment):
        raise ValueError(f"comment {comment!r}: use 1-100 letters, digits or @._+- (it names the person)")
    return (f'restrict,port-forwarding,permitopen="127.0.0.1:{port}",command="{_FORCED_COMMAND}" '
            f"{key_type} {blob} {comment}")


def caddy_site(host: str, port: int) -> str:
    """One Caddyfile site block proxying ``host`` (HTTPS) to the desk on 127.0.0.1:``port`` only.

    ``host`` is the public name of that person's desk (``alice.annotate.example.org``), or a
    name with the port the proxy listens on for that desk (``annotate.example.org:9081``). Caddy
    obtains and renews the certificate itself (docs/OPERATIONS.md). Nothing else is served
    under that name: no other path, port or upstream.
    """
    _port(port, "the desk's port")
    if not isinstance(host, str):
        raise ValueError(f"host must be a DNS name, not {host!r}")
    m = _HOST_RE.fullmatch(host)
    if not m or len(m.group("name")) > 253:
        raise ValueError(f"host {host!r}: give one lower-case DNS name (no scheme, path or wildcard), "
                         "optionally with :PORT")
    if m.group("port"):
        _port(int(m.group("port")), "the proxy's port")
    return (f"{host} {{\n"
            f"\treverse_proxy 127.0.0.1:{port}\n"
            f"}}\n")


# --- the recipes for a registry's desks: site names and fronts' ports only ---------------------

def desk_site(site: str, domain: str, front_port: int) -> str:
    """The Caddyfile site block of one desk: ``<site>.<domain>``, proxying to its front only."""
    if not re.fullmatch(_LABEL, site or ""):
        raise ValueError(f"site {site!r}: one DNS label (the registry's random site name)")
    return caddy_site(f"{site}.{domain}", front_port)


def caddyfile(sites: Iterable[tuple[str, int]], domain: str, email: str | None = None) -> str:
    """A whole Caddyfile: one site ``<site>.<domain>`` per ``(site, front_port)``, proxying to that
    front only; ``email``: the ACME account's (expiry notices). Names nobody and no role."""
    head = f"{{\n\temail {email}\n}}\n\n" if email else ""
    blocks = []
    for site, port in sorted(sites):
        blocks.append(desk_site(site, domain, port))
    return head + "\n".join(blocks)


def desk_ssh_line(public_key: str, site: str, front_port: int) -> str:
    """The ``authorized_keys`` line of one desk's person: forwards to their front only, with the
    desk's site name as its comment (not their e-mail)."""
    return authorized_keys_line(public_key, front_port, site)


cli = typer.Typer(help="Recipes for remote people: the TLS proxy's Caddyfile for every desk (docs/OPERATIONS.md; "
                       "one person's SSH line or site: rescue annotators remote).",
                  no_args_is_help=True)
_DATA_ROOT = typer.Option(None, help="Data root (default $RESCUE_DATA_ROOT or ./data).")


def _registry(data_root: Path | None):
    from pipeline.labelstudio.desks import DeskError, Desks
    from pipeline.paths import DataRoot

    desks = Desks(DataRoot.from_env(data_root))
    try:
        return desks, desks.registered_fronts()
    except DeskError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from None


@cli.command("caddyfile")
def _cli_caddyfile(domain: str = typer.Option(..., help="The proxy's domain: each desk is <site>.<domain>."),
                   email: str = typer.Option(None, help="ACME account e-mail (certificate expiry notices)."),
                   data_root: Path = _DATA_ROOT) -> None:
    """Print a Caddyfile with one site per desk, proxying to that desk's front only. Then set
    RESCUE_DESK_PUBLIC_URL='https://{site}.<domain>' where the desks start."""
    _, desks = _registry(data_root)
    try:
        typer.echo(caddyfile([(d.site, d.front_port) for d in desks], domain, email), nl=False)
    except ValueError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from None


def annotators_remote(
    annotator: str = typer.Argument(..., metavar="EMAIL", help="Whose desk (their e-mail)."),
    ssh: Path = typer.Option(None, "--ssh", metavar="KEY.pub",
                             help="Print the authorized_keys line that lets this public key (ssh-keygen's .pub "
                                  "file) forward to the person's front only."),
    caddy: str = typer.Option(None, "--caddy", metavar="DOMAIN",
                              help="Print the TLS proxy's site block <site>.DOMAIN -> the person's front only."),
    data_root: Path = _DATA_ROOT,
) -> None:
    """How a person far away reaches their own front, and nothing else on the host: the SSH line
    (--ssh) or the proxy site (--caddy). Both name the desk by its random site name, never by
    the person (docs/OPERATIONS.md, "Remote annotators")."""
    if ssh is None and caddy is None:
        typer.secho("error: say --ssh KEY.pub, --caddy DOMAIN or both", fg="red", err=True)
        raise typer.Exit(2)
    desks, _ = _registry(data_root)
    from pipeline.labelstudio.desks import DeskError

    try:
        desk = desks.get(annotator)
        if ssh is not None:  # ssh-keygen's .pub ends in a newline; a second key line is refused
            typer.echo(desk_ssh_line(ssh.read_text().strip(), desk.site, desk.front_port))
        if caddy is not None:
            typer.echo(desk_site(desk.site, caddy, desk.front_port), nl=False)
    except (DeskError, OSError, UnicodeDecodeError, ValueError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from None
