"""The DAG factory: one Airflow DAG per lakestate app.

``make_dag("jobs/APP.py")`` returns a DAG that runs the app's micro-batches on a schedule
(every 5 minutes by default, never two runs at once, no catch-up of missed intervals) and on
demand from the UI's trigger form (Params ``until_caught_up``, ``time_budget_s``,
``max_batches``, ``max_records``). Its one task is the Spark provider's
``SparkSubmitOperator`` running::

    spark-submit --master <from the Spark connection> --packages <Delta jar> --conf ... \\
        lib/lakestate/engine/submit.py <repo>/jobs/APP.py --max-batches=N|none \\
        --max-records=N|none --until-caught-up=true|false --time-budget=SECONDS|none \\
        --warehouse=DIR --state-dir=DIR

What a run processes
    By default a run processes until caught up (``until_caught_up``): batch after batch
    until no input is left, so that a record reaches its sink in one run however many
    sub-topologies (repartition topics) lie between. ``time_budget_s`` bounds it: no new
    batch starts once that many seconds have passed since the engine began the run (the
    batch under way finishes; spark-submit's own start-up comes before and is not counted),
    and the next scheduled run goes on from the committed offsets. Its default is a bit
    under the schedule interval (``time_budget_for``: 80% of it, 240 s for the 5-minute
    schedule), so that a run normally ends about when the next one is due. With
    ``until_caught_up`` off, a run does at most ``max_batches`` batches (within the budget
    too). ``max_records`` bounds each batch's records per task.

The Spark master
    comes from the Airflow connection ``spark_conn_id`` (default ``spark_default``), as the
    provider's ``SparkSubmitHook`` derives it: a connection of type ``spark`` whose host is a
    full master URL (``local[*]``, ``spark://host:7077``, ``k8s://https://...``) is used as is,
    e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'`` or
    ``AIRFLOW_CONN_SPARK_DEFAULT='spark://spark-master:7077?deploy-mode=client'``. Without
    such a connection the hook would fall back to ``yarn``; the task's ``pre_execute`` instead
    defines the connection for its own process as ``default_master`` (``local[*]``) when no
    secrets backend, environment variable or metadata-database entry has it. A connection
    that exists always wins.

The job's environment (``env_vars``, on top of the worker's own)
    ``LAKESTATE_WAREHOUSE`` and ``LAKESTATE_STATE_DIR`` (the ``warehouse``/``state_dir``
    arguments, else the same env vars where the DAG is parsed, else ``<repo>/warehouse`` and
    ``<repo>/state``), ``LAKESTATE_IVY_DIR``, ``PYTHONPATH`` with lakestate's source folder
    first, ``PYSPARK_PYTHON`` (env ``PYSPARK_PYTHON`` where the DAG is parsed, else the Python
    running Airflow, ``sys.executable``: the one with pyspark, delta-spark and lakestate) and,
    when the first ``spark-submit`` on ``PATH`` is not the one beside that Python (the pyspark
    wheel's), ``PATH`` with that Python's bin folder first. The task's process re-parses the
    DAG file, so these are the worker's values.

Spark confs come from ``lakestate.engine.spark.spark_conf`` (Delta's SQL extension and
catalog, the Ivy cache of the Delta jars, shuffle partitions, ...), minus what spark-submit
takes as options (master, name, ``--packages``), plus ``spark.pyspark.python`` and
``spark.log.level`` (env ``LAKESTATE_LOG_LEVEL``, default ``WARN``).

The maintenance DAG
    ``make_maintenance_dag("jobs/APP.py")`` returns the app's second DAG,
    ``lakestate_<app>_maintenance``, on its own schedule (daily by default, one run at a
    time): three Python tasks, no Spark, ``compact`` (``lakestate.engine.compaction``: the
    changelog tables) -> ``optimize`` -> ``vacuum`` (``lakestate.engine.maintenance``: the
    changelog tables, the progress table and the topics the app writes). It runs beside
    the app's batches: nothing it commits changes data, txn versions or end offsets, and
    VACUUM keeps what the last ``vacuum_retention_hours`` (Param; default 168, 7 days)
    need, so time travel over that window (an app's rewind) keeps working."""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param
