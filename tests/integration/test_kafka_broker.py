"""The tests' Kafka broker (kafka_broker.py) is a real one: confluent-kafka's clients produce
to it and consume from it, its transactions hide aborted records from read_committed
consumers, and a second producer with the same transactional.id fences the first."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_broker import BrokerJarsMissing, broker_classpath

pytestmark = pytest.mark.integration


def _topic(broker, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _consume(broker, topic: str, isolation: str, expected: int) -> list[tuple[bytes, bytes]]:
    """Every record of ``topic`` from the start, until ``expected`` or 10 s; as (key, value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    records: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(50):
            for message in consumer.consume(num_messages=100, timeout=0.2):
                if message.error() is None:
                    records.append((message.key(), message.value()))
            if len(records) >= expected:
                # A little longer: a record past the expected count would fail the test.
                records += [
                    (m.key(), m.value()) for m in consumer.consume(100, 0.5) if m.error() is None
                ]
                break
    finally:
        consumer.close()
    return records


def test_records_produced_are_consumed_in_order(kafka_broker):
    topic = _topic(kafka_broker)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    sent = [(f"k{i % 2}".encode(), f"v{i}".encode()) for i in range(5)]
    for key, value in sent:
        producer.produce(topic, value=value, key=key)
    assert producer.flush(30) == 0
    assert _consume(kafka_broker, topic, "read_uncommitted", len(sent)) == sent


def test_read_committed_sees_only_committed_transactions(kafka_broker):
    topic = _topic(kafka_broker)
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "transactional.id": f"tx-{topic}",
        }
    )
    producer.init_transactions(30)
    for values, commit in (([b"a", b"b"], True), ([b"c"], False), ([b"d"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, key=b"k")
        # On the broker before the abort (librdkafka drops what it has not sent yet).
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed = _consume(kafka_broker, topic, "read_committed", 3)
    assert [value for _, value in committed] == [b"a", b"b", b"d"]
    everything = _consume(kafka_broker, topic, "read_uncommitted", 4)
    assert [value for _, value in everything] == [b"a", b"b", b"c", b"d"]


def test_a_second_producer_with_the_transactional_id_fences_the_first(kafka_broker):
    topic = _topic(kafka_broker)
    config = {"bootstrap.servers": kafka_broker.bootstrap_servers, "transactional.id": topic}
    zombie = Producer(config)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", key=b"k")
    zombie.flush(30)
    successor = Producer(config)
    successor.init_transactions(30)  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", key=b"k")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].txn_requires_abort()
    assert _consume(kafka_broker, topic, "read_committed", 1) == [(b"k", b"successor")]


def test_without_the_jars_the_broker_says_to_run_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("LAKESTATE_KAFKA_DIR", str(tmp_path / "no-cache"))
    with pytest.raises(BrokerJarsMissing, match=r"run scripts/setup\.sh"):
        broker_classpath()
