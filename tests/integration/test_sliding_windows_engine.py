"""Sliding windows (KIP-450) through the engine on real Spark + Delta, with each transport:
the same output as the test driver in many batches with the local state wiped in between
(the window store and both stream times restored from Delta), and the store's SQL view
holding what the driver's window store holds."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_helpers import APPS, driver_outputs, events, produce, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io.partitioner import partition_for
from lakestate.read.spark_engine import state_frame
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse
from test_transport import TRANSPORTS

pytestmark = pytest.mark.integration

OUTPUTS = ["sliding-updates", "sliding-final"]


def _expected_outputs(records):
    raw = driver_outputs("sliding.py", records, 2, OUTPUTS, with_partition=True)
    return {
        topic: [(p, k.as_fields(), v, ts) for p, k, v, ts in rows] for topic, rows in raw.items()
    }


def _expected_store(records, store):
    """(key, window_start, window_end, value, ts) of the driver's window store, per task."""
    app = load_app(APPS / "sliding.py")
    rows = []
    for p in (0, 1):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            topic = d.create_input_topic("events")
            for r in records:
                if partition_for(r["key"], 2) == p:
                    topic.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            for w, found in d.get_window_store(store).all_with_timestamps():
                rows.append((w.key, w.window.start, w.window.end, found.value, found.timestamp))
    return sorted(rows)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_sliding_windows_match_the_driver_in_many_batches(spark, tmp_path, transport):
    records = events(150, keys=5, seed=11)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    state = tmp_path / "state"
    said: list[str] = []
    for i in range(30):
        result = run_app(
            str(APPS / "sliding.py"),
            warehouse=wh.root,
            state_dir=str(state),
            max_records=12,
            max_batches=1,
            inprocess_max_records=TRANSPORTS[transport],
            say=said.append,
        )
        if result.records == 0:
            break
        if i % 2:
            shutil.rmtree(state)  # the next batch restores the store and stream times
    where = "in Spark" if transport == "spark" else "in this process"
    assert [line for line in said if line.startswith("transport:")]
    assert all(where in line for line in said if line.startswith("transport:"))
    expected = _expected_outputs(records)
    for topic in OUTPUTS:
        got = [(p, k, v, ts) for p, _offset, k, v, ts in topic_rows(spark, wh, topic)]
        assert sorted(got, key=lambda r: r[0]) == sorted(expected[topic], key=lambda r: r[0])
        assert got, topic
    view = state_frame(spark, wh, "sliding", "sliding_sums").collect()
    got_store = sorted(
        (json.loads(r["key"]), r["window_start"], r["window_end"], json.loads(r["value"]), r["ts"])
        for r in view
    )
    assert got_store == _expected_store(records, "sliding_sums")
    assert all(end - start == 50 for _, start, end, _, _ in got_store)
