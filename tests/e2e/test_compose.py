"""docker-compose.yml: valid for a real Compose implementation, and wired as lakestate needs.

No Docker engine is needed: `scripts/check_compose.sh` runs `docker compose config -q` (and
`docker-compose config -q`) on the file with whichever the machine has, installing Debian's
docker-compose from apt first when it has neither (about 15 s); where apt cannot (no root, no
passwordless sudo) the two tests that need Compose are skipped with the script's message. The
other tests read the file with PyYAML, and load its Airflow settings in a real Airflow (the
CeleryExecutor with its Redis broker, the workers' command lines).

The deployment it describes: Airflow's CeleryExecutor, and a Celery worker per instance of the
demo app (jobs/demo.py's ``lakestate.instances``: the queues are read from the app, not written
here), each with its own state volume, all sharing the warehouse.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "airflow.Dockerfile"

REQUIRED_SERVICES = {
    "postgres",
    "redis",
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker-a",
    "airflow-worker-b",
}
AIRFLOW_SERVICES = sorted(s for s in REQUIRED_SERVICES if s.startswith("airflow-"))
LONG_RUNNING_AIRFLOW = [s for s in AIRFLOW_SERVICES if s != "airflow-init"]
WORKERS = ["airflow-worker-a", "airflow-worker-b"]
PROJECT_FOLDERS = ["dags", "jobs", "plugins", "lib"]
REPO = "/opt/lakestate"
#: Airflow's default queue ([operators] default_queue): apps without instances, maintenance.
DEFAULT_QUEUE = "default"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", ...]
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: str(v) for k, v in env.items()}


def command(service: dict) -> str:
    cmd = service["command"]
    return cmd if isinstance(cmd, str) else " ".join(cmd)


def named_volumes(service: dict) -> dict[str, str]:
    """Named-volume mounts of a service as {container path: volume name}."""
    result = {}
    for volume in service.get("volumes") or []:
        source, target = (
            (volume.get("source", ""), volume["target"])
            if isinstance(volume, dict)
            else volume.split(":")[:2]
        )
        if source and not source.startswith((".", "/")):
            result[target.rstrip("/")] = source
    return result


def worker_queues(service: dict) -> list[str]:
    """The queues of an ``airflow celery worker`` service (``--queues A,B``)."""
    args = command(service).split()
    assert args[:2] == ["celery", "worker"], args
    return args[args.index("--queues") + 1].split(",")


def demo_instances(state_root: str) -> list:
    """jobs/demo.py's instances, their state dirs under ``state_root``."""
    from lakestate.app import load_app
    from lakestate.scaleout.instances import instances_of

    return instances_of(load_app(ROOT / "jobs" / "demo.py"), state_root)


def mounts(service: dict) -> dict[str, str]:
    """Bind mounts of a service as {container path: host path relative to the repo}."""
    result = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            source, target = volume.get("source", ""), volume["target"]
        else:
            source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            result[target.rstrip("/")] = os.path.normpath(source)
    return result


def pinned(package: str) -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        name, _, version = dep.partition("==")
        if name.strip() == package:
            return version.strip()
    raise AssertionError(f"{package} is not pinned in pyproject.toml")


#: check_compose.sh's exit status when no Compose implementation is on the machine.
NO_COMPOSE = 3


