"""The processor API: what every operator implements and what a task gives it.

Processors are pure Python and know nothing of Spark or Airflow. One instance serves one
task; records arrive in offset order. The same code runs in the test driver and in the
Spark engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

from lakestate.records import Record, RecordMetadata


class ProcessorContext(Protocol):
    """What a running task offers its processors."""

    @property
    def task_id(self) -> int:
        """The task's partition number."""
        ...

    @property
    def stream_time(self) -> int:
        """Max timestamp seen by the task, including the current record (-1 before any)."""
        ...

    @property
    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed, if it came from one."""
        ...

    @property
    def application_id(self) -> str: ...

    def forward(self, record: Record, child: str | None = None) -> None:
        """Send ``record`` to every child node, or only to the named one."""
        ...

    def get_state_store(self, name: str) -> Any:
        """The typed store ``name``, reading and writing through the task's transaction."""
        ...

    def metric(self, name: str, delta: float = 1) -> None:
        """Add ``delta`` to the task-level metric ``name``."""
        ...

    def set_metric(self, name: str, value: float) -> None: ...


class Processor(ABC):
    """One node's per-task logic."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    @abstractmethod
    def process(self, record: Record) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook, most processors hold nothing
        """Called when the task closes."""
