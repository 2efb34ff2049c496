"""The public Processor API (Kafka's ``processor.api``): a processor the user writes, the
context it sees, and the node that runs it (``KStream.process`` / ``process_values``).

A user processor sees records one at a time, reads and writes the stores connected to its
node through the task's transaction (committed with the batch, KIP-892), forwards records,
and schedules stream-time punctuators (processors/punctuation.py). It knows nothing of
where it runs: the same code runs in the test driver and in the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from lakestate.errors import StreamsException, TopologyException
from lakestate.processors.api import Processor as NodeProcessor
from lakestate.processors.api import ProcessorContext as NodeContext
from lakestate.processors.punctuation import Cancellable, PunctuationType
from lakestate.records import Record, RecordMetadata, duration_millis


class Processor:
    """A processor of records (Kafka's ``processor.api.Processor``): ``init`` once per
    task before any record, ``process`` for each record in offset order, ``close`` when
    the task closes. A task makes its own instance (the supplier is called per task)."""

    def init(self, context: ProcessorContext) -> None:  # noqa: B027 - optional hook
        """Called once with the task's context; keep it to forward, read stores, schedule."""

    def process(self, record: Record) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement process(record)")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called when the task closes (at the end of each batch in the engine)."""


class ProcessorContext:
    """What a user processor is given (Kafka's ``api.ProcessorContext``)."""

    def __init__(self, node: UserProcessorNode, context: NodeContext) -> None:
        self._node = node
        self._context = context

    @property
    def application_id(self) -> str:
        return self._context.application_id

    @property
    def task_id(self) -> int:
        """The task's partition number."""
        return self._context.task_id

    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed; None in a punctuator."""
        return self._context.record_metadata

    def current_stream_time_ms(self) -> int:
        """The task's stream time: the largest timestamp it has seen (-1 before any)."""
        return self._context.stream_time

    def forward(self, record: Record, child_name: str | None = None) -> None:
        """Send ``record`` to every child node, or only to ``child_name``."""
        self._node.check_forward(record, child_name)
        self._context.forward(record, child_name)

    def get_state_store(self, name: str) -> Any:
        """The store ``name``, which must be connected to this node (``process(supplier,
        name)``): reads see the batch's own writes, writes commit with the batch."""
        if name not in self._node.store_names:
            raise StreamsException(
                f"processor {self._node.name} has no access to store {name!r}: connect it "
                f"with process(supplier, {name!r}) after builder.add_state_store(...)"
            )
        return self._context.get_state_store(name)

    def schedule(
        self, interval: timedelta, punctuation_type: PunctuationType, callback: Callable
    ) -> Cancellable:
        """Call ``callback(stream_time)`` when stream time passes each multiple of
        ``interval`` (at most once per record; see processors/punctuation.py). Only
        ``PunctuationType.STREAM_TIME``: wall-clock punctuation is refused (its output
        could not be replayed after a failure)."""
        where = f"processor {self._node.name}: schedule"
        if punctuation_type is PunctuationType.WALL_CLOCK_TIME:
            raise StreamsException(
                f"{where}: PunctuationType.WALL_CLOCK_TIME is not supported. lakestate runs "
                "in micro-batches that may be replayed after a failure, and a wall clock "
                "would make a replay's output differ; schedule on PunctuationType.STREAM_TIME "
                "(the records' own time) instead"
            )
        if not isinstance(punctuation_type, PunctuationType):
            raise StreamsException(
                f"{where}: type must be a PunctuationType, got {punctuation_type!r}"
            )
        if not callable(callback):
            raise StreamsException(f"{where}: callback must be callable, got {callback!r}")
        try:
            interval_ms = duration_millis(interval, "interval", positive=True)
        except (TypeError, ValueError) as exc:
            raise StreamsException(f"{where}: {exc}") from None
        return self._context.schedule(interval_ms, callback)

    def commit(self) -> None:
        """Accepted for Kafka's API: every batch commits as a whole, so this asks nothing."""


class UserProcessorNode(NodeProcessor):
    """The graph node that runs a user processor made by ``supplier``. With ``fixed_key``
    (``process_values``), a record forwarded while processing a record keeps its key."""

    def __init__(
        self, name: str, supplier: Callable[[], Any], store_names: tuple[str, ...], fixed_key: bool
    ) -> None:
        self.name = name
        self.store_names = frozenset(store_names)
        self.fixed_key = fixed_key
        self._user = make_processor(supplier, name)
        self._current: Record | None = None

    def init(self, context: NodeContext) -> None:
        self.context = context
        self._user.init(ProcessorContext(self, context))

    def process(self, record: Record) -> None:
        self._current = record
        try:
            self._user.process(record)
        finally:
            self._current = None

    def check_forward(self, record: Record, child: str | None) -> None:
        if not isinstance(record, Record):
            raise StreamsException(
                f"processor {self.name} forwarded {record!r}: forward takes a "
                "lakestate.Record(key, value, timestamp)"
            )
        ts = record.timestamp
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise StreamsException(
                f"processor {self.name} forwarded a record with timestamp {ts!r}: it must be "
                "epoch ms >= 0 (record.timestamp, or the punctuator's stream time)"
            )
        current = self._current
        if self.fixed_key and current is not None and record.key != current.key:
            raise StreamsException(
                f"processor {self.name} (process_values) forwarded key {record.key!r} for a "
                f"record of key {current.key!r}: process_values keeps keys; use process() "
                "to change them"
            )
        if child is not None and child not in self.context_children():
            raise StreamsException(
                f"processor {self.name} forwarded to {child!r}, which is not one of its "
                f"children {sorted(self.context_children())}"
            )

    def context_children(self) -> list[str]:
        return self.context.children

    def close(self) -> None:
        self._user.close()


def make_processor(supplier: Callable[[], Any], node: str) -> Any:
    """A new processor from ``supplier``, checked to have ``process``."""
    processor = supplier()
    if not callable(getattr(processor, "process", None)):
        raise TopologyException(
            f"node {node}: the processor supplier returned {processor!r}, which has no "
            "process(record); pass a lakestate.Processor subclass or a function returning "
            "a new instance"
        )
    return processor


def check_supplier(supplier: Any, node: str) -> None:
    """Kafka's rule: the supplier makes a new processor each call (one per task)."""
    is_instance = not isinstance(supplier, type) and callable(getattr(supplier, "process", None))
    if isinstance(supplier, Processor) or is_instance:
        raise TopologyException(
            f"node {node}: process() got a processor instance; pass its class (or a function "
            "returning a new instance): each task needs its own"
        )
    if not callable(supplier):
        raise TopologyException(
            f"node {node}: process() takes a processor supplier (a Processor subclass or a "
            f"function returning a new instance), got {supplier!r}"
        )
    first, second = make_processor(supplier, node), make_processor(supplier, node)
    if first is second:
        raise TopologyException(
            f"node {node}: the processor supplier returned the same instance twice; it must "
            "return a new processor on each call (each task needs its own)"
        )
