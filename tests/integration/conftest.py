"""Fixtures for the integration tests: one real SparkSession with Delta Lake for the whole
session, and a fresh warehouse directory per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lakestate.warehouse import Warehouse


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The session's SparkSession: local[2], 2 shuffle partitions, Delta configured as in
    production (``lakestate.engine.spark.get_spark``)."""
    from lakestate.engine.spark import get_spark, stop_spark

    session = get_spark(
        master="local[2]",
        app_name="lakestate-tests",
        extra_conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            # Short-lived JVM, tiny data: compiling costs more than it saves.
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            "spark.sql.adaptive.enabled": "false",
        },
    )
    yield session
    stop_spark()


@pytest.fixture
def warehouse(tmp_path) -> Warehouse:
    """An empty warehouse in the test's temporary directory."""
    return Warehouse(tmp_path / "warehouse")
