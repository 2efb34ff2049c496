"""docker-compose.yml: valid for a real Compose implementation, and wired as lakestate needs.

No Docker engine is needed: `scripts/check_compose.sh` runs `docker compose config -q` (and
`docker-compose config -q`) on the file with whichever the machine has, installing Debian's
docker-compose from apt first when it has neither (about 15 s); where apt cannot (no root, no
passwordless sudo) the two tests that need Compose are skipped with the script's message. The
other tests read the file with PyYAML, and load its Airflow settings in a real Airflow (the
CeleryExecutor with its Redis broker, the workers' command lines).

The deployment it describes: Airflow's CeleryExecutor, and a Celery worker per instance of the
demo app (jobs/demo.py's ``lakestate.instances``: the queues are read from the app, not written
here), each with its own state volume, all sharing the warehouse on the object store (SeaweedFS's
S3 API; its bucket made by a one-shot service, whose code runs here against the tests' S3
server), with one set of ``AWS_*`` variables; a Spark master and two workers from the same image;
a Kafka broker in KRaft mode, and the Kafka demo: Airflow's Kafka connection, a one-shot
service filling the demo's topic in Kafka, and the DAG whose runs read it through that
connection.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

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
    "seaweedfs",
    "seaweedfs-init",
    "spark-master",
    "spark-worker-1",
    "spark-worker-2",
    "kafka",
    "kafka-demo-init",
}
SPARK_SERVICES = ["spark-master", "spark-worker-1", "spark-worker-2"]
#: Every service that runs lakestate (its image) and so reaches the warehouse.
LAKESTATE_SERVICES = [
    *sorted(s for s in REQUIRED_SERVICES if s.startswith("airflow-")),
    *SPARK_SERVICES,
    "seaweedfs-init",
    "kafka-demo-init",
]
#: The variables that say where the warehouse is and how to reach it.
OBJECT_STORE_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
    "LAKESTATE_WAREHOUSE",
)
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


def _named_volume_at(service: dict, target: str) -> str | None:
    """The named volume a service mounts at ``target`` (None: none)."""
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            source, at = volume.get("source", ""), volume["target"]
        else:
            source, at = volume.split(":")[:2]
        if at.rstrip("/") == target and not source.startswith((".", "/")):
            return source
    return None


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


def _store(services) -> dict[str, str]:
    """The object-store variables (``OBJECT_STORE_ENV``) of airflow-scheduler."""
    env = environment(services["airflow-scheduler"])
    return {k: env[k] for k in OBJECT_STORE_ENV}


def _published(service: dict) -> dict[int, str]:
    """A service's published ports as {container port: host port (as written)}."""
    found = {}
    for port in service.get("ports") or []:
        host, _, container = str(port).rpartition(":")
        found[int(container)] = host
    return found


@pytest.mark.parametrize("name", [*LAKESTATE_SERVICES, "seaweedfs"])
def test_every_service_reaches_one_warehouse_on_the_object_store(services, name):
    """Delta tables, what the instances share, are in one bucket, which every service that
    runs lakestate (and the store, for its identity) names with the same variables; nothing
    mounts a warehouse folder."""
    env = environment(services[name])
    assert {k: env.get(k) for k in OBJECT_STORE_ENV} == _store(services), name
    assert f"{REPO}/warehouse" not in mounts(services[name]), name


def test_each_volume_entry_is_one_mount(services):
    """(A list item indented wrongly is folded into the one before it, and Compose takes
    the folded text as one mount.)"""
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            assert isinstance(volume, dict) or len(volume.split()) == 1, (name, volume)


def test_the_endpoint_is_the_store_s_s3_port(services):
    store = _store(services)
    warehouse = urlsplit(store["LAKESTATE_WAREHOUSE"])
    assert warehouse.scheme == "s3" and warehouse.netloc and warehouse.path.strip("/")
    endpoint = urlsplit(store["AWS_ENDPOINT_URL"])
    assert endpoint.scheme == "http" and store["AWS_ALLOW_HTTP"] == "true"
    assert endpoint.hostname == "seaweedfs"
    seaweedfs = services["seaweedfs"]
    script = command(seaweedfs)
    assert f"-s3.port={endpoint.port}" in script and " -s3 " in script and "-filer" in script
    assert endpoint.port in _published(seaweedfs)
    # Its one identity is the clients' keys, and its S3 API reads it.
    assert "$$AWS_ACCESS_KEY_ID" in script and "$$AWS_SECRET_ACCESS_KEY" in script
    (config,) = re.findall(r"-s3\.config=(\S+)", script)
    assert f"> {config}" in script
    assert named_volumes(seaweedfs).get("/data") == "seaweedfs-data"


