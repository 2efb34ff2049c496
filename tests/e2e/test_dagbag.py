"""The DAGs folder parses in a real Airflow, and the demo DAG has the shape the design asks for:
scheduled micro-batches without overlapping runs, by default until caught up within a time
budget, trigger Params, one SparkSubmitOperator task on local[*] unless a Spark connection says
otherwise; beside it, the demo app's maintenance DAG (compact -> optimize -> vacuum)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lakestate.engine.spark import DELTA_CONF, delta_maven_coordinates
from lakestate.engine.submit import build_parser

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

DEMO_DAG = "lakestate_demo"
MAINTENANCE_DAG = "lakestate_demo_maintenance"


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


def test_clicks_dags_run_the_clicks_app(described: dict) -> None:
    dag = described["dags"]["lakestate_clicks"]
    assert Path(dag["fileloc"]).resolve() == REPO / "dags" / "clicks.py"
    (task,) = dag["tasks"]
    assert task["is_spark_submit"], task["class"]
    assert task["application_args"][0] == str(REPO / "jobs" / "clicks.py")
    assert task["name"] == "clicks"
    maintenance = described["dags"]["lakestate_clicks_maintenance"]
    assert Path(maintenance["fileloc"]).resolve() == REPO / "dags" / "clicks_maintenance.py"
    assert {t["task_id"] for t in maintenance["tasks"]} == {"compact", "optimize", "vacuum"}


def test_orders_dags_run_the_orders_app(described: dict) -> None:
    dag = described["dags"]["lakestate_orders"]
    assert Path(dag["fileloc"]).resolve() == REPO / "dags" / "orders.py"
    (task,) = dag["tasks"]
    assert task["is_spark_submit"], task["class"]
    assert task["application_args"][0] == str(REPO / "jobs" / "orders.py")
    assert task["name"] == "orders"
    maintenance = described["dags"]["lakestate_orders_maintenance"]
    assert Path(maintenance["fileloc"]).resolve() == REPO / "dags" / "orders_maintenance.py"
    assert {t["task_id"] for t in maintenance["tasks"]} == {"compact", "optimize", "vacuum"}


def test_demo_dag_schedule_and_concurrency(described: dict) -> None:
    dag = described["dags"][DEMO_DAG]
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert "seconds=300" in dag["schedule"]  # timedelta(minutes=5)
    assert "lakestate" in dag["tags"]


def test_demo_dag_params(described: dict) -> None:
    params = described["dags"][DEMO_DAG]["params"]
    assert set(params) == {"max_batches", "max_records", "until_caught_up", "time_budget_s"}
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
    for name, param in params.items():
        assert param["description"], f"Param {name} has no description"


def test_demo_dag_runs_one_spark_submit(described: dict) -> None:
    (task,) = described["dags"][DEMO_DAG]["tasks"]
    assert task["is_spark_submit"], task["class"]
    assert Path(task["application"]) == REPO / "lib" / "lakestate" / "engine" / "submit.py"
    assert Path(task["application"]).is_file()
    assert task["application_args"][0] == str(REPO / "jobs" / "demo.py")
    assert task["name"] == "demo"
    assert task["conn_id"] == "spark_default"
    assert task["packages"] == delta_maven_coordinates()
    conf = task["conf"]
    for key, value in DELTA_CONF.items():
        assert conf[key] == value
    assert conf["spark.jars.ivy"]
    assert Path(conf["spark.pyspark.python"]).is_file()
    assert "spark.master" not in conf  # spark-submit's --master, from the connection
    env = task["env_vars"]
    assert Path(env["LAKESTATE_WAREHOUSE"]).is_absolute()
    assert Path(env["LAKESTATE_STATE_DIR"]).is_absolute()
    assert env["PYSPARK_PYTHON"] == conf["spark.pyspark.python"]
    assert str(REPO / "lib") in env["PYTHONPATH"].split(":")
    assert task["retries"] == 0


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {},
            [
                "--max-batches=none",
                "--max-records=none",
                "--until-caught-up=true",
                "--time-budget=240",
            ],
        ),
        (
            {"max_batches": 3, "max_records": 500, "until_caught_up": False},
            [
                "--max-batches=3",
                "--max-records=500",
                "--until-caught-up=false",
                "--time-budget=240",
            ],
        ),
        (
            {"max_batches": 3, "until_caught_up": False, "time_budget_s": None},
            [
                "--max-batches=3",
                "--max-records=none",
                "--until-caught-up=false",
                "--time-budget=none",
            ],
        ),
        (
            {"max_batches": 3, "time_budget_s": 60},
            [
                "--max-batches=none",
                "--max-records=none",
                "--until-caught-up=true",
                "--time-budget=60",
            ],
        ),
    ],
)
def test_params_render_to_submit_arguments(airflow_env, params, expected) -> None:
    rendered = airflow_env.run("render", DEMO_DAG, json.dumps(params))["application_args"]
    assert rendered[1:5] == expected
    args = build_parser().parse_args(rendered)
    assert args.app == str(REPO / "jobs" / "demo.py")
    until_caught_up = params.get("until_caught_up", True)
    assert args.max_batches == (None if until_caught_up else params.get("max_batches", 1))
    assert args.max_records == params.get("max_records")
    assert args.until_caught_up is until_caught_up
    assert args.time_budget == params.get("time_budget_s", 240)
    assert args.warehouse and args.state_dir


@pytest.mark.parametrize(
    "params", [{"max_batches": 0}, {"max_records": "many"}, {"time_budget_s": 0}]
)
def test_invalid_params_are_rejected(airflow_env, params) -> None:
    with pytest.raises(AssertionError, match="ParamValidationError"):
        airflow_env.run("render", DEMO_DAG, json.dumps(params))


def test_submit_accepts_lakestate_run_arguments() -> None:
    args = build_parser().parse_args(
        ["jobs/demo.py", "--max-batches", "2", "--max-records", "10", "--until-caught-up"]
    )
    assert (args.max_batches, args.max_records, args.until_caught_up) == (2, 10, True)
    assert build_parser().parse_args(["jobs/demo.py"]).until_caught_up is False
    assert build_parser().parse_args(["jobs/demo.py"]).time_budget is None
    assert build_parser().parse_args(["jobs/demo.py", "--time-budget", "90"]).time_budget == 90


def test_default_master_is_local_without_a_connection(airflow_env) -> None:
    result = airflow_env.run("spark-command", DEMO_DAG, env={"AIRFLOW_CONN_SPARK_DEFAULT": None})
    assert result["conn_env_before"] is None
    assert result["master"] == "local[*]"
    command = result["command"]
    assert command[command.index("--master") + 1] == "local[*]"
    assert command[command.index("--packages") + 1] == delta_maven_coordinates()


def test_a_defined_connection_chooses_the_master(airflow_env) -> None:
    result = airflow_env.run(
        "spark-command",
        DEMO_DAG,
        env={"AIRFLOW_CONN_SPARK_DEFAULT": "spark://spark-master:7077?deploy-mode=client"},
    )
    assert result["master"] == "spark://spark-master:7077"
    assert result["conn_env_after"] == result["conn_env_before"]  # left alone


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
    assert not any(t["is_spark_submit"] for t in tasks.values())  # no Spark


def test_maintenance_dag_params(described: dict) -> None:
    params = described["dags"][MAINTENANCE_DAG]["params"]
    assert set(params) == {"vacuum_retention_hours"}
    retention = params["vacuum_retention_hours"]
    assert retention["default"] == 7 * 24
    assert retention["schema"]["type"] == "integer"
    assert retention["schema"]["minimum"] == 1
    assert retention["description"]
