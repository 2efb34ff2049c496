"""What a task hands over after processing its share of a batch (step 1 of the commit),
and its encoding in the processing output.

Each task's output holds one ``task`` row (``batch_rows``), whose ``info`` column is the
task's ``TaskOutcome`` as JSON (``encode``/``decode``): the driver reads them back from
the collected Arrow table (``outcomes_of``) and, with the task's plan and its previous
checkpoint, makes the ``checkpoint.commit.TaskResult`` the commit records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan
from lakestate.checkpoint.commit import TaskResult
from lakestate.errors import StreamsException
from lakestate.processors.metrics import accumulate
from lakestate.task_id import TaskId


@dataclass(frozen=True)
class TaskOutcome:
    """One task's batch, as processed: ``reached``, the next offset per input it read
    (topic, or ``global_key`` for a global topic partition); ``stream_time``; ``records``
    processed; ``metrics``, the batch's own report (``TaskMetrics.report()``: counts and
    values, not totals); ``output_partitions``, records output per topic and partition;
    ``stores`` with changelog rows; ``processor_metadata`` after the batch."""

    reached: dict[str, int]
    stream_time: int
    records: int
    metrics: dict[str, Any] = field(default_factory=dict)
    output_partitions: dict[str, dict[int, int]] = field(default_factory=dict)
    stores: tuple[str, ...] = ()
    processor_metadata: dict[str, int] = field(default_factory=dict)

    def encode(self) -> str:
        """The outcome as the ``info`` column's JSON text (partitions as strings: JSON
        object keys)."""
        return json.dumps(
            {
                "reached": self.reached,
                "stream_time": self.stream_time,
                "records": self.records,
                "metrics": self.metrics,
                "output_partitions": {
                    topic: {str(p): n for p, n in per.items()}
                    for topic, per in self.output_partitions.items()
                },
                "stores": list(self.stores),
                "processor_metadata": self.processor_metadata,
            }
        )

    @classmethod
    def decode(cls, text: str) -> TaskOutcome:
        """The outcome ``encode`` gave ``text``."""
        doc = json.loads(text)
        return cls(
            reached={topic: int(o) for topic, o in doc["reached"].items()},
            stream_time=int(doc["stream_time"]),
            records=int(doc["records"]),
            metrics=doc["metrics"],
            output_partitions={
                topic: {int(p): int(n) for p, n in per.items()}
                for topic, per in doc["output_partitions"].items()
            },
            stores=tuple(doc["stores"]),
            processor_metadata={k: int(v) for k, v in doc["processor_metadata"].items()},
        )

    def result(self, plan: TaskPlan, before: TaskCheckpoint) -> TaskResult:
        """The commit's record of the task's batch ``plan``: its ranges as far as the task
        reached, every input's offset (``before``'s, moved on by this batch), and the
        metrics totals since the task's first batch (a replay starts from the same
        previous checkpoint, so it gets the totals it recorded)."""
        offsets = dict(before.offsets)
        offsets.update(self.reached)
        return TaskResult(
            plan.task,
            plan.batch_id,
            {t: (plan.ranges[t][0], end) for t, end in self.reached.items()},
            offsets,
            self.stream_time,
            self.records,
            accumulate(before.metrics, self.metrics),
            {topic: dict(per) for topic, per in self.output_partitions.items()},
            self.stores,
            dict(self.processor_metadata),
        )


def outcomes_of(rows: pa.Table) -> dict[TaskId, TaskOutcome]:
    """The outcome of each task in a batch's processing output (its ``task`` rows)."""
    infos = rows.filter(pc.equal(rows.column("kind"), "task"))
    outcomes: dict[TaskId, TaskOutcome] = {}
    for sub, partition, info in zip(
        infos.column("sub").to_pylist(),
        infos.column("task").to_pylist(),
        infos.column("info").to_pylist(),
        strict=True,
    ):
        task = TaskId(sub, partition)
        if task in outcomes:
            raise StreamsException(f"task {task} handed over two outcomes in one batch")
        outcomes[task] = TaskOutcome.decode(info)
    return outcomes


__all__ = ["TaskOutcome", "outcomes_of"]
