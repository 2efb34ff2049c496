"""A cogroup (KIP-150) through the engine, with each transport: many small batches with
the local state wiped before every other batch (the shared store and each input's stream
time restored from Delta) give what the test driver gives, record by record, and the
stores' SQL views hold what the driver's stores hold.

Records of two inputs of one task interleave by timestamp within a batch, so the output
would depend on where batches end; each phase here feeds one input and the engine catches
up before the next, as in test_stream_joins_engine."""

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

APP = APPS / "cogroup.py"
PARTITIONS = 2
KEYS = ("u1", "u2", "u6", "u8")  # two in each partition
OUTPUTS = ("activity-updates", "activity-windows")
TRANSPORTS = {"spark": 0, "in_process": 10**9}


def _phases(seed: int) -> list[tuple[str, list[dict]]]:
    """Alternating inputs, timestamps walking forward with some out of order (a few late
    for their window), a few null keys and values (dropped by the unwindowed one)."""
    rng = random.Random(seed)
    phases, now = [], 1_000
    for n, topic in enumerate(["clicks", "views", "clicks", "views", "views", "clicks"]):
        records = []
        for i in range(10):
            now += rng.randrange(30)
            records.append(
                {
                    "key": None if rng.random() < 0.05 else rng.choice(KEYS),
                    "value": None if rng.random() < 0.1 else f"{n}.{i}",
                    "timestamp": now - rng.randrange(150),
                }
            )
        phases.append((topic, records))
    return phases


def _driver_model(phases) -> tuple[dict, dict]:
    """Per output topic and partition, the driver's output; per store, its rows."""
    app = load_app(APP)
    outputs: dict = {t: {} for t in OUTPUTS}
    stores: dict = {"activity": [], "activity_windows": []}
    for p in range(PARTITIONS):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            for topic, records in phases:
                source = d.create_input_topic(topic)
                for r in records:
                    if r["key"] is not None and partition_for(r["key"], PARTITIONS) == p:
                        source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            for t in OUTPUTS:
                out = d.create_output_topic(t).read_records_to_list()
                outputs[t][p] = [(x.key, x.value, x.timestamp) for x in out]
            stores["activity"] += [(k, v) for k, v in d.get_key_value_store("activity").all()]
            stores["activity_windows"] += [
                (w.key, w.window.start, found.value, found.timestamp)
                for w, found in d.get_window_store("activity_windows").all_with_timestamps()
            ]
    return outputs, {name: sorted(rows) for name, rows in stores.items()}


def _views(spark, wh: Warehouse) -> dict:
    kv = state_frame(spark, wh, "cogroup", "activity").collect()
    windows = state_frame(spark, wh, "cogroup", "activity_windows").collect()
    return {
        "activity": sorted((json.loads(r["key"]), json.loads(r["value"])) for r in kv),
        "activity_windows": sorted(
            (json.loads(r["key"]), r["window_start"], json.loads(r["value"]), r["ts"])
            for r in windows
        ),
    }


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_cogroup_matches_the_driver_in_small_batches_with_state_wiped(spark, tmp_path, transport):
    phases = _phases(seed=5)
    wh = Warehouse(tmp_path / "wh")
    for topic in ("clicks", "views"):
        io_topics.topic(wh, topic).create(PARTITIONS)
    state = tmp_path / "state"
    batches = 0
    for topic, records in phases:
        io_topics.topic(wh, topic).append(records)
        while run_app(
            str(APP),
            warehouse=wh.root,
            state_dir=str(state),
            inprocess_max_records=TRANSPORTS[transport],
            say=lambda _: None,
            max_records=4,
            max_batches=1,
            until_caught_up=False,
        ).records:
            batches += 1
            if batches % 2:
                shutil.rmtree(state)
    expected, stores = _driver_model(phases)
    for t in OUTPUTS:
        got: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
        for partition, _offset, key, value, ts in topic_rows(spark, wh, t):
            got[partition].append((key, value, ts))
        assert got == expected[t], t
        assert all(got.values()), t
    assert any(
        "c" in v and "v" in v for rows in expected["activity-updates"].values() for _, v, _ in rows
    )  # both inputs folded into one aggregate
    assert _views(spark, wh) == stores
    assert stores["activity"] and stores["activity_windows"]


def test_describe_shows_the_cogroup_nodes():
    described = load_app(APP).topology.describe()
    assert "COGROUPKSTREAM-AGGREGATE-" in described
    assert "COGROUPKSTREAM-MERGE-" in described
    assert "(stores: ['activity'])" in described