def test_the_one_shot_service_makes_the_warehouse_s_bucket(services, tmp_path):
    """seaweedfs-init's code, run with its variables against the tests' S3 server: it makes
    the warehouse's bucket, and run again it keeps it."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from s3_server import start_server

    init = services["seaweedfs-init"]
    args = init["command"]
    assert args[:2] == ["python", "-c"], args
    server = start_server(tmp_path / "s3")
    try:
        env = {**os.environ, **environment(init), **server.env()}
        for _ in range(2):
            proc = subprocess.run(
                [sys.executable, "-c", args[2]],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            bucket = urlsplit(env["LAKESTATE_WAREHOUSE"]).netloc
            assert f"bucket {bucket} is there" in proc.stdout
        from pyarrow import fs

        client = fs.S3FileSystem(
            access_key=env["AWS_ACCESS_KEY_ID"],
            secret_key=env["AWS_SECRET_ACCESS_KEY"],
            region=env["AWS_REGION"],
            scheme="http",
            endpoint_override=server.endpoint.removeprefix("http://"),
        )
        assert client.get_file_info(bucket).type == fs.FileType.Directory
    finally:
        server.stop()


def test_the_dags_keep_the_warehouse_uri(services):
    """What a DAG's tasks get as --warehouse from the compose's LAKESTATE_WAREHOUSE: the URI
    itself, not a path made of it (Airflow reads its configuration when imported: its own
    interpreter)."""
    warehouse = _store(services)["LAKESTATE_WAREHOUSE"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    code = (
        "from pathlib import Path\n"
        "from lakestate.airflow.dag_factory import warehouse_dir\n"
        "print(warehouse_dir(Path('/opt/lakestate'), None))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "LAKESTATE_WAREHOUSE": warehouse},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == warehouse


def test_a_spark_master_and_two_workers(services):
    """The cluster runs the lakestate image's Spark (the same Spark, Python and lakestate as
    the drivers in the Airflow workers); each worker registers with the master at its port,
    with a work dir of its own, after the master is healthy."""
    master = services["spark-master"]
    args = command(master).split()
    assert args[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    port = args[args.index("--port") + 1]
    ui = int(args[args.index("--webui-port") + 1])
    assert ui in _published(master)
    work_dirs, state_volumes = set(), set()
    for name in ("spark-worker-1", "spark-worker-2"):
        worker = services[name]
        wargs = command(worker).split()
        assert wargs[:3] == [
            "spark-class",
            "org.apache.spark.deploy.worker.Worker",
            f"spark://spark-master:{port}",
        ]
        assert worker["depends_on"]["spark-master"]["condition"] == "service_healthy"
        work_dirs.add(environment(worker)["SPARK_WORKER_DIR"])
        # The executors own their tasks' stores, on a volume of the worker's own.
        state_dir = environment(worker)["LAKESTATE_STATE_DIR"]
        state_volumes.add(_named_volume_at(worker, state_dir))
    assert len(work_dirs) == 2, work_dirs
    assert state_volumes == {"spark-state-1", "spark-state-2"}, state_volumes
    for name in SPARK_SERVICES:
        deps = services[name]["depends_on"]
        assert deps["seaweedfs-init"]["condition"] == "service_completed_successfully", name
        env = environment(services[name])
        assert env["PYTHONPATH"] == f"{REPO}/lib" and env["CONNECTION_CHECK_MAX_COUNT"] == "0"
        assert mounts(services[name]).get(f"{REPO}/lib") == "lib", name
    # The instances' Spark runs go to the cluster through Airflow's spark_default.
    for name in AIRFLOW_SERVICES:
        env = environment(services[name])
        assert env["AIRFLOW_CONN_SPARK_DEFAULT"] == f"spark://spark-master:{port}", name
        assert "LAKESTATE_SPARK_MASTER" not in env, name


def test_kafka_in_kraft_mode(services):
    """One node, broker and controller, its image the release of the tests' broker jars;
    containers reach it at kafka:9092, the host at its published port."""
    kafka = services["kafka"]
    pom = (ROOT / "tests" / "integration" / "kafka_broker.pom.xml").read_text()
    version = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom).group(1)
    assert kafka["image"] == f"apache/kafka:${{KAFKA_VERSION:-{version}}}"
    env = environment(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    listeners = {
        item.split("://")[0]: int(item.rsplit(":", 1)[1])
        for item in env["KAFKA_LISTENERS"].split(",")
    }
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{node}@kafka:{listeners[controller]}"
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert f"PLAINTEXT://kafka:{listeners['PLAINTEXT']}" in advertised
    assert listeners["EXTERNAL"] in _published(kafka)
    for name in listeners:
        assert f"{name}:" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], name
    assert named_volumes(kafka).get(env["KAFKA_LOG_DIRS"]) == "kafka-data"


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
    healthy = ["postgres", "redis", "seaweedfs", "spark-master", "kafka", *LONG_RUNNING_AIRFLOW]
    for name in healthy:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for name in LONG_RUNNING_AIRFLOW:
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
    for name in AIRFLOW_SERVICES:  # the bucket is there before any lakestate command runs
        deps = services[name]["depends_on"]
        assert deps["seaweedfs-init"]["condition"] == "service_completed_successfully", name
    assert services["seaweedfs-init"]["depends_on"]["seaweedfs"]["condition"] == "service_healthy"
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in WORKERS:  # tasks call the API server's Execution API
        assert services[name]["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"
    # ... and "healthy" means that API is built (the server builds it on its first request).
    assert any(
        "/execution/health" in part for part in services["airflow-apiserver"]["healthcheck"]["test"]
    )


def test_one_image_for_every_airflow_service(services):
    """Scheduler, API server, workers and the Spark cluster run the same Airflow, lakestate
    and Spark."""
    image = services["airflow-scheduler"]["image"]
    build = services["airflow-scheduler"]["build"]
    for name in LAKESTATE_SERVICES:
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


KAFKA_DEMO_DAG = ROOT / "dags" / "kafka_demo.py"


def kafka_demo_conn_id() -> str:
    """Param kafka_conn_id's default in dags/kafka_demo.py (its make_dag call's
    ``kafka_conn_id``), read from the file's syntax tree: no Airflow needed."""
    tree = ast.parse(KAFKA_DEMO_DAG.read_text())
    constants = {  # NAME = "text" at the module's top level
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "make_dag"
    ]
    (call,) = calls
    assert "jobs" in ast.unparse(call.args[0]) and "kafka_demo.py" in ast.unparse(call.args[0])
    (value,) = [k.value for k in call.keywords if k.arg == "kafka_conn_id"]
    return value.value if isinstance(value, ast.Constant) else constants[value.id]


