"""Reading a Kafka topic's offset ranges as Arrow, in ``RECORD_SCHEMA``'s columns, with a
read_committed consumer assigned to the partitions (it never joins a group nor commits).

A range ``[start, end)`` is read up to the first record at or past ``end``, or to the
partition's end: with transactions, offsets have gaps (commit markers, aborted records), so
the last offset before ``end`` need not be a record. A plan's ends are read_committed ends,
so every record of a planned range is decided and a replay reads the same records.
Key and value bytes are taken as UTF-8 JSON text (lakestate's default serde, Json), or,
for a topic read with other serdes (``raw_bytes``), handed over as base64 text of the raw
bytes for the task to deserialize with its source's serdes (runtime/task_executor.py):
either way, bytes that do not deserialize reach the app's deserialization exception
handler, whole. Header values are taken as JSON text, else as text.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pyarrow as pa

from lakestate.errors import SerializationException, StreamsException
from lakestate.io.kafka.cluster import KafkaCluster
from lakestate.io.partitioner import canonical_json
from lakestate.io.topic_records import RECORD_SCHEMA, Ranges, check_ranges
from lakestate.serdes import TopicSerdes

# Seconds a range read may wait for records the broker said were there.
READ_TIMEOUT = 120.0
_BATCH = 10_000


def _text(data: bytes | None) -> str | None:
    # Bytes that are not UTF-8 keep their place as replacement characters: not JSON, so
    # the deserialization handler sees a bad record instead of the read failing.
    return None if data is None else data.decode("utf-8", errors="replace")


def _base64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _headers(headers: list[tuple[str, bytes | None]] | None) -> str | None:
    if not headers:
        return None
    import json

    decoded: dict[str, Any] = {}
    for name, data in headers:
        text = _text(data)
        try:
            decoded[name] = None if text is None else json.loads(text)
        except ValueError:
            decoded[name] = text
    return canonical_json(decoded)


class KafkaReader:
    """Reads of one Kafka topic's ranges (``lakestate.io.topics.TopicReader``)."""

    def __init__(self, cluster: KafkaCluster, topic: str, raw_bytes: bool = False) -> None:
        self.cluster = cluster
        self.topic = topic
        self.raw_bytes = raw_bytes

    def read_range(self, ranges: Ranges) -> pa.Table:
        """The records with ``start <= offset < end`` of each partition of ``ranges``."""
        wanted = {p: (s, e) for p, (s, e) in check_ranges(self.topic, ranges).items() if e > s}
        columns: dict[str, list[Any]] = {name: [] for name in RECORD_SCHEMA.names}
        if wanted:
            self._consume(wanted, columns)
        return pa.table(columns, schema=RECORD_SCHEMA)

    def _consume(self, wanted: dict[int, tuple[int, int]], columns: dict[str, list]) -> None:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(
            self.cluster.client_config(
                group_id="lakestate-reader",  # required by the client; never joined
                enable_auto_commit=False,
                enable_partition_eof=True,
                isolation_level="read_committed",
                # Records before start deleted by retention: read from the earliest held,
                # as Kafka Streams' default auto.offset.reset does.
                auto_offset_reset="earliest",
                # A range ending at the partition's end ends with an empty fetch: answered
                # at once rather than after Kafka's default half second.
                fetch_wait_max_ms=10,
            )
        )
        pending = dict(wanted)
        deadline = time.monotonic() + READ_TIMEOUT
        try:
            consumer.assign([TopicPartition(self.topic, p, s) for p, (s, _) in wanted.items()])
            while pending:
                # consume() waits its whole timeout unless _BATCH messages come: a short
                # one, in a loop, returns as soon as the range is read.
                for message in consumer.consume(_BATCH, 0.02):
                    p = message.partition()
                    if p not in pending:
                        continue
                    end = pending[p][1]
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise StreamsException(
                                f"reading Kafka topic {self.topic!r} partition {p}: {error}"
                            )
                        if message.offset() >= end:
                            self._done(consumer, pending, p)
                    elif message.offset() >= end:
                        self._done(consumer, pending, p)
                    else:
                        self._add(message, columns, self.raw_bytes)
                if pending and time.monotonic() > deadline:
                    raise StreamsException(
                        f"reading Kafka topic {self.topic!r}: offsets "
                        + ", ".join(f"{s}..{e} of partition {p}" for p, (s, e) in pending.items())
                        + f" not read in {READ_TIMEOUT:.0f} s (the broker listed them as "
                        "committed): is the cluster up?"
                    )
        finally:
            consumer.close()

    def _done(self, consumer: Any, pending: dict[int, tuple[int, int]], partition: int) -> None:
        from confluent_kafka import TopicPartition

        del pending[partition]
        consumer.pause([TopicPartition(self.topic, partition)])

    @staticmethod
    def _add(message: Any, columns: dict[str, list], raw_bytes: bool) -> None:
        columns["partition"].append(message.partition())
        columns["offset"].append(message.offset())
        columns["timestamp"].append(message.timestamp()[1])
        text = _base64 if raw_bytes else _text
        columns["key"].append(text(message.key()))
        columns["value"].append(text(message.value()))
        columns["headers"].append(_headers(message.headers()))


def as_json(rows: pa.Table, topic: str, serdes: TopicSerdes) -> pa.Table:
    """``rows`` read as raw bytes (base64 text) turned into JSON text, as a log table holds
    a record: each key and value deserialized by ``serdes`` and written in its JSON form
    (``Serde.to_json``: a Bytes value as base64 text). ``StreamsException`` naming the
    record and the serde for bytes that do not deserialize."""
    columns = {name: rows.column(name).to_pylist() for name in ("key", "value")}
    for name, serde in (("key", serdes.key), ("value", serdes.value)):
        for i, text in enumerate(columns[name]):
            if text is None:
                continue
            try:
                columns[name][i] = canonical_json(
                    serde.to_json(serde.deserialize(base64.b64decode(text)))
                )
            except SerializationException as exc:
                partition = rows.column("partition")[i].as_py()
                offset = rows.column("offset")[i].as_py()
                raise StreamsException(
                    f"Kafka topic {topic!r} partition {partition} offset {offset}: its {name} "
                    f"is not {serde.name}: {exc}; give the topic's {name} serde"
                ) from None
    for name, values in columns.items():
        rows = rows.set_column(
            rows.schema.get_field_index(name), name, pa.array(values, pa.string())
        )
    return rows
