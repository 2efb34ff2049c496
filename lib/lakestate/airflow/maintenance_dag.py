"""The maintenance DAG of a lakestate app.

``make_maintenance_dag("jobs/APP.py")`` returns the app's second DAG,
``lakestate_<app>_maintenance``, on its own schedule (daily by default, one run at a
time): three Python tasks, no Spark, ``compact`` (``lakestate.ops.compaction``: the
changelog tables) -> ``optimize`` -> ``vacuum`` (``lakestate.ops.maintenance``: the
changelog tables, the progress table and the topics the app writes). It runs beside
the app's batches: nothing it commits changes data, txn versions or end offsets, and
VACUUM keeps what the last ``vacuum_retention_hours`` (Param; default 168, 7 days)
need, so time travel over that window (an app's rewind) keeps working."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param

from lakestate.airflow.dag_factory import DEFAULT_START_DATE, base_dir, warehouse_dir
from lakestate.app import load_app
from lakestate.warehouse import Warehouse

__all__ = [
    "MAINTENANCE_TASKS",
    "compact_task",
    "make_maintenance_dag",
    "optimize_task",
    "vacuum_task",
]

#: The maintenance DAG's tasks, in the order they run.
MAINTENANCE_TASKS = ("compact", "optimize", "vacuum")


def compact_task(warehouse: str, app: str) -> None:
    """The maintenance DAG's ``compact`` task: compaction of the app's changelog tables
    (``lakestate.ops.maintenance.compact_changelogs``)."""
    from lakestate.ops import maintenance

    result = maintenance.compact_changelogs(Warehouse(warehouse), app)
    print(f"compact: {len(result.committed)} of {len(result.tasks)} task changelogs compacted")


def optimize_task(warehouse: str, app: str) -> None:
    """The maintenance DAG's ``optimize`` task (``lakestate.ops.maintenance.optimize``)."""
    from lakestate.ops import maintenance

    done = maintenance.optimize(Warehouse(warehouse), app)
    before, after = sum(t.files_before for t in done), sum(t.files_after for t in done)
    print(f"optimize: {len(done)} tables, {before} -> {after} files")


def vacuum_task(warehouse: str, app: str, params: Mapping[str, Any]) -> None:
    """The maintenance DAG's ``vacuum`` task, with the run's ``vacuum_retention_hours``."""
    from lakestate.ops import maintenance

    retention = timedelta(hours=int(params["vacuum_retention_hours"]))
    done = maintenance.vacuum(Warehouse(warehouse), app, retention)
    print(f"vacuum: {len(done)} tables, {sum(len(t.deleted) for t in done)} files deleted")


def make_maintenance_dag(
    app_path: str | os.PathLike[str],
    *,
    dag_id: str | None = None,
    schedule: Any = timedelta(days=1),
    start_date: datetime = DEFAULT_START_DATE,
    vacuum_retention: timedelta = timedelta(days=7),
    warehouse: str | os.PathLike[str] | None = None,
    tags: Sequence[str] | None = None,
    retries: int = 1,
    retry_delay: timedelta = timedelta(minutes=10),
    execution_timeout: timedelta | None = None,
    is_paused_upon_creation: bool = False,
) -> DAG:
    """The maintenance DAG of the lakestate app defined in ``app_path`` (see the module
    docstring): ``compact`` -> ``optimize`` -> ``vacuum`` on ``schedule`` (daily by
    default), one run at a time, beside the app's own DAG.

    ``dag_id`` defaults to ``lakestate_<app name>_maintenance``; ``tags`` to ``["lakestate",
    <app name>, "maintenance"]``. ``vacuum_retention`` is the default of Param
    ``vacuum_retention_hours`` (whole hours, at least 1). ``warehouse`` as in ``make_dag``.
    ``retries``: a task that lost a commit race to a concurrent writer retries later.
    ``is_paused_upon_creation`` as in ``make_dag``.
    """
    from lakestate.ops.maintenance import retention_hours

    app_path = Path(app_path).resolve()
    app = load_app(app_path)  # a broken app is an import error of the DAG file
    hours = retention_hours(vacuum_retention)
    warehouse = warehouse_dir(base_dir(app_path), warehouse)
    arguments = {"warehouse": warehouse, "app": app.name}

    with DAG(
        dag_id=dag_id or f"lakestate_{app.name}_maintenance",
        description=f"lakestate app {app.name}: compaction, OPTIMIZE and VACUUM of its tables",
        doc_md=f"### Maintenance of lakestate app `{app.name}`\n\n`{app_path}`\n\n"
        f"compact -> optimize -> vacuum of the app's tables in `{warehouse}`, beside its "
        "batches (no Spark).",
        schedule=schedule,
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=is_paused_upon_creation,
        tags=list(tags) if tags is not None else ["lakestate", app.name, "maintenance"],
        default_args={"owner": "lakestate", "retries": retries, "retry_delay": retry_delay},
        params={"vacuum_retention_hours": _retention_param(hours)},
    ) as dag:
        _chain_tasks(arguments, execution_timeout)
    return dag


def _chain_tasks(arguments: dict[str, str], execution_timeout: timedelta | None) -> None:
    """The DAG's tasks (inside its ``with DAG``), in MAINTENANCE_TASKS order, each after
    the one before."""
    previous = None
    for task_id in MAINTENANCE_TASKS:
        run, doc = _TASKS[task_id]
        task = PythonOperator(
            task_id=task_id,
            python_callable=run,
            op_kwargs=arguments,
            execution_timeout=execution_timeout,
            doc_md=doc,
        )
        if previous is not None:
            previous >> task
        previous = task


def _retention_param(hours: int) -> Param:
    return Param(
        hours,
        type="integer",
        minimum=1,
        title="VACUUM retention (hours)",
        description="VACUUM deletes only files that no table version of this many "
        "hours back needs: time travel (an app's rewind) works over this window. "
        "At least 1: younger files may belong to a batch being read or committed.",
    )


#: Each maintenance task's callable and documentation.
_TASKS: dict[str, tuple[Callable[..., None], str]] = {
    "compact": (
        compact_task,
        "Compaction of the app's changelog tables (`lakestate.ops.compaction`).",
    ),
    "optimize": (
        optimize_task,
        "OPTIMIZE (small-file compaction, delta-rs) of the app's changelog tables, "
        "progress table and the topics it writes.",
    ),
    "vacuum": (
        vacuum_task,
        "VACUUM (delta-rs) of the same tables, keeping `vacuum_retention_hours`.",
    ),
}
