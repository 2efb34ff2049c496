"""Co-partitioning with Kafka topics of String keys on a real broker: customers and orders
are produced by confluent-kafka with Java's default partitioner (murmur2 of the key's
UTF-8 bytes, 2 partitions), and the app (apps/kafka_copartition.py) joins the orders,
re-keyed by customer, with the customers table through internal topics with String keys:
a repartition topic (an explicit repartition(), and a join's own, typed by Joined), a
group_by's repartition topic and a foreign-key join's subscription and response topics. Each is partitioned as Kafka Streams partitions it (murmur2 of the
String's bytes), so every order finds its customer on the task that holds it; hashing the
key's JSON text instead (``"c1"`` with its quotes) would send about half the customers'
orders to the other task, where the joins miss them. Killed at each commit step and
rerun, the app writes each result once (exactly once through the internal topics too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from engine_helpers import APPS
from lakestate import run_app
from lakestate.io.kafka import KafkaCluster, KafkaTopic
from lakestate.io.partitioner import partition_of_bytes, partition_of_text

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
APP = str(APPS / "kafka_copartition.py")

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


@pytest.fixture
def topics(kafka_broker, monkeypatch) -> tuple[KafkaCluster, str]:
    """The app's environment and its two source topics (2 partitions each), empty."""
    test_id = uuid.uuid4().hex[:8]
    monkeypatch.setenv("KAFKA_TEST_BOOTSTRAP", kafka_broker.bootstrap_servers)
    monkeypatch.setenv("KAFKA_TEST_ID", test_id)
    cluster = KafkaCluster.from_config({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for name in ("customers", "orders"):
        KafkaTopic(cluster, f"{name}-{test_id}").create(2)
    return cluster, test_id


def _produce_customers(cluster: KafkaCluster, test_id: str) -> None:
    records = [(c, f"name-{c}", 1) for c in CUSTOMERS]
    _produce(cluster.bootstrap_servers, f"customers-{test_id}", records)


def _produce_orders(cluster: KafkaCluster, test_id: str) -> None:
    values = [json.dumps({"customer": c, "id": o}, separators=(",", ":")) for o, c in ORDERS]
    records = [(o, v, 100 + i) for i, ((o, _), v) in enumerate(zip(ORDERS, values, strict=True))]
    _produce(cluster.bootstrap_servers, f"orders-{test_id}", records)


def _run(tmp_path: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    """A run until caught up in its own process (killed at ``fault`` when given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        f"from lakestate import run_app; run_app({APP!r}, warehouse={str(tmp_path / 'wh')!r}, "
        f"state_dir={str(tmp_path / 'state')!r}, max_records=20, until_caught_up=True)"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


def _check_sinks(cluster: KafkaCluster, test_id: str) -> None:
    """Every order joined with its customer once, each customer's counts joined with its
    name, increasing (a count written twice would repeat), every sink record where Kafka's
    partitioner puts its String key's bytes."""
    joined = _sink(cluster, f"joined-{test_id}")
    assert sorted((k, v) for _, k, v in joined) == sorted((c, f"{o}:name-{c}") for o, c in ORDERS)
    counted = _sink(cluster, f"counted-{test_id}")
    totals = {c: sum(1 for _, oc in ORDERS if oc == c) for c in CUSTOMERS}
    assert _last(counted) == {c: f"name-{c}={n}" for c, n in totals.items() if n}
    for c in CUSTOMERS:
        counts = [int(v.split("=")[1]) for _, k, v in counted if k == c]
        assert counts == sorted(set(counts)), (c, counts)
    # select_key + join(customers, joiner, Joined.with_(String, None, String)): the join's
    # own repartition topic takes Joined's String key serde, no repartition() needed.
    direct = _sink(cluster, f"direct-joined-{test_id}")
    assert sorted((k, v) for _, k, v in direct) == sorted((c, f"{o}:name-{c}") for o, c in ORDERS)
    fk = _sink(cluster, f"fk-joined-{test_id}")
    assert sorted((k, v) for _, k, v in fk) == sorted((o, f"{o}:name-{c}") for o, c in ORDERS)
    for rows in (joined, direct, counted, fk):
        assert all(p == partition_of_bytes(k.encode(), 2) for p, k, _ in rows)


# The case at hand: customers whose bytes and JSON text fall on different partitions.
MOVED = [
    c for c in CUSTOMERS if partition_of_bytes(c.encode(), 2) != partition_of_text(json.dumps(c), 2)
]


def _run_in_process(cluster: KafkaCluster, test_id: str, tmp_path: Path) -> None:
    """Customers first (their own run), then the orders: each order meets its customer's row."""

    def run() -> None:
        run_app(
            APP,
            warehouse=str(tmp_path / "wh"),
            state_dir=str(tmp_path / "state"),
            max_records=20,
            until_caught_up=True,
            say=lambda _: None,
        )

    _produce_customers(cluster, test_id)
    run()
    _produce_orders(cluster, test_id)
    run()


def test_string_keyed_joins_through_internal_topics_meet_kafkas_partitions(topics, tmp_path):
    assert 3 <= len(MOVED) <= 9
    _run_in_process(*topics, tmp_path)
    _check_sinks(*topics)


def test_without_joineds_key_serde_the_moved_customers_orders_miss(topics, tmp_path, monkeypatch):
    """The join's repartition topic without Joined's key serde takes the default (Json),
    as Kafka Streams' does after select_key: its records are placed by the key's JSON text,
    so the orders of the customers whose text and bytes hash apart reach the task without
    their row, and the inner join drops them."""
    cluster, test_id = topics
    # In its own processes: a second app of the same path in this process (the test above
    # ran one) would read the topics with the first one's codecs.
    monkeypatch.setenv("KAFKA_TEST_JOINED_KEY", "default")
    _produce_customers(cluster, test_id)
    assert _run(tmp_path).returncode == 0
    _produce_orders(cluster, test_id)
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    direct = _sink(cluster, f"direct-joined-{test_id}")
    met = [(o, c) for o, c in ORDERS if c not in MOVED]
    assert len(met) < len(ORDERS)
    assert sorted((k, v) for _, k, v in direct) == sorted((c, f"{o}:name-{c}") for o, c in met)


def test_killed_at_each_commit_step_the_joins_write_each_result_once(topics, tmp_path):
    cluster, test_id = topics
    _produce_customers(cluster, test_id)
    assert _run(tmp_path).returncode == 0
    _produce_orders(cluster, test_id)
    points = [
        "after_progress@2",
        f"after_sink:joined-{test_id}@3",
        "after_tables@3",
        f"after_sink:fk-joined-{test_id}@4",
        "mid_local_commit@4",
    ]
    for point in points:
        proc = _run(tmp_path, point)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_sinks(cluster, test_id)
