"""docker-compose.yml: valid for a real Compose implementation, and wired as lakestate needs.

No Docker engine is needed: `scripts/check_compose.sh` runs `docker compose config -q` (and
`docker-compose config -q`) on the file with whichever the machine has, installing Debian's
docker-compose from apt first when it has neither (about 15 s); where apt cannot (no root, no
passwordless sudo) the two tests that need Compose are skipped with the script's message. The
other tests read the file with PyYAML.
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
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "spark-master",
    "spark-worker",
}
AIRFLOW_SERVICES = sorted(s for s in REQUIRED_SERVICES if s.startswith("airflow-"))
LONG_RUNNING_AIRFLOW = [s for s in AIRFLOW_SERVICES if s != "airflow-init"]
SPARK_SERVICES = ["spark-master", "spark-worker"]
PROJECT_FOLDERS = ["dags", "jobs", "plugins", "lib"]
REPO = "/opt/lakestate"


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


@pytest.mark.parametrize("name", AIRFLOW_SERVICES + SPARK_SERVICES)
def test_warehouse_and_state_are_shared_by_airflow_and_spark(services, name):
    """Delta tables, and the tasks' local stores (written by the workers, recovered by the
    driver in the scheduler), are at the same paths in every container."""
    service = services[name]
    bind = mounts(service)
    env = environment(service)
    assert bind.get(f"{REPO}/warehouse") == "warehouse", f"{name} does not mount ./warehouse"
    assert env["LAKESTATE_WAREHOUSE"] == f"{REPO}/warehouse"
    assert bind.get(f"{REPO}/state") == "state", f"{name} does not mount ./state"
    assert env["LAKESTATE_STATE_DIR"] == f"{REPO}/state"
    assert bind.get(REPO) == ".", f"{name} does not mount the checkout (the editable lakestate)"


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_configuration(services, name):
    env = environment(services[name])
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    assert "@postgres" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW_CONN_SPARK_DEFAULT"].startswith("spark://spark-master:7077")
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(
        "http://airflow-apiserver:8080/"
    )


def test_spark_connection_resolves_to_the_master(services, tmp_path):
    """What SparkSubmitOperator makes of the connection: spark-submit --master and deploy mode.
    Airflow reads its configuration when imported, so this runs in its own interpreter."""
    uri = environment(services["airflow-scheduler"])["AIRFLOW_CONN_SPARK_DEFAULT"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW_CONN_SPARK_DEFAULT=uri)
    code = (
        "import json\n"
        "from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook\n"
        "c = SparkSubmitHook(conn_id='spark_default')._connection\n"
        "print(json.dumps([c['master'], c['deploy_mode']]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [
        "spark://spark-master:7077",
        "client",
    ]


def test_airflow_3_commands(services):
    def command(name):
        cmd = services[name]["command"]
        return cmd if isinstance(cmd, str) else " ".join(cmd)

    assert command("airflow-apiserver") == "api-server"
    assert command("airflow-scheduler") == "scheduler"
    assert command("airflow-dag-processor") == "dag-processor"
    assert command("airflow-triggerer") == "triggerer"
    init = command("airflow-init")
    assert "airflow db migrate" in init
    assert "airflow users create" in init
    assert "--role Admin" in init


def test_healthchecks_and_startup_order(services):
    for name in ["postgres", "spark-master", "spark-worker", *LONG_RUNNING_AIRFLOW]:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for name in LONG_RUNNING_AIRFLOW:
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["spark-worker"]["depends_on"]["spark-master"]["condition"] == "service_healthy"


def test_spark_runs_from_the_airflow_image(services):
    """Driver (spark-submit in Airflow) and workers share Spark, Python and pyspark exactly."""
    image = services["airflow-scheduler"]["image"]
    build = services["airflow-scheduler"]["build"]
    for name in [*AIRFLOW_SERVICES, *SPARK_SERVICES]:
        assert services[name]["image"] == image, name
        assert services[name]["build"] == build, name
    assert build["dockerfile"] == "docker/airflow.Dockerfile"
    assert "org.apache.spark.deploy.master.Master" in " ".join(services["spark-master"]["command"])
    worker = " ".join(services["spark-worker"]["command"])
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert "spark://spark-master:7077" in worker


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
