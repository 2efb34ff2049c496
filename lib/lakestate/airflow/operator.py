"""The task of an app's DAG: ``LakestateRunOperator`` runs ``lakestate run`` for one DAG run.

It runs the lakestate CLI in a subprocess (``python -m lakestate.cli run APP ...``, the
Python running Airflow), its output streamed line by line into the task log. No
spark-submit: the engine itself decides whether a run needs Spark (a run of at most
``lakestate.inprocess.max.records`` pending records reads with delta-rs and never starts a
JVM); when it does, Spark runs in that subprocess on the master of the Airflow connection
``conn_id`` (``spark_master``). A failed run fails the task with the CLI's error line
(``lakestate run: error: ...``), which ends the task log.

What a DAG run does, by its type and Params (``run_arguments``):

- scheduled and manual runs: until caught up (``until_caught_up``, default) or
  ``max_batches`` batches, within ``time_budget_s``, ``max_records`` per batch;
- backfill runs (``dag_run.run_type == "backfill"``): the source records stamped before the
  run's ``data_interval_end``, in offset order, until caught up to that cut
  (``--until-timestamp``; ``engine/cutoff.py``), whatever ``until_caught_up`` and
  ``max_batches`` say, with a time budget only if the run's conf gives one: a green
  backfill run has processed its interval (or found it processed before: a no-op);
- any run with Param ``rewind`` (and ``confirm_rewind`` equal to the app's name, checked
  before anything is touched): first ``lakestate.engine.rewind.rewind`` of the app to the
  latest point at which no task's stream time had reached ``data_interval_start``, then
  the run processes up to ``data_interval_end`` as a backfill run does.

Every run waits for another run of the app on this instance (``--wait``): up to its time
budget, and as long as it takes for backfill and rewind runs, so concurrent runs queue and
stay green; a scheduled run still waiting when its budget is spent finishes green having
done nothing (the running one processes what is new).
"""

from __future__ import annotations

import collections
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

__all__ = [
    "DEFAULT_MASTER",
    "LakestateRunOperator",
    "check_rewind",
    "error_line",
    "run_arguments",
    "spark_master",
]

#: The Spark master when connection ``conn_id`` is not defined.
DEFAULT_MASTER = "local[*]"
#: ``DagRunType.BACKFILL_JOB``'s value (airflow.utils.types).
BACKFILL = "backfill"


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


class LakestateRunOperator(BaseOperator):
    """Runs ``python -m lakestate.cli run APP`` for the DAG run (see the module docstring).

    ``app_path``: the app's module; ``app``: its name; ``warehouse``, ``state_dir``:
    absolute paths; ``conn_id``/``default_master``: the Spark master (``spark_master``);
    ``env``: the subprocess's environment on top of the worker's; ``python``: the
    interpreter (default: the one running Airflow, which has lakestate)."""

    ui_color = "#d8f0ff"

    def __init__(
        self,
        *,
        app_path: str,
        app: str,
        warehouse: str,
        state_dir: str,
        conn_id: str = "spark_default",
        default_master: str = DEFAULT_MASTER,
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.app_path = app_path
        self.app = app
        self.warehouse = warehouse
        self.state_dir = state_dir
        self.conn_id = conn_id
        self.default_master = default_master
        self.env = dict(env or {})
        self.python = python or sys.executable
        self._proc: subprocess.Popen | None = None

    def command(self, arguments: Sequence[str], master: str) -> list[str]:
        """The command line of a run with ``arguments`` (``run_arguments``) on ``master``."""
        return [
            self.python, "-m", "lakestate.cli", "--master", master,
            "run", self.app_path, "--warehouse", self.warehouse, "--state-dir", self.state_dir,
            *arguments,
        ]  # fmt: skip

    def execute(self, context: Any) -> None:
        params = context["params"]
        dag_run = context["dag_run"]
        rewinding = check_rewind(params, self.app)  # before anything is touched
        run_type = getattr(dag_run, "run_type", None)
        run_type = str(getattr(run_type, "value", run_type) or "")  # an enum in the task SDK
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        until = None
        if rewinding or run_type == BACKFILL:
            if start is None or end is None:
                raise AirflowFailException(
                    f"a {'rewind' if rewinding else 'backfill'} run needs a data interval; "
                    f"run {dag_run.run_id} has none (trigger it with a logical date)"
                )
            until = end
            self.log.info(
                "%s run: the records stamped before %s (data interval %s to %s)",
                "rewind" if rewinding else "backfill", end.isoformat(), start.isoformat(),
                end.isoformat(),
            )  # fmt: skip
        if rewinding:
            self._rewind(start)
        arguments = run_arguments(params, run_type=run_type, conf=dag_run.conf, until=until)
        self._run(self.command(arguments, spark_master(self.conn_id, self.default_master)))

    def _rewind(self, start: datetime) -> None:
        from lakestate.engine.rewind import rewind

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

    def _run(self, command: list[str]) -> None:
        self.log.info("running %s", " ".join(command))
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
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
            raise AirflowException(f"{error} (lakestate run exited with code {code})")

    def on_kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
