"""A batch's transport: where its tasks' records are read and processed (step 1 of the
commit), behind one interface.

The runner computes a batch's ``BatchInput`` once (the tasks' plans, the context every
task's processing gets, the reads of its input) and hands it to the run's ``Transport``,
which returns each task's rows and ``TaskOutcome`` (``BatchOutput``). Two implement it:
``inprocess.InProcessTransport`` (delta-rs reads, the tasks one after another in this
process, no JVM) and ``spark_transport.SparkTransport`` (Spark reads, the tasks in
parallel in Spark's Python workers). Both run ``task_executor.process_task`` on the rows
of ``input_reads``, so the transport cannot change what a batch commits.

Which one a run uses is chosen once, at its start (``choose``): ``--transport`` /
``run_app(transport=...)``, else the app config ``lakestate.transport``, else ``auto``:
in process when the run's pending records are at most ``lakestate.inprocess.max.records``,
or whatever their number when Spark's master is local (``local_master``). Why: on this
machine's cores alone, in process was faster than Spark ``local[2]`` at every size measured
(10k to 5M records, 1.1-30x; tests/benchmarks/bench_threshold.py, docs/benchmarks.md) with
at most Spark's memory, a batch's memory being bounded by ``lakestate.batch.max.records``
(``plan.py``), not by the transport: Spark is worth it for a cluster's machines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from lakestate.checkpoint.batch import TaskPlan
from lakestate.checkpoint.executor_writes import RowsElsewhere
from lakestate.errors import StreamsException
from lakestate.runtime.batch_rows import GLOBAL_INPUT
from lakestate.runtime.outcome import TaskOutcome, outcomes_of
from lakestate.runtime.task_executor import BatchContext
from lakestate.task_id import TaskId

#: App config key: the transport of the app's runs when the run does not say
#: (``--transport``): ``auto`` (the default), ``inprocess`` or ``spark``.
TRANSPORT_CONFIG = "lakestate.transport"
AUTO, IN_PROCESS, SPARK = "auto", "inprocess", "spark"
TRANSPORTS = (AUTO, IN_PROCESS, SPARK)
#: App config key: with ``auto``, a run whose whole pending input (every owned task's
#: records from its committed offsets to the ends, global topics included) is at most this
#: many records is processed in this process, without starting Spark; 0: always Spark.
MAX_RECORDS_CONFIG = "lakestate.inprocess.max.records"
DEFAULT_MAX_RECORDS = 2_000_000


def max_records(config: Mapping[str, Any]) -> int:
    """The app's in-process threshold (``MAX_RECORDS_CONFIG``), checked."""
    value = config.get(MAX_RECORDS_CONFIG, DEFAULT_MAX_RECORDS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamsException(f"{MAX_RECORDS_CONFIG} must be an int >= 0, got {value!r}")
    return value


def local_master(master: str | None) -> bool:
    """Whether Spark, started for this run, would run on this machine alone: ``master``,
    else env ``LAKESTATE_SPARK_MASTER``, else ``local[*]`` (``spark_session``'s choice,
    repeated here because that module imports pyspark), is ``local`` or ``local[...]``;
    under spark-submit without either, its ``--master`` decides: not known here, so no."""
    chosen = master or os.environ.get("LAKESTATE_SPARK_MASTER")
    if chosen is None:
        return "PYSPARK_GATEWAY_PORT" not in os.environ
    return chosen == "local" or chosen.startswith("local[")


def checked(value: Any, where: str) -> str:
    """``value`` if it names a transport; else a clear error saying ``where`` it came from."""
    if value not in TRANSPORTS:
        raise StreamsException(
            f"{where} must be one of {', '.join(TRANSPORTS)}, got {value!r} (auto: in this "
            f"process when the run's pending records are at most {MAX_RECORDS_CONFIG}, "
            "else Spark)"
        )
    return value


@dataclass(frozen=True)
class Choice:
    """The transport a run uses (``IN_PROCESS`` or ``SPARK``) and why, as its first
    transport line says it."""

    transport: str
    why: str

    @property
    def in_process(self) -> bool:
        return self.transport == IN_PROCESS

    def line(self) -> str:
        where = "in this process, no Spark" if self.in_process else "in Spark"
        return f"transport: {where} ({self.why})"


def choose(
    option: str | None, config: Mapping[str, Any], pending: int, limit: int, local: bool = False
) -> Choice:
    """The run's transport: ``option`` (the run's ``--transport``) if given, else the app
    config's ``TRANSPORT_CONFIG``, else ``auto``; ``auto`` is in process when ``limit``
    (``MAX_RECORDS_CONFIG``) is > 0 and ``pending`` (the run's pending records) is at most
    ``limit`` or Spark's master is ``local`` (``local_master``)."""
    if option is not None:
        asked, source = checked(option, "--transport"), f"--transport {option}"
    else:
        asked = checked(config.get(TRANSPORT_CONFIG, AUTO), TRANSPORT_CONFIG)
        source = f"{TRANSPORT_CONFIG} {asked}"
    if asked != AUTO:
        return Choice(asked, f"{source}; {pending} records pending")
    in_process = 0 < limit and (pending <= limit or local)
    why = f"{pending} records pending; {MAX_RECORDS_CONFIG} {limit}"
    if in_process and pending > limit:
        why += "; Spark's master is local: in process at any size"
    return Choice(IN_PROCESS if in_process else SPARK, why)


@dataclass(frozen=True)
class InputRead:
    """One read of a batch's input: the records of ``topic`` in ``ranges`` (partition ->
    ``[start, end)``), for ``readers`` as their input ``input_index``. The rows of a
    sub-topology's input go to the reader of their partition (the task ``(sub,
    partition)``); a global topic's (``GLOBAL_INPUT``) go to every reader."""

    topic: str
    input_index: int
    ranges: Mapping[int, tuple[int, int]]
    readers: tuple[TaskId, ...]

    @property
    def is_global(self) -> bool:
        return self.input_index == GLOBAL_INPUT

    def ranges_of(self, task: TaskId) -> dict[int, tuple[int, int]]:
        """The ranges whose rows go to ``task`` (none if it is not a reader)."""
        if task not in self.readers:
            return {}
        if self.is_global:
            return dict(self.ranges)
        return {task.partition: self.ranges[task.partition]}


def input_reads(
    inputs: Mapping[int, Sequence[str]], global_topics: Sequence[str], plans: Sequence[TaskPlan]
) -> tuple[InputRead, ...]:
    """The reads of the tasks' planned ranges (``inputs``: sub-topology -> its input topics
    in input order; ``global_topics``: the global tables' topics): per sub-topology and
    input, one read of its tasks' partitions; per global topic, one read per set of ranges
    (the tasks reading the same ranges share it). Each task's share of them
    (``InputRead.ranges_of``) is its plan's ranges."""
    reads = []
    for sub, topics in inputs.items():
        of_sub = [p for p in plans if p.task.subtopology == sub]
        for index, topic in enumerate(topics):
            readers = tuple(p.task for p in of_sub if topic in p.ranges)
            if readers:
                ranges = {p.task.partition: p.ranges[topic] for p in of_sub if topic in p.ranges}
                reads.append(InputRead(topic, index, ranges, readers))
    for topic in global_topics:
        sharing: dict[tuple, list[TaskId]] = {}
        for plan in plans:
            ranges = plan.global_ranges(topic)
            if ranges:
                sharing.setdefault(tuple(sorted(ranges.items())), []).append(plan.task)
        for key, tasks in sharing.items():
            reads.append(InputRead(topic, GLOBAL_INPUT, dict(key), tuple(tasks)))
    return tuple(reads)


@dataclass(frozen=True)
class BatchInput:
    """A batch as the runner hands it to a transport, computed once: the tasks' plans,
    the context their processing gets, the reads of their input, and the app's store
    kinds (they decide the processing output's columns, ``batch_rows.out_fields``)."""

    plans: tuple[TaskPlan, ...]
    ctx: BatchContext
    reads: tuple[InputRead, ...]
    store_kinds: tuple[str, ...]

    @property
    def records(self) -> int:
        """The records the batch plans to read, global topics included."""
        return sum(p.records for p in self.plans)


@dataclass(frozen=True)
class BatchOutput:
    """What a transport returns: the processing output (every task's ``out``, ``state``
    and ``task`` rows, columns ``batch_rows.out_fields``) and each task's outcome. With
    ``elsewhere`` (Spark's executors own the state), ``rows`` holds only the ``task`` rows
    and the ``out`` rows of the topics that are not log tables: the rest stayed on the
    executors, which write them as files for the commit (``checkpoint/executor_writes``)."""

    rows: pa.Table
    outcomes: dict[TaskId, TaskOutcome]
    elsewhere: RowsElsewhere | None = None

    @classmethod
    def of(cls, rows: pa.Table) -> BatchOutput:
        return cls(rows, outcomes_of(rows))


class Transport(Protocol):
    """Step 1 of the commit for a batch's tasks: read their input, process it
    (``task_executor.process_task``: each task stages its transaction beside its local
    store) and return what they hand over. A failure raises, and the batch commits
    nothing."""

    #: ``RunResult.transport``: ``in_process`` or ``spark``.
    name: str

    def start(self) -> None:
        """Get ready, in the background if it takes time (called once the run chose it)."""

    def state_owner(self, config: dict) -> str:
        """Whose the tasks' stores are in this transport: ``driver`` (this instance's state
        directory) or ``executors`` (each Spark executor's own: ``executor_stores``)."""

    def run_batch(self, batch: BatchInput) -> BatchOutput:
        """Process ``batch``."""

    def close(self) -> None:
        """Wait for what ``start`` began (called at the end of the run)."""


__all__ = [
    "AUTO",
    "DEFAULT_MAX_RECORDS",
    "IN_PROCESS",
    "MAX_RECORDS_CONFIG",
    "SPARK",
    "TRANSPORTS",
    "TRANSPORT_CONFIG",
    "BatchInput",
    "BatchOutput",
    "Choice",
    "InputRead",
    "Transport",
    "checked",
    "choose",
    "input_reads",
    "local_master",
    "max_records",
]