from airflow.sdk.exceptions import AirflowNotFoundException

import lakestate
from lakestate.app import load_app
from lakestate.engine import spark as lakestate_spark
from lakestate.warehouse import Warehouse

__all__ = [
    "DEFAULT_MASTER",
    "DEFAULT_START_DATE",
    "DEFAULT_TIME_BUDGET_S",
    "SUBMIT_SCRIPT",
    "TASK_ID",
    "EnsureSparkConnection",
    "application_args",
    "make_dag",
    "make_maintenance_dag",
    "spark_connection_uri",
    "submit_conf",
    "time_budget_for",
]

log = logging.getLogger(__name__)

#: The Spark master when no Airflow connection says otherwise.
DEFAULT_MASTER = "local[*]"
#: A fixed date in the past: with ``catchup=False`` only the latest interval is scheduled.
DEFAULT_START_DATE = datetime(2025, 1, 1, tzinfo=UTC)
#: The id of the DAG's Spark task.
TASK_ID = "run_batches"
#: A run's time budget when the schedule is not a fixed interval (a cron expression, ...).
DEFAULT_TIME_BUDGET_S = 240
#: The maintenance DAG's tasks, in the order they run.
MAINTENANCE_TASKS = ("compact", "optimize", "vacuum")
#: lakestate's source folder (``<repo>/lib`` in a checkout).
LIB_DIR = Path(lakestate.__file__).resolve().parent.parent
#: The spark-submit application: parses ``lakestate run``'s arguments, calls the runner.
SUBMIT_SCRIPT = Path(lakestate.__file__).resolve().parent / "engine" / "submit.py"

#: spark_conf() entries that spark-submit takes as options instead.
_SUBMIT_OPTIONS = ("spark.master", "spark.app.name", "spark.jars.packages")


def spark_connection_uri(master: str = DEFAULT_MASTER) -> str:
    """The value of ``AIRFLOW_CONN_<ID>`` for a Spark connection to ``master`` (JSON form:
    the host holds the whole master URL, which ``SparkSubmitHook`` passes to ``--master``)."""
    return json.dumps({"conn_type": "spark", "host": master})


class EnsureSparkConnection:
    """A task ``pre_execute`` hook: if connection ``conn_id`` is defined nowhere, define it in
    this process's environment as a Spark connection to ``master`` before the operator builds
    its ``SparkSubmitHook`` (which would otherwise fall back to ``yarn``)."""

    def __init__(self, conn_id: str, master: str = DEFAULT_MASTER) -> None:
        self.conn_id = conn_id
        self.master = master

    @property
    def env_var(self) -> str:
        return f"AIRFLOW_CONN_{self.conn_id.upper()}"

    def __call__(self, context: Any = None) -> None:
        from airflow.sdk import BaseHook

        try:
            BaseHook.get_connection(self.conn_id)
            return
        except AirflowNotFoundException:
            pass
        log.info(
            "No Airflow connection %r: running Spark on %s (define the connection, e.g. env %s, "
            "to choose another master)",
            self.conn_id,
            self.master,
            self.env_var,
        )
        os.environ[self.env_var] = spark_connection_uri(self.master)

    def __repr__(self) -> str:
        return f"EnsureSparkConnection({self.conn_id!r}, {self.master!r})"


def application_args(app_path: str | os.PathLike[str], warehouse: str, state_dir: str) -> list[str]:
    """submit.py's arguments, templated on the run's Params (one ``--opt=value`` each, so a
    null or false value still renders to a valid argument). ``until_caught_up`` lifts the
    ``max_batches`` cap: the engine stops at whichever bound comes first, and it always stops
    once no input is left, so the flag only matters without a cap. The time budget applies
    either way."""
    return [
        str(app_path),
        "--max-batches={{ 'none' if params.until_caught_up else params.max_batches }}",
        "--max-records={{ 'none' if params.max_records is none else params.max_records }}",
        "--until-caught-up={{ 'true' if params.until_caught_up else 'false' }}",
        "--time-budget={{ 'none' if params.time_budget_s is none else params.time_budget_s }}",
        f"--warehouse={warehouse}",
        f"--state-dir={state_dir}",
    ]


