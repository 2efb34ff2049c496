"""Airflow actions for the e2e tests, each run in its own process (``conftest.Airflow.run``).

Airflow reads its configuration (AIRFLOW_HOME, the DAGs folder, the database) when it is
imported, so every action runs in a fresh interpreter with the test's environment and writes
its result as JSON to the file given last::

    python tests/e2e/airflow_actions.py describe OUT.json
    python tests/e2e/airflow_actions.py render DAG_ID PARAMS_JSON RUN_TYPE UNTIL_ISO OUT.json
    python tests/e2e/airflow_actions.py master DAG_ID OUT.json
    python tests/e2e/airflow_actions.py test DAG_ID RUN_CONF_JSON OUT.json
    python tests/e2e/airflow_actions.py test-backfill DAG_ID RUN_CONF_JSON START END OUT.json
"""

from __future__ import annotations

import copy
import json
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
    from lakestate.airflow.operator import LakestateRebalanceOperator, LakestateRunOperator

    bag = _dagbag()
    dags: dict[str, Any] = {}
    for dag_id, dag in bag.dags.items():
        tasks = []
        for task in dag.tasks:
            info: dict[str, Any] = {
                "task_id": task.task_id,
                "class": f"{type(task).__module__}.{type(task).__qualname__}",
                "is_lakestate_run": isinstance(task, LakestateRunOperator),
                "is_lakestate_rebalance": isinstance(task, LakestateRebalanceOperator),
                "retries": task.retries,
                "queue": task.queue,
                "upstream": sorted(task.upstream_task_ids),
                "downstream": sorted(task.downstream_task_ids),
            }
            if isinstance(task, LakestateRunOperator | LakestateRebalanceOperator):
                info.update(
                    app_path=task.app_path,
                    app=task.app,
                    warehouse=task.warehouse,
                    state_dir=task.state_dir,
                    env=task.env,
                    python=task.python,
                )
            if isinstance(task, LakestateRebalanceOperator):
                info.update(command=task.command())
            if isinstance(task, LakestateRunOperator):
                info.update(
                    instance=task.instance,
                    master=task.master,
                    conn_id=task.conn_id,
                    default_master=task.default_master,
                    command=task.command(["--until-caught-up"], "local[2]"),
                )
            tasks.append(info)
        dags[dag_id] = {
            "fileloc": dag.fileloc,
            "max_active_runs": dag.max_active_runs,
            "catchup": dag.catchup,
            "is_paused_upon_creation": dag.is_paused_upon_creation,
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


def render(dag_id: str, params: dict[str, Any], run_type: str, until: str) -> dict[str, Any]:
    """The ``lakestate run`` options of a run of ``run_type`` with the DAG's Params,
    overridden by ``params`` (as a run's conf overrides them, validated as a trigger would),
    and cut at ``until`` (ISO; empty: none)."""
    from datetime import datetime

    from lakestate.airflow.operator import run_arguments

    dag = _dag(dag_id)
    resolved = copy.deepcopy(dag.params)
    resolved.update(params)  # validates each value against its Param's schema
    arguments = run_arguments(
        resolved.validate(),
        run_type=run_type,
        conf=params,
        until=datetime.fromisoformat(until) if until else None,
    )
    return {"arguments": arguments}


def render_all(dag_id: str, cases: list[list[Any]]) -> dict[str, Any]:
    """``render`` of each ``[params, run_type, until]`` case in this one interpreter
    (importing Airflow and parsing the DAGs once): per case its result, or the error it
    raised as ``{"error": "Type: message"}``."""
    results: list[dict[str, Any]] = []
    for params, run_type, until in cases:
        try:
            results.append(render(dag_id, params, run_type, until))
        except Exception as exc:  # the case's answer, asserted by the test
            results.append({"error": f"{type(exc).__name__}: {exc}"})
    return {"results": results}


def master(dag_id: str) -> dict[str, Any]:
    """The Spark master the DAG's first run task would give ``lakestate run``."""
    from lakestate.airflow.operator import LakestateRunOperator

    (task, *_) = (t for t in _dag(dag_id).tasks if isinstance(t, LakestateRunOperator))
    return {"master": task.spark_master()}


def _as_backfill_runs(start: str, end: str) -> None:
    """Make ``dag.test`` create its run as the scheduler creates a backfill's runs: run type
    ``backfill`` and the data interval ``[start, end)`` (dag.test creates manual runs only;
    no scheduler runs here, so the run's task still runs in this process)."""
    from datetime import datetime

    import airflow.models.dagrun as dagrun_module
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    interval = (datetime.fromisoformat(start), datetime.fromisoformat(end))

    def create(*, dag, run_id, logical_date, data_interval, run_after, conf, triggered_by,
               triggering_user_name, start_date, session):  # fmt: skip
        from sqlalchemy import select

        # As dag.test's own helper does: a run of the same logical date is replaced.
        for old in session.scalars(
            select(dagrun_module.DagRun).where(
                dagrun_module.DagRun.dag_id == dag.dag_id,
                dagrun_module.DagRun.logical_date == interval[0],
            )
        ):
            session.delete(old)
        session.commit()
        return dag.create_dagrun(
            run_id=DagRunType.BACKFILL_JOB.generate_run_id(suffix=interval[0].isoformat()),
            logical_date=interval[0],
            data_interval=interval,
            run_after=interval[1],
            conf=conf,
            run_type=DagRunType.BACKFILL_JOB,
            state=DagRunState.RUNNING,
            triggered_by=triggered_by,
            triggering_user_name=triggering_user_name,
            start_date=start_date,
            session=session,
        )

    dagrun_module.get_or_create_dagrun = create


def run_test(
    dag_id: str, run_conf: dict[str, Any], logical_date: str | None = None
) -> dict[str, Any]:
    """One real run of the DAG with ``dag.test``; the run's and the tasks' final states,
    and the path of each task's log."""
    from datetime import datetime

    dag = _dag(dag_id)
    if logical_date is None:
        dag_run = dag.test(run_conf=run_conf)
    else:
        dag_run = dag.test(run_conf=run_conf, logical_date=datetime.fromisoformat(logical_date))
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        dr = session.get(DagRun, dag_run.id)
        tis = dr.get_task_instances(session=session)
        return {
            "run_id": dr.run_id,
            "run_type": str(dr.run_type),
            "data_interval": [str(dr.data_interval_start), str(dr.data_interval_end)],
            "state": str(dr.state),
            "conf": dr.conf,
            "task_states": {ti.task_id: str(ti.state) for ti in tis},
        }


def kafka(conn_id: str) -> dict[str, Any]:
    """The Kafka settings a run task would give ``lakestate run`` for Param ``kafka_conn_id``
    ``conn_id``, or the error failing the task."""
    from lakestate.airflow.operator import kafka_settings

    try:
        return {"settings": kafka_settings(conn_id)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def connection_types() -> dict[str, Any]:
    """The connection types the installed providers give (Admin > Connections' choices)."""
    from airflow.providers_manager import ProvidersManager

    return {"types": sorted(ProvidersManager().hooks)}


def main(argv: list[str]) -> int:
    action, *args, out = argv
    if action == "describe":
        result = describe()
    elif action == "render":
        result = render(args[0], json.loads(args[1]), args[2], args[3])
    elif action == "render-all":
        result = render_all(args[0], json.loads(args[1]))
    elif action == "master":
        result = master(args[0])
    elif action == "kafka":
        result = kafka(args[0])
    elif action == "connection-types":
        result = connection_types()
    elif action == "test":
        result = run_test(args[0], json.loads(args[1]))
    elif action == "test-backfill":
        _as_backfill_runs(args[2], args[3])
        result = run_test(args[0], json.loads(args[1]), logical_date=args[2])
    else:
        raise SystemExit(f"unknown action {action!r}")
    Path(out).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
