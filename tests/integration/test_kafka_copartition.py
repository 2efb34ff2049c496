"""Co-partitioning with Kafka topics of String keys on a real broker: customers and orders
are produced by confluent-kafka with Java's default partitioner (murmur2 of the key's
UTF-8 bytes, 2 partitions), and the app (apps/kafka_copartition.py) joins the orders,
re-keyed by customer, with the customers table through internal topics with String keys:
a repartition topic, a group_by's repartition topic and a foreign-key join's subscription
and response topics. Each is partitioned as Kafka Streams partitions it (murmur2 of the
String's bytes), so every order finds its customer on the task that holds it; hashing the
key's JSON text instead (``"c1"`` with its quotes) would send about half the customers'
orders to the other task, where the joins miss them."""

from __future__ import annotations

import json
import uuid

import pytest
from engine_helpers import APPS
from lakestate import run_app
from lakestate.io.kafka import KafkaCluster, KafkaTopic
from lakestate.io.partitioner import partition_of_bytes, partition_of_text

pytestmark = pytest.mark.integration

CUSTOMERS = [f"c{i}" for i in range(12)]
ORDERS = [(f"o{i}", CUSTOMERS[i * 5 % len(CUSTOMERS)]) for i in range(36)]


def _produce(bootstrap: str, topic: str, records: list[tuple[str, str, int]]) -> None:
    """(key, value, timestamp) records with String keys, placed by Java's partitioner."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value, timestamp in records:
        producer.produce(topic, key=key.encode(), value=value.encode(), timestamp=timestamp)
    assert producer.flush(30) == 0


def _sink(cluster: KafkaCluster, topic: str) -> list[tuple[int, str, str]]:
    """(partition, key, value) of the sink's records as a read_committed consumer sees
    them, in partition and offset order."""
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
    found: list[tuple[int, str, str]] = []
    done: set[int] = set()
    try:
        while len(done) < partitions:
            message = consumer.poll(10)
            assert message is not None, f"{topic}'s records did not come"
            if message.error():
                done.add(message.partition())
                continue
            found.append((message.partition(), message.key().decode(), message.value().decode()))
    finally:
        consumer.close()
    return sorted(found, key=lambda row: row[0])  # stable: each partition's in offset order


def _last(rows: list[tuple[int, str, str]]) -> dict[str, str]:
    return {key: value for _, key, value in rows}


def test_string_keyed_joins_through_internal_topics_meet_kafkas_partitions(
    kafka_broker, tmp_path, monkeypatch
):
    test_id = uuid.uuid4().hex[:8]
    bootstrap = kafka_broker.bootstrap_servers
    monkeypatch.setenv("KAFKA_TEST_BOOTSTRAP", bootstrap)
    monkeypatch.setenv("KAFKA_TEST_ID", test_id)
    # The case at hand: customers whose bytes and JSON text fall on different partitions.
    moved = [
        c
        for c in CUSTOMERS
        if partition_of_bytes(c.encode(), 2) != partition_of_text(json.dumps(c), 2)
    ]
    assert 3 <= len(moved) <= 9
    cluster = KafkaCluster.from_config({"bootstrap.servers": bootstrap})
    for name in ("customers", "orders"):
        KafkaTopic(cluster, f"{name}-{test_id}").create(2)

    def run() -> None:
        run_app(
            str(APPS / "kafka_copartition.py"),
            warehouse=str(tmp_path / "wh"),
            state_dir=str(tmp_path / "state"),
            max_records=20,
            until_caught_up=True,
            say=lambda _: None,
        )

    # The table first (its own run), then the orders: each order meets its customer's row.
    _produce(bootstrap, f"customers-{test_id}", [(c, f"name-{c}", 1) for c in CUSTOMERS])
    run()
    values = [json.dumps({"customer": c, "id": o}, separators=(",", ":")) for o, c in ORDERS]
    _produce(
        bootstrap,
        f"orders-{test_id}",
        [(o, value, 100 + i) for i, ((o, _), value) in enumerate(zip(ORDERS, values, strict=True))],
    )
    run()

    joined = _sink(cluster, f"joined-{test_id}")
    assert sorted((k, v) for _, k, v in joined) == sorted((c, f"{o}:name-{c}") for o, c in ORDERS)
    totals = {c: sum(1 for _, oc in ORDERS if oc == c) for c in CUSTOMERS}
    counted = _sink(cluster, f"counted-{test_id}")
    assert _last(counted) == {c: f"name-{c}={n}" for c, n in totals.items() if n}
    fk = _sink(cluster, f"fk-joined-{test_id}")
    assert _last(fk) == {o: f"{o}:name-{c}" for o, c in ORDERS}
    # Every sink's record sits where Kafka's partitioner puts its String key's bytes.
    for rows in (joined, counted, fk):
        assert all(p == partition_of_bytes(k.encode(), 2) for p, k, _ in rows)
