"""The DAGs folder parses in a real Airflow, and the demo DAG has the shape the design asks for:
scheduled micro-batches without overlapping scheduled runs, unpaused when created, by default
until caught up within a time budget, trigger Params (rewind guarded by a confirmation), a
``rebalance`` task upstream of one task per instance of the app (jobs/demo.py has two, each
on its own queue), each running ``lakestate run --instance NAME`` in a subprocess with Spark
on local[*] unless a Spark connection says otherwise; an app without instances has one run
task; beside it, the demo app's maintenance DAG (compact -> optimize -> vacuum), and the demo
on Kafka, whose runs take their cluster from the Kafka connection kafka_default."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from lakestate.cli import build_parser
from lakestate.runtime.transport import TRANSPORTS

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

DEMO_DAG = "lakestate_demo"
MAINTENANCE_DAG = "lakestate_demo_maintenance"
KAFKA_DAG = "lakestate_kafka_demo"


@pytest.fixture(scope="module")
def described(airflow_env) -> dict:
    return airflow_env.run("describe")


def test_every_dag_file_imports_cleanly(described: dict) -> None:
    assert described["import_errors"] == {}
    dag_files = {p.resolve() for p in (REPO / "dags").glob("*.py") if not p.name.startswith("_")}
    parsed = {Path(d["fileloc"]).resolve() for d in described["dags"].values()}
    assert dag_files <= parsed, f"files without a DAG: {sorted(map(str, dag_files - parsed))}"
    assert DEMO_DAG in described["dags"]
    assert MAINTENANCE_DAG in described["dags"]


def _tasks(dag: dict) -> dict[str, dict]:
    return {t["task_id"]: t for t in dag["tasks"]}


def _demo_instances(state_root: str) -> list:
    """jobs/demo.py's instances, as its config gives them (``state_root``: the DAG's)."""
    from lakestate.app import load_app
    from lakestate.scaleout.instances import instances_of

    return instances_of(load_app(REPO / "jobs" / "demo.py"), state_root)


def _assert_one_instance_dag(dag: dict, app: str) -> None:
    """An app without instances: ``rebalance`` then one run task, ``run_batches``, on the
    default queue, without ``--instance``, in the state root itself."""
    tasks = _tasks(dag)
    assert set(tasks) == {"rebalance", "run_batches"}
    rebalance, run = tasks["rebalance"], tasks["run_batches"]
    assert rebalance["is_lakestate_rebalance"] and run["is_lakestate_run"], tasks
    assert rebalance["downstream"] == ["run_batches"] and run["upstream"] == ["rebalance"]
    assert rebalance["queue"] == run["queue"] == "default"  # Airflow's default queue
    for task in (rebalance, run):
        assert task["app_path"] == str(REPO / "jobs" / f"{app}.py")
        assert task["app"] == app
    assert run["instance"] is None and "--instance" not in run["command"]
    assert run["state_dir"] == run["env"]["LAKESTATE_STATE_DIR"] == rebalance["state_dir"]


def test_clicks_dags_run_the_clicks_app(described: dict) -> None:
    dag = described["dags"]["lakestate_clicks"]
    assert Path(dag["fileloc"]).resolve() == REPO / "dags" / "clicks.py"
    _assert_one_instance_dag(dag, "clicks")
    maintenance = described["dags"]["lakestate_clicks_maintenance"]
    assert Path(maintenance["fileloc"]).resolve() == REPO / "dags" / "clicks_maintenance.py"
    assert {t["task_id"] for t in maintenance["tasks"]} == {"compact", "optimize", "vacuum"}


def test_orders_dags_run_the_orders_app(described: dict) -> None:
    dag = described["dags"]["lakestate_orders"]
    assert Path(dag["fileloc"]).resolve() == REPO / "dags" / "orders.py"
    _assert_one_instance_dag(dag, "orders")
    maintenance = described["dags"]["lakestate_orders_maintenance"]
    assert Path(maintenance["fileloc"]).resolve() == REPO / "dags" / "orders_maintenance.py"
    assert {t["task_id"] for t in maintenance["tasks"]} == {"compact", "optimize", "vacuum"}


def test_kafka_demo_dag_reads_through_the_kafka_default_connection(
    described: dict, airflow_env
) -> None:
    """dags/kafka_demo.py: the demo on Kafka, one instance, its runs' Kafka settings from the
    connection kafka_default (Param kafka_conn_id's default). Where Airflow's environment
    does not define that connection (as here) it is paused when created, its scheduled runs
    would fail; where it does (docker-compose.yml), unpaused as every lakestate DAG."""
    dag = described["dags"][KAFKA_DAG]
    assert Path(dag["fileloc"]).resolve() == REPO / "dags" / "kafka_demo.py"
    _assert_one_instance_dag(dag, "kafka_demo")
    assert dag["params"]["kafka_conn_id"]["default"] == "kafka_default"
    assert described["dags"][DEMO_DAG]["params"]["kafka_conn_id"]["default"] is None
    assert dag["is_paused_upon_creation"] is True
    connection = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "k:9092"}})
    defined = airflow_env.run("describe", env={"AIRFLOW_CONN_KAFKA_DEFAULT": connection})
    assert defined["dags"][KAFKA_DAG]["is_paused_upon_creation"] is False


def test_demo_dag_schedule_and_concurrency(described: dict) -> None:
    dag = described["dags"][DEMO_DAG]
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert "seconds=300" in dag["schedule"]  # timedelta(minutes=5)
    assert "lakestate" in dag["tags"]


def test_every_lakestate_dag_is_unpaused_when_created(described: dict) -> None:
    """(But the Kafka demo's where its connection is not in the environment: below.)"""
    lakestate_dags = {
        i: d for i, d in described["dags"].items() if "lakestate" in d["tags"] and i != KAFKA_DAG
    }
    assert {DEMO_DAG, MAINTENANCE_DAG} <= set(lakestate_dags)
    assert {i: d["is_paused_upon_creation"] for i, d in lakestate_dags.items()} == {
        i: False for i in lakestate_dags
    }


def test_demo_dag_params(described: dict) -> None:
    params = described["dags"][DEMO_DAG]["params"]
    assert set(params) == {
        "max_batches",
        "max_records",
        "until_caught_up",
        "time_budget_s",
        "transport",
        "kafka_conn_id",
        "rewind",
        "confirm_rewind",
    }
    # By default a run processes until caught up, within a budget under the 5-minute interval.
    assert params["until_caught_up"]["default"] is True
    assert params["until_caught_up"]["schema"]["type"] == "boolean"
    assert params["time_budget_s"]["default"] == 240
    assert set(params["time_budget_s"]["schema"]["type"]) == {"null", "integer"}
    assert params["time_budget_s"]["schema"]["minimum"] == 1
    assert params["max_batches"]["default"] == 1
    assert params["max_batches"]["schema"]["type"] == "integer"
    assert params["max_batches"]["schema"]["minimum"] == 1
    assert params["max_records"]["default"] is None
    assert set(params["max_records"]["schema"]["type"]) == {"null", "integer"}
    # The transport: the app's config decides unless the run asks for one.
    assert params["transport"]["default"] is None
    assert params["transport"]["schema"]["enum"] == [None, *TRANSPORTS]
    # Kafka settings: the app's config unless the run names a Kafka connection.
    assert params["kafka_conn_id"]["default"] is None
    assert set(params["kafka_conn_id"]["schema"]["type"]) == {"null", "string"}
    # A rewind is off unless asked for, and asks for the app's name.
    assert params["rewind"]["default"] is False
    assert params["rewind"]["schema"]["type"] == "boolean"
    assert params["confirm_rewind"]["default"] == ""
    assert "demo" in params["confirm_rewind"]["description"]
    for name, param in params.items():
        assert param["description"], f"Param {name} has no description"


def test_demo_dag_rebalances_then_runs_each_instance_on_its_queue(described: dict) -> None:
    """``rebalance`` first, on the first instance's queue; then ``run_<name>`` per instance of
    jobs/demo.py, side by side (no dependency between them), each on its instance's queue
    with ``--instance NAME`` and the instance's state directory (``<state root>/<name>``)."""
    tasks = _tasks(described["dags"][DEMO_DAG])
    rebalance = tasks.pop("rebalance")
    root = rebalance["env"]["LAKESTATE_STATE_DIR"]
    instances = _demo_instances(root)
    assert len(instances) == 2 and len({i.queue for i in instances}) == 2
    runs = {f"run_{i.name}": i for i in instances}
    assert set(tasks) == set(runs)
    assert rebalance["is_lakestate_rebalance"], rebalance["class"]
    assert rebalance["upstream"] == [] and rebalance["downstream"] == sorted(runs)
    assert rebalance["queue"] == instances[0].queue
    assert rebalance["state_dir"] == instances[0].state_dir  # where a rewind takes the lock
    for task_id, instance in runs.items():
        task = tasks[task_id]
        assert task["is_lakestate_run"], task["class"]
        assert task["upstream"] == ["rebalance"] and task["downstream"] == []
        assert task["queue"] == instance.queue
        assert task["instance"] == instance.name
        assert task["state_dir"] == instance.state_dir == str(Path(root) / instance.name)
        args = build_parser().parse_args(task["command"][3:])
        assert (args.command, args.instance, args.state_dir) == (
            "run",
            instance.name,
            instance.state_dir,
        )
        assert task["env"]["LAKESTATE_STATE_DIR"] == root
    # The rebalance task runs the lakestate CLI's own `rebalance`, with the DAG's paths.
    command = rebalance["command"]
    assert command[:3] == [rebalance["python"], "-m", "lakestate.cli"]
    args = build_parser().parse_args(command[3:])
    assert (args.command, args.app, args.warehouse) == (
        "rebalance",
        rebalance["app_path"],
        rebalance["warehouse"],
    )


def test_demo_dag_runs_lakestate_run_in_a_subprocess(described: dict) -> None:
    task = _tasks(described["dags"][DEMO_DAG])["run_a"]
    assert task["is_lakestate_run"], task["class"]
    assert task["app_path"] == str(REPO / "jobs" / "demo.py")
    assert task["app"] == "demo"
    assert task["conn_id"] == "spark_default"
    assert task["default_master"] == "local[*]"
    assert task["master"] is None  # the instance configures none: the connection's
    assert Path(task["python"]) == Path(sys.executable)  # the Python running Airflow
    command = task["command"]
    assert command[:3] == [task["python"], "-m", "lakestate.cli"]
    # What the task runs is the lakestate CLI's own `run`, with the DAG's paths.
    args = build_parser().parse_args(command[3:])
    assert (args.command, args.app, args.master) == ("run", task["app_path"], "local[2]")
    assert args.warehouse == task["warehouse"] and args.state_dir == task["state_dir"]
    env = task["env"]
    assert Path(env["LAKESTATE_WAREHOUSE"]).is_absolute()
    assert env["LAKESTATE_WAREHOUSE"] == task["warehouse"]
    assert Path(task["state_dir"]).parent == Path(env["LAKESTATE_STATE_DIR"])
    assert Path(env["PYSPARK_PYTHON"]).is_file()
    assert str(REPO / "lib") in env["PYTHONPATH"].split(":")
    assert task["retries"] == 0


def test_instances_configured_by_an_app_make_its_run_tasks(airflow_env, tmp_path: Path) -> None:
    """A DAG file made by ``make_dag`` for an app of the user's: an instance's queue
    defaults to its name, its ``state_dir`` and ``master`` are used when given; an app whose
    instances are badly configured is an import error naming the instance and the key."""
    jobs, dags = tmp_path / "jobs", tmp_path / "dags"
    jobs.mkdir()
    dags.mkdir()
    own_state = tmp_path / "disk-x"
    apps = {
        "scaled": [
            {"name": "x", "state_dir": str(own_state), "master": "spark://m:7077", "capacity": 2},
            {"name": "y"},
        ],
        "broken": [{"name": "a"}, {"name": "b", "queues": "lakestate-b"}],
    }
    for name, instances in apps.items():
        (jobs / f"{name}.py").write_text(
            "import lakestate as ls\n"
            "builder = ls.StreamsBuilder()\n"
            "builder.stream('in').to('out')\n"
            f"app = ls.App({name!r}, builder.build(), {{'lakestate.instances': {instances!r}}})\n",
            encoding="utf-8",
        )
    for name in ("scaled", "broken"):
        (dags / f"{name}.py").write_text(
            "from lakestate.airflow import make_dag\n"
            f"dag = make_dag({str(jobs / f'{name}.py')!r})\n",
            encoding="utf-8",
        )
    root = tmp_path / "state"
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(dags), "LAKESTATE_STATE_DIR": str(root)}
    described = airflow_env.run("describe", env=env)
    ((broken_file, error),) = described["import_errors"].items()
    assert Path(broken_file).name == "broken.py"
    assert "app broken" in error and "instance 'b'" in error and "'queues'" in error, error
    tasks = _tasks(described["dags"]["lakestate_scaled"])
    assert set(tasks) == {"rebalance", "run_x", "run_y"}
    x, y = tasks["run_x"], tasks["run_y"]
    assert (x["queue"], x["state_dir"], x["master"]) == ("x", str(own_state), "spark://m:7077")
    assert (y["queue"], y["state_dir"], y["master"]) == ("y", str(root / "y"), None)
    assert tasks["rebalance"]["queue"] == "x" and tasks["rebalance"]["state_dir"] == str(own_state)
    # The instance's own master wins over the Spark connection (local[*] in these tests).
    (dags / "broken.py").unlink()  # the action wants a DAGs folder without import errors
    assert airflow_env.run("master", "lakestate_scaled", env=env)["master"] == "spark://m:7077"


SCHEDULED = ["--until-caught-up", "--time-budget", "240", "--wait", "240"]
BACKFILL_END = "2026-11-20T10:05:00+00:00"

RUN_OPTIONS = [
    ({}, SCHEDULED),
    (
        {"max_batches": 3, "max_records": 500, "until_caught_up": False},
        ["--max-batches", "3", "--time-budget", "240", "--max-records", "500",
         "--wait", "240"],
    ),
    (
        {"max_batches": 3, "until_caught_up": False, "time_budget_s": None},
        ["--max-batches", "3", "--wait", "inf"],
    ),
    (
        {"max_batches": 3, "time_budget_s": 60},
        ["--until-caught-up", "--time-budget", "60", "--wait", "60"],
    ),
    (
        {"transport": "spark"},
        ["--until-caught-up", "--time-budget", "240", "--transport", "spark", "--wait", "240"],
    ),
    (
        {"transport": "inprocess", "max_records": 7},
        ["--until-caught-up", "--time-budget", "240", "--max-records", "7",
         "--transport", "inprocess", "--wait", "240"],
    ),
]  # fmt: skip
RUN_TYPES = ["scheduled", "manual"]
BACKFILLS = [({}, None), ({"time_budget_s": 90, "max_batches": 2}, 90)]
INVALID = [
    {"max_batches": 0},
    {"max_records": "many"},
    {"time_budget_s": 0},
    {"rewind": "x"},
    {"transport": "gpu"},
]


@pytest.fixture(scope="module")
def rendered(airflow_env) -> dict[str, dict]:
    """The demo DAG's rendered run options of every case below, by ``_case`` key, from one
    Airflow interpreter (each fresh interpreter imports Airflow and parses the DAGs anew)."""
    cases = [[params, run_type, ""] for params, _ in RUN_OPTIONS for run_type in RUN_TYPES]
    cases += [[params, "backfill", BACKFILL_END] for params, _ in BACKFILLS]
    cases += [[params, "manual", ""] for params in INVALID]
    results = airflow_env.run("render-all", DEMO_DAG, json.dumps(cases))["results"]
    return {_case(*case): result for case, result in zip(cases, results, strict=True)}


def _case(params: dict, run_type: str, until: str) -> str:
    return json.dumps([params, run_type, until], sort_keys=True)


def _arguments(rendered: dict[str, dict], params: dict, run_type: str, until: str = "") -> list:
    result = rendered[_case(params, run_type, until)]
    assert "error" not in result, result["error"]
    return result["arguments"]


@pytest.mark.parametrize(("params", "expected"), RUN_OPTIONS)
@pytest.mark.parametrize("run_type", RUN_TYPES)
def test_params_render_to_run_options(rendered, params, expected, run_type) -> None:
    arguments = _arguments(rendered, params, run_type)
    assert arguments == expected
    args = build_parser().parse_args(["run", "jobs/demo.py", *arguments])
    until_caught_up = params.get("until_caught_up", True)
    assert args.until_caught_up is until_caught_up
    assert args.max_batches == (None if until_caught_up else params.get("max_batches", 1))
    assert args.max_records == params.get("max_records")
    assert args.time_budget == params.get("time_budget_s", 240)
    assert args.transport == params.get("transport")
    assert args.until_timestamp is None


@pytest.mark.parametrize(("params", "expected_budget"), BACKFILLS)
def test_a_backfill_run_processes_up_to_its_interval_end(rendered, params, expected_budget) -> None:
    arguments = _arguments(rendered, params, "backfill", BACKFILL_END)
    args = build_parser().parse_args(["run", "jobs/demo.py", *arguments])
    assert args.until_timestamp == "1795169100000"  # the data interval's end, in ms
    assert args.until_caught_up is True and args.max_batches is None
    # The Params' default budget does not bound a backfill run; its conf's does.
    assert args.time_budget == expected_budget
    assert args.wait == float("inf")  # backfill runs queue behind each other


@pytest.mark.parametrize("params", INVALID)
def test_invalid_params_are_rejected(rendered, params) -> None:
    result = rendered[_case(params, "manual", "")]
    assert "ParamValidationError" in result.get("error", ""), result


def test_default_master_is_local_without_a_connection(airflow_env) -> None:
    result = airflow_env.run("master", DEMO_DAG, env={"AIRFLOW_CONN_SPARK_DEFAULT": None})
    assert result["master"] == "local[*]"


@pytest.mark.parametrize(
    ("connection", "master"),
    [
        ('{"conn_type": "spark", "host": "local[2]"}', "local[2]"),
        ("spark://spark-master:7077?deploy-mode=client", "spark://spark-master:7077"),
        ('{"conn_type": "spark", "host": "k8s://https://k8s.example:6443"}',
         "k8s://https://k8s.example:6443"),
    ],
)  # fmt: skip
def test_a_defined_connection_chooses_the_master(airflow_env, connection, master) -> None:
    result = airflow_env.run("master", DEMO_DAG, env={"AIRFLOW_CONN_SPARK_DEFAULT": connection})
    assert result["master"] == master


def test_a_kafka_connection_gives_the_run_its_client_settings(airflow_env) -> None:
    """Param kafka_conn_id names a connection of the Kafka provider's type: its extra is the
    client config, as the provider's hooks read it."""
    assert "kafka" in airflow_env.run("connection-types")["types"]  # the provider's type
    extra = {"bootstrap.servers": "broker-1:9092,broker-2:9092", "security.protocol": "SSL"}
    connection = json.dumps({"conn_type": "kafka", "extra": extra})
    result = airflow_env.run("kafka", "kafka_events", env={"AIRFLOW_CONN_KAFKA_EVENTS": connection})
    assert result == {"settings": extra}
    result = airflow_env.run("kafka", "kafka_nowhere", env={"AIRFLOW_CONN_KAFKA_NOWHERE": None})
    assert "AirflowFailException" in result["error"] and "'kafka_nowhere'" in result["error"]
    assert "not defined" in result["error"]
    empty = json.dumps({"conn_type": "kafka", "extra": {"group.id": "x"}})
    result = airflow_env.run("kafka", "kafka_empty", env={"AIRFLOW_CONN_KAFKA_EMPTY": empty})
    assert "no bootstrap.servers" in result["error"], result


def test_maintenance_dag_shape(described: dict) -> None:
    dag = described["dags"][MAINTENANCE_DAG]
    assert Path(dag["fileloc"]).resolve() == REPO / "dags" / "demo_maintenance.py"
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert "days=1" in dag["schedule"]  # timedelta(days=1): its own schedule, daily
    assert {"lakestate", "demo", "maintenance"} <= set(dag["tags"])
    tasks = {t["task_id"]: t for t in dag["tasks"]}
    assert set(tasks) == {"compact", "optimize", "vacuum"}
    assert tasks["compact"]["downstream"] == ["optimize"]
    assert tasks["optimize"]["downstream"] == ["vacuum"]
    assert tasks["vacuum"]["downstream"] == []
    assert not any(t["is_lakestate_run"] for t in tasks.values())  # Python tasks


def test_maintenance_dag_params(described: dict) -> None:
    params = described["dags"][MAINTENANCE_DAG]["params"]
    assert set(params) == {"vacuum_retention_hours"}
    retention = params["vacuum_retention_hours"]
    assert retention["default"] == 7 * 24
    assert retention["schema"]["type"] == "integer"
    assert retention["schema"]["minimum"] == 1
    assert retention["description"]
