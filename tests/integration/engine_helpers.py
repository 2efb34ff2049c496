"""Shared helpers of the engine tests: input generation, reading results, the driver model."""

from __future__ import annotations

import random
from pathlib import Path

from lakestate.app import load_app
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.io import topics
from lakestate.runtime import spark_topics
from lakestate.state.base import IsolationLevel
from lakestate.state.registry import open_view
from lakestate.testing import TopologyTestDriver
from rocksdict import Rdict

APPS = Path(__file__).parent / "apps"

# ``python -c`` code that runs the CLI's ``main`` on ``sys.argv[1:]`` in a fresh process, says
# on stderr whether pyspark was imported, and exits the way ``lakestate.cli.entrypoint`` does
# (flush, then ``os._exit``): a plain interpreter teardown can abort after the output
# ("terminate called without an active exception", apache/arrow#34314).
CLI_PROBE = (
    "import os, sys; from lakestate.cli import main; code = main(sys.argv[1:]); "
    "print('PYSPARK', 'pyspark' in sys.modules, file=sys.stderr); "
    "sys.stdout.flush(); sys.stderr.flush(); os._exit(code)"
)

# Spark settings for short test runs on tiny data: compiling costs more than it saves.
FAST_TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}


def events(n: int, keys: int = 7, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        user = f"u{rng.randrange(keys)}"
        out.append(
            {
                "key": f"k{rng.randrange(keys)}",
                "value": {"user": user, "amount": rng.choice([0, 1, 2, 5])},
                "timestamp": 1_000 + i * 10 + rng.randrange(50),  # some out-of-order
            }
        )
    return out


def produce(spark, warehouse, topic: str, records: list[dict], partitions: int) -> None:
    topics.topic(warehouse, topic).create(partitions)
    topics.topic(warehouse, topic).append(records)


def topic_rows(spark, warehouse, topic: str) -> list[tuple]:
    """(partition, offset, key, value, timestamp) in partition/offset order."""
    return [
        (r.partition, r.offset, r.key, r.value, r.timestamp)
        for r in spark_topics.collect_records(
            spark_topics.read_topic(spark, topics.topic(warehouse, topic))
        )
    ]


def state_rows(spark, warehouse, app: str, store: str) -> dict:
    """{key: value} of a store's current state, as SQL sees it (JSON text decoded)."""
    import json

    from lakestate.read.spark_engine import state_frame

    df = state_frame(spark, warehouse, app, store)
    return {json.loads(r["key"]): json.loads(r["value"]) for r in df.collect()}


def changelog_history(spark, warehouse, app: str, store: str) -> list:
    """The changelog table's commits, oldest first (Delta's DESCRIBE HISTORY rows)."""
    from delta.tables import DeltaTable

    return (
        DeltaTable.forPath(spark, warehouse.changelog_path(app, store))
        .history()
        .orderBy("version")
        .collect()
    )


def local_state(state_dir, app_name: str, task_id: str, store: str, kind: str) -> dict:
    from lakestate.state.base import IsolationLevel

    s = TaskDir(state_dir, app_name, task_id).open(IsolationLevel.READ_COMMITTED)
    try:
        return dict(open_view(store, kind, {}, lambda: s).all())
    finally:
        s.close()


def driver_outputs(
    app_file: str,
    records: list[dict],
    partitions: int,
    out_topics: list[str],
    *,
    with_partition: bool = False,
    in_topic: str = "events",
):
    """What the test driver outputs per input partition (each partition is one task):
    ``(key, value, timestamp)`` per output record, ``(partition, key, value, timestamp)``
    ``with_partition``."""
    from lakestate.io.partitioner import partition_for

    app = load_app(APPS / app_file)
    results: dict[str, list[tuple]] = {t: [] for t in out_topics}
    for p in range(partitions):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            topic = d.create_input_topic(in_topic)
            for r in records:
                if partition_for(r["key"], partitions) == p:
                    topic.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            for t in out_topics:
                for x in d.create_output_topic(t).read_records_to_list():
                    row = (x.key, x.value, x.timestamp)
                    results[t].append((p, *row) if with_partition else row)
    return results


def dump_store(state_dir, app: str, task) -> dict[str, dict[bytes, bytes]]:
    """Every entry of every column family of a task's RocksDB store (to compare two stores
    byte for byte)."""
    store = TaskDir(state_dir, app, task).open(IsolationLevel.READ_COMMITTED)
    try:
        backend = store._backend
        names = Rdict.list_cf(backend.path, backend._options)
        return {n: dict(backend.iterate(n, None, None, False)) for n in names if n != "default"}
    finally:
        store.close()
