"""The processor API: what every operator implements and what a task gives it.

Processors are pure Python and know nothing of Spark or Airflow. One instance serves one
task; records arrive in offset order. The same code runs in the test driver and in the
Spark engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from lakestate.processors.chunk import Chunk
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

    @property
    def children(self) -> list[str]:
        """The names of this node's child nodes."""
        ...

    def schedule(self, interval_ms: int, callback: Callable[[int], None]) -> Any:
        """Call ``callback(stream_time)`` on stream time (processors/punctuation.py);
        returns a ``Cancellable``."""
        ...

    def get_state_store(self, name: str) -> Any:
        """The typed store ``name``, reading and writing through the task's transaction."""
        ...

    def metric(self, name: str, delta: float = 1, store: str | None = None) -> None:
        """Count ``delta`` more of ``name``: this node's metric, or store ``store``'s. Counts
        add up over batches (see ``lakestate.processors.metrics``)."""
        ...

    def set_metric(self, name: str, value: float, store: str | None = None) -> None:
        """Set the current value of ``name`` (this node's, or store ``store``'s): a gauge, or
        a figure derived from totals the processor keeps as processor metadata."""
        ...

    def get_metric(self, name: str, store: str | None = None) -> float:
        """The metric ``name`` as it stands (0 when never counted or set)."""
        ...

    def derive_metrics(self, source: Callable[[Callable[[str], float | None]], Any]) -> None:
        """Values worked out when the metrics are read, not set per record: ``source(set_)``
        gives ``(name, value, store or None)`` for each value to show now, computed from
        state the task rolls back and restores (processor metadata, the node's stores);
        ``set_(name)`` is this node's value ``name`` as set, else None. Call it in
        ``init``."""
        ...

    def processor_metadata(self, key: str) -> int | None:
        """The integer kept under ``key`` with the task's committed state (None: none);
        see ``lakestate.state.processor_metadata``."""
        ...

    def set_processor_metadata(self, key: str, value: int) -> None:
        """Keep ``value`` under ``key``: committed, rolled back and restored with the task's
        state. Set it where the stores are written (``finish_chunk`` for chunked processors)."""
        ...

    @property
    def cached(self) -> bool:
        """True when what this node forwards goes into the task's record cache (a
        ``forwards_store_changes`` node's, with a cache budget), not straight on."""
        ...


class Processor:
    """One node's per-task logic, written once.

    A processor written for lists of records (``chunked = True``) implements only
    ``process_chunk``: it returns what it forwards for the chunk's records, in order, and
    must not write its stores there, only in ``finish_chunk``, which the task calls once
    every node of a chain has taken the chunk (so a chunk that fails anywhere leaves nothing
    behind and is processed again record by record, which names the record that fails).
    One record is a chunk of one: ``process`` runs ``process_chunk``, ``finish_chunk`` and
    forwards the result, so there are no separate per-record semantics. User functions are
    assumed pure, as Kafka Streams assumes them: a chunk calls them in a different
    interleaving. Other processors (those whose output for one record depends on the
    records before it having passed every node below, e.g. ``peek``) implement ``process``.
    """

    chunked: ClassVar[bool] = False
    # A chunked processor that sends each record to one child of its choice (split's branch
    # node) implements ``route_chunk`` instead of ``process_chunk``, and ``process``.
    routes_chunks: ClassVar[bool] = False
    # Its forwarded records are its store's updates, one ``Change`` per key written (Kafka:
    # a timestamped tuple forwarder over the store), so the task's record cache
    # (state/record_cache.py) may hold them back and coalesce them per key.
    forwards_store_changes: ClassVar[bool] = False
    # A chunk of one record costs no more than ``process`` (a chain of such nodes may take
    # single records as chunks: ``ChunkPlan.run_record``); not so for a suppression,
    # whose chunks stage the buffer's changes.
    cheap_single_chunks: ClassVar[bool] = True

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        """Process one record: a chunk of one (see the class docstring)."""
        if not self.chunked:
            raise NotImplementedError(f"{type(self).__name__} must implement process")
        out = self.process_chunk(Chunk.of_record(self.context, record))
        self.finish_chunk()
        forward = self.context.forward
        for r in out.records:
            forward(r)

    def process_chunk(self, chunk: Chunk) -> Chunk:
        """What this node forwards for the records of ``chunk``, as one chunk."""
        raise NotImplementedError(f"{type(self).__name__} does not process chunks")

    def route_chunk(self, chunk: Chunk) -> dict[str, Chunk]:
        """Per child node (every one), the chunk of the records this node sends it."""
        raise NotImplementedError(f"{type(self).__name__} does not route chunks")

    def finish_chunk(self) -> None:  # noqa: B027 - optional hook, stateless processors hold nothing
        """Write to the stores what the last ``process_chunk`` decided."""

    def close(self) -> None:  # noqa: B027 - optional hook, most processors hold nothing
        """Called when the task closes."""
