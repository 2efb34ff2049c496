"""The micro-batch runtime: plan, read, process, commit, recover (docs/architecture.md).

A run owns a set of tasks (all of the app's by default). It recovers them (``recovery``),
then runs batches until its limit: plan each task's next offset ranges (no commit), have
the run's transport read and process every task's records, each task staging its
transaction beside its local store (step 1), then commit (``commit.commit_batch``:
progress, tables, local stores). The transport (``transport.py``) is chosen once, at the
start of a run: by default from the size of its pending input, a small run reading with
delta-rs and processing its tasks one after another in this process (``inprocess.py``,
never a JVM), a larger one reading with Spark and processing its tasks in parallel in
Spark's Python workers (``spark_transport.py``, imported only then). Both run the same
per-task function (``task_executor.process_task``) and commit the same way.
Sub-topologies that feed each other through repartition topics advance in the same run:
each batch plans from the ends the previous one left. A task also reads the new records of
every global table's topic (all partitions) and applies them before its inputs
(``task_executor.py``).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakestate import console
from lakestate.app import App
from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan, global_key, split_global_key
from lakestate.checkpoint.commit import TaskResult, commit_batch
from lakestate.checkpoint.layout import AppLayout, ensure_layout
from lakestate.checkpoint.layout import end_offsets as layout_end_offsets
from lakestate.checkpoint.standing import where_tasks_stand
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.errors import StreamsException
from lakestate.processors.exception_handlers import ExceptionHandlers
from lakestate.restore.recovery import recover
from lakestate.runtime import transport
from lakestate.runtime.batch_rows import store_kinds
from lakestate.runtime.cutoff import Cutoff, format_timestamp
from lakestate.runtime.executor_stores import STATE_OWNER, ExecutorStores
from lakestate.runtime.failure import message_of
from lakestate.runtime.inprocess import InProcessTransport
from lakestate.runtime.plan import batch_cap, batch_max_records, plan_tasks
from lakestate.runtime.task_executor import BatchContext, remember_app
from lakestate.runtime.transport import BatchInput, BatchOutput, Transport
from lakestate.state.base import isolation_for
from lakestate.state.constants import (
    DEFAULT_UNCOMMITTED_MAX_RECORDS,
    UNCOMMITTED_MAX_RECORDS,
)
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

log = logging.getLogger("lakestate.engine")

# What a plan is made from: end offsets per topic and partition; per task, the next offset
# its local store holds of each global topic partition.
_Sources = tuple[dict[str, dict[int, int]], dict[TaskId, dict[str, int]]]


@dataclass
class RunResult:
    """What a run did: per batch, each task's batch number; the records processed; whether
    it stopped because no input was left (before the cut, with ``until_timestamp``);
    ``busy``: another run of the app held the instance's lock for the whole wait, and this
    one did nothing. ``transport``: ``in_process`` or ``spark`` (None: no batch to run);
    ``figures``: per batch, its tasks' batch numbers, records in and out, the tasks it
    replayed, and its seconds. ``instance``: the instance the run was; ``warmed``: the
    warmup and standby tasks it brought to their committed batch, with the lag each had.
    ``dead_letters``: the records its batches skipped (log-and-continue) to the app's
    ``dead_letter_topic``; they are not among the output records."""

    batches: list[dict[str, int]] = field(default_factory=list)
    records: int = 0
    caught_up: bool = False
    busy: bool = False
    transport: str | None = None
    figures: list[dict[str, Any]] = field(default_factory=list)
    instance: str | None = None
    warmed: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    dead_letter_topic: str | None = None


def new_run_id() -> str:
    """A run's id: where it ran, and a random part."""
    return f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Runner:
    """An instance's run of batches of ``app`` for the tasks it owns (``run``); ``master``:
    the Spark master, should the run choose Spark. ``close`` when done."""

    def __init__(
        self,
        app: App,
        app_path: str,
        wh: Warehouse,
        state_dir: str,
        max_records: int | None,
        say: Callable[[str], None],
        master: str | None = None,
    ) -> None:
        self.app = app
        self.app_path = app_path
        remember_app(app_path, app)  # tasks run in this process run this very app
        self.state_dir = state_dir
        self.say = say
        self.master = master
        self.isolation = isolation_for(app.config)
        bound = int(app.config.get(UNCOMMITTED_MAX_RECORDS, DEFAULT_UNCOMMITTED_MAX_RECORDS))
        self.max_records = min(bound, max_records) if max_records else bound
        self.inprocess_max_records = transport.max_records(app.config)
        #: at most this many records in one batch, all tasks together (``plan.py``)
        self.batch_max_records = batch_max_records(app.config)
        #: ``run_app(transport=...)`` (``--transport``): overrides the app's
        #: ``lakestate.transport`` (None: the app's, else ``auto``).
        self.transport_option: str | None = None
        #: the run's transport, chosen at the start of each run (``_choose_transport``)
        self.transport: Transport | None = None
        self._made: dict[str, Transport] = {}  # the transports made, by choice
        #: lines said right after the run's first line, which says the transport it chose
        #: and why (or that it is caught up): e.g. an instance's tasks by role
        self.after_first_line: list[str] = []
        self.bar = console.Bar()  # the run's progress: records processed of those pending
        self.run_id = new_run_id()
        #: the owner fences a batch's progress commit checks and carries, for its fresh
        #: tasks (an instance's run: its tasks' planned owner epochs, ``scaleout.task_roles``)
        self.fences: Callable[[list[TaskId]], Mapping[str, int]] | None = None
        self.layout: AppLayout = ensure_layout(app, wh)
        self.wh = wh
        #: ``run_app(until_timestamp=...)``: the inputs' ends are cut (``runtime/cutoff.py``).
        self.cutoff: Cutoff | None = None
        #: where records skipped by log-and-continue go (None: every failure fails its batch)
        self.dead_letter_topic = ExceptionHandlers.from_config(
            app.config, app.name
        ).dead_letter_topic
        self._executor_owned: bool | None = None  # decided with the transport
        self._rewound: dict[TaskId, int] = {}  # per task, the batch of its latest rewind row
        self._plan_runs: dict[TaskId, str] = {}  # per task, the run its batch is recorded for

    def run(self, tasks: list[TaskId], limit: int | None, deadline: float | None) -> RunResult:
        """Batches of ``tasks`` until ``limit`` batches (None: until caught up), no new one
        once ``deadline`` (monotonic) has passed."""
        result = RunResult(dead_letter_topic=self.dead_letter_topic)
        standing = where_tasks_stand(self.layout, tasks)
        committed = dict(standing.committed)
        replays = standing.replays
        # The first plan, made before anything else: a run with nothing new ends here. Its
        # end offsets and global starts also size the run for the transport.
        sources = self._sources(tasks, committed)
        planned = None if replays else self._plan(tasks, committed, sources=sources)
        if planned == []:
            result.caught_up = True
            self._say_first(self._caught_up())
            return result
        result.transport = self._choose_transport(tasks, committed, sources).name
        self._rewound = dict(standing.rewound)
        if self._executors_own_state():
            self.say("state: on Spark's executors (each brings its tasks' stores up itself)")
        else:
            recover(self.layout, tasks, self.state_dir, self.isolation, self.say, standing)
        if self.layout.global_topics:
            # Global data is read from where each (now recovered) local store stands: a
            # restored store holds none, and reads its global topics again from offset 0.
            planned = None
            starts = self._global_starts([p.task for p in replays])
            replays = [
                _from_global_starts(p, starts.get(p.task, {}), self.layout.global_topics)
                for p in replays
            ]
        while limit is None or len(result.batches) < limit:
            if deadline is not None and result.batches and time.monotonic() >= deadline:
                self.say("time budget spent: no new batch")
                break
            if replays:
                plans, replayed, replays = replays, {p.task for p in replays}, []
                self.say(
                    "replaying the recorded batches of "
                    + ", ".join(f"task {p.task} (batch {p.batch_id})" for p in plans)
                )
            else:
                plans = planned if planned is not None else self._plan(tasks, committed)
                planned, replayed = None, set()
                if not plans:
                    result.caught_up = True
                    self.say(self._caught_up())
                    break
            self._record(result, committed, replayed, self._run_batch(plans, committed, replayed))
        return result

    def close(self) -> None:
        """Wait for what the run's transports started (Spark's start, in the background)."""
        for made in self._made.values():
            made.close()

    def _record(
        self,
        result: RunResult,
        committed: dict[TaskId, TaskCheckpoint],
        replayed: set[TaskId],
        batch: tuple[list[TaskResult], float],
    ) -> None:
        """A committed batch into ``committed`` (where its tasks now stand) and ``result``."""
        results, seconds = batch
        for r in results:
            committed[r.task] = TaskCheckpoint(
                r.batch_id,
                dict(r.offsets),
                r.stream_time,
                r.processor_metadata,
                r.metrics,
                self._plan_runs.get(r.task, self.run_id),
            )
        result.batches.append({str(r.task): r.batch_id for r in results})
        result.records += sum(r.records for r in results)
        figures = _figures(results, replayed, seconds, self.dead_letter_topic)
        result.figures.append(figures)
        result.dead_letters += figures["dead_letters"]
        self.bar.advance(sum(r.records for r in results))

    def _executors_own_state(self) -> bool:
        """Whether the run's stores are its Spark executors' (``executor_stores``), not the
        ones in this instance's state directory; decided once per run."""
        if self._executor_owned is None:
            assert self.transport is not None
            owned = self.transport.state_owner(self.app.config) == "executors"
            if owned and self.layout.global_topics:
                raise StreamsException(
                    f"app {self.app.name}: its global tables ("
                    + ", ".join(self.layout.global_topics)
                    + ") need the stores in this instance's state directory, and Spark's "
                    f"executors own them here: set {STATE_OWNER}=driver with local Spark, "
                    "or run in process (--transport inprocess)"
                )
            self._executor_owned = owned
        return self._executor_owned

    def _choose_transport(
        self, tasks: list[TaskId], committed: dict[TaskId, TaskCheckpoint], sources: _Sources
    ) -> Transport:
        """The run's transport, for the whole run (replays included): the one asked for
        (``transport_option``, else the app's ``lakestate.transport``), or with ``auto``
        from the run's pending input: every task's records from where it committed (so a
        batch to replay counts) to the ends, global topics included. Either gives the same
        rows. Spark starts in the background, while the local stores recover."""
        plans = self._plan(tasks, committed, unbounded=True, sources=sources)
        pending = sum(p.records for p in plans)
        self.bar.update(total=pending)
        choice = transport.choose(
            self.transport_option,
            self.app.config,
            pending,
            self.inprocess_max_records,
            transport.local_master(self.master),
        )
        self._say_first(choice.line())
        made = self._made.get(choice.transport)
        if made is None:
            made = self._made[choice.transport] = self._make(choice)
        self.transport = made
        self.transport.start()
        return self.transport

    def _make(self, choice: transport.Choice) -> Transport:
        if choice.in_process:
            return InProcessTransport(self.layout)
        # Imported only now: a run in this process never imports pyspark.
        from lakestate.runtime.spark_transport import SparkTransport

        return SparkTransport(self.master, f"lakestate-{self.app.name}", self.layout)

    def _plan(
        self,
        tasks: list[TaskId],
        committed: dict[TaskId, TaskCheckpoint],
        unbounded: bool = False,
        sources: _Sources | None = None,
    ) -> list[TaskPlan]:
        """The next batch's plans (``unbounded``: everything to the ends, in one), from
        ``sources`` when given (read now otherwise); within ``batch_max_records`` in all
        (``plan.batch_cap``: a smaller cap per task), unless unbounded."""
        ends, starts = sources or self._sources(tasks, committed)

        def plans_within(cap: int | None) -> list[TaskPlan]:
            return plan_tasks(
                tasks, self.layout.inputs, committed, ends, cap, self.layout.global_topics,
                starts, self._timestamps,
            )  # fmt: skip

        if unbounded:
            return plans_within(None)
        plans = plans_within(self.max_records)
        if sum(p.records for p in plans) > self.batch_max_records:
            plans = plans_within(batch_cap([p.records for p in plans], self.batch_max_records))
        return plans

    def _timestamps(self, topic: str, partition: int, start: int, end: int) -> list[int]:
        """The timestamps of ``topic``'s records ``start <= offset < end`` in ``partition``,
        in offset order (for a capped multi-input plan's merged cut)."""
        rows = self.layout.topic(topic).reader().read_range({partition: (start, end)})
        rows = rows.select(["offset", "timestamp"]).sort_by("offset")
        return rows.column("timestamp").to_pylist()

    def _say_first(self, line: str) -> None:
        """The run's first line, then ``after_first_line``."""
        self.say(line)
        for after in self.after_first_line:
            self.say(after)

    def _caught_up(self) -> str:
        if self.cutoff is None:
            return "caught up: no new input"
        return (
            "caught up to the cut: no input left before the first record stamped at or after "
            f"{format_timestamp(self.cutoff.until_timestamp)} in each partition"
        )

    def _sources(self, tasks: list[TaskId], committed: dict[TaskId, TaskCheckpoint]) -> _Sources:
        """What a plan is made from: each input and global topic's end offsets (the inputs'
        cut by ``self.cutoff`` from where the tasks stand), and where each task's local
        store stands in its global topics."""
        subs = {t.subtopology for t in tasks}
        ends = {
            topic: layout_end_offsets(self.layout, topic)
            for sub in sorted(subs)
            for topic in [*self.layout.inputs[sub], *self.layout.global_topics]
        }
        if self.cutoff is not None:
            for sub in sorted(subs):
                for topic in self.layout.inputs[sub]:
                    starts: dict[int, int] = {}
                    for task in tasks:
                        if task.subtopology == sub:
                            offset = committed.get(task, TaskCheckpoint()).offset(topic)
                            starts[task.partition] = min(offset, starts.get(task.partition, offset))
                    ends[topic] = self.cutoff.ends(topic, ends[topic], starts)
        return ends, self._global_starts(tasks)

    def _global_starts(self, tasks: list[TaskId]) -> dict[TaskId, dict[str, int]]:
        """Per task, the next offset of each global topic partition its local store holds
        (none for a store that does not exist yet)."""
        starts: dict[TaskId, dict[str, int]] = {}
        if not self.layout.global_topics:
            return starts
        for task in tasks:
            if not TaskDir(self.state_dir, self.app.name, task).exists():
                continue
            store = TaskDir(self.state_dir, self.app.name, task).open(self.isolation)
            try:
                starts[task] = {
                    global_key(tp.topic, tp.partition): offset
                    for tp, offset in store.committed_offsets().items()
                    if tp.topic in self.layout.global_topics
                }
            finally:
                store.close()
        return starts

    def _batch_input(
        self, plans: list[TaskPlan], committed: dict[TaskId, TaskCheckpoint]
    ) -> BatchInput:
        """The batch as its transport gets it, computed once."""
        self._plan_runs = {p.task: p.run_id or self.run_id for p in plans}
        executor_stores = None
        if self._executors_own_state():
            stand = {p.task: committed.get(p.task, TaskCheckpoint()) for p in plans}
            executor_stores = ExecutorStores.of(self.layout, stand, self._rewound)
        ctx = BatchContext(
            self.app_path,
            self.app.name,
            {str(p.task): p.batch_id for p in plans},
            self.state_dir,
            self.isolation,
            dict(self.layout.outputs),
            {str(p.task): {topic: r[0] for topic, r in p.ranges.items()} for p in plans},
            {str(t): run for t, run in self._plan_runs.items()},
            executor_stores,
        )
        reads = transport.input_reads(self.layout.inputs, self.layout.global_topics, plans)
        return BatchInput(tuple(plans), ctx, reads, store_kinds(self.app))

    def _run_batch(
        self, plans: list[TaskPlan], committed: dict[TaskId, TaskCheckpoint], replayed: set[TaskId]
    ) -> tuple[list[TaskResult], float]:
        """Step 1 by the run's transport, then the commit; the batch's task results and
        its seconds."""
        started = time.monotonic()
        assert self.transport is not None  # chosen before the first batch
        try:
            output = self.transport.run_batch(self._batch_input(plans, committed))
        except Exception as exc:
            raise StreamsException(
                f"app {self.app.name}: batch of tasks "
                f"{', '.join(str(p.task) for p in plans)} failed and committed nothing: "
                f"{message_of(exc)}"
            ) from exc  # the whole trace goes to the log file
        results = _results(plans, committed, output)
        fresh = [p.task for p in plans if p.task not in replayed]
        fences = None if self.fences is None else self.fences(fresh)
        commit_batch(
            self.layout,
            self.run_id,
            results,
            output.rows,
            replayed,
            None if self._executors_own_state() else self.state_dir,
            self.isolation,
            fences,
            output.elsewhere,
        )
        seconds = time.monotonic() - started
        figures = _figures(results, replayed, seconds, self.dead_letter_topic)
        dead = figures["dead_letters"]
        self.say(
            "batch "
            + ", ".join(f"{r.task}:{r.batch_id}" for r in results)
            + f": {figures['records']} records, {figures['output_records']} output records, "
            + (f"{dead} skipped to dead-letter topic {self.dead_letter_topic}, " if dead else "")
            + f"{seconds:.1f}s"
        )
        return results, seconds