def kafka_demo_connection(services: dict, name: str) -> tuple[str, dict]:
    """The env variable defining the Kafka demo's connection in service ``name``, and the
    connection (its JSON form)."""
    variable = f"AIRFLOW_CONN_{kafka_demo_conn_id().upper()}"
    return variable, json.loads(environment(services[name])[variable])


def containers_bootstrap(kafka: dict) -> str:
    """The address the containers reach the broker at: its PLAINTEXT listener as advertised."""
    advertised = environment(kafka)["KAFKA_ADVERTISED_LISTENERS"].split(",")
    (plaintext,) = [a for a in advertised if a.startswith("PLAINTEXT://")]
    return plaintext.removeprefix("PLAINTEXT://")


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_has_the_kafka_demo_s_connection(services, name):
    """The connection dags/kafka_demo.py's runs read (Param kafka_conn_id's default) is
    defined for every Airflow service, as the Kafka provider's type whose extra is the client
    config, naming the broker at the address the containers reach it."""
    variable, connection = kafka_demo_connection(services, name)
    assert connection["conn_type"] == "kafka", variable
    assert connection["extra"] == {"bootstrap.servers": containers_bootstrap(services["kafka"])}


def test_the_kafka_demo_s_topic_is_filled_before_the_dag_runs(services):
    """kafka-demo-init produces the sample of jobs/kafka_demo.py (the app of the DAG) to that
    app's source topic, in the broker the DAG's connection names, once the broker is healthy;
    the scheduler starts (so the DAG runs) only after it succeeded."""
    from lakestate.app import load_app

    init = services["kafka-demo-init"]
    env = environment(init)
    _, connection = kafka_demo_connection(services, "airflow-worker-a")
    assert env["KAFKA_BOOTSTRAP"] == connection["extra"]["bootstrap.servers"]
    (topic,) = load_app(ROOT / "jobs" / "kafka_demo.py").topology.source_topics()
    script = command(init)
    assert init["command"][:2] == ["bash", "-c"] and "set -euo pipefail" in script
    assert 'load_module("jobs/kafka_demo.py")' in script and init["working_dir"] == REPO
    assert f"lakestate.cli produce {topic} - " in script
    assert f"lakestate.cli describe {topic} " in script  # a topic already there is kept
    assert script.count('--bootstrap-servers "$$KAFKA_BOOTSTRAP"') == 2
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert init["depends_on"]["seaweedfs-init"]["condition"] == "service_completed_successfully"
    assert init["restart"] == "no"
    bind = mounts(init)
    assert bind.get(REPO) == "." and bind.get(f"{REPO}/jobs") == "jobs"
    assert bind.get(f"{REPO}/lib") == "lib" and env["PYTHONPATH"] == f"{REPO}/lib"
    scheduler = services["airflow-scheduler"]["depends_on"]
    assert scheduler["kafka-demo-init"]["condition"] == "service_completed_successfully"


def test_the_compose_s_kafka_connection_reads_as_the_runs_read_it(services, airflow_env):
    """The connection's value as written in docker-compose.yml, read by a real Airflow as a
    run task reads Param kafka_conn_id's connection (``operator.kafka_settings``): the
    client settings of its extra. tests/e2e/test_kafka_demo_dag.py runs the demo on it."""
    variable, connection = kafka_demo_connection(services, "airflow-worker-a")
    value = environment(services["airflow-worker-a"])[variable]
    result = airflow_env.run("kafka", kafka_demo_conn_id(), env={variable: value})
    assert result == {"settings": connection["extra"]}
    assert connection["extra"] == {"bootstrap.servers": "kafka:9092"}
