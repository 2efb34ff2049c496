"""Where an app's records and state live: its topics, tasks and tables in the warehouse."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from lakestate.app import App
from lakestate.engine import batches, state_tables
from lakestate.errors import StreamsException
from lakestate.io import logtable
from lakestate.topology.graph import internal_topic_name
from lakestate.warehouse import Warehouse


@dataclass(frozen=True)
class AppLayout:
    """The app's sub-topologies resolved against the warehouse.

    ``inputs``: sub-topology -> its input topics (real names) in input order.
    ``task_counts``: sub-topology -> number of tasks (the most partitions of its inputs).
    ``outputs``: every topic the app writes -> its partition count.
    """

    app: App
    warehouse: Warehouse
    inputs: dict[int, list[str]]
    task_counts: dict[int, int]
    outputs: dict[str, int]
    partitions: dict[str, int]  # every topic the app reads or writes -> partition count

    @property
    def batches_path(self) -> str:
        return self.warehouse.batches_path(self.app.name)

    def state_path(self, store: str) -> str:
        return self.warehouse.state_table_path(self.app.name, store)

    def tasks(self) -> list[tuple[int, int]]:
        return [(sub, p) for sub in sorted(self.task_counts) for p in range(self.task_counts[sub])]

    def stores_of(self, sub: int) -> tuple[str, ...]:
        return self.app.topology.subtopologies[sub].stores


def prepare(spark: SparkSession, app: App, warehouse: Warehouse) -> AppLayout:
    """Resolve topics and tasks; create the app's repartition and sink topics, state tables
    and batch log if they do not exist yet."""
    topology = app.topology
    inputs: dict[int, list[str]] = {}
    task_counts: dict[int, int] = {}
    outputs: dict[str, int] = {}
    partitions: dict[str, int] = {}
    for sub in topology.subtopologies:
        names = list(sub.source_topics) + [
            internal_topic_name(app.name, s) for s in sub.repartition_sources
        ]
        counts = []
        for topic in names:
            if not logtable.topic_exists(spark, warehouse, topic):
                raise StreamsException(
                    f"app {app.name}: input topic {topic!r} of sub-topology {sub.id} does not "
                    f"exist in {warehouse.root}; create it with `lakestate produce {topic} FILE`"
                )
            _check_columns(spark, warehouse, topic)
            partitions[topic] = logtable.partitions(spark, warehouse, topic)
            counts.append(partitions[topic])
        inputs[sub.id] = names
        task_counts[sub.id] = max(counts)
        # Sinks and repartition topics get as many partitions as the tasks writing them.
        for topic in list(sub.sink_topics) + [
            internal_topic_name(app.name, s) for s in sub.repartition_sinks
        ]:
            if not logtable.topic_exists(spark, warehouse, topic):
                logtable.create_topic(spark, warehouse, topic, task_counts[sub.id])
            outputs[topic] = partitions[topic] = logtable.partitions(spark, warehouse, topic)
    for name, spec in topology.stores.items():
        if not spec.is_global:
            state_tables.ensure_table(
                spark, warehouse.state_table_path(app.name, name), name, spec.kind
            )
    batches.ensure_table(spark, warehouse.batches_path(app.name))
    return AppLayout(app, warehouse, inputs, task_counts, outputs, partitions)


def end_offsets(spark: SparkSession, layout: AppLayout, topic: str) -> dict[int, int]:
    """End offsets of one of the app's topics."""
    return logtable.end_offsets(spark, layout.warehouse, topic)


def _check_columns(spark: SparkSession, warehouse: Warehouse, topic: str) -> None:
    columns = set(spark.read.format("delta").load(warehouse.topic_path(topic)).columns)
    missing = [f.name for f in logtable.LOG_SCHEMA.fields if f.name not in columns]
    if missing:
        raise StreamsException(
            f"topic {topic!r} at {warehouse.topic_path(topic)} is not a log table: it has no "
            f"column {', '.join(missing)} (expected {logtable.LOG_SCHEMA.simpleString()})"
        )
