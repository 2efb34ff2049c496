"""A batch's recorded identity: which offsets a task's batch reads (``TaskPlan``), where a
task stands after its last complete batch (``TaskCheckpoint``), and how a global topic's
partitions are keyed in both (``global_key``). The progress table records them (``progress.py``);
the runtime plans them (``runtime/plan.py``) and recovery reads them back (``restore/``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakestate.task_id import TaskId

GLOBAL_SEPARATOR = "@"


def global_key(topic: str, partition: int) -> str:
    """The key of a global topic's partition in a task's ranges and offsets."""
    return f"{topic}{GLOBAL_SEPARATOR}{partition}"


def split_global_key(key: str, global_topics: Collection[str]) -> tuple[str, int] | None:
    """``(topic, partition)`` of a ``global_key`` of one of ``global_topics``; None for
    any other key (an input topic's name)."""
    topic, sep, partition = key.rpartition(GLOBAL_SEPARATOR)
    if sep and topic in global_topics and partition.isdigit():
        return topic, int(partition)
    return None


@dataclass(frozen=True)
class TaskPlan:
    """Task ``task`` processes ``[start, end)`` of its partition of each topic in
    ``ranges`` as its batch ``batch_id``. ``run_id``: for a batch being replayed, the run
    whose progress row recorded it (its staged transaction carries that id); None for a
    new batch (the run's own)."""

    task: TaskId
    batch_id: int
    ranges: dict[str, tuple[int, int]]
    run_id: str | None = None

    def global_ranges(self, topic: str) -> dict[int, tuple[int, int]]:
        """The ranges of global topic ``topic``, by partition."""
        return {
            split[1]: bounds
            for key, bounds in self.ranges.items()
            if (split := split_global_key(key, [topic]))
        }

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


@dataclass(frozen=True)
class TaskCheckpoint:
    """Where a task stands: its last complete batch (0: none), the next offset of each of
    its inputs, its stream time, its processors' metadata and its metrics' totals (the
    document of its last progress row, ``lakestate.processors.metrics``); ``run_id``: the
    run whose progress row recorded the batch (None when not read from a row)."""

    batch_id: int = 0
    offsets: Mapping[str, int] = field(default_factory=dict)
    stream_time: int | None = None
    processor_metadata: Mapping[str, int] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None

    def offset(self, topic: str) -> int:
        return self.offsets.get(topic, 0)
