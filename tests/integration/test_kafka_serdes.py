"""Serdes on a real broker (issue 26 item 3): a topic whose keys are Kafka Longs (8 bytes,
big-endian) and values Kafka Strings, produced with confluent-kafka's own StringSerializer
and Kafka's Long layout, counted per key into a Kafka topic of Long keys and Long values,
read back by a read_committed consumer and checked byte for byte (and per 10 ms window,
with the serdes the windowed table carries: Kafka's windowed key layout); a record whose
key is not a Long goes to the dead-letter topic with its raw bytes."""

from __future__ import annotations

import base64
import json
import struct
import uuid
from collections import Counter

import pytest
from engine_helpers import APPS
from lakestate import run_app
from lakestate.io import topics
from lakestate.io.kafka import KafkaCluster, KafkaTopic
from lakestate.io.partitioner import partition_of_bytes
from lakestate.io.topic_records import records_of
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

KEYS = [3, -7, 1 << 40, 0]
N = 40
POISON_KEY = b"\x01\x02\x03"  # 3 bytes: not a Long


def _produce(bootstrap: str, topic: str) -> list[int]:
    """N records keyed by Longs (Kafka's layout), valued by confluent-kafka's
    StringSerializer, then the poison record; the keys in order."""
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer

    strings = StringSerializer("utf_8")
    context = SerializationContext(topic, MessageField.VALUE)
    # murmur2: Java's default partitioner, so that a key always lands on one partition.
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    keys = [KEYS[i % len(KEYS)] for i in range(N)]
    for i, key in enumerate(keys):
        # Timestamp 1 + i: librdkafka stamps a timestamp of 0 with the wall clock.
        value = strings(f"click {i}", context)
        producer.produce(topic, key=struct.pack(">q", key), value=value, timestamp=1 + i)
    producer.produce(topic, key=POISON_KEY, value=b"poison", timestamp=N, partition=0)
    assert producer.flush(30) == 0
    return keys


def _sink(cluster: KafkaCluster, topic: str) -> list[tuple[int, bytes, bytes]]:
    """The sink's (partition, key bytes, value bytes) as a read_committed consumer sees them, in
    partition and offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        cluster.client_config(
            group_id=f"check-{uuid.uuid4().hex}",
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_partition_eof=True,
        )
    )
    partitions = KafkaTopic(cluster, topic).partitions()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list] = {}
    done: set[int] = set()
    try:
        while len(done) < partitions:
            message = consumer.poll(10)
            assert message is not None, "the sink's records did not come"
            if message.error():
                done.add(message.partition())
                continue
            found.setdefault(message.partition(), []).append((message.key(), message.value()))
    finally:
        consumer.close()
    return [(p, *row) for p in sorted(found) for row in found[p]]


def test_long_keys_and_string_values_counted_into_long_values_with_a_poison_dead_letter(
    kafka_broker, tmp_path, monkeypatch
):
    test_id = uuid.uuid4().hex[:8]
    monkeypatch.setenv("KAFKA_TEST_BOOTSTRAP", kafka_broker.bootstrap_servers)
    monkeypatch.setenv("KAFKA_TEST_ID", test_id)
    cluster = KafkaCluster.from_config({"bootstrap.servers": kafka_broker.bootstrap_servers})
    KafkaTopic(cluster, f"clicks-{test_id}").create(2)
    keys = _produce(kafka_broker.bootstrap_servers, f"clicks-{test_id}")
    wh = tmp_path / "wh"
    result = run_app(
        str(APPS / "kafka_serdes.py"),
        warehouse=str(wh),
        state_dir=str(tmp_path / "state"),
        max_records=15,
        until_caught_up=True,
        inprocess_max_records=10**9,
        say=lambda _: None,
    )
    assert result.records == N + 1 and result.dead_letters == 1

    rows = _sink(cluster, f"click-counts-{test_id}")
    # Kafka's layouts: 8-byte big-endian keys and values, each record in the partition
    # Kafka's default partitioner gives its key's bytes (murmur2).
    assert all(len(k) == 8 and len(v) == 8 for _, k, v in rows)
    partitions = KafkaTopic(cluster, f"click-counts-{test_id}").partitions()
    assert [p for p, _, _ in rows] == [partition_of_bytes(k, partitions) for _, k, _ in rows]
    decoded = [(struct.unpack(">q", k)[0], struct.unpack(">q", v)[0]) for _, k, v in rows]
    # Every update once (no record cache), each key's counts 1..n in order.
    per_key: dict[int, list[int]] = {}
    for key, count in decoded:
        per_key.setdefault(key, []).append(count)
    expected = Counter(keys)
    assert per_key == {k: list(range(1, n + 1)) for k, n in expected.items()}

    # The windowed counts, with no serde given: Kafka's TimeWindowedSerializer layout (the
    # Long key's 8 bytes, then the window start's), partitioned by the inner key's bytes
    # (WindowedStreamPartitioner), Long values; each (key, window)'s counts 1..n in order.
    windowed = _sink(cluster, f"windowed-counts-{test_id}")
    assert all(len(k) == 16 and len(v) == 8 for _, k, v in windowed)
    partitions = KafkaTopic(cluster, f"windowed-counts-{test_id}").partitions()
    assert [p for p, _, _ in windowed] == [
        partition_of_bytes(k[:8], partitions) for _, k, _ in windowed
    ]
    per_window: dict[tuple[int, int], list[int]] = {}
    for _, k, v in windowed:
        per_window.setdefault(struct.unpack(">qq", k), []).append(struct.unpack(">q", v)[0])
    in_window = Counter((key, (1 + i) // 10 * 10) for i, key in enumerate(keys))
    assert per_window == {w: list(range(1, n + 1)) for w, n in in_window.items()}

    # The poison record: in the warehouse's dead-letter topic with its raw bytes (base64).
    letters = [
        r
        for table in topics.topic(
            Warehouse(str(wh)), f"kserdes-{test_id}-dead-letters"
        ).read_partitions()
        for r in records_of(table)
    ]
    assert len(letters) == 1
    (letter,) = letters
    assert base64.b64decode(letter.key) == POISON_KEY
    assert base64.b64decode(letter.value) == b"poison"
    assert letter.timestamp == N
    headers = letter.headers
    assert headers["__streams.errors.raw.encoding"] == "base64"
    assert headers["__streams.errors.topic"] == f"clicks-{test_id}"
    assert headers["__streams.errors.partition"] == "0"
    assert headers["__streams.errors.message"] == (
        "Size of data received by LongDeserializer is not 8"
    )
    assert json.dumps(headers)  # a JSON object, as every dead letter's headers
