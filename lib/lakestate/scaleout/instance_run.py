"""An instance's run, start to end (docs/architecture.md, "The life of a run"): take the
instance's lock, read its roles (``task_roles``), run its active tasks' batches
(``runtime.runner``), warm its warmup and standby tasks, and report its stores' lags.
Every run is an instance's: an app without ``lakestate.instances`` has one, ``default``.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable

from lakestate import console
from lakestate.app import App, load_app
from lakestate.checkpoint.layout import ensure_layout
from lakestate.checkpoint.task_dir import state_dir_of
from lakestate.errors import TaskMigratedException
from lakestate.runtime import transport as transports
from lakestate.runtime.cutoff import Cutoff
from lakestate.runtime.run_lock import instance_lock
from lakestate.runtime.runner import Runner, RunResult, new_run_id
from lakestate.scaleout import task_roles
from lakestate.scaleout.instances import Instance, instance_of
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

log = logging.getLogger("lakestate.scaleout")


def run_app(
    app_path: str,
    *,
    warehouse: str | None = None,
    state_dir: str | None = None,
    max_batches: int | None = None,
    max_records: int | None = None,
    until_caught_up: bool = False,
    time_budget_s: float | None = None,
    tasks: list[TaskId] | list[str] | None = None,
    master: str | None = None,
    inprocess_max_records: int | None = None,
    lock_wait_s: float | None = None,
    until_timestamp: int | None = None,
    say: Callable[[str], None] = print,
    instance: str | None = None,
    transport: str | None = None,
) -> RunResult:
    """Run micro-batches of the app in ``app_path``: one by default, up to ``max_batches``, or until
    no input is left (``until_caught_up``); no new batch starts once ``time_budget_s`` has passed
    since the call (waiting for the lock included; a run that gets the lock always does its first
    batch). ``tasks``: the tasks this run owns (default: all); runs of disjoint task sets may run
    side by side, each with its own state directory. ``inprocess_max_records``: overrides the
    app's ``lakestate.inprocess.max.records`` (a run with at most that many pending records runs
    without Spark; 0: always Spark). ``transport``: ``auto``, ``inprocess`` or ``spark``
    (``--transport``; None: the app's ``lakestate.transport``, default ``auto``: in process when
    the pending records are at most that threshold, else Spark); the run's first ``transport:``
    line says which it used and why.

    Another run of the app on this instance (its lock held): this run waits for it up to
    ``lock_wait_s`` seconds (None: ``time_budget_s``, else no wait; ``math.inf``: as long as it
    takes), then processes what is new; if the other run still holds the lock, this one returns
    ``RunResult(busy=True)`` having done nothing: never an error.
    ``until_timestamp`` (epoch ms, exclusive): process each input partition, in offset order, up
    to its first record stamped at or after it (``runtime/cutoff.py``), until caught up to that
    cut unless ``max_batches`` says otherwise (a backfill's interval).
    ``instance``: the app's instance this run is (``scaleout/instances.py``; None: the first
    configured, or the implicit ``default``), with its state dir and Spark master unless
    ``state_dir``, ``master`` say otherwise; it runs as the module's docstring says, on its tasks
    in force (``tasks`` restricts them further). A rebalance moving one of them before a batch's
    progress commit stops the run (TaskMigratedException, nothing committed)."""
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    app = _load(app_path, transport)
    wh = Warehouse(warehouse)
    member = instance_of(app, instance)
    sdir = member.state_dir if state_dir is None else state_dir_of(state_dir)
    master = member.master if master is None else master
    scaled = task_roles.scaled_out(app, wh)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    wait = (time_budget_s or 0.0) if lock_wait_s is None else lock_wait_s
    with instance_lock(sdir, app.name, wait, say) as held:
        if not held:
            return _busy(app, wh, member, tasks, sdir, scaled)
        runner = Runner(app, os.path.abspath(app_path), wh, sdir, max_records, say, master)
        try:
            _set_options(runner, transport, inprocess_max_records, until_timestamp, wh)
            limit = _batch_limit(max_batches, until_caught_up, until_timestamp)
            return _run(runner, member, tasks, limit, deadline, scaled)
        finally:
            runner.close()


def _set_options(
    runner: Runner,
    transport: str | None,
    inprocess_max_records: int | None,
    until_timestamp: int | None,
    wh: Warehouse,
) -> None:
    """The run's options that override the app's config, set on its runner."""
    runner.transport_option = transport
    if inprocess_max_records is not None:
        runner.inprocess_max_records = transports.max_records(
            {transports.MAX_RECORDS_CONFIG: inprocess_max_records}
        )
    if until_timestamp is not None:
        runner.cutoff = Cutoff(wh, until_timestamp)


def _batch_limit(
    max_batches: int | None, until_caught_up: bool, until_timestamp: int | None
) -> int | None:
    """The most batches the run does (None: until caught up); a cut runs until caught up
    to it unless ``max_batches`` says otherwise."""
    if until_timestamp is not None and max_batches is None:
        until_caught_up = True
    return max_batches if max_batches is not None else (None if until_caught_up else 1)


def _load(app_path: str, transport: str | None) -> App:
    """The app, once the run's ``transport`` and the app's own are known to be valid."""
    if transport is not None:
        transports.checked(transport, "run_app(transport=...) (--transport)")
    app = load_app(app_path)
    configured = app.config.get(transports.TRANSPORT_CONFIG, transports.AUTO)
    transports.checked(configured, f"{transports.TRANSPORT_CONFIG} in the config of app {app.name}")
    return app


def _run(
    runner: Runner,
    member: Instance,
    tasks: list[TaskId] | list[str] | None,
    limit: int | None,
    deadline: float | None,
    scaled: bool,
) -> RunResult:
    """The instance's run, its lock held: its active tasks' batches, then (scaled out) its
    warmup and standby tasks brought up to date and its lag report."""
    app, say = runner.app, runner.say
    roles = task_roles.roles_of(runner.layout, member, tasks)
    runner.fences = functools.partial(roles.fences, app.name)
    if scaled:
        runner.after_first_line.append(task_roles.describe(roles))
    ended = False
    deleted: list[TaskId] = []
    try:
        with console.progress(f"{app.name}: records", total=None) as bar:
            runner.bar = bar
            result = runner.run(roles.active, limit, deadline)
        result.instance = member.name
        if scaled:
            warmed = task_roles.warm(runner.layout, roles, runner.state_dir, runner.isolation, say)
            result.warmed = {str(t): lag for t, lag in warmed.items()}
            deleted = task_roles.clean_up(runner.layout, roles, runner.state_dir, say)
        ended = True
    except TaskMigratedException as exc:
        raise task_roles.migrated(runner.layout, roles, exc) from exc
    finally:
        if scaled:
            _report(runner, roles, ended, deleted)
    return result


def _busy(
    app: App,
    wh: Warehouse,
    member: Instance,
    tasks: list[TaskId] | list[str] | None,
    sdir: str,
    scaled: bool,
) -> RunResult:
    """A busy run's result; scaled out, with its lag report: what the last run that held
    the lock saw of the stores. Never an error (a busy run is not one): e.g. a rewind
    holding the lock leaves the app mid-rewind, unreadable until it ends; the report is
    then logged as not written."""
    if scaled:
        try:
            layout = ensure_layout(app, wh)
            roles = task_roles.roles_of(layout, member, tasks)
            task_roles.report(layout, roles, sdir, None, new_run_id())
        except Exception:
            log.warning("the lag report of a busy run was not written", exc_info=True)
    return RunResult(busy=True, instance=member.name)


def _report(runner: Runner, roles: task_roles.Roles, ended: bool, deleted: list[TaskId]) -> None:
    """The run's lag report, under the lock. After a run that failed, a report that fails
    too (e.g. the app is mid-rewind) is logged, not raised: the run's own error is the one
    to see."""
    try:
        task_roles.report(
            runner.layout, roles, runner.state_dir, runner.isolation, runner.run_id, deleted
        )
    except Exception:
        if ended:
            raise
        log.warning("the lag report of a failed run was not written", exc_info=True)
