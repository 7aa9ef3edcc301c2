"""docker-compose.yml: the Prefect server requires the env file's API auth string and every
service that calls Prefect sends it; without it compose refuses to start and names it.
Checked by the real Compose v2 binary (as tests/flows/test_compose.py; no Docker engine)."""
from __future__ import annotations

import json

import pytest

from tests.flows.test_compose import COMPOSE, _config

pytestmark = pytest.mark.skipif(COMPOSE is None, reason="Compose v2 binary missing: run scripts/setup.sh")


def test_the_server_requires_the_env_files_auth_string_and_every_client_sends_it(tmp_path):
    env = tmp_path / "site.env"
    env.write_text("PREFECT_DB_PASSWORD=db-secret\nPREFECT_REDIS_PASSWORD=redis-secret\n"
                   "PREFECT_API_AUTH_STRING=auth-from-the-env-file\n")
    proc = _config("--env-file", str(env), "--profile", "gpu", "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    for server in ("prefect-server", "prefect-services", "prefect-db-init"):  # the API, its services, the scratch one
        assert services[server]["environment"]["PREFECT_SERVER_API_AUTH_STRING"] == "auth-from-the-env-file", server
    clients = [name for name, svc in services.items() if "PREFECT_API_URL" in svc.get("environment", {})]
    assert {"prefect-init", "cpu-worker", "gpu-worker"} <= set(clients), clients
    for name in clients:
        assert services[name]["environment"].get("PREFECT_API_AUTH_STRING") == "auth-from-the-env-file", name


def test_without_the_auth_string_compose_refuses_and_names_it(tmp_path):
    env = tmp_path / "no-auth.env"
    env.write_text("PREFECT_DB_PASSWORD=db-secret\nPREFECT_REDIS_PASSWORD=redis-secret\n")
    proc = _config("--env-file", str(env), "config", "-q")
    assert proc.returncode != 0 and "PREFECT_API_AUTH_STRING" in proc.stderr, proc.stderr