def _results(
    plans: list[TaskPlan], committed: dict[TaskId, TaskCheckpoint], output: BatchOutput
) -> list[TaskResult]:
    """Each planned task's result, from the outcome it handed over."""
    results = []
    for plan in plans:
        outcome = output.outcomes.get(plan.task)
        if outcome is None:
            raise StreamsException(
                f"task {plan.task} handed over no outcome for its batch {plan.batch_id}"
            )
        results.append(outcome.result(plan, committed.get(plan.task, TaskCheckpoint())))
    return results


def _from_global_starts(
    plan: TaskPlan, starts: dict[str, int], global_topics: tuple[str, ...]
) -> TaskPlan:
    """A replayed plan reading its global topics from where the task's local store stands
    (a restored store: from 0) up to the recorded ends: its global stores then hold what
    they held in the recorded batch, so the batch gives the same rows."""
    ranges = {}
    for key, (start, end) in plan.ranges.items():
        if split_global_key(key, global_topics):
            start = starts.get(key, 0)
        if end > start:
            ranges[key] = (start, end)
    return TaskPlan(plan.task, plan.batch_id, ranges, plan.run_id)


def _figures(
    results: list[TaskResult], replayed: set[TaskId], seconds: float, dead_letter_topic: str | None
) -> dict[str, Any]:
    """One batch's figures, as ``RunResult.figures`` and ``lakestate run --json`` give them:
    the records skipped to the dead-letter topic are counted apart from the output."""
    out = dead = 0
    for r in results:
        for topic, per in r.outputs.items():
            n = sum(per.values())
            if topic == dead_letter_topic:
                dead += n
            else:
                out += n
    return {
        "tasks": {str(r.task): r.batch_id for r in results},
        "records": sum(r.records for r in results),
        "output_records": out,
        "dead_letters": dead,
        "replayed": sorted(str(t) for t in replayed),
        "seconds": round(seconds, 3),
    }


__all__ = ["RunResult", "Runner", "new_run_id"]
