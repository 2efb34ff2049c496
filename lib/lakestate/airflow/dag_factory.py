"""The DAG factory: one Airflow DAG per lakestate app.

``make_dag("jobs/APP.py")`` returns a DAG that runs the app's micro-batches on a schedule
(every 5 minutes by default, one scheduled run at a time, no catch-up of missed intervals,
unpaused when created) and on demand from the UI's trigger form (Params
``until_caught_up``, ``time_budget_s``, ``max_batches``, ``max_records``, ``transport``,
``kafka_conn_id``, ``rewind``, ``confirm_rewind``).

Its tasks (``lakestate.airflow.operator``), each the lakestate CLI in a subprocess, its
output in the task log:

- ``rebalance`` (``LakestateRebalanceOperator``): ``python -m lakestate.cli rebalance
  <repo>/jobs/APP.py --warehouse DIR``, the app's next assignment generation when its
  instances or their lags changed or a probing rebalance is due; then, downstream of it and
  side by side,
- one run task per instance of the app (``lakestate.instances`` in its config;
  ``lakestate.scaleout.instances``), ``run_<name>``, on the instance's Airflow queue
  (``queue=<instance queue>``: a Celery worker per instance, with its own local disk), each
  ``python -m lakestate.cli --master M run <repo>/jobs/APP.py --warehouse DIR --state-dir
  DIR --instance NAME ...``: the tasks the assignment gives that instance. The tasks are
  made when the DAG is parsed (Airflow cannot vary a mapped task's queue), so a change to
  the instances shows once the DAG file is parsed again. An app without instances has one
  run task, ``run_batches``, on the default queue, with no ``--instance`` (its implicit
  instance runs every task, as before instances existed).

The rebalance task runs on the first instance's queue (any worker could: it reads and writes
Delta tables only; a rewind run's rewind, done there, waits for a run under way on that
instance). No spark-submit, and no JVM at all for a run small enough to be processed in
process (the engine decides).

What a run processes
    By default a run processes until caught up (``until_caught_up``): batch after batch
    until no input is left, so that a record reaches its sink in one run however many
    sub-topologies (repartition topics) lie between. ``time_budget_s`` bounds it: no new
    batch starts once that many seconds have passed since the run began (the batch under
    way finishes), and the next scheduled run goes on from the committed offsets. Its
    default is a bit under the schedule interval (``time_budget_for``: 80% of it, 240 s for
    the 5-minute schedule), so that a run normally ends about when the next one is due.
    With ``until_caught_up`` off, a run does at most ``max_batches`` batches (within the
    budget too). ``max_records`` bounds each batch's records per task.

Runs never fight
    A run that finds another run of the app active on this instance (a manual run beside
    the scheduled one, a backfill's runs) waits for it, up to its time budget (backfill and
    rewind runs: as long as it takes), then processes what is new; a run still waiting when
    its budget is spent finishes green having done nothing.

Backfills and rewinds
    A backfill run (``airflow backfill create``) processes the records stamped before its
    data interval's end, in offset order, until caught up to that cut: after the backfill of
    an interval, everything stamped in it has been processed once (a no-op if it was
    before); every instance's run is cut there. Param ``rewind`` (with ``confirm_rewind`` =
    the app's name) first restores the app's state and sinks to the batch before the run's
    data interval (``lakestate.ops.rewind``, once, in the rebalance task), then every
    instance reprocesses up to its end. See ``lakestate.airflow.operator``.

The Spark master (for runs large enough to use Spark)
    is the instance's ``master`` when its config gives one, else it comes from the Airflow
    connection ``spark_conn_id`` (default ``spark_default``), read as
    the Spark provider reads it (``operator.spark_master``): a connection of type ``spark``
    whose host is a full master URL (``local[*]``, ``k8s://https://...``) is used as is, e.g.
    ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'``; a URI
    connection ``spark://spark-master:7077?deploy-mode=client`` gives
    ``spark://spark-master:7077`` (the driver is always the task's subprocess). Without such
    a connection: ``default_master`` (``local[*]``).

The Kafka cluster (for apps whose topics are in Kafka)
    comes from the app's config (``bootstrap.servers``), overridden by the extra of the
    Airflow connection of type Apache Kafka that Param ``kafka_conn_id`` names (its default:
    ``make_dag(kafka_conn_id=...)``, e.g. ``kafka_default``), as env
    ``LAKESTATE_KAFKA_CONFIG`` of the run (``operator.kafka_settings``).

The run's environment (on top of the worker's own)
    ``LAKESTATE_WAREHOUSE`` and ``LAKESTATE_STATE_DIR`` (the ``warehouse``/``state_dir``
    arguments, else the same env vars where the DAG is parsed, else ``<repo>/warehouse`` and
    ``<repo>/state``; an instance's state directory, ``--state-dir``, is its configured
    ``state_dir``, else ``<LAKESTATE_STATE_DIR>/<name>``), ``LAKESTATE_IVY_DIR``, ``PYTHONPATH`` with lakestate's source folder
    first, ``PYSPARK_PYTHON`` (env ``PYSPARK_PYTHON`` where the DAG is parsed, else the
    Python running Airflow, ``sys.executable``), ``LAKESTATE_SPARK_CONF`` (JSON) when
    ``spark_conf`` is given, then ``env_vars``. The task's process re-parses the DAG file, so
    these are the worker's values.

The maintenance DAG
    is ``make_maintenance_dag`` (``lakestate.airflow.maintenance_dag``)."""

