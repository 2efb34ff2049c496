"""The tasks of an app's DAG: ``LakestateRebalanceOperator`` runs ``lakestate rebalance``,
``LakestateRunOperator`` runs ``lakestate run`` (as one instance of the app) for one DAG run.

Both run the lakestate CLI in a subprocess (``python -m lakestate.cli ...``, the Python
running Airflow; ``LakestateCliOperator``), its output streamed line by line into the task
log; a failed command fails the task with the CLI's error line (``lakestate run: error:
...``), which ends the task log. No spark-submit: the engine itself decides whether a run
needs Spark (a run of at most ``lakestate.inprocess.max.records`` pending records reads with
delta-rs and never starts a JVM); when it does, Spark runs in that subprocess on the
instance's configured master, else the master of the Airflow connection ``conn_id``
(``spark_master``).

What a DAG run does, by its type and Params (``run_arguments``):

- scheduled and manual runs: until caught up (``until_caught_up``, default) or
  ``max_batches`` batches, within ``time_budget_s``, ``max_records`` per batch;
- any run: on the transport of Param ``transport`` (``--transport``; empty: the app's
  ``lakestate.transport``, default ``auto``);
- backfill runs (``dag_run.run_type == "backfill"``): the source records stamped before the
  run's ``data_interval_end``, in offset order, until caught up to that cut
  (``--until-timestamp``; ``runtime/cutoff.py``), whatever ``until_caught_up`` and
  ``max_batches`` say, with a time budget only if the run's conf gives one: a green
  backfill run has processed its interval (or found it processed before: a no-op);
- any run with Param ``rewind`` (and ``confirm_rewind`` equal to the app's name, checked
  before anything is touched): the rebalance task first rewinds the app
  (``lakestate.ops.rewind.rewind``) to the latest point at which no task's stream time
  had reached ``data_interval_start``, once, then rebalances; every instance's run task
  then processes up to ``data_interval_end`` as a backfill run does.

Every run waits for another run of the app on its instance (``--wait``): up to its time
budget, and as long as it takes for backfill and rewind runs, so concurrent runs queue and
stay green; a scheduled run still waiting when its budget is spent finishes green having
done nothing (the running one processes what is new).
"""

from __future__ import annotations

import collections
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow.sdk import BaseHook, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

from lakestate.app import KAFKA_CONFIG_ENV

__all__ = [
    "DEFAULT_MASTER",
    "TRANSPORTS",
    "LakestateCliOperator",
    "LakestateRebalanceOperator",
    "LakestateRunOperator",
    "check_rewind",
    "data_interval",
    "error_line",
    "kafka_settings",
    "run_arguments",
    "spark_master",
]

#: The Spark master when connection ``conn_id`` is not defined.
DEFAULT_MASTER = "local[*]"
#: ``DagRunType.BACKFILL_JOB``'s value (airflow.utils.types).
BACKFILL = "backfill"
#: The values of Param ``transport`` (``lakestate run --transport``; None: the app's).
TRANSPORTS = ("auto", "inprocess", "spark")


def spark_master(conn_id: str, default: str = DEFAULT_MASTER) -> str:
    """The Spark master of Airflow connection ``conn_id``, read as the Spark provider's
    ``SparkSubmitHook`` reads it: a ``spark`` connection whose host is a whole master URL
    (``local[*]``, ``k8s://https://...``, or a host without a port) is that URL; otherwise
    ``<conn_type>://<host>[:<port>]`` (``spark://spark-master:7077``). ``default`` when the
    connection is defined nowhere."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return default
    host = conn.host or ""
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port else master


def kafka_settings(conn_id: str) -> dict[str, str]:
    """The Kafka client settings of Airflow connection ``conn_id``, read as the Kafka
    provider's hooks read a ``kafka`` connection: its extra is the client's config, with
    ``bootstrap.servers``. ``AirflowFailException`` when the connection is not defined or
    names no ``bootstrap.servers``."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise AirflowFailException(
            f"Param kafka_conn_id names connection {conn_id!r}, which is not defined: add it "
            '(Admin > Connections, type Apache Kafka, extra {"bootstrap.servers": ...}) or '
            "clear the Param"
        ) from None
    settings = {str(k): str(v) for k, v in (conn.extra_dejson or {}).items()}
    if not settings.get("bootstrap.servers"):
        raise AirflowFailException(
            f"Kafka connection {conn_id!r} has no bootstrap.servers in its extra: set it to "
            "the cluster's HOST:PORT list"
        )
    return settings


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def run_arguments(
    params: Mapping[str, Any],
    *,
    run_type: str | None = None,
    conf: Mapping[str, Any] | None = None,
    until: datetime | None = None,
) -> list[str]:
    """``lakestate run``'s options for a DAG run with ``params`` (its resolved Params),
    of ``run_type``, whose conf is ``conf``. ``until``: the cut (the run's
    ``data_interval_end``) of a backfill or rewind run, which then processes until caught up
    to it, waits for the lock as long as it takes, and has a time budget only if ``conf``
    sets ``time_budget_s``."""
    args: list[str] = []
    if until is not None:
        args += ["--until-timestamp", str(_ms(until)), "--until-caught-up"]
        budget = (conf or {}).get("time_budget_s")
        wait = math.inf
    else:
        if params["until_caught_up"]:
            args.append("--until-caught-up")
        else:
            args += ["--max-batches", str(int(params["max_batches"]))]
        budget = params.get("time_budget_s")
        wait = math.inf if budget is None else budget
    if budget is not None:
        args += ["--time-budget", str(budget)]
    if params.get("max_records") is not None:
        args += ["--max-records", str(int(params["max_records"]))]
    if params.get("transport") is not None:
        args += ["--transport", str(params["transport"])]
    args += ["--wait", "inf" if math.isinf(wait) else str(wait)]
    return args