def time_budget_for(schedule: Any) -> int:
    """A run's default time budget for ``schedule``: 80% of its interval when it is a
    ``timedelta`` (240 s for 5 minutes), else ``DEFAULT_TIME_BUDGET_S``."""
    if isinstance(schedule, timedelta):
        return max(1, int(schedule.total_seconds() * 0.8))
    return DEFAULT_TIME_BUDGET_S


def submit_conf(pyspark_python: str, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """spark-submit's ``--conf`` entries: lakestate's session confs (Delta, Ivy cache, ...)
    without the ones spark-submit takes as options, plus ``spark.pyspark.python`` and
    ``spark.log.level``; ``extra`` last."""
    conf = {k: v for k, v in lakestate_spark.spark_conf().items() if k not in _SUBMIT_OPTIONS}
    conf["spark.pyspark.python"] = pyspark_python
    # The level get_spark sets once the session is up, from the start (less INFO in task logs).
    conf["spark.log.level"] = os.environ.get(
        "LAKESTATE_LOG_LEVEL", lakestate_spark.DEFAULT_LOG_LEVEL
    )
    conf.update({k: str(v) for k, v in (extra or {}).items()})
    return conf


def _base_dir(app_path: Path) -> Path:
    """The checkout an app belongs to: ``<repo>`` for ``<repo>/jobs/APP.py``."""
    if app_path.parent.name == "jobs":
        return app_path.parent.parent
    return LIB_DIR.parent


def _warehouse_dir(base: Path, warehouse: str | os.PathLike[str] | None) -> str:
    """The ``warehouse`` argument, else env ``LAKESTATE_WAREHOUSE``, else ``<base>/warehouse``."""
    return str(
        Path(warehouse or os.environ.get("LAKESTATE_WAREHOUSE") or base / "warehouse").resolve()
    )


def _job_env(
    warehouse: str, state_dir: str, pyspark_python: str, extra: Mapping[str, Any] | None
) -> dict[str, str]:
    env = {
        "LAKESTATE_WAREHOUSE": warehouse,
        "LAKESTATE_STATE_DIR": state_dir,
        "LAKESTATE_IVY_DIR": str(lakestate_spark.ivy_dir()),
        "PYSPARK_PYTHON": pyspark_python,
        "PYTHONPATH": os.pathsep.join(
            [str(LIB_DIR), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        ),
    }
    # spark-submit is looked up on PATH: make it the one next to the Python that has pyspark.
    python_bin = Path(pyspark_python if os.path.isabs(pyspark_python) else sys.executable).parent
    spark_submit = python_bin / "spark-submit"
    if spark_submit.is_file() and shutil.which("spark-submit") != str(spark_submit):
        env["PATH"] = os.pathsep.join([str(python_bin), os.environ.get("PATH", os.defpath)])
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def _doc_md(app_path: Path, app: lakestate.App) -> str:
    doc = ast.get_docstring(ast.parse(app_path.read_text(encoding="utf-8"))) or ""
    try:
        topology = str(app.topology.describe())
    except Exception:  # documentation only
        topology = ""
    parts = [f"### lakestate app `{app.name}`", f"`{app_path}`", doc]
    if topology:
        parts.append(f"```\n{topology}\n```")
    return "\n\n".join(p for p in parts if p)


def make_dag(
    app_path: str | os.PathLike[str],
    *,
    dag_id: str | None = None,
    schedule: Any = timedelta(minutes=5),
    start_date: datetime = DEFAULT_START_DATE,
    spark_conn_id: str = "spark_default",
    default_max_batches: int = 1,
    default_until_caught_up: bool = True,
    default_time_budget_s: int | None = None,
    tags: Sequence[str] | None = None,
    default_master: str = DEFAULT_MASTER,
    warehouse: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    spark_conf: Mapping[str, Any] | None = None,
    env_vars: Mapping[str, Any] | None = None,
    retries: int = 0,
    execution_timeout: timedelta | None = None,
) -> DAG:
    """The DAG running the lakestate app defined in ``app_path`` (``jobs/APP.py``).

    ``dag_id`` defaults to ``lakestate_<app name>``; ``tags`` to ``["lakestate", <app
    name>]``. ``default_until_caught_up``, ``default_time_budget_s`` (None:
    ``time_budget_for(schedule)``) and ``default_max_batches`` are the Params'
    defaults: what scheduled runs do (see the module docstring).
    ``default_master`` is used when connection ``spark_conn_id`` is not defined.
    ``spark_conf`` and ``env_vars`` add to (and override) the defaults described in the
    module docstring. ``retries`` is 0: a failed batch leaves the committed state as it was,
    and the next scheduled run resumes from the committed offsets.
    """
    app_path = Path(app_path).resolve()
    app = load_app(app_path)  # a broken app is an import error of the DAG file
    if default_max_batches < 1:
        raise ValueError(f"default_max_batches must be at least 1, got {default_max_batches}")
    if default_time_budget_s is None:
        default_time_budget_s = time_budget_for(schedule)
    if default_time_budget_s < 1:
        raise ValueError(f"default_time_budget_s must be at least 1, got {default_time_budget_s}")
    base = _base_dir(app_path)
    warehouse = _warehouse_dir(base, warehouse)
    state_dir = str(
        Path(state_dir or os.environ.get("LAKESTATE_STATE_DIR") or base / "state").resolve()
    )
    pyspark_python = os.environ.get("PYSPARK_PYTHON") or sys.executable

    with DAG(
        dag_id=dag_id or f"lakestate_{app.name}",
        description=f"lakestate app {app.name}: micro-batches of {app_path.name} on Spark",
        doc_md=_doc_md(app_path, app),
        schedule=schedule,
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        tags=list(tags) if tags is not None else ["lakestate", app.name],
        default_args={"owner": "lakestate", "retries": retries},
        params={
            "until_caught_up": Param(
                default_until_caught_up,
                type="boolean",
                title="Until caught up",
                description="Keep running micro-batches until no input is left "
                "(--until-caught-up), within time_budget_s: a record reaches its sink in one "
                "run whatever the number of sub-topologies. max_batches does not apply.",
            ),
            "time_budget_s": Param(
                default_time_budget_s,
                type=["null", "integer"],
                minimum=1,
                title="Time budget (seconds)",
                description="Start no new micro-batch once this many seconds have passed "
                "since the engine began the run (--time-budget; the batch under way "
                "finishes, Spark's start-up is not counted). The next run goes on from where "
                "this one stopped. Empty: no budget.",
            ),
            "max_batches": Param(
                default_max_batches,
                type="integer",
                minimum=1,
                title="Max batches",
                description="Run at most this many micro-batches in this DAG run (fewer "
                "when the input runs out or the time budget is spent). Ignored when "
                "until_caught_up is set.",
            ),
            "max_records": Param(
                None,
                type=["null", "integer"],
                minimum=1,
                title="Max records",
                description="Read at most this many source records per micro-batch "
                "(--max-records); the app's statestore.uncommitted.max.records bounds it too. "
                "Empty: that bound alone.",
            ),
        },
    ) as dag:
        SparkSubmitOperator(
            task_id=TASK_ID,
            conn_id=spark_conn_id,
            application=str(SUBMIT_SCRIPT),
            application_args=application_args(app_path, warehouse, state_dir),
            name=app.name,
            packages=lakestate_spark.delta_maven_coordinates(),
            conf=submit_conf(pyspark_python, spark_conf),
            env_vars=_job_env(warehouse, state_dir, pyspark_python, env_vars),
            pre_execute=EnsureSparkConnection(spark_conn_id, default_master),
            execution_timeout=execution_timeout,
            doc_md=f"spark-submit of `{SUBMIT_SCRIPT.name}` for `{app_path}`; the Spark master "
            f"is connection `{spark_conn_id}`'s, else `{default_master}`.",
        )
    return dag


# -- the maintenance DAG ------------------------------------------------------------------


def compact_task(warehouse: str, app: str) -> None:
    """The maintenance DAG's ``compact`` task: compaction of the app's changelog tables
    (``lakestate.engine.maintenance.compact_changelogs``)."""
    from lakestate.engine import maintenance

    result = maintenance.compact_changelogs(Warehouse(warehouse), app)
    print(f"compact: {len(result.committed)} of {len(result.tasks)} task changelogs compacted")


def optimize_task(warehouse: str, app: str) -> None:
    """The maintenance DAG's ``optimize`` task (``lakestate.engine.maintenance.optimize``)."""
    from lakestate.engine import maintenance

    done = maintenance.optimize(Warehouse(warehouse), app)
    before, after = sum(t.files_before for t in done), sum(t.files_after for t in done)
    print(f"optimize: {len(done)} tables, {before} -> {after} files")


def vacuum_task(warehouse: str, app: str, params: Mapping[str, Any]) -> None:
    """The maintenance DAG's ``vacuum`` task, with the run's ``vacuum_retention_hours``."""
    from lakestate.engine import maintenance

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
) -> DAG:
    """The maintenance DAG of the lakestate app defined in ``app_path`` (see the module
    docstring): ``compact`` -> ``optimize`` -> ``vacuum`` on ``schedule`` (daily by
    default), one run at a time, beside the app's own DAG.

    ``dag_id`` defaults to ``lakestate_<app name>_maintenance``; ``tags`` to ``["lakestate",
    <app name>, "maintenance"]``. ``vacuum_retention`` is the default of Param
    ``vacuum_retention_hours`` (whole hours, at least 1). ``warehouse`` as in ``make_dag``.
    ``retries``: a task that lost a commit race to a concurrent writer retries later.
    """
    from lakestate.engine.maintenance import retention_hours

    app_path = Path(app_path).resolve()
    app = load_app(app_path)  # a broken app is an import error of the DAG file
    hours = retention_hours(vacuum_retention)
    warehouse = _warehouse_dir(_base_dir(app_path), warehouse)
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
        tags=list(tags) if tags is not None else ["lakestate", app.name, "maintenance"],
        default_args={"owner": "lakestate", "retries": retries, "retry_delay": retry_delay},
        params={
            "vacuum_retention_hours": Param(
                hours,
                type="integer",
                minimum=1,
                title="VACUUM retention (hours)",
                description="VACUUM deletes only files that no table version of this many "
                "hours back needs: time travel (an app's rewind) works over this window. "
                "At least 1: younger files may belong to a batch being read or committed.",
            ),
        },
    ) as dag:
        compact = PythonOperator(
            task_id="compact",
            python_callable=compact_task,
            op_kwargs=arguments,
            execution_timeout=execution_timeout,
            doc_md="Compaction of the app's changelog tables (`lakestate.engine.compaction`).",
        )
        optimize = PythonOperator(
            task_id="optimize",
            python_callable=optimize_task,
            op_kwargs=arguments,
            execution_timeout=execution_timeout,
            doc_md="OPTIMIZE (small-file compaction, delta-rs) of the app's changelog tables, "
            "progress table and the topics it writes.",
        )
        vacuum = PythonOperator(
            task_id="vacuum",
            python_callable=vacuum_task,
            op_kwargs=arguments,
            execution_timeout=execution_timeout,
            doc_md="VACUUM (delta-rs) of the same tables, keeping `vacuum_retention_hours`.",
        )
        compact >> optimize >> vacuum
    return dag