from __future__ import annotations

import ast
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param

import lakestate
from lakestate.airflow.operator import (
    DEFAULT_MASTER,
    TRANSPORTS,
    LakestateRebalanceOperator,
    LakestateRunOperator,
)
from lakestate.app import load_app
from lakestate.runtime import spark_session as lakestate_spark
from lakestate.warehouse import Warehouse

__all__ = [
    "DEFAULT_MASTER",
    "DEFAULT_START_DATE",
    "DEFAULT_TIME_BUDGET_S",
    "REBALANCE_TASK_ID",
    "TASK_ID",
    "base_dir",
    "instance_runs",
    "make_dag",
    "time_budget_for",
    "warehouse_dir",
]

#: A fixed date in the past: with ``catchup=False`` only the latest interval is scheduled.
DEFAULT_START_DATE = datetime(2025, 1, 1, tzinfo=UTC)
#: The id of the run task of an app without instances (one implicit instance).
TASK_ID = "run_batches"
#: The id of the DAG's first task, upstream of the instances' run tasks.
REBALANCE_TASK_ID = "rebalance"
#: A run's time budget when the schedule is not a fixed interval (a cron expression, ...).
DEFAULT_TIME_BUDGET_S = 240
#: lakestate's source folder (``<repo>/lib`` in a checkout).
LIB_DIR = Path(lakestate.__file__).resolve().parent.parent


def time_budget_for(schedule: Any) -> int:
    """A run's default time budget for ``schedule``: 80% of its interval when it is a
    ``timedelta`` (240 s for 5 minutes), else ``DEFAULT_TIME_BUDGET_S``."""
    if isinstance(schedule, timedelta):
        return max(1, int(schedule.total_seconds() * 0.8))
    return DEFAULT_TIME_BUDGET_S


def base_dir(app_path: Path) -> Path:
    """The checkout an app belongs to: ``<repo>`` for ``<repo>/jobs/APP.py``."""
    if app_path.parent.name == "jobs":
        return app_path.parent.parent
    return LIB_DIR.parent


def warehouse_dir(base: Path, warehouse: str | os.PathLike[str] | None) -> str:
    """The ``warehouse`` argument, else env ``LAKESTATE_WAREHOUSE``, else ``<base>/warehouse``:
    a folder as an absolute path, a URI (``s3://bucket/prefix``) as it is."""
    return Warehouse(warehouse or os.environ.get("LAKESTATE_WAREHOUSE") or base / "warehouse").root


