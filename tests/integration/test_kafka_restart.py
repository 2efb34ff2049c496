"""A Kafka broker restarted during a run (issue 26 item 1), on a broker of this test's own
(the session's must stay up): the batch being committed either completes or fails with an
error naming the cluster, within a bound, and the rerun leaves every sink record once."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from engine_helpers import APPS, driver_outputs, events
from kafka_broker import BrokerJarsMissing, restart_broker, start_broker
from lakestate import run_app
from lakestate.checkpoint import faults
from lakestate.errors import StreamsException
from lakestate.io.kafka import KafkaCluster, KafkaTopic, admin, close_clients
from lakestate.io.topic_records import records_of

pytestmark = pytest.mark.integration

N = 120
TXN_TIMEOUT_S = 20  # the app's producer.transaction.timeout.ms: a transaction's bound
BOUND_S = 90  # the failed run's time: the restart, a marker read's retries, the txn bound


def _sink(cluster: KafkaCluster, topic: str) -> list[tuple]:
    rows = [r for table in KafkaTopic(cluster, topic).read_partitions() for r in records_of(table)]
    return [(r.partition, r.key, r.value, r.timestamp) for r in rows]


def test_a_broker_restart_between_progress_and_sinks_then_rerun_is_exactly_once(
    tmp_path, monkeypatch
):
    try:
        broker = start_broker(tmp_path / "kafka")
    except BrokerJarsMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        test_id = uuid.uuid4().hex[:8]
        monkeypatch.setenv("KAFKA_TEST_BOOTSTRAP", broker.bootstrap_servers)
        monkeypatch.setenv("KAFKA_TEST_ID", test_id)
        monkeypatch.setenv("KAFKA_TEST_TXN_TIMEOUT_MS", str(TXN_TIMEOUT_S * 1000))
        cluster = KafkaCluster.from_config({"bootstrap.servers": broker.bootstrap_servers})
        source = KafkaTopic(cluster, f"events-{test_id}")
        source.create(2)
        records = events(N, seed=11)
        source.append(records)
        run = {
            "warehouse": str(tmp_path / "wh"),
            "state_dir": str(tmp_path / "state"),
            "max_records": 15,
            "until_caught_up": True,
            "inprocess_max_records": 10**9,
            "say": lambda _: None,
        }
        restarted: list[int] = []

        def restart(batch: int) -> None:
            # Batch 2's progress row is committed; its sink transactions are not begun.
            if batch == 2 and not restarted:
                restarted.append(batch)
                restart_broker(broker, down_seconds=2)

        started = time.monotonic()
        failure = None
        with faults.hook("after_progress", restart):
            try:
                run_app(str(APPS / "kafka_counts.py"), **run)
            except StreamsException as exc:
                failure = str(exc)
        took = time.monotonic() - started
        print(f"the run with the restart: {took:.1f} s, failure: {failure}")
        assert restarted and took < BOUND_S
        if failure is not None:  # a clear error: the cluster, or the producer, named
            assert (
                f"Kafka cluster {broker.bootstrap_servers}" in failure
                or f"lakestate-kcounts-{test_id}-" in failure
            ), failure

        close_clients()  # the rerun's clients are new, as in a new process
        again = run_app(str(APPS / "kafka_counts.py"), **run)
        assert again.caught_up

        os.environ["KAFKA_TEST_ID"] = test_id
        outs = [f"counts-out-{test_id}", f"sums-out-{test_id}"]
        expected = driver_outputs(
            "kafka_counts.py", records, 2, outs, with_partition=True, in_topic=source.name
        )
        for topic, rows in expected.items():
            assert rows and _sink(cluster, topic) == sorted(rows, key=lambda r: r[0]), topic
        group = admin.group_offsets(cluster, f"kcounts-{test_id}", source.name)
        assert group == source.end_offsets()
    finally:
        close_clients()
        broker.stop()
