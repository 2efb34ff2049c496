"""Airflow actions for the e2e tests, each run in its own process (``conftest.Airflow.run``).

Airflow reads its configuration (AIRFLOW_HOME, the DAGs folder, the database) when it is
imported, so every action runs in a fresh interpreter with the test's environment and writes
its result as JSON to the file given last::

    python tests/e2e/airflow_actions.py describe OUT.json
    python tests/e2e/airflow_actions.py render DAG_ID PARAMS_JSON OUT.json
    python tests/e2e/airflow_actions.py spark-command DAG_ID OUT.json
    python tests/e2e/airflow_actions.py test DAG_ID RUN_CONF_JSON OUT.json
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any


def _dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag()  # the configured DAGs folder; examples are off (AIRFLOW__CORE__LOAD_EXAMPLES)


def _dag(dag_id: str) -> Any:
    bag = _dagbag()
    if bag.import_errors:
        raise SystemExit(f"import errors: {bag.import_errors}")
    return bag.dags[dag_id]


def _param(param: Any) -> dict[str, Any]:
    return {"default": param.value, "schema": param.schema, "description": param.description}


def describe() -> dict[str, Any]:
    """Every DAG of the DAGs folder, with what the tests check."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    bag = _dagbag()
    dags: dict[str, Any] = {}
    for dag_id, dag in bag.dags.items():
        tasks = []
        for task in dag.tasks:
            info: dict[str, Any] = {
                "task_id": task.task_id,
                "class": f"{type(task).__module__}.{type(task).__qualname__}",
                "is_spark_submit": isinstance(task, SparkSubmitOperator),
                "retries": task.retries,
                "pre_execute_hook": repr(task._pre_execute_hook),
                "downstream": sorted(task.downstream_task_ids),
            }
            if isinstance(task, SparkSubmitOperator):
                info.update(
                    application=task.application,
                    application_args=task.application_args,
                    conf=task.conf,
                    env_vars=task.env_vars,
                    packages=task.packages,
                    name=task.name,
                    conn_id=task._conn_id,
                )
            tasks.append(info)
        dags[dag_id] = {
            "fileloc": dag.fileloc,
            "max_active_runs": dag.max_active_runs,
            "catchup": dag.catchup,
            "schedule": repr(dag.timetable),
            "tags": sorted(dag.tags),
            "params": {name: _param(dag.params.get_param(name)) for name in dag.params},
            "tasks": tasks,
        }
    return {
        "dags_folder": str(bag.dag_folder),
        "import_errors": {str(k): v for k, v in bag.import_errors.items()},
        "dags": dags,
    }


def render(dag_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """The Spark task's application_args rendered with the DAG's Params, overridden by
    ``params`` (as a run's conf overrides them), and validated like a trigger would."""
    dag = _dag(dag_id)
    task = dag.tasks[0]
    resolved = copy.deepcopy(dag.params)
    resolved.update(params)  # validates each value against its Param's schema
    context = {"params": resolved.validate()}
    return {"application_args": task.render_template(task.application_args, context)}


def spark_command(dag_id: str) -> dict[str, Any]:
    """The spark-submit command the Spark task's hook would run, after its pre_execute hook
    (which provides the default connection when none is defined)."""
    task = _dag(dag_id).tasks[0]
    env_var = f"AIRFLOW_CONN_{task._conn_id.upper()}"
    before = os.environ.get(env_var)
    if task._pre_execute_hook is not None:
        task._pre_execute_hook({})
    hook = task._get_hook()
    return {
        "conn_env_before": before,
        "conn_env_after": os.environ.get(env_var),
        "master": hook._connection["master"],
        "command": hook._build_spark_submit_command(task.application),
    }


def run_test(dag_id: str, run_conf: dict[str, Any]) -> dict[str, Any]:
    """One real run of the DAG with ``dag.test``; the run's and the tasks' final states."""
    dag = _dag(dag_id)
    dag_run = dag.test(run_conf=run_conf)
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        dr = session.get(DagRun, dag_run.id)
        tis = {ti.task_id: str(ti.state) for ti in dr.get_task_instances(session=session)}
        return {"run_id": dr.run_id, "state": str(dr.state), "conf": dr.conf, "task_states": tis}


def main(argv: list[str]) -> int:
    action, *args, out = argv
    if action == "describe":
        result = describe()
    elif action == "render":
        result = render(args[0], json.loads(args[1]))
    elif action == "spark-command":
        result = spark_command(args[0])
    elif action == "test":
        result = run_test(args[0], json.loads(args[1]))
    else:
        raise SystemExit(f"unknown action {action!r}")
    Path(out).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
