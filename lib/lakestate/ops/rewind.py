"""Rewind: an app's state and sinks back to an earlier point of its history, through Delta
time travel, so that its next runs reprocess from there (docs/architecture.md, "Rewind").

**The app's line.** Each task numbers its batches; each progress-table commit with this
app's ``txn`` actions is a *point* of the app's history, at which each task stands at its
last batch committed so far. A rewind appends, per task, a *rewind row* with a new batch id
``R`` (ids stay monotonic: Delta's RESTORE keeps the later ``txn`` actions, so an old id
would be fenced as already held) and ``rewound_to = {"batch": b}``: the task is back in the
state of its batch ``b``. Batches strictly between ``b`` and ``R`` are off the line. A
task's last batch that is incomplete (its progress row committed, some table not) is off
the line too: the rewind supersedes its replay.

**The target.** ``to_batch=N``: the latest point on the line at which every task's batch is
at most ``N``. ``before_stream_time=T``: the latest point at which no task's stream time
has reached ``T`` (Airflow's "the batch before the interval"). The state of a task at a
point is that of its batch there (0: none, from the beginning).

**The tables.** Every table the app writes (changelogs, sink and repartition topics) is
restored to its latest version that holds only batches at or before the target: the
version before the first commit carrying a batch ``txn`` past a task's target batch.
Refused before anything changes when a table has commits after that version that are not
this app's (another writer: a shared sink, ``lakestate produce``), when the files or the
log of that version are gone (VACUUM, log cleanup), or when no version holds exactly the
target in some table (writers of disjoint task sets interleaved: an earlier point is
tried). Compaction commits and OPTIMIZE (no data change) are this app's.

**Crash safety.** Under the app's instance lock: (1) the intent, with the whole plan, is
written atomically (``rewind_intent``); from then on runs and readers refuse the app;
(2) the rewind rows are committed to the progress table with each task's ``txn`` ``R``
(the fence: a run on another instance that commits a batch first makes this step fail and
the rewind stops having changed nothing; one that commits later is refused), plus a
``progress.rewind_txn_id`` txn per task, which makes every local store behind ``R`` restore
from the changelogs (``recovery``); (3) each table is restored to its recorded version, the
RESTORE commit carrying each task's ``txn`` ``R`` (a batch still appending from before the
rewind is then skipped or conflicts) and, for a topic, its end offsets at that version;
(4) the intent is removed. Each step is skipped when it is found done, so a rerun after a
crash anywhere completes the rewind (restoring a table twice is harmless, and is not done).

**The modules.** This one: ``rewind``, the locks and the intent (step 1);
``rewind_history``: the app's line and points; ``rewind_plan``: the target and each
table's restore version (reads only); ``rewind_carry_out``: steps 2-4.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from lakestate.checkpoint import faults, rewind_intent
from lakestate.errors import StreamsException
from lakestate.io import topics
from lakestate.ops.rewind_carry_out import (
    FAULT_AFTER_INTENT,
    FAULT_AFTER_PROGRESS,
    FAULT_AFTER_TABLE,
    METADATA_KEY,
    carry_out,
)
from lakestate.ops.rewind_history import RewindRefused
from lakestate.ops.rewind_plan import (
    RewindPlan,
    TableRestore,
    TaskTarget,
    app_tables,
    plan_rewind,
)
from lakestate.ops.table_lock import table_lock
from lakestate.warehouse import Warehouse

__all__ = [
    "FAULT_AFTER_INTENT",
    "FAULT_AFTER_PROGRESS",
    "FAULT_AFTER_TABLE",
    "METADATA_KEY",
    "RewindPlan",
    "RewindRefused",
    "RewindResult",
    "TableRestore",
    "TaskTarget",
    "plan_rewind",
    "rewind",
]


@dataclass(frozen=True)
class RewindResult:
    """What ``rewind`` did: the plan it carried out (``noop``: none was needed; ``declined``:
    the confirmation said no, nothing changed); ``resumed``: the plan of an interrupted
    rewind that this call completed (then ``plan`` is the one asked for, if any)."""

    app: str
    plan: RewindPlan | None
    noop: bool = False
    declined: bool = False
    resumed: RewindPlan | None = None


def rewind(
    warehouse: Warehouse | str | None,
    app: str,
    *,
    to_batch: int | None = None,
    before_stream_time: int | None = None,
    resume: bool = False,
    state_dir: str | None = None,
    lock_wait_s: float = 0.0,
    confirm: Callable[[RewindPlan], bool] | None = None,
    say: Callable[[str], None] = print,
) -> RewindResult:
    """Rewind ``app`` (its name) to ``to_batch`` (the latest point at which no task is past
    its batch N) or ``before_stream_time`` (epoch ms: the latest point at which no task's
    stream time has reached it): restore its tables and record its tasks' target offsets,
    so that its next runs reprocess from there. Exactly one of the two, unless ``resume``
    (complete an interrupted rewind only). An interrupted rewind is always completed first.

    Holds the app's lock on this instance (``state_dir``: its state directory), waiting up
    to ``lock_wait_s`` seconds for a run holding it (``math.inf``: as long as it takes);
    runs of the app on other instances must be stopped: they are fenced, not waited for. ``confirm``
    is called with the plan before anything changes (False: nothing is done). Raises
    RewindRefused before changing anything when it cannot be done; returns ``noop`` when
    the app is already at the target. Crash-safe: after a crash, runs and readers of the
    app refuse until ``rewind(..., resume=True)`` (or the same call) completes it."""
    from lakestate.checkpoint.task_dir import state_dir_of
    from lakestate.runtime.run_lock import instance_lock

    if resume and (to_batch is not None or before_stream_time is not None):
        raise ValueError("resume completes the interrupted rewind: give no target with it")
    if not resume and (to_batch is None) == (before_stream_time is None):
        raise ValueError("give exactly one of to_batch and before_stream_time")
    if to_batch is not None and to_batch < 0:
        raise ValueError(f"to_batch must be at least 0, got {to_batch}")
    wh = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)
    if app not in wh.list_apps():
        known = ", ".join(wh.list_apps()) or "none"
        raise ValueError(f"no app {app!r} in warehouse {wh.root} (apps: {known})")
    with instance_lock(state_dir_of(state_dir), app, lock_wait_s, say) as held:
        if not held:
            raise StreamsException(
                f"app {app} is running on this instance: it was not rewound (wait for the run "
                "to end, or give the rewind a lock wait)"
            )
        # Every table the app writes stays locked until the rewind is done: no maintenance
        # rewrite and no append on this machine (a produce into a sink, say) comes between
        # the plan's checks and the restores.
        with _tables_locked(wh, app):
            return _rewind_locked(wh, app, to_batch, before_stream_time, resume, confirm, say)


def _rewind_locked(
    wh: Warehouse,
    app: str,
    to_batch: int | None,
    before_stream_time: int | None,
    resume: bool,
    confirm: Callable[[RewindPlan], bool] | None,
    say: Callable[[str], None],
) -> RewindResult:
    resumed = None
    intent = rewind_intent.read(wh, app)
    if intent is not None:
        resumed = RewindPlan.from_json(intent["plan"])
        say(f"completing the interrupted rewind of app {app} to {resumed.target_text}")
        carry_out(wh, resumed, say)
    elif resume:
        say(f"app {app} is not mid-rewind: nothing to resume")
    if resume:
        return RewindResult(app, None, noop=resumed is None, resumed=resumed)
    plan = plan_rewind(wh, app, to_batch=to_batch, before_stream_time=before_stream_time)
    if plan.noop:
        for line in plan.describe():
            say(line)
        return RewindResult(app, plan, noop=True, resumed=resumed)
    if confirm is not None and not confirm(plan):
        return RewindResult(app, plan, declined=True, resumed=resumed)
    rewind_intent.write(
        wh,
        app,
        {
            "plan": plan.to_json(),
            "target_text": plan.target_text,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    faults.maybe_fail(FAULT_AFTER_INTENT, 0)
    carry_out(wh, plan, say)
    return RewindResult(app, plan, resumed=resumed)


@contextlib.contextmanager
def _tables_locked(warehouse: Warehouse, app: str) -> Iterator[None]:
    """Hold the maintenance lock of every table the app writes, and a topic's append lock
    (in path order, each table's maintenance lock first, as compaction takes them)."""
    prefix = warehouse.topics_dir().rstrip("/") + "/"
    with contextlib.ExitStack() as stack:
        for path in app_tables(warehouse, app):
            stack.enter_context(table_lock(path))
            if path.startswith(prefix):
                stack.enter_context(topics.topic(warehouse, path[len(prefix) :]).append_lock())
        yield