def _job_env(
    warehouse: str,
    state_dir: str,
    pyspark_python: str,
    spark_conf: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None,
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
    if spark_conf:
        env["LAKESTATE_SPARK_CONF"] = json.dumps({k: str(v) for k, v in spark_conf.items()})
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


def _params(
    until_caught_up: bool, time_budget_s: int, max_batches: int, app: str, kafka_conn_id: str | None
) -> dict[str, Param]:
    """The DAG's trigger Params: what a run processes, on which transport, with which Kafka
    connection, and a rewind."""
    return {
        **_run_params(until_caught_up, time_budget_s, max_batches),
        **_kafka_params(kafka_conn_id),
        **_rewind_params(app),
    }


def _run_params(until_caught_up: bool, time_budget_s: int, max_batches: int) -> dict[str, Param]:
    return {
        "until_caught_up": Param(
            until_caught_up,
            type="boolean",
            title="Until caught up",
            description="Keep running micro-batches until no input is left "
            "(--until-caught-up), within time_budget_s: a record reaches its sink in one "
            "run whatever the number of sub-topologies. max_batches does not apply.",
        ),
        "time_budget_s": Param(
            time_budget_s,
            type=["null", "integer"],
            minimum=1,
            title="Time budget (seconds)",
            description="Start no new micro-batch once this many seconds have passed "
            "since the run began, waiting for another run of the app included (the batch "
            "under way finishes). The next run goes on from where this one stopped. Empty: "
            "no budget. Backfill and rewind runs have none unless their conf sets it.",
        ),
        "max_batches": Param(
            max_batches,
            type="integer",
            minimum=1,
            title="Max batches",
            description="Run at most this many micro-batches in this DAG run (fewer "
            "when the input runs out or the time budget is spent). Ignored when "
            "until_caught_up is set, and by backfill and rewind runs.",
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
        "transport": Param(
            None,
            type=["null", "string"],
            enum=[None, *TRANSPORTS],
            title="Transport",
            description="Where the run reads and processes its batches (--transport): "
            "inprocess (delta-rs, in the task's process, no JVM), spark (Spark's workers), "
            "auto (in process when the pending records are at most "
            "lakestate.inprocess.max.records or Spark's master is local, else Spark). Empty: "
            "the app's "
            "lakestate.transport, else auto.",
        ),
    }


def _kafka_params(kafka_conn_id: str | None) -> dict[str, Param]:
    """Where a run's Kafka settings come from: the connection ``kafka_conn_id`` (default)."""
    return {
        "kafka_conn_id": Param(
            kafka_conn_id,
            type=["null", "string"],
            title="Kafka connection",
            description="An Airflow connection of type Apache Kafka whose extra holds the Kafka "
            "client settings (bootstrap.servers, security settings): the app reads its source "
            "topics from and writes its sink topics to that cluster, these settings over its "
            "config's. Empty: the app's config alone.",
        ),
    }


def _rewind_params(app: str) -> dict[str, Param]:
    return {
        "rewind": Param(
            False,
            type="boolean",
            title="Rewind",
            description="Restore the app's state and sinks to the batch before this run's "
            "data interval (the latest point at which no task's stream time had reached its "
            "start; Delta time travel), then reprocess the records stamped before its end. "
            "Sinks lose what later batches wrote. Needs confirm_rewind.",
        ),
        "confirm_rewind": Param(
            "",
            type=["null", "string"],
            title="Confirm rewind",
            description=f"With rewind: the app's name ({app}), to confirm. Any other value "
            "fails the run before anything is changed.",
        ),
    }


@dataclass(frozen=True)
class InstanceRun:
    """What an instance's run task is made of: its task id, ``--instance`` (None: the app
    has no instances), state directory, configured Spark master (None: the connection's)
    and queue (``{"queue": NAME}``, or ``{}``: Airflow's default queue)."""

    task_id: str
    instance: str | None
    state_dir: str
    master: str | None
    queue: dict[str, str]


def instance_runs(app: lakestate.App, state_dir: str) -> list[InstanceRun]:
    """The run tasks of ``app``'s DAG, one per instance in config order; ``state_dir`` is
    the state root (``LAKESTATE_STATE_DIR``). An app without ``lakestate.instances`` has one,
    ``run_batches``, in the state root itself, as before instances existed."""
    from lakestate.scaleout.instances import INSTANCES_KEY, instances_of

    instances = instances_of(app, state_dir)  # a bad config is an import error of the DAG file
    if INSTANCES_KEY not in app.config:
        return [InstanceRun(TASK_ID, None, instances[0].state_dir, None, {})]
    return [
        InstanceRun(
            task_id=f"run_{instance.name}",
            instance=instance.name,
            state_dir=instance.state_dir,
            master=instance.master,
            queue={"queue": instance.queue},
        )
        for instance in instances
    ]


def make_dag(
    app_path: str | os.PathLike[str],
    *,
    dag_id: str | None = None,
    schedule: Any = timedelta(minutes=5),
    start_date: datetime = DEFAULT_START_DATE,
    spark_conn_id: str = "spark_default",
    kafka_conn_id: str | None = None,
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
    is_paused_upon_creation: bool = False,
) -> DAG:
    """The DAG running the lakestate app defined in ``app_path`` (``jobs/APP.py``).

    ``dag_id`` defaults to ``lakestate_<app name>``; ``tags`` to ``["lakestate", <app
    name>]``. ``default_until_caught_up``, ``default_time_budget_s`` (None:
    ``time_budget_for(schedule)``) and ``default_max_batches`` are the Params'
    defaults: what scheduled runs do (see the module docstring).
    ``default_master`` is used when connection ``spark_conn_id`` is not defined (and the
    instance configures no master). ``kafka_conn_id``: Param ``kafka_conn_id``'s default (a
    Kafka connection giving the runs their Kafka settings; None: the app's config alone).
    ``state_dir``: the state root (the implicit instance's state directory; a configured
    instance's is ``<state_dir>/<name>`` unless it names one).
    ``spark_conf`` (Spark confs, as env ``LAKESTATE_SPARK_CONF``) and ``env_vars`` add to
    the run's environment. ``retries`` is 0: a failed batch leaves the committed state as
    it was, and the next scheduled run resumes from the committed offsets.
    ``is_paused_upon_creation``: False, the DAG runs on its schedule once Airflow first
    sees it (whatever ``[core] dags_are_paused_at_creation`` says).
    """
    app_path = Path(app_path).resolve()
    app = load_app(app_path)  # a broken app is an import error of the DAG file
    default_time_budget_s = _time_budget(default_max_batches, default_time_budget_s, schedule)
    defaults = (default_until_caught_up, default_time_budget_s, default_max_batches)
    state_dir, task_args = _run_args(
        app_path, app.name, warehouse, state_dir, spark_conf, env_vars, execution_timeout
    )
    with DAG(
        dag_id=dag_id or f"lakestate_{app.name}",
        description=f"lakestate app {app.name}: micro-batches of {app_path.name}",
        doc_md=_doc_md(app_path, app),
        schedule=schedule,
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=is_paused_upon_creation,
        tags=list(tags) if tags is not None else ["lakestate", app.name],
        default_args={"owner": "lakestate", "retries": retries},
        params=_params(*defaults, app.name, kafka_conn_id),
    ) as dag:
        _add_tasks(instance_runs(app, state_dir), task_args, spark_conn_id, default_master)
    return dag


def _time_budget(default_max_batches: int, default_time_budget_s: int | None, schedule: Any) -> int:
    """The Params' default time budget (None: the schedule's), once both defaults are
    known to be valid."""
    if default_max_batches < 1:
        raise ValueError(f"default_max_batches must be at least 1, got {default_max_batches}")
    if default_time_budget_s is None:
        default_time_budget_s = time_budget_for(schedule)
    if default_time_budget_s < 1:
        raise ValueError(f"default_time_budget_s must be at least 1, got {default_time_budget_s}")
    return default_time_budget_s


def _run_args(
    app_path: Path,
    app_name: str,
    warehouse: str | os.PathLike[str] | None,
    state_dir: str | os.PathLike[str] | None,
    spark_conf: Mapping[str, Any] | None,
    env_vars: Mapping[str, Any] | None,
    execution_timeout: timedelta | None,
) -> tuple[str, dict[str, Any]]:
    """The state root, and the arguments every task of the DAG takes (the app, its
    warehouse, the job's environment)."""
    base = base_dir(app_path)
    warehouse = warehouse_dir(base, warehouse)
    state_dir = str(
        Path(state_dir or os.environ.get("LAKESTATE_STATE_DIR") or base / "state").resolve()
    )
    pyspark_python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    task_args = {
        "app_path": str(app_path),
        "app": app_name,
        "warehouse": warehouse,
        "env": _job_env(warehouse, state_dir, pyspark_python, spark_conf, env_vars),
        "execution_timeout": execution_timeout,
    }
    return state_dir, task_args


def _add_tasks(
    runs: list[InstanceRun], task_args: dict[str, Any], spark_conn_id: str, default_master: str
) -> None:
    """The DAG's tasks (inside its ``with DAG``): the rebalance, then each instance's run."""
    rebalance = _rebalance_task(runs[0], task_args)
    for run in runs:
        rebalance >> _run_task(run, task_args, spark_conn_id, default_master)


def _rebalance_task(first: InstanceRun, task_args: dict[str, Any]) -> LakestateRebalanceOperator:
    """The DAG's first task, on the first instance's queue (a rewind run's rewind too)."""
    return LakestateRebalanceOperator(
        task_id=REBALANCE_TASK_ID,
        state_dir=first.state_dir,
        doc_md=f"`lakestate rebalance {task_args['app_path']}` in a subprocess: the app's next "
        "assignment generation, if its instances or their lags changed or a probing "
        "rebalance is due. A rewind run rewinds the app here first, once.",
        **task_args,
        **first.queue,
    )


def _run_task(
    run: InstanceRun, task_args: dict[str, Any], spark_conn_id: str, default_master: str
) -> LakestateRunOperator:
    """An instance's run task, on its queue."""
    master = run.master or f"`{spark_conn_id}`'s master, else `{default_master}`"
    return LakestateRunOperator(
        task_id=run.task_id,
        state_dir=run.state_dir,
        instance=run.instance,
        master=run.master,
        conn_id=spark_conn_id,
        default_master=default_master,
        doc_md=f"`lakestate run {task_args['app_path']}"
        + (f" --instance {run.instance}`" if run.instance else "`")
        + f" in a subprocess; Spark, when the run needs it, on {master}.",
        **task_args,
        **run.queue,
    )
