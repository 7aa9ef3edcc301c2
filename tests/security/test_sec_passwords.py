"""A person's password as another local account would look for it, and as a guesser would like it:
while ``rescue annotators add --password-stdin`` re-adds a person, every process's command line
and environment (/proc/<pid>/cmdline, /proc/<pid>/environ) is read over and over and never holds
the password; nor does any file of the desk or what the command prints. A password under 12
characters is refused on add and on re-add, with a message that says so, before anything is made."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from attack_kit import OURS, count, form_login, login_attempt, logged_in

pytestmark = pytest.mark.slow

RESCUE = Path(sys.executable).parent / "rescue"


class ProcWatch(threading.Thread):
    """Reads every process's command line and environment until stopped: where ``secret`` shows."""

    def __init__(self, secret: str, marker: str):
        super().__init__(daemon=True)
        self.secret, self.marker = secret.encode(), marker.encode()
        self.hits: list[str] = []
        self.seen_marker: set[int] = set()  # processes whose command line names the person (the reset's)
        self.scans = 0
        self.stop = threading.Event()

    def run(self):
        me = os.getpid()
        while not self.stop.is_set():
            for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
                if pid == me:
                    continue
                for part in ("cmdline", "environ"):
                    try:
                        data = Path(f"/proc/{pid}/{part}").read_bytes()
                    except OSError:
                        continue
                    if self.secret in data:
                        self.hits.append(f"pid {pid} {part}: {data[:120]!r}")
                    if part == "cmdline" and self.marker in data:
                        self.seen_marker.add(pid)
            self.scans += 1
            self.stop.wait(0.05)


def test_a_re_added_persons_password_is_on_no_command_line(desk_pair):
    """Re-added twice while watched: through the library (``Desks.add``) and the command."""
    desks = desk_pair.desks
    first, new = "library-" + secrets.token_urlsafe(12), "stdin-only-" + secrets.token_urlsafe(12)
    env = {k: v for k, v in os.environ.items() if k != "RESCUE_ANNOTATOR_PASSWORD"}
    watches = [ProcWatch(first, OURS), ProcWatch(new, OURS)]
    for w in watches:
        w.start()
    try:
        desks.add(OURS, "annotator", first)
        desk_pair.passwords[OURS] = first
        done = subprocess.run([str(RESCUE), "annotators", "add", OURS, "--data-root", str(desks.root.root),
                               "--password-stdin"], input=new + "\n", env=env, capture_output=True, text=True,
                              timeout=600)
    finally:
        for w in watches:
            w.stop.set()
            w.join()
    count("passwords: /proc sweeps", sum(w.scans for w in watches))
    assert not [h for w in watches for h in w.hits], [h for w in watches for h in w.hits]
    assert done.returncode == 0, done.stdout + done.stderr
    desk_pair.passwords[OURS] = new
    # the watch saw the processes that had the password: the command and the desk's two resets
    assert len(watches[1].seen_marker) >= 3, (watches[1].scans, watches[1].seen_marker)
    assert new not in done.stdout + done.stderr
    files = [p for p in desks.root.desk_dir(desks.get(OURS).slug).rglob("*") if p.is_file()]
    assert files and not [str(p) for p in files if new.encode() in p.read_bytes()]
    login = form_login(desk_pair.url(OURS), OURS, new)  # the new password is the one set
    login.http.close()


def test_a_short_password_is_refused_on_add_and_re_add(desk_pair):
    from pipeline.labelstudio.desks import DeskError

    desks, short = desk_pair.desks, "elevenchars"
    assert len(short) == 11
    people = desks.people()
    newcomer = f"short-{secrets.token_hex(3)}@rescue.test"
    for email in (newcomer, OURS):
        with pytest.raises(DeskError, match=r"has 11 characters; a person's password needs at least 12"):
            desks.add(email, "annotator", short)
    assert desks.people() == people  # the newcomer got no desk
    refused = subprocess.run([str(RESCUE), "annotators", "add", newcomer, "--data-root", str(desks.root.root),
                              "--password-stdin"], input=short + "\n", capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "at least 12" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    assert desks.people() == people
    r = login_attempt(desk_pair.port(OURS), OURS, short)  # the person's password is as it was
    assert not logged_in(r), r.describe()
