"""Topics, whatever stores them: the one interface the runtime, the commit protocol, the
read side and the CLI read and write topics through.

A ``Topic`` is one topic of a warehouse: it exists or not, has a fixed partition count and
per partition dense offsets from 0 up to its end offset; it reads offset ranges per
partition as Arrow (``topic_records.RECORD_SCHEMA``'s columns), appends producers' records
and a batch's records with its tasks' Delta-style txns (step 3 of the commit protocol,
``checkpoint/commit.py``), and describes itself. A ``TopicKind`` makes the topics of one
kind; ``topic(warehouse, name)`` resolves a name to its kind's ``Topic``.

A topic is a log table (``lakestate.io.logtable``) unless it is given a Kafka cluster
(``lakestate.io.kafka``): an app whose config has ``bootstrap.servers`` reads and writes
its source and sink topics there (``AppLayout.topic`` says which), or the warehouse
declares it a Delta source (``lakestate.io.deltasource``: an existing Delta table read
as a topic) or a Delta sink (``lakestate.io.deltasink``: a typed Delta table an app
writes), which ``kind_of`` finds; ``KINDS`` is where kinds are added, without
touching the runtime. Spark reads a
topic through ``lakestate.runtime.spark_topics``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from lakestate.io import deltasink, deltasource
from lakestate.io.deltasink import DeltaSinkKind
from lakestate.io.deltasource import DeltaSourceKind
from lakestate.io.kafka import KafkaCluster, KafkaTopic
from lakestate.io.logtable import LogTableKind
from lakestate.io.topic_records import (
    RECORD_SCHEMA,
    AppendResult,
    Ranges,
    TopicDescription,
    TopicRecord,
    records_of,
    validate_records,
)
from lakestate.serdes import TopicSerdes
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = [
    "KINDS",
    "RECORD_SCHEMA",
    "AppendResult",
    "BatchRows",
    "Topic",
    "TopicDescription",
    "TopicKind",
    "TopicReader",
    "TopicRecord",
    "kind_of",
    "records_of",
    "topic",
    "validate_records",
]

#: Builds a batch's rows for a topic: given the task batches the topic does not hold yet
#: (task -> batch) and its end offsets (partition -> end), the rows of those tasks in
#: ``RECORD_SCHEMA``, each partition's numbered densely on from its end, in append order.
BatchRows = Callable[[dict[TaskId, int], dict[int, int]], pa.Table]


class TopicReader(Protocol):
    """Reads of one topic's offset ranges, for one batch."""

    def read_range(self, ranges: Ranges) -> pa.Table:
        """The records with ``start <= offset < end`` of each partition of ``ranges``
        (``{partition: (start, end)}``), in ``RECORD_SCHEMA``'s columns, in no particular
        order. ``ValueError`` for a range that is not two ints 0 <= start <= end."""
        ...


