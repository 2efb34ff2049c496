"""The plan of a micro-batch: per task, the offset range of each input partition.

A plan is recorded before processing (in the app's batch log), so a run that crashes mid-
batch is replayed with the same ranges. A task may stop short of its planned ends when its
uncommitted state exceeds ``statestore.uncommitted.max.*`` (KIP-892's forced commit); what
it did process is in the batch's commit record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

# {topic: {partition: next offset}}
Offsets = dict[str, dict[int, int]]


@dataclass(frozen=True)
class TaskPlan:
    """Task ``subtopology``_``partition`` reads ``[start, end)`` of partition ``partition``
    of each input topic in ``ranges`` (input order is the topology's)."""

    subtopology: int
    partition: int
    ranges: dict[str, tuple[int, int]]

    @property
    def task_id(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


@dataclass(frozen=True)
class BatchPlan:
    batch_id: int
    tasks: list[TaskPlan] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks)

    def to_json(self) -> str:
        return json.dumps(
            {
                "batch_id": self.batch_id,
                "tasks": [
                    {
                        "sub": t.subtopology,
                        "partition": t.partition,
                        "ranges": {topic: list(r) for topic, r in t.ranges.items()},
                    }
                    for t in self.tasks
                ],
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str) -> BatchPlan:
        raw = json.loads(text)
        return BatchPlan(
            raw["batch_id"],
            [
                TaskPlan(
                    t["sub"],
                    t["partition"],
                    {topic: (r[0], r[1]) for topic, r in t["ranges"].items()},
                )
                for t in raw["tasks"]
            ],
        )


def plan_batch(
    batch_id: int,
    task_inputs: Mapping[int, list[str]],
    task_counts: Mapping[int, int],
    committed: Offsets,
    ends: Offsets,
    max_records: int | None,
) -> BatchPlan:
    """Ranges from the committed offsets towards the end offsets, at most ``max_records``
    per task (shared across its inputs in input order), skipping tasks with nothing to read.

    ``task_inputs``: sub-topology id -> its input topics (real names), in input order.
    ``task_counts``: sub-topology id -> number of tasks (partitions).
    """
    tasks = []
    for sub in sorted(task_inputs):
        for partition in range(task_counts[sub]):
            budget = max_records
            ranges: dict[str, tuple[int, int]] = {}
            for topic in task_inputs[sub]:
                end = ends.get(topic, {}).get(partition)
                if end is None:
                    continue
                start = committed.get(topic, {}).get(partition, 0)
                if budget is not None:
                    end = min(end, start + budget)
                if end > start:
                    ranges[topic] = (start, end)
                    if budget is not None:
                        budget -= end - start
            if ranges:
                tasks.append(TaskPlan(sub, partition, ranges))
    return BatchPlan(batch_id, tasks)
