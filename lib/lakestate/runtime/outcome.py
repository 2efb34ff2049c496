"""What a task hands over after processing its share of a batch (step 1 of the commit),
and its encoding in the processing output.

Each task's output holds one ``task`` row (``batch_rows``), whose ``outcome`` column is the
task's ``TaskOutcome`` as a typed Arrow struct (``OUTCOME_TYPE``; ``encode``/``decode``),
the same in process and through Spark: the driver reads them back from the collected
Arrow table (``outcomes_of``) and, with the task's plan and its previous checkpoint, makes
the ``checkpoint.commit.TaskResult`` the commit records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan
from lakestate.checkpoint.commit import TaskResult
from lakestate.errors import StreamsException
from lakestate.processors.metrics import Key, TaskMetrics, accumulate
from lakestate.task_id import TaskId

#: One metric of a batch: its key (``processors/metrics.Key``) and its figure, in
#: ``int_value`` when a whole number was counted or set, else in ``float_value`` (so a
#: count stays an int through the trip, as the progress row shows it).
METRIC_TYPE = pa.struct(
    [
        pa.field("level", pa.string()),
        pa.field("scope", pa.string()),
        pa.field("name", pa.string()),
        pa.field("int_value", pa.int64()),
        pa.field("float_value", pa.float64()),
    ]
)

#: A ``TaskOutcome`` in the processing output's ``outcome`` column.
OUTCOME_TYPE = pa.struct(
    [
        pa.field("reached", pa.map_(pa.string(), pa.int64())),
        pa.field("stream_time", pa.int64()),
        pa.field("records", pa.int64()),
        pa.field("metric_counts", pa.list_(METRIC_TYPE)),
        pa.field("metric_values", pa.list_(METRIC_TYPE)),
        pa.field(
            "output_partitions",
            pa.list_(
                pa.struct(
                    [
                        pa.field("topic", pa.string()),
                        pa.field("partition", pa.int32()),
                        pa.field("records", pa.int64()),
                    ]
                )
            ),
        ),
        pa.field("stores", pa.list_(pa.string())),
        pa.field("processor_metadata", pa.map_(pa.string(), pa.int64())),
    ]
)


@dataclass(frozen=True)
class TaskOutcome:
    """One task's batch, as processed: ``reached``, the next offset per input it read
    (topic, or ``global_key`` for a global topic partition); ``stream_time``; ``records``
    processed; ``metrics``, the batch's own (counts and values, not totals);
    ``output_partitions``, records output per topic and partition; ``stores`` with
    changelog rows; ``processor_metadata`` after the batch."""

    reached: dict[str, int]
    stream_time: int
    records: int
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    output_partitions: dict[str, dict[int, int]] = field(default_factory=dict)
    stores: tuple[str, ...] = ()
    processor_metadata: dict[str, int] = field(default_factory=dict)

    def encode(self) -> pa.StructScalar:
        """The outcome as a value of the ``outcome`` column (``OUTCOME_TYPE``)."""
        return pa.scalar(
            {
                "reached": list(self.reached.items()),
                "stream_time": self.stream_time,
                "records": self.records,
                "metric_counts": _metric_rows(self.metrics.counts),
                "metric_values": _metric_rows(self.metrics.values),
                "output_partitions": [
                    {"topic": topic, "partition": p, "records": n}
                    for topic, per in self.output_partitions.items()
                    for p, n in per.items()
                ],
                "stores": list(self.stores),
                "processor_metadata": list(self.processor_metadata.items()),
            },
            OUTCOME_TYPE,
        )

    @classmethod
    def decode(cls, value: pa.StructScalar) -> TaskOutcome:
        """The outcome ``encode`` gave ``value``."""
        doc = value.as_py()
        output_partitions: dict[str, dict[int, int]] = {}
        for row in doc["output_partitions"]:
            output_partitions.setdefault(row["topic"], {})[row["partition"]] = row["records"]
        return cls(
            reached=dict(doc["reached"]),
            stream_time=doc["stream_time"],
            records=doc["records"],
            metrics=TaskMetrics(
                _metrics_of(doc["metric_counts"]), _metrics_of(doc["metric_values"])
            ),
            output_partitions=output_partitions,
            stores=tuple(doc["stores"]),
            processor_metadata=dict(doc["processor_metadata"]),
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
            accumulate(before.metrics, self.metrics.report()),
            {topic: dict(per) for topic, per in self.output_partitions.items()},
            self.stores,
            dict(self.processor_metadata),
        )


def _metric_rows(metrics: dict[Key, float]) -> list[dict[str, object]]:
    rows = []
    for (level, scope, name), figure in metrics.items():
        whole = isinstance(figure, int) and not isinstance(figure, bool)
        rows.append(
            {
                "level": level,
                "scope": scope,
                "name": name,
                "int_value": figure if whole else None,
                "float_value": None if whole else float(figure),
            }
        )
    return rows


def _metrics_of(rows: list[dict[str, object]]) -> dict[Key, float]:
    return {
        (row["level"], row["scope"], row["name"]): (
            row["int_value"] if row["float_value"] is None else row["float_value"]
        )
        for row in rows
    }


def outcomes_of(rows: pa.Table) -> dict[TaskId, TaskOutcome]:
    """The outcome of each task in a batch's processing output (its ``task`` rows)."""
    tasks = rows.filter(pc.equal(rows.column("kind"), "task"))
    outcomes: dict[TaskId, TaskOutcome] = {}
    for sub, partition, outcome in zip(
        tasks.column("sub").to_pylist(),
        tasks.column("task").to_pylist(),
        tasks.column("outcome"),
        strict=True,
    ):
        task = TaskId(sub, partition)
        if task in outcomes:
            raise StreamsException(f"task {task} handed over two outcomes in one batch")
        outcomes[task] = TaskOutcome.decode(outcome)
    return outcomes


__all__ = ["METRIC_TYPE", "OUTCOME_TYPE", "TaskOutcome", "outcomes_of"]
