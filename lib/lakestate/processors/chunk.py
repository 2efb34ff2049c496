"""A chunk: a run of one task's records from one input topic, processed node by node.

A task whose sub-topology is a straight chain of chunk-capable processors (see
``Processor.process_chunk``) may hand each node the whole run at once instead of one record
at a time: every node sees the same records, in the same order, with the same stream time
and offset per record, so the state, the output and the metrics come out the same. What a
node forwards is the chunk it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakestate.records import Record


@dataclass(slots=True)
class Chunk:
    """``records[i]`` came from input position ``at[i]``; for input position ``p``,
    ``offsets[p]`` is its offset in ``topic`` and ``stream_times[p]`` the task's stream time
    once it was read (its own timestamp included)."""

    topic: str | None
    offsets: list[int | None]
    stream_times: list[int]
    records: list[Record]
    at: list[int]

    @staticmethod
    def of_record(context: Any, record: Record) -> Chunk:
        """One record as a chunk: the record being processed by ``context``'s task (its
        topic and offset, None when it came from no topic, and the task's stream time)."""
        meta = context.record_metadata
        return Chunk(
            None if meta is None else meta.topic,
            [None if meta is None else meta.offset],
            [context.stream_time],
            [record],
            [0],
        )

    def with_records(self, records: list[Record], at: list[int] | None = None) -> Chunk:
        """The same input positions (or ``at``) carrying ``records``."""
        return Chunk(
            self.topic, self.offsets, self.stream_times, records, self.at if at is None else at
        )

    def select(self, keep: list[int]) -> Chunk:
        """Only the records at indices ``keep`` (in order)."""
        records, at = self.records, self.at
        return Chunk(
            self.topic,
            self.offsets,
            self.stream_times,
            [records[i] for i in keep],
            [at[i] for i in keep],
        )