def check_rewind(params: Mapping[str, Any], app: str) -> bool:
    """Whether the run rewinds (Param ``rewind``); raises ``AirflowFailException`` (no
    retry) unless Param ``confirm_rewind`` is the app's name."""
    if not params.get("rewind"):
        return False
    confirmation = params.get("confirm_rewind")
    if confirmation != app:
        raise AirflowFailException(
            f"Param rewind is set but confirm_rewind is {confirmation!r}: a rewind restores "
            f"app {app}'s state and sinks to the batch before this run's data interval and "
            f"reprocesses it; to do it, set confirm_rewind to {app!r}. Nothing was changed."
        )
    return True


def error_line(lines: Sequence[str]) -> str | None:
    """The lakestate CLI's error line (``lakestate <command>: error: ...``) among the last
    ``lines`` of its output, else None."""
    for line in reversed(lines):
        if line.startswith("lakestate ") and ": error: " in line:
            return line
    return None


def data_interval(context: Mapping[str, Any], what: str) -> tuple[datetime, datetime]:
    """The data interval ``[start, end)`` of the DAG run in ``context``; fails the task
    (``what``: "a backfill run", "a rewind run") when the run has none."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        raise AirflowFailException(
            f"{what} needs a data interval; run {context['dag_run'].run_id} has none "
            "(trigger it with a logical date)"
        )
    return start, end


def _run_type(context: Mapping[str, Any]) -> str:
    run_type = getattr(context["dag_run"], "run_type", None)
    return str(getattr(run_type, "value", run_type) or "")  # an enum in the task SDK


class LakestateCliOperator(BaseOperator):
    """Base of lakestate's operators: runs a ``python -m lakestate.cli ...`` command line in a
    subprocess, its output line by line in the task log; a non-zero exit fails the task with
    the CLI's error line (``error_line``). ``app_path``: the app's module; ``app``: its name;
    ``warehouse``, ``state_dir``: absolute paths; ``env``: the subprocess's environment on top
    of the worker's; ``python``: the interpreter (default: the one running Airflow, which has
    lakestate). Killing the task sends SIGTERM to the subprocess."""

    def __init__(
        self,
        *,
        app_path: str,
        app: str,
        warehouse: str,
        state_dir: str,
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.app_path = app_path
        self.app = app
        self.warehouse = warehouse
        self.state_dir = state_dir
        self.env = dict(env or {})
        self.python = python or sys.executable
        self._proc: subprocess.Popen | None = None

    def run_command(
        self, command: list[str], name: str, params: Mapping[str, Any] | None = None
    ) -> None:
        """Runs ``command`` (the CLI's ``name`` command, for the error message), with the
        Kafka settings of the connection Param ``kafka_conn_id`` of ``params`` names."""
        self.log.info("running %s", " ".join(command))
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        conn_id = (params or {}).get("kafka_conn_id")
        if conn_id:
            self.log.info("Kafka settings from connection %s", conn_id)
            env[KAFKA_CONFIG_ENV] = json.dumps(kafka_settings(str(conn_id)))
        last: collections.deque[str] = collections.deque(maxlen=50)
        self._proc = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            errors="replace",
        )
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            line = line.rstrip("\n")
            last.append(line)
            self.log.info("%s", line)
        code = self._proc.wait()
        self._proc = None
        if code != 0:
            error = error_line(last) or (last[-1] if last else "no output")
            self.log.error("%s", error)
            raise AirflowException(f"{error} (lakestate {name} exited with code {code})")

    def on_kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)


class LakestateRebalanceOperator(LakestateCliOperator):
    """Runs ``python -m lakestate.cli rebalance APP`` for the DAG run: the app's next
    assignment generation, when its instances or their lags changed or a probing rebalance
    is due (else it prints "no change" and writes nothing). It is the first task of the app's
    DAG, upstream of every instance's run task.

    A rewind run (Param ``rewind``, confirmed) first rewinds the app here, once for all its
    instances, to the latest point at which no task's stream time had reached the run's
    ``data_interval_start``, waiting as long as it takes for a run under way on the instance
    whose state directory is ``state_dir`` (the task runs on that instance's queue); then the
    instances' run tasks reprocess up to the interval's end. A wrong ``confirm_rewind`` fails
    this task before anything is touched, and the run tasks do not run.

    ``state_dir``: the first instance's, whose lock a rewind holds."""

    ui_color = "#fff3c8"

    def command(self) -> list[str]:
        """The command line of the rebalance."""
        return [
            self.python, "-m", "lakestate.cli",
            "rebalance", self.app_path, "--warehouse", self.warehouse,
        ]  # fmt: skip

    def execute(self, context: Any) -> None:
        if check_rewind(context["params"], self.app):  # before anything is touched
            start, end = data_interval(context, "a rewind run")
            self.log.info(
                "rewind run: rewinding app %s to before %s; the instances then process the "
                "records stamped before %s", self.app, start.isoformat(), end.isoformat(),
            )  # fmt: skip
            self._rewind(start)
        self.run_command(self.command(), "rebalance", context["params"])

    def _rewind(self, start: datetime) -> None:
        from lakestate.ops.rewind import rewind

        result = rewind(
            self.warehouse,
            self.app,
            before_stream_time=_ms(start),
            state_dir=self.state_dir,
            lock_wait_s=math.inf,  # as a backfill run, after a run under way
            say=self.log.info,
        )
        if result.noop:
            self.log.info("rewind: app %s is already at that point", self.app)


class LakestateRunOperator(LakestateCliOperator):
    """Runs ``python -m lakestate.cli run APP [--instance NAME]`` for the DAG run (see the
    module docstring): the tasks the app's assignment gives instance ``instance`` (None: the
    app configures no instances; its one implicit instance runs every task).

    A rewind run is run as a backfill run of its interval: the rewind itself is done once,
    upstream, by the DAG's ``LakestateRebalanceOperator``.

    ``state_dir``: the instance's state directory; ``master``: the instance's configured Spark
    master, else ``conn_id``/``default_master`` give it (``spark_master``)."""

    ui_color = "#d8f0ff"

    def __init__(
        self,
        *,
        instance: str | None = None,
        master: str | None = None,
        conn_id: str = "spark_default",
        default_master: str = DEFAULT_MASTER,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.instance = instance
        self.master = master
        self.conn_id = conn_id
        self.default_master = default_master

    def command(self, arguments: Sequence[str], master: str) -> list[str]:
        """The command line of a run with ``arguments`` (``run_arguments``) on ``master``."""
        instance = ["--instance", self.instance] if self.instance is not None else []
        return [
            self.python, "-m", "lakestate.cli", "--master", master,
            "run", self.app_path, "--warehouse", self.warehouse, "--state-dir", self.state_dir,
            *instance, *arguments,
        ]  # fmt: skip

    def execute(self, context: Any) -> None:
        params = context["params"]
        dag_run = context["dag_run"]
        rewinding = check_rewind(params, self.app)
        run_type = _run_type(context)
        until = None
        if rewinding or run_type == BACKFILL:
            start, until = data_interval(context, "a rewind run" if rewinding else "a backfill run")
            self.log.info(
                "%s run: the records stamped before %s (data interval %s to %s)",
                "rewind" if rewinding else "backfill", until.isoformat(), start.isoformat(),
                until.isoformat(),
            )  # fmt: skip
        arguments = run_arguments(params, run_type=run_type, conf=dag_run.conf, until=until)
        self.run_command(self.command(arguments, self.spark_master()), "run", params)

    def spark_master(self) -> str:
        """The run's Spark master: the instance's configured ``master``, else connection
        ``conn_id``'s, else ``default_master``."""
        return self.master or spark_master(self.conn_id, self.default_master)