def check_compose(path: Path) -> subprocess.CompletedProcess:
    """Runs scripts/check_compose.sh on ``path``; skips the test when the machine has no
    Docker Compose and apt could not install one (the script says so on stderr)."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_compose.sh"), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode == NO_COMPOSE:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    return result


def test_compose_file_is_valid_for_docker_compose():
    result = check_compose(COMPOSE_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is valid" in result.stdout


def test_check_compose_rejects_an_invalid_file(tmp_path):
    invalid = tmp_path / "docker-compose.yml"
    invalid.write_text("services:\n  a:\n    image: busybox\n    helthcheck: {}\n")
    result = check_compose(invalid)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "helthcheck" in result.stderr


def test_check_compose_without_compose_says_skipped(tmp_path):
    """A machine with neither `docker compose` nor `docker-compose`, and nothing to be
    installed: exit status 3 and a message saying what to install; nothing else is tried."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "mktemp", "rm", "id"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    env = dict(os.environ, PATH=str(bin_dir), LAKESTATE_COMPOSE_INSTALL="none")
    result = subprocess.run(
        [shutil.which("bash"), str(ROOT / "scripts" / "check_compose.sh"), str(COMPOSE_FILE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == NO_COMPOSE, result.stdout + result.stderr
    assert "skipped: no Docker Compose on this machine (install docker-compose from apt)" in (
        result.stderr
    )
    assert result.stdout == ""


def test_required_services_exist(services):
    assert REQUIRED_SERVICES <= set(services), REQUIRED_SERVICES - set(services)


def test_postgres_16(services):
    assert services["postgres"]["image"].split(":")[1].startswith("16")


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_project_folders_are_mounted_into_airflow(services, name):
    bind = mounts(services[name])
    assert bind.get(REPO) == ".", f"{name} does not mount the checkout at {REPO}"
    for folder in PROJECT_FOLDERS:
        # At the checkout's layout: dags/*.py find their app at <dags>/../jobs/APP.py.
        assert bind.get(f"{REPO}/{folder}") == folder, f"{name} does not mount ./{folder}"
    env = environment(services[name])
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == f"{REPO}/dags"
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == f"{REPO}/plugins"


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_the_warehouse_is_shared(services, name):
    """Delta tables, what the instances share, are at the same path in every container."""
    service = services[name]
    bind = mounts(service)
    env = environment(service)
    assert bind.get(f"{REPO}/warehouse") == "warehouse", f"{name} does not mount ./warehouse"
    assert env["LAKESTATE_WAREHOUSE"] == f"{REPO}/warehouse"
    assert bind.get(REPO) == ".", f"{name} does not mount the checkout (the editable lakestate)"


def test_a_celery_worker_per_instance_of_the_demo_app(compose, services):
    """Each instance of jobs/demo.py has its queue consumed by one worker of its own; that
    worker keeps the instance's state dir on a named volume no other service mounts; one
    worker also consumes Airflow's default queue (apps without instances, maintenance)."""
    workers = {name: s for name, s in services.items() if "celery worker" in str(s.get("command"))}
    assert set(workers) == set(WORKERS)
    queues = {name: worker_queues(s) for name, s in workers.items()}
    consumed = [q for qs in queues.values() for q in qs]
    assert len(consumed) == len(set(consumed)), f"a queue is consumed twice: {queues}"
    assert DEFAULT_QUEUE in consumed
    volumes_of: dict[str, str] = {}
    for name, worker in workers.items():
        env = environment(worker)
        (instance,) = [
            i for i in demo_instances(env["LAKESTATE_STATE_DIR"]) if i.queue in queues[name]
        ]
        assert set(queues[name]) - {DEFAULT_QUEUE} == {instance.queue}, queues
        volume = named_volumes(worker).get(env["LAKESTATE_STATE_DIR"])
        assert volume, f"{name}: no named volume at LAKESTATE_STATE_DIR"
        assert volume in compose["volumes"], f"volume {volume} is not declared"
        assert Path(instance.state_dir).is_relative_to(env["LAKESTATE_STATE_DIR"])
        volumes_of[name] = volume
        assert worker["healthcheck"]["test"], name
        assert worker["depends_on"]["redis"]["condition"] == "service_healthy", name
    assert len(set(volumes_of.values())) == len(workers), f"state volumes shared: {volumes_of}"
    assert {i.queue for i in demo_instances("/state")} == {
        q for qs in queues.values() for q in qs if q != DEFAULT_QUEUE
    }
    for name in LONG_RUNNING_AIRFLOW:
        if name not in workers:
            assert not set(named_volumes(services[name]).values()) & set(volumes_of.values()), (
                f"{name} mounts a worker's state volume"
            )


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_configuration(services, name):
    env = environment(services[name])
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
    assert "@redis:6379/" in env["AIRFLOW__CELERY__BROKER_URL"]
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql://")
    assert "@postgres" in env["AIRFLOW__CELERY__RESULT_BACKEND"]
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    assert "@postgres" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    # lakestate's DAGs are unpaused when created (make_dag's is_paused_upon_creation=False).
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"].lower() == "false"
    # Each instance runs Spark in its own worker (its stores are on the worker's disk).
    assert "AIRFLOW_CONN_SPARK_DEFAULT" not in env
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(
        "http://airflow-apiserver:8080/"
    )


def test_celery_settings_load_in_airflow(services, tmp_path):
    """What Airflow makes of a worker's settings: the CeleryExecutor, whose Celery app has the
    Redis broker and the database result backend, and `airflow celery worker --queues ...`
    as the worker's command line. Airflow reads its configuration when imported, so this
    runs in its own interpreter."""
    worker = services["airflow-worker-a"]
    compose_env = environment(worker)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.update({k: v for k, v in compose_env.items() if k.startswith("AIRFLOW__CELERY__")})
    env.update(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__CORE__EXECUTOR=compose_env["AIRFLOW__CORE__EXECUTOR"],
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path / 'airflow.db'}",
    )
    code = (
        "import json, sys\n"
        "from airflow.cli import cli_parser\n"
        "from airflow.executors.executor_loader import ExecutorLoader\n"
        "from airflow.providers.celery.executors.celery_executor_utils import app\n"
        "cls, _ = ExecutorLoader.import_default_executor_cls()\n"
        "args = cli_parser.get_parser().parse_args(sys.argv[1:])\n"
        "print(json.dumps([cls.__name__, app.conf.broker_url, app.conf.result_backend,\n"
        "                  args.queues, args.func.__name__]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *command(worker).split()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    executor, broker, backend, queues, func = json.loads(proc.stdout.strip().splitlines()[-1])
    assert executor == "CeleryExecutor"
    assert broker == compose_env["AIRFLOW__CELERY__BROKER_URL"]
    assert backend == compose_env["AIRFLOW__CELERY__RESULT_BACKEND"]
    assert queues.split(",") == worker_queues(worker)
    assert "worker" in func


def test_airflow_3_commands(services):
    assert command(services["airflow-apiserver"]) == "api-server"
    assert command(services["airflow-scheduler"]) == "scheduler"
    assert command(services["airflow-dag-processor"]) == "dag-processor"
    assert command(services["airflow-triggerer"]) == "triggerer"
    init = command(services["airflow-init"])
    assert "airflow db migrate" in init
    assert "airflow users create" in init
    assert "--role Admin" in init


def test_healthchecks_and_startup_order(services):
    for name in ["postgres", "redis", *LONG_RUNNING_AIRFLOW]:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for name in LONG_RUNNING_AIRFLOW:
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in WORKERS:  # tasks call the API server's Execution API
        assert services[name]["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"


def test_one_image_for_every_airflow_service(services):
    """Scheduler, API server and workers run the same Airflow, lakestate and Spark."""
    image = services["airflow-scheduler"]["image"]
    build = services["airflow-scheduler"]["build"]
    for name in AIRFLOW_SERVICES:
        assert services[name]["image"] == image, name
        assert services[name]["build"] == build, name
    assert build["dockerfile"] == "docker/airflow.Dockerfile"


def test_airflow_init_owns_the_state_volumes(compose, services):
    """The workers run as AIRFLOW_UID: airflow-init hands their state volumes to it."""
    init = services["airflow-init"]
    mounted = named_volumes(init)
    script = command(init)
    for worker in WORKERS:
        target = environment(services[worker])["LAKESTATE_STATE_DIR"]
        volume = named_volumes(services[worker])[target]
        (path,) = [p for p, v in mounted.items() if v == volume]
        assert path in script.split("chown", 1)[1], f"airflow-init does not chown {volume}"


def test_image_matches_the_pins(compose):
    """The Airflow image tag, the Dockerfile's default and pyproject.toml agree."""
    airflow = pinned("apache-airflow")
    python = re.search(
        r"python(3\.\d+)", compose["x-lakestate-image"]["build"]["args"]["AIRFLOW_IMAGE"]
    ).group(1)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f">={python}" in requires.replace(" ", "")
    expected = f"apache/airflow:{airflow}-python{python}"
    assert expected in compose["x-lakestate-image"]["build"]["args"]["AIRFLOW_IMAGE"]
    dockerfile = DOCKERFILE.read_text()
    assert f"ARG AIRFLOW_IMAGE={expected}" in dockerfile
    assert "openjdk-${JAVA_VERSION}-jre-headless" in dockerfile
    assert "ARG JAVA_VERSION=17" in dockerfile
    assert "pip install --no-cache-dir --no-deps -e /opt/lakestate" in dockerfile
    assert pinned("apache-airflow-providers-celery")  # the executor's provider, in the image
