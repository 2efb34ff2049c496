"""A stream-stream outer join through the engine, with each transport: many small batches
with the local state wiped before every other batch (the buffers and the waiting records
restored from their changelogs) give what the test driver gives, record by record, and
the SQL view of the waiting records shows what the driver's store holds. (The SIGKILLs at
each commit step are test_new_operators_exactly_once.py's, with the other new operators.)

Records of two inputs of one task interleave by timestamp within a batch, so a join's
output would depend on where batches end; each phase here feeds one side and the engine
catches up before the next, so the order is the phases' whatever the batches."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from engine_helpers import APPS, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io import topics as io_topics
from lakestate.io.partitioner import partition_for
from lakestate.read.spark_engine import state_frame
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = APPS / "stream_joins.py"
PARTITIONS = 2
KEYS = ("u1", "u2", "u6", "u8")  # two in each partition
WAITING = "pairs-outer-shared-join-store"
# The transports of a batch's processing (engine/inprocess.py): inprocess_max_records.
TRANSPORTS = {"spark": 0, "in_process": 10**9}


def _phases(seed: int) -> list[tuple[str, list[dict]]]:
    """Alternating sides, timestamps walking forward with some out of order, a few null
    values (dropped) and a last record far ahead (closes most windows)."""
    rng = random.Random(seed)
    phases, now = [], 1_000
    for n, topic in enumerate(["clicks", "views", "clicks", "views", "clicks"]):
        records = []
        for i in range(12):
            now += rng.randrange(15)
            records.append(
                {
                    "key": rng.choice(KEYS),
                    "value": None if rng.random() < 0.1 else f"{topic[0]}{n}.{i}",
                    "timestamp": now - rng.randrange(60),
                }
            )
        phases.append((topic, records))
    phases.append(
        ("views", [{"key": f"u{k}", "value": "end", "timestamp": now + 500} for k in range(4)])
    )
    return phases


def _driver_model(phases) -> tuple[dict[int, list[tuple]], list[tuple]]:
    """Per partition (one task each), the driver's output; and the waiting records."""
    app = load_app(APP)
    outputs, waiting = {}, []
    for p in range(PARTITIONS):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            for topic, records in phases:
                source = d.create_input_topic(topic)
                for r in records:
                    if partition_for(r["key"], PARTITIONS) == p:
                        source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            out = d.create_output_topic("paired").read_records_to_list()
            outputs[p] = [(x.key, x.value, x.timestamp) for x in out]
            store = d.get_state_store(WAITING)
            waiting += [
                (key, ts, "left" if left else "right", v) for _, ts, left, key, v in store.scan()
            ]
    return outputs, sorted(waiting)


def _waiting_view(spark, wh: Warehouse) -> list[tuple]:
    rows = state_frame(spark, wh, "stream_joins", WAITING).collect()
    return sorted((json.loads(r["key"]), r["ts"], r["side"], json.loads(r["value"])) for r in rows)


def _run(wh: Warehouse, state, transport: str, **kwargs):
    return run_app(
        str(APP),
        warehouse=wh.root,
        state_dir=str(state),
        inprocess_max_records=TRANSPORTS[transport],
        say=lambda _: None,
        **kwargs,
    )


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_outer_join_matches_the_driver_in_small_batches_with_state_wiped(
    spark, tmp_path, transport
):
    phases = _phases(seed=7)
    wh = Warehouse(tmp_path / "wh")
    for topic in ("clicks", "views"):
        io_topics.topic(wh, topic).create(PARTITIONS)
    state = tmp_path / "state"
    batches = 0
    for topic, records in phases:
        io_topics.topic(wh, topic).append(records)
        while _run(
            wh, state, transport, max_records=5, max_batches=1, until_caught_up=False
        ).records:
            batches += 1
            if batches % 2:
                shutil.rmtree(state)
    expected, waiting = _driver_model(phases)
    got: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    for partition, _offset, key, value, ts in topic_rows(spark, wh, "paired"):
        got[partition].append((key, value, ts))
    assert got == expected
    assert any("/None" in v for rows in got.values() for _, v, _ in rows)  # unjoined clicks
    assert any("/v" in v for rows in got.values() for _, v, _ in rows)  # pairs
    assert _waiting_view(spark, wh) == waiting
    assert waiting  # the last records still wait


NULL_KEYS_APP = """
from datetime import timedelta
import lakestate as ls
b = ls.StreamsBuilder()
lefts = b.stream("l").select_key(lambda k, v: k)
rights = b.stream("r").select_key(lambda k, v: k)
windows = ls.JoinWindows.of_time_difference_without_grace(timedelta(milliseconds=10))
lefts.left_join(rights, lambda a, c: f"{a}|{c}", windows).to("out")
app = ls.App("null_keys", b.build(), {})
"""


def test_a_left_joins_repartition_topics_carry_null_keys_in_the_engine(tmp_path):
    # KIP-962 as Kafka 4.4 plays it (conformance groups bytes_stream_join-*): the left
    # side's null key crosses its repartition topic and is emitted joined with None; the
    # right side's is dropped at the join.
    from lakestate.read import duckdb_engine

    app = tmp_path / "null_keys.py"
    app.write_text(NULL_KEYS_APP)
    wh = Warehouse(tmp_path / "wh")
    for topic in ("l", "r"):
        io_topics.topic(wh, topic).create(PARTITIONS)
    io_topics.topic(wh, "l").append(
        [{"key": None, "value": "A", "timestamp": 1}, {"key": "k", "value": "B", "timestamp": 2}]
    )
    io_topics.topic(wh, "r").append(
        [{"key": None, "value": "b", "timestamp": 3}, {"key": "k", "value": "c", "timestamp": 4}]
    )
    state = str(tmp_path / "state")
    run_app(str(app), warehouse=wh.root, state_dir=state, until_caught_up=True, say=lambda _: None)
    rows = duckdb_engine.sql(wh, "SELECT key, value FROM out ORDER BY value").rows
    assert rows == [(None, '"A|None"'), ('"k"', '"B|c"')]
