"""Log tables: the embedded stand-in for Kafka topics, one Delta table per topic, and the
first kind of topic (``lakestate.io.topics``).

A log table at ``<warehouse>/topics/<topic>`` holds the topic's records in
``topic_records.RECORD_SCHEMA``'s columns, partitioned (Delta) by ``partition``; partition
p holds offsets 0 .. end-1 with no gaps. By concern:

- ``table``: existence, creation (the partition count is the table property
  ``lakestate.partitions``, fixed at creation), the partition count, the columns;
- ``ends``: end offsets, recorded in each append's commit metadata and cached;
- ``reads``: offset ranges and whole partitions, through delta-rs and Arrow;
- ``appends``: the append lock, producers' appends, a batch's append with its txns.

Everything here runs without a JVM; Spark reads log tables through
``lakestate.runtime.spark_topics``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakestate.io.logtable import appends, ends, reads, table
from lakestate.io.logtable.ends import ENDS_METADATA_KEY, ends_metadata
from lakestate.io.logtable.reads import LogTableReader
from lakestate.io.logtable.table import PARTITIONS_PROPERTY
from lakestate.io.table_files import DataFile
from lakestate.io.topic_records import AppendResult, TopicDescription, check_txn
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

if TYPE_CHECKING:
    from lakestate.io.topics import BatchRows

__all__ = [
    "ENDS_METADATA_KEY",
    "KIND",
    "PARTITIONS_PROPERTY",
    "LogTableKind",
    "LogTableReader",
    "LogTableTopic",
    "create_topic",
    "ends_metadata",
]

#: The kind's name, as ``TopicDescription.kind`` gives it.
KIND = "log_table"


class LogTableTopic:
    """A topic stored as a log table (``lakestate.io.topics.Topic``)."""

    kind = KIND

    def __init__(self, warehouse: Warehouse, name: str, partitions: int | None = None) -> None:
        self.warehouse = warehouse
        self.name = name
        self.path = warehouse.topic_path(name)  # checks the name
        self._partitions = partitions

    def __repr__(self) -> str:
        return f"LogTableTopic({self.path!r})"

    def exists(self) -> bool:
        return table.exists(self.warehouse, self.path)

    def create(self, partitions: int, *, exist_ok: bool = True) -> None:
        # Under the topic's lock: two processes creating it at once (two runs of disjoint
        # tasks of an app, both creating its sinks) would see each other's half-written table.
        with self.append_lock():
            table.create(self.warehouse, self.name, self.path, partitions, exist_ok)

    def partitions(self) -> int:
        if self._partitions is None:
            return table.partitions(self.warehouse, self.name, self.path)
        return self._partitions

    def check_columns(self) -> None:
        table.check_columns(self.name, self.path)

    def end_offsets(self) -> dict[int, int]:
        return ends.read_ends(self.warehouse, self.path, self.partitions())[0]

    def describe(self) -> TopicDescription:
        return TopicDescription(self.name, KIND, self.path, self.partitions(), self.end_offsets())

    def reader(self) -> LogTableReader:
        return LogTableReader(self.name, self.path)

    def read_partitions(
        self, partitions: Iterable[int] | None = None, limit: int | None = None
    ) -> Iterator[pa.Table]:
        return reads.read_partitions(self.path, self.partitions(), partitions, limit)

    def append_lock(self) -> contextlib.AbstractContextManager[None]:
        return appends.append_lock(self.warehouse, self.name, self.path)

    def check_append(self, records: pa.Table) -> None:
        pass  # any records a producer or a batch gives are appendable here

    def append(
        self,
        records: Sequence[Any],
        *,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
        labels: Sequence[str] | None = None,
    ) -> AppendResult:
        txn = check_txn(txn_app_id, txn_version)
        return appends.append_records(
            self.warehouse, self.name, self.path, self.partitions(), records, txn, labels
        )

    def append_batch(
        self,
        app: str,
        batches: Mapping[TaskId, int],
        build: BatchRows,
        metadata: Mapping[str, Any],
    ) -> AppendResult:
        return appends.append_batch(
            self.warehouse, self.name, self.path, self.partitions(), app, batches, build, metadata
        )

    def held_append(
        self, app: str, batches: Mapping[TaskId, int]
    ) -> contextlib.AbstractContextManager[appends.HeldAppend]:
        """``append_batch`` for records written as files elsewhere: the append lock held
        and the ends read (``appends.held_append``); commit with ``commit_files``."""
        return appends.held_append(
            self.warehouse, self.name, self.path, self.partitions(), app, batches
        )

    def held_again(self, app: str, held: appends.HeldAppend) -> appends.HeldAppend:
        return appends.held_again(self.warehouse, self.path, self.partitions(), app, held)

    def commit_files(
        self,
        held: appends.HeldAppend,
        files: Sequence[DataFile],
        app: str,
        metadata: Mapping[str, Any],
    ) -> AppendResult:
        return appends.commit_files(
            self.warehouse, self.name, self.path, held, files, app, metadata
        )


class LogTableKind:
    """Log tables as a ``lakestate.io.topics.TopicKind``."""

    name = KIND

    def topic(
        self, warehouse: Warehouse, name: str, partitions: int | None = None
    ) -> LogTableTopic:
        return LogTableTopic(warehouse, name, partitions)


def create_topic(warehouse: Warehouse, topic: str, partitions: int) -> str:
    """Create topic ``topic`` as a log table (as ``Topic.create``) and return the table's
    path: for writers that load a log table themselves (e.g. benchmarks' bulk loads, which
    record their end offsets with ``ends_metadata``)."""
    created = LogTableTopic(warehouse, topic)
    created.create(partitions)
    return created.path
