"""The plan of a batch: per task, its next batch number and the offset ranges it reads.

Each task numbers its own batches. A task reads, per input, from its committed offset
towards the input's end, at most ``statestore.uncommitted.max.records`` (and
``--max-records``) records across its inputs; a task may still stop short when its
uncommitted state exceeds ``statestore.uncommitted.max.*`` (KIP-892's forced commit). The
plan needs no commit of its own: what a task processed is recorded with its results, in
step 2 of the commit (``commit.py``), and a batch no table holds had no durable effect.

Global tables: every task also reads every partition of each global table's topic, from
the offsets its local store holds (not from Delta: a restored store holds no global data
and starts again at 0) to the planned end, before its own inputs and within the same
budget. Those ranges are keyed ``global_key(topic, partition)`` ("topic@partition"; Kafka
topic names cannot contain "@"), in the plan, the task's results and its progress row.

A capped batch of a task with several inputs takes the first records of the order the task
processes them in (``task_executor._in_order``, Kafka's PartitionGroup: the input whose
next record has the lowest timestamp goes first, ties in input order), not the first input's
records before the next's: so batch boundaries never change that order and a task's output
does not depend on ``--max-records``. (That prefix is what one uncapped batch would process
first: each choice of the whole merge is the lowest head among all inputs, so also among the
prefix's.) It needs the timestamps of at most ``max_records`` records per input. A replayed
batch reads the ranges its progress row recorded, never a new plan.

A batch as a whole is bounded too (``BATCH_MAX_RECORDS_CONFIG``): its records, every task's
together, are what a transport holds in memory at once (the tasks' input columns, their
output rows until the commit), and a backlog larger than that goes in several batches, each
committed before the next is planned, rather than in one that runs out of memory. When the
per-task plans exceed it, every task gets the same smaller cap (``batch_cap``: the tasks
with less pending keep all of theirs, the rest share what is left), so tasks still advance
together and each batch's cut is one a smaller ``max_records`` would have made: the output
does not depend on it.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan, global_key
from lakestate.errors import StreamsException
from lakestate.task_id import TaskId

#: App config key: at most this many records in one batch, all tasks together (a task still
#: gets at least one). Default: ``default_batch_max_records()``, from the machine's memory.
BATCH_MAX_RECORDS_CONFIG = "lakestate.batch.max.records"
#: Peak memory per record of a batch run in process, rounded up: the demo's count, measured
#: by tests/benchmarks/bench_threshold.py (peak RSS of the run's processes: 2,048 MiB for a
#: 1M-record batch, 3,800 MiB for 2M, so about 1.8 KiB per record; docs/benchmarks.md).
BYTES_PER_RECORD = 2048
#: The share of the machine's memory a batch may take by default.
MEMORY_SHARE = 0.25
#: The default's floor and ceiling: a small machine still runs batches of useful size, and a
#: big one does not plan batches so large that one failure replays minutes of work.
MIN_BATCH_RECORDS, MAX_BATCH_RECORDS = 100_000, 10_000_000

#: The timestamps of one partition's records ``start <= offset < end``, in offset order.
Timestamps = Callable[[str, int, int, int], Sequence[int]]


def merged_counts(timestamps: Sequence[Sequence[int]], budget: int) -> list[int]:
    """How many records of each input (each its timestamps in offset order) the first
    ``budget`` records of the lowest-timestamp-head merge take (ties: input order)."""
    counts = [0] * len(timestamps)
    heap = [(ts[0], n) for n, ts in enumerate(timestamps) if ts]
    heapq.heapify(heap)
    for _ in range(budget):
        if not heap:
            break
        _, n = heapq.heappop(heap)
        counts[n] += 1
        if counts[n] < len(timestamps[n]):
            heapq.heappush(heap, (timestamps[n][counts[n]], n))
    return counts


def plan_tasks(
    tasks: list[TaskId],
    task_inputs: Mapping[int, list[str]],
    committed: Mapping[TaskId, TaskCheckpoint],
    ends: Mapping[str, Mapping[int, int]],
    max_records: int | None,
    global_topics: list[str] | tuple[str, ...] = (),
    global_starts: Mapping[TaskId, Mapping[str, int]] | None = None,
    timestamps: Timestamps | None = None,
) -> list[TaskPlan]:
    """Ranges from each task's committed offsets towards the end offsets, at most
    ``max_records`` per task (shared across its global topics' partitions, then its inputs
    in input order), skipping tasks with nothing to read. ``task_inputs``: sub-topology ->
    its input topics (real names); ``global_starts``: task -> ``global_key`` -> the next
    offset its local store holds (0 when absent). ``timestamps`` (required for a capped
    plan of a task with several inputs) reads the records' timestamps for the merged cut."""
    plans = []
    for task in tasks:
        budget = max_records
        ranges: dict[str, tuple[int, int]] = {}
        state = committed.get(task, TaskCheckpoint())
        held = (global_starts or {}).get(task, {})
        reads = [
            (global_key(topic, p), end, held.get(global_key(topic, p), 0))
            for topic in global_topics
            for p, end in sorted(ends.get(topic, {}).items())
        ]
        inputs = [
            (topic, ends.get(topic, {}).get(task.partition), state.offset(topic))
            for topic in task_inputs[task.subtopology]
        ]
        budget = _one_after_another(reads, budget, ranges)
        ranges.update(_input_ranges(task, inputs, budget, timestamps))
        if ranges:
            plans.append(TaskPlan(task, state.batch_id + 1, ranges))
    return plans


