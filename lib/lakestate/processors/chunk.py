"""A chunk: a run of one task's records from one input topic, processed node by node.

A task whose sub-topology is a straight chain of chunk-capable processors (see
``Processor.process_chunk``) may hand each node the whole run at once instead of one record
at a time: every node sees the same records, in the same order, with the same stream time
and offset per record, so the state, the output and the metrics come out the same. What a
node forwards is the chunk it returns.

A chunk may carry its records as columns (processors/columns.py): a node that knows them
reads ``columns``; any other reads ``records``, built from the columns on first use.
"""

from __future__ import annotations

from typing import Any

from lakestate.processors.columns import Columns
from lakestate.records import Record


class Chunk:
    """``records[i]`` came from input position ``at[i]``; for input position ``p``,
    ``offsets[p]`` is its offset in ``topic`` and ``stream_times[p]`` the task's stream time
    once it was read (its own timestamp included). ``columns``, when given, are the same
    records as columns (``records`` is then None until first read)."""

    __slots__ = ("topic", "offsets", "stream_times", "_records", "at", "columns")

    def __init__(
        self,
        topic: str | None,
        offsets: list[int | None],
        stream_times: list[int],
        records: list[Record] | None,
        at: list[int],
        columns: Columns | None = None,
    ) -> None:
        self.topic = topic
        self.offsets = offsets
        self.stream_times = stream_times
        self._records = records
        self.at = at
        self.columns = columns

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            self._records = self.columns.records()  # type: ignore[union-attr]
        return self._records

    def __len__(self) -> int:
        return len(self.at)

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

    def with_columns(self, columns: Columns, at: list[int] | None = None) -> Chunk:
        """The same input positions (or ``at``) carrying the records of ``columns``."""
        return Chunk(
            self.topic,
            self.offsets,
            self.stream_times,
            None,
            self.at if at is None else at,
            columns,
        )

    def without_columns(self) -> Chunk:
        """The same records, as records only (for a node that counts output per record)."""
        if self.columns is None:
            return self
        return Chunk(self.topic, self.offsets, self.stream_times, self.records, self.at)

    def select(self, keep: list[int]) -> Chunk:
        """Only the records at indices ``keep`` (in order)."""
        if not keep:  # a sink's: no records to build from columns
            return Chunk(self.topic, self.offsets, self.stream_times, [], [])
        records, at = self.records, self.at
        return Chunk(
            self.topic,
            self.offsets,
            self.stream_times,
            [records[i] for i in keep],
            [at[i] for i in keep],
        )
