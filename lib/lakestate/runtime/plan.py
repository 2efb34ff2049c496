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
"""

from __future__ import annotations

from collections.abc import Mapping

from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan, global_key
from lakestate.task_id import TaskId


def plan_tasks(
    tasks: list[TaskId],
    task_inputs: Mapping[int, list[str]],
    committed: Mapping[TaskId, TaskCheckpoint],
    ends: Mapping[str, Mapping[int, int]],
    max_records: int | None,
    global_topics: list[str] | tuple[str, ...] = (),
    global_starts: Mapping[TaskId, Mapping[str, int]] | None = None,
) -> list[TaskPlan]:
    """Ranges from each task's committed offsets towards the end offsets, at most
    ``max_records`` per task (shared across its global topics' partitions, then its inputs
    in input order), skipping tasks with nothing to read. ``task_inputs``: sub-topology ->
    its input topics (real names); ``global_starts``: task -> ``global_key`` -> the next
    offset its local store holds (0 when absent)."""
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
        reads += [
            (topic, ends.get(topic, {}).get(task.partition), state.offset(topic))
            for topic in task_inputs[task.subtopology]
        ]
        for topic, end, start in reads:
            if end is None:
                continue
            if budget is not None:
                end = min(end, start + budget)
            if end > start:
                ranges[topic] = (start, end)
                if budget is not None:
                    budget -= end - start
        if ranges:
            plans.append(TaskPlan(task, state.batch_id + 1, ranges))
    return plans