class Topic(Protocol):
    """One topic of a warehouse (see the module's docstring)."""

    name: str
    kind: str

    def exists(self) -> bool:
        """Whether the topic exists."""
        ...

    def create(self, partitions: int, *, exist_ok: bool = True) -> None:
        """Create the topic with ``partitions`` partitions. If it exists with as many,
        nothing happens (``exist_ok``) or ``ValueError``; with another count it is always
        ``ValueError``: a topic's partition count never changes (keys would move)."""
        ...

    def partitions(self) -> int:
        """The partition count (``ValueError`` if the topic does not exist)."""
        ...

    def check_columns(self) -> None:
        """``StreamsException`` unless the topic's records have ``RECORD_SCHEMA``'s columns."""
        ...

    def end_offsets(self) -> dict[int, int]:
        """The next offset of every partition (0 for an empty one): Kafka's end offsets."""
        ...

    def describe(self) -> TopicDescription:
        """Kind, location, partition count and end offsets."""
        ...

    def reader(self) -> TopicReader:
        """A reader of the topic's ranges (a batch's reads share one)."""
        ...

    def read_partitions(
        self, partitions: Iterable[int] | None = None, limit: int | None = None
    ) -> Iterator[pa.Table]:
        """The records as Arrow tables in ``RECORD_SCHEMA``'s columns, one per partition in
        partition order (of ``partitions`` only, when given), each in offset order, at
        most ``limit`` records in all."""
        ...

    def append_lock(self) -> contextlib.AbstractContextManager[None]:
        """Hold the topic's append lock: no append numbers records while it is held by
        another (reentrant within a thread)."""
        ...

    def check_append(self, records: pa.Table) -> None:
        """Before anything of a batch is committed: ``StreamsException`` if the batch's
        ``records`` of this topic (``RECORD_SCHEMA``'s columns; their offsets are not
        numbered yet) could not be appended, so that such a batch fails whole rather than
        in step 3, after its progress (a typed Delta table checks their types)."""
        ...

    def append(
        self,
        records: Sequence[Any],
        *,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
        labels: Sequence[str] | None = None,
    ) -> AppendResult:
        """Append producers' ``records`` (``topic_records.normalize_records``: dicts or
        tuples; timestamp default now, partition default ``partition_for(key, n)``) at
        once, each partition's numbered on from its end offset in the order given. Every
        record is checked first: if any is invalid, ``ValueError`` names each bad one
        (``labels[i]``, default ``record i``) and nothing is written.
        ``txn_app_id``/``txn_version`` (both or neither) make the append idempotent: it is
        skipped if a version >= ``txn_version`` was committed for ``txn_app_id``."""
        ...

    def append_batch(
        self,
        app: str,
        batches: Mapping[TaskId, int],
        build: BatchRows,
        metadata: Mapping[str, Any],
    ) -> AppendResult:
        """Step 3 of the commit protocol for this topic: under its append lock, append
        ``build(todo, ends)`` at once with a txn per task batch of ``todo`` (those of
        ``batches`` of ``app`` the topic does not hold yet: a replay writes none twice) and
        ``metadata``; nothing (``skipped``) when it holds them all. A concurrent commit of
        one of those txns raises ``TaskMigratedException``."""
        ...


class TopicKind(Protocol):
    """Makes the topics of one kind."""

    name: str

    def topic(self, warehouse: Warehouse, name: str, partitions: int | None = None) -> Topic:
        """Topic ``name`` of ``warehouse``; ``partitions``: its partition count when the
        caller has read it already (an app's layout), so it is not read again."""
        ...


LOG_TABLES = LogTableKind()
DELTA_SOURCES = DeltaSourceKind()
DELTA_SINKS = DeltaSinkKind()
#: The topic kinds, by name.
KINDS: dict[str, TopicKind] = {k.name: k for k in (LOG_TABLES, DELTA_SOURCES, DELTA_SINKS)}


def kind_of(warehouse: Warehouse, name: str) -> str:
    """The kind of topic ``name`` of ``warehouse``: a Delta source or a Delta sink if the
    warehouse declares one of that name (``lakestate.io.deltasource.declare``,
    ``lakestate.io.deltasink.declare``), else a log table."""
    if deltasource.is_declared(warehouse, name):
        return DELTA_SOURCES.name
    if deltasink.is_declared(warehouse, name):
        return DELTA_SINKS.name
    return LOG_TABLES.name


def topic(
    warehouse: Warehouse,
    name: str,
    partitions: int | None = None,
    cluster: KafkaCluster | None = None,
    serdes: TopicSerdes | None = None,
) -> Topic:
    """Topic ``name`` of Kafka ``cluster`` when given, else of ``warehouse``, of its kind
    (``kind_of``); ``partitions``: its partition count when already read; ``serdes``: a
    Kafka topic's key and value serdes (default Json; a log table holds the JSON form of
    any serde's values, so needs none). ``ValueError`` for an illegal topic name."""
    if cluster is not None:
        return KafkaTopic(cluster, name, partitions, serdes)
    return KINDS[kind_of(warehouse, name)].topic(warehouse, name, partitions)
