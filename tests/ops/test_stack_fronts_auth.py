"""`rescue stack up` on a fresh data root: Prefect refuses every API call without the stack's
auth string, the stack's own processes and the operator's `prefect` CLI (after `eval "$(rescue
stack env)"`) work with it, and every desk is served through its own front, whose address
`rescue annotators list` gives. `rescue stack down` stops the fronts with the rest.

All real: the `rescue` and `prefect` commands as processes, the Prefect server and worker, one
Label Studio per person, one pipeline.labelstudio.front per desk."""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import httpx
import pytest

from pipeline.labelstudio.front.comfort import KEYS_PATH
from pipeline.config import REPO_ROOT
from tests.helpers import free_port, require_label_studio
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow

PEOPLE = (("front-ann@example.org", "annotator"), ("front-adj@example.org", "adjudicator"))
BIN = Path(sys.executable).parent


def _run(env: dict, *argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A fresh data root with two people registered (no login: none is needed to see the
    front), then `rescue stack up` as the operator runs it, with no Prefect variable of the
    caller's; `rescue stack down` at the end."""
    require_label_studio()
    from pipeline.labelstudio.desks import Desks
    from pipeline.config import Settings

    root = tmp_path_factory.mktemp("front-auth-data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(RESCUE_DATA_ROOT=str(root), RESCUE_PREFECT_PORT=str(free_port()),
               RESCUE_DESK_BASE_PORT=str(free_port()), RESCUE_FRONT_BASE_PORT=str(free_port()),
               RESCUE_DESK_PUBLIC_URL="")
    saved = {k: os.environ.get(k) for k in ("RESCUE_DESK_BASE_PORT", "RESCUE_FRONT_BASE_PORT", "RESCUE_DESK_PUBLIC_URL")}
    os.environ.update({k: env[k] for k in saved})
    try:
        desks = Desks(DataRoot(root), Settings.from_env(root))
        for email, role in PEOPLE:
            desks.register(email, role)
        up = _run(env, str(BIN / "rescue"), "stack", "up", "--data-root", str(root))
        yield root, env, desks, up
    finally:
        down = _run(env, str(BIN / "rescue"), "stack", "down", "--data-root", str(root))
        assert down.returncode == 0, down.stdout + down.stderr
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _api(env: dict) -> str:
    return f"http://127.0.0.1:{env['RESCUE_PREFECT_PORT']}/api"


def _post(url: str, auth: str | None) -> int:
    headers = {"content-type": "application/json"}
    if auth is not None:
        headers["authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}", headers=headers, method="POST"),
                                    timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_stack_up_starts_every_desks_front_and_says_so(stack):
    root, env, desks, up = stack
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    for d in desks.all():
        assert f"front of {d.email}: http://127.0.0.1:{d.front_port} -> {desks.url(d)}" in up.stdout, up.stdout


def test_prefect_refuses_the_api_without_the_auth_string(stack):
    root, env, _, up = stack
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    secret_file = root / "stack" / "prefect-api-auth"
    assert secret_file.stat().st_mode & 0o777 == 0o600
    secret = secret_file.read_text().strip()
    assert len(secret) >= 32 and secret not in up.stdout + up.stderr
    assert _post(f"{_api(env)}/flows/filter", None) == 401
    assert _post(f"{_api(env)}/flows/filter", "wrong") == 401
    assert _post(f"{_api(env)}/flows/filter", secret) == 200
    assert httpx.get(f"{_api(env)}/health", timeout=30).status_code == 200  # probes stay open
    # the operator's CLI without `rescue stack env`: refused
    bare = _run({**env, "PREFECT_API_URL": _api(env), "PREFECT_HOME": str(root / "other-home")},
                str(BIN / "prefect"), "deployment", "ls", timeout=300)
    assert bare.returncode != 0 and "401" in bare.stdout + bare.stderr, bare.stdout[-2000:] + bare.stderr[-2000:]


def test_stack_env_prints_no_secret_and_a_deployment_runs_through_the_worker(stack):
    root, env, _, up = stack
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    printed = _run(env, str(BIN / "rescue"), "stack", "env", "--data-root", str(root))
    assert printed.returncode == 0 and "PREFECT_API_AUTH_STRING" in printed.stdout, printed.stderr
    assert (root / "stack" / "prefect-api-auth").read_text().strip() not in printed.stdout
    script = (f'eval "$({BIN / "rescue"} stack env --data-root {root})" && '
              f'{BIN / "prefect"} deployment run build-release/default --param version=1.0.0 '
              f'--param source=synthetic:0.05 --param data_root={root} --watch')
    run = _run(env, "bash", "-c", script)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    manifest = json.loads((root / "releases" / "1.0.0" / "manifest.json").read_text())
    assert manifest["version"] == "1.0.0"
    for name in ("prefect-worker", "sweeper"):
        log = (root / "stack" / "logs" / f"{name}.log").read_text(errors="replace")
        # a 401 as a status, not three digits inside a run id or a timestamp (a4017c94, 16.401)
        assert not re.search(r"(?<![\w.:-])401(?![\w.:-])", log) and "Unauthorized" not in log, log[-2000:]


def test_annotators_list_gives_each_front_and_the_front_serves_the_desk(stack):
    root, env, desks, up = stack
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    listed = _run(env, str(BIN / "rescue"), "annotators", "list", "--json", "--data-root", str(root))
    assert listed.returncode == 0, listed.stderr
    people = json.loads(listed.stdout)
    assert [(p["email"], p["url"], p["desk_url"]) for p in people] == [
        (d.email, f"http://127.0.0.1:{d.front_port}", desks.url(d)) for d in desks.all()]
    for p in people:
        login = httpx.get(f"{p['url']}/user/login/", timeout=120)
        assert login.status_code == 200 and KEYS_PATH.encode() in login.content, p  # the front's page
        assert KEYS_PATH.encode() not in httpx.get(f"{p['desk_url']}/user/login/", timeout=120).content
        # the desk still asks for the login: the front holds no security role
        projects = httpx.get(f"{p['url']}/api/projects", timeout=120)
        assert projects.status_code in (401, 403, 302), projects.status_code
    status = _run(env, str(BIN / "rescue"), "stack", "status", "--data-root", str(root))
    assert status.returncode == 0, status.stdout + status.stderr
    for d in desks.all():
        assert f"front=http://127.0.0.1:{d.front_port}" in status.stdout, status.stdout


def test_stack_down_stops_the_fronts(stack):
    """Last in the module: stops the stack, then finds no front left."""
    root, env, desks, up = stack
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    pids = {d.email: desks.front(d).pid() for d in desks.all()}
    assert all(pids.values()), pids
    down = _run(env, str(BIN / "rescue"), "stack", "down", "--data-root", str(root))
    assert down.returncode == 0, down.stdout + down.stderr
    for d in desks.all():
        assert desks.front(d).pid() is None and not desks.front(d).healthy(), d
        assert not Path(f"/proc/{pids[d.email]}").exists() or \
            Path(f"/proc/{pids[d.email]}/stat").read_text().split(")")[-1].split()[0] == "Z"
    listed = json.loads(_run(env, str(BIN / "rescue"), "annotators", "list", "--json",
                             "--data-root", str(root)).stdout)
    assert [p["url"] for p in listed] == [desks.url(d) for d in desks.all()]  # no front: the desk's address
