"""`rescue annotate front -a EMAIL` serves on the port the desks' registry gives that person (the one
`rescue stack up` starts it on and `annotators list` shows), not on one port for everyone."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from pipeline.labelstudio.desks import Desks
from pipeline.paths import DataRoot

REPO = Path(__file__).resolve().parents[2]


def test_front_defaults_to_the_registered_port(tmp_path):
    desks = Desks(DataRoot(tmp_path))
    desks.register("alice@example.org", "annotator")
    desks.register("bob@example.org", "annotator")
    want = {d.email: d.front_port for d in desks.registered_fronts()}
    assert len(set(want.values())) == 2 and 0 not in want.values()
    proc = subprocess.Popen([sys.executable, "-m", "ops.cli", "annotate", "front", "-a", "bob@example.org",
                             "--data-root", str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline and "front of" not in line:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert line.startswith(f"front of bob@example.org's desk on http://127.0.0.1:{want['bob@example.org']} -> "), line
    finally:
        proc.terminate()
        proc.wait(timeout=30)
