"""Fixtures for the integration tests: one real SparkSession with Delta Lake for the whole
session, and a fresh warehouse directory per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from engine_helpers import FAST_TEST_CONF
from lakestate.warehouse import Warehouse


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The session's SparkSession: local[2], 2 shuffle partitions, Delta configured as in
    production (``lakestate.runtime.spark_session.get_spark``)."""
    from lakestate.runtime.spark_session import get_spark, stop_spark

    session = get_spark(
        master="local[2]",
        app_name="lakestate-tests",
        extra_conf=FAST_TEST_CONF,
    )
    yield session
    stop_spark()


@pytest.fixture(autouse=True)
def _log_dir(tmp_path, monkeypatch) -> None:
    """The CLI's log files (lakestate.logfile) go to the test's directory, not ./logs."""
    monkeypatch.setenv("LAKESTATE_LOG_DIR", str(tmp_path / "logs"))


@pytest.fixture
def warehouse(tmp_path) -> Warehouse:
    """An empty warehouse in the test's temporary directory."""
    return Warehouse(tmp_path / "warehouse")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> Iterator[object]:
    """One real single-node Kafka broker (KRaft) for the session (``kafka_broker.py``). Fails,
    never skips, when ``scripts/setup.sh`` has not cached Kafka's jars."""
    from kafka_broker import BrokerJarsMissing, start_broker

    try:
        broker = start_broker(tmp_path_factory.mktemp("kafka-broker"))
    except BrokerJarsMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield broker
    from lakestate.io.kafka import close_clients

    close_clients()
    broker.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[object]:
    """One real S3-compatible server (moto's server mode, ``s3_server.py``) for the session
    on a free 127.0.0.1 port. Fails, never skips, when moto is not installed."""
    from s3_server import S3ServerMissing, start_server

    try:
        server = start_server(tmp_path_factory.mktemp("s3-server"))
    except S3ServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def s3_warehouse(s3_server, monkeypatch) -> Warehouse:
    """An empty warehouse ``s3://<fresh bucket>/warehouse`` on the session's S3 server, the
    environment (``AWS_*``) pointing delta-rs and pyarrow at it for this test and the
    processes it starts."""
    import uuid

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_S3_ALLOW_UNSAFE_RENAME", raising=False)
    bucket = f"lakestate-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    return Warehouse(f"s3://{bucket}/warehouse")


#: The cluster's master and workers only schedule and launch: their JVMs need no
#: optimizing compiler nor a parallel collector (the start of each costs less CPU).
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="module")
def standalone_cluster(s3_server, tmp_path_factory) -> Iterator[object]:
    """A standalone Spark cluster of two one-core workers (``spark_cluster.py``) for the
    module, its workers with the S3 server's credentials."""
    from spark_cluster import StandaloneCluster

    env = {**s3_server.env(), "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS}
    running = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), env)
    try:
        running.start(workers=2)
        yield running
    finally:
        running.stop()