def _input_ranges(
    task: TaskId,
    inputs: list[tuple[str, int | None, int]],
    budget: int | None,
    timestamps: Timestamps | None,
) -> dict[str, tuple[int, int]]:
    """A task's input ranges within ``budget``: the merged prefix (see the module) when
    more than one input has records and they exceed the budget."""
    pending = [(t, e, s) for t, e, s in inputs if e is not None and e > s]
    if budget is not None and len(pending) > 1 and sum(e - s for _, e, s in pending) > budget:
        if timestamps is None:
            raise ValueError(f"plan of {task}: a capped multi-input plan needs timestamps")
        stamps = [timestamps(t, task.partition, s, min(e, s + budget)) for t, e, s in pending]
        counts = merged_counts(stamps, budget)
        return {t: (s, s + c) for (t, _, s), c in zip(pending, counts, strict=True) if c}
    ranges: dict[str, tuple[int, int]] = {}
    _one_after_another(pending, budget, ranges)
    return ranges


def _one_after_another(
    reads: list[tuple[str, int | None, int]],
    budget: int | None,
    ranges: dict[str, tuple[int, int]],
) -> int | None:
    """Adds to ``ranges`` each read's range in turn, within what is left of ``budget``;
    returns what is left."""
    for topic, end, start in reads:
        if end is None:
            continue
        if budget is not None:
            end = min(end, start + budget)
        if end > start:
            ranges[topic] = (start, end)
            if budget is not None:
                budget -= end - start
    return budget


def default_batch_max_records(memory_bytes: int | None = None) -> int:
    """``MEMORY_SHARE`` of ``memory_bytes`` (default: this machine's physical memory) in
    records of ``BYTES_PER_RECORD``, within ``MIN_BATCH_RECORDS``..``MAX_BATCH_RECORDS``."""
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    fits = int(memory_bytes * MEMORY_SHARE) // BYTES_PER_RECORD
    return max(MIN_BATCH_RECORDS, min(MAX_BATCH_RECORDS, fits))


def batch_max_records(config: Mapping[str, Any]) -> int:
    """The app's bound on a batch's records (``BATCH_MAX_RECORDS_CONFIG``), checked."""
    value = config.get(BATCH_MAX_RECORDS_CONFIG)
    if value is None:
        return default_batch_max_records()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StreamsException(f"{BATCH_MAX_RECORDS_CONFIG} must be an int >= 1, got {value!r}")
    return value


def batch_cap(records: Sequence[int], bound: int) -> int:
    """The largest per-task cap ``c`` with ``sum(min(r, c) for r in records) <= bound``
    (``records``: each task's planned records), at least 1: the tasks with fewer than ``c``
    keep theirs, the others take ``c`` each."""
    left, ordered = bound, sorted(records)
    for i, r in enumerate(ordered):
        sharing = len(ordered) - i
        if r * sharing > left:
            return max(1, left // sharing)
        left -= r
    return max(ordered, default=1)
