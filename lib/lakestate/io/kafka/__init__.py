"""Kafka topics: a kind of topic (``lakestate.io.topics``) stored in a Kafka cluster, for
the apps whose config names one (``bootstrap.servers``). An app's source and sink topics
are then the cluster's; its repartition topics and changelogs stay in the warehouse.

By concern: ``cluster`` (client settings from the app's config, one admin client per
cluster), ``admin`` (metadata, creation, offsets, the consumer group mirror), ``reads``
(offset ranges through a read_committed consumer), ``appends`` (a batch's records in a
transaction per task batch, exactly once for read_committed consumers). Offsets are Kafka's: not dense when the
topic is written transactionally (commit markers take offsets), so a range's record count
is at most its width.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakestate.errors import SerializationException, StreamsException
from lakestate.io.kafka import admin, appends
from lakestate.io.kafka.cluster import BOOTSTRAP_SERVERS, KafkaCluster, admin_client
from lakestate.io.kafka.reads import KafkaReader, as_json
from lakestate.io.topic_records import (
    AppendResult,
    TopicDescription,
    check_txn,
    normalize_records,
)
from lakestate.serdes import DEFAULT_SERDES, TopicSerdes
from lakestate.task_id import TaskId

if TYPE_CHECKING:
    from lakestate.io.topics import BatchRows

__all__ = [
    "BOOTSTRAP_SERVERS",
    "KIND",
    "KafkaCluster",
    "KafkaKind",
    "KafkaReader",
    "KafkaTopic",
    "close_clients",
    "connect",
]

#: The kind's name, as ``TopicDescription.kind`` gives it.
KIND = "kafka"


class KafkaTopic:
    """A topic of a Kafka cluster (``lakestate.io.topics.Topic``). ``serdes``: how its
    bytes are read and written (default Json: the bytes are JSON text). With other serdes
    its reader hands over each key's and value's raw bytes as base64 text (``raw_bytes``),
    for the task that reads it to deserialize, so that bytes that do not deserialize reach
    the app's deserialization exception handler whole; its appends serialize the JSON form
    of each key and value with them (``lakestate/serdes.py``)."""

    kind = KIND

    def __init__(
        self,
        cluster: KafkaCluster,
        name: str,
        partitions: int | None = None,
        serdes: TopicSerdes | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self._partitions = partitions
        self.serdes = serdes or DEFAULT_SERDES

    @property
    def raw_bytes(self) -> bool:
        """True when the reader hands over raw bytes (base64 text), not JSON text."""
        return not self.serdes.is_json

    def __repr__(self) -> str:
        return f"KafkaTopic({self.cluster.bootstrap_servers!r}, {self.name!r})"

    @property
    def location(self) -> str:
        return f"kafka://{self.cluster.bootstrap_servers}/{self.name}"

    def exists(self) -> bool:
        return admin.partition_count(self.cluster, self.name) is not None

    def create(self, partitions: int, *, exist_ok: bool = True) -> None:
        found = admin.partition_count(self.cluster, self.name)
        if found is None:
            admin.create_topic(self.cluster, self.name, partitions)
            found = admin.partition_count(self.cluster, self.name)
        elif not exist_ok:
            raise ValueError(f"Kafka topic {self.location} exists already")
        if found != partitions:
            raise ValueError(
                f"Kafka topic {self.location} has {found} partitions, not {partitions}: "
                "a topic keeps its partitions"
            )

    def partitions(self) -> int:
        if self._partitions is None:
            found = admin.partition_count(self.cluster, self.name)
            if found is None:
                raise ValueError(f"Kafka topic {self.location} does not exist")
            self._partitions = found
        return self._partitions

    def check_columns(self) -> None:
        """Kafka records always have a partition, offset, timestamp, key, value, headers."""

    def end_offsets(self) -> dict[int, int]:
        return admin.offsets(self.cluster, self.name, self.partitions(), earliest=False)

    def describe(self) -> TopicDescription:
        return TopicDescription(
            self.name, KIND, self.location, self.partitions(), self.end_offsets()
        )

    def reader(self) -> KafkaReader:
        return KafkaReader(self.cluster, self.name, raw_bytes=self.raw_bytes)

    def read_partitions(
        self, partitions: Iterable[int] | None = None, limit: int | None = None
    ) -> Iterator[pa.Table]:
        """As a log table's: keys and values as JSON text, in their serdes' JSON form
        (read_committed)."""
        count = self.partitions()
        starts = admin.offsets(self.cluster, self.name, count, earliest=True)
        ends = self.end_offsets()
        remaining = limit
        for p in sorted(set(range(count) if partitions is None else partitions)):
            if remaining is not None and remaining <= 0:
                return
            # Raw, then deserialized here: bytes that are not the serde's fail naming the
            # record (Json's too), in a log table's form, each key and value's JSON form.
            raw = KafkaReader(self.cluster, self.name, raw_bytes=True)
            rows = as_json(raw.read_range({p: (starts[p], ends[p])}), self.name, self.serdes)
            rows = rows.sort_by("offset")
            if remaining is not None:
                rows = rows.slice(0, remaining)
                remaining -= rows.num_rows
            yield rows

    def append_lock(self) -> contextlib.AbstractContextManager[None]:
        # Kafka numbers records itself: appends need no lock of lakestate's.
        return contextlib.nullcontext()

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
        """Producers' records, keys and values in their serdes' JSON form (``Serde.to_json``:
        the value itself but for Bytes, a base64 string), each to its partition (murmur2 of
        the key's serialized bytes, as Kafka's default partitioner: with Json, its JSON
        text), acknowledged by all in-sync replicas. A txn is refused: Kafka has no Delta txn to make it idempotent."""
        if check_txn(txn_app_id, txn_version) is not None:
            raise ValueError(f"Kafka topic {self.location}: an append takes no txn")
        # Kafka's default partitioner hashes the key's serialized bytes (with Json: its text).
        encoded = normalize_records(records, self.partitions(), labels, self.serdes.key)
        return produce(self.cluster, self.name, encoded, self.serdes, labels)

    def append_batch(
        self,
        app: str,
        batches: Mapping[TaskId, int],
        build: BatchRows,
        metadata: Mapping[str, Any],
    ) -> AppendResult:
        """Step 3 for a Kafka sink: each task batch not held yet in its own transaction
        with its marker (``appends``); ``metadata`` has no place in Kafka."""
        return appends.append_batch(
            self.cluster, self.name, self.partitions(), app, batches, build, self.serdes
        )

    def holds(self, app: str, task: TaskId) -> int:
        """The last batch of ``task`` of ``app`` this topic holds (0: none)."""
        return appends.held_batch(self.cluster, app, task, self.name)


def produce(
    cluster: KafkaCluster,
    topic: str,
    encoded: Sequence[tuple[int, int, str | None, str | None, str | None]],
    serdes: TopicSerdes = DEFAULT_SERDES,
    labels: Sequence[str] | None = None,
) -> AppendResult:
    """Produce ``(partition, timestamp, key, value, headers)`` rows (JSON text, serialized
    with ``serdes``) and wait for every acknowledgement; the offsets they got, per
    partition. Every row is serialized first: ``ValueError`` naming the first that its
    serdes cannot write (``labels[i]``, default ``record i``), and nothing is produced."""
    import json

    from confluent_kafka import Producer

    wire = []
    for i, (partition, timestamp, key, value, headers) in enumerate(encoded):
        try:
            key_bytes = appends.wire_bytes(serdes.key, key)
            value_bytes = appends.wire_bytes(serdes.value, value)
        except SerializationException as exc:
            label = labels[i] if labels is not None else f"record {i}"
            raise ValueError(
                f"{label}: {exc} (topic {topic!r}: {serdes}); nothing produced"
            ) from None
        wire.append((partition, timestamp, key_bytes, value_bytes, headers))
    producer = Producer(cluster.client_config(enable_idempotence=True, linger_ms=5))
    errors: list[str] = []
    ranges: dict[int, tuple[int, int]] = {}

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(str(error))
            return
        p, offset = message.partition(), message.offset()
        start, end = ranges.get(p, (offset, offset + 1))
        ranges[p] = (min(start, offset), max(end, offset + 1))

    for partition, timestamp, key_bytes, value_bytes, headers in wire:
        header_list = None
        if headers is not None:
            header_list = [(k, json.dumps(v).encode()) for k, v in json.loads(headers).items()]
        producer.produce(
            topic,
            value=value_bytes,
            key=key_bytes,
            partition=partition,
            timestamp=timestamp,
            headers=header_list,
            on_delivery=delivered,
        )
        producer.poll(0)
    left = producer.flush(60)
    if errors or left:
        raise StreamsException(
            f"producing to Kafka topic {topic!r} on {cluster.bootstrap_servers}: "
            + (f"{errors[0]}" if errors else f"{left} records not acknowledged in 60 s")
        )
    return AppendResult(topic, dict(sorted(ranges.items())))


def connect(config: Mapping[str, Any], setting: str, timeout: float = 5.0) -> KafkaCluster:
    """The cluster ``config`` names (``bootstrap.servers`` and the client settings beside
    it), checked to answer within ``timeout`` seconds; ``StreamsException`` naming
    ``setting`` (where the address came from, e.g. ``--bootstrap-servers``) otherwise."""
    cluster = KafkaCluster.from_config(config)
    if cluster is None:
        raise ValueError(f"{setting} is empty: give the Kafka cluster's HOST:PORT")
    admin.check_reachable(cluster, setting, timeout)
    return cluster


def close_clients() -> None:
    """Close every Kafka client this process keeps (producers, marker consumers, admin
    clients): before the cluster goes away, so that none keeps reconnecting to it."""
    appends.close_clients()
    admin_client.cache_clear()


class KafkaKind:
    """Kafka topics of one cluster as a ``lakestate.io.topics.TopicKind``."""

    name = KIND

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster

    def topic(self, warehouse: object, name: str, partitions: int | None = None) -> KafkaTopic:
        return KafkaTopic(self.cluster, name, partitions)
