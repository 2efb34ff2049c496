"""A Processor-API app with a stream-time punctuator (apps/punctuated.py) through the
engine, with each transport: many small batches with the local state wiped before every
other batch (the store restored from its changelog, the punctuator resumed past the
committed stream time) give what the test driver gives, record by record, and the store's
SQL view shows what the driver's store holds. (The SIGKILLs at each commit step are
test_new_operators_exactly_once.py's, with the other new operators.)"""

from __future__ import annotations

import shutil

import pytest
from engine_helpers import APPS, driver_outputs, events, state_rows, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io import topics as io_topics
from lakestate.io.partitioner import partition_for
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = APPS / "punctuated.py"
PARTITIONS = 2
N = 120
# The transports of a batch's processing (runtime/inprocess.py): inprocess_max_records.
TRANSPORTS = {"spark": 0, "in_process": 10**9}


def _produce(wh: Warehouse, records: list[dict]) -> None:
    io_topics.topic(wh, "events").create(PARTITIONS)
    io_topics.topic(wh, "events").append(records)


def _driver_store(records: list[dict], store: str) -> dict:
    """The driver's ``store`` at the end, over both partitions' tasks."""
    app = load_app(APP)
    held = {}
    for p in range(PARTITIONS):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            topic = d.create_input_topic("events")
            for r in records:
                if partition_for(r["key"], PARTITIONS) == p:
                    topic.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            held.update(d.get_state_store(store).all())
    return held


def _per_partition(spark, wh: Warehouse) -> list[tuple]:
    return [(p, k, v, ts) for p, _offset, k, v, ts in topic_rows(spark, wh, "totals-out")]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_punctuated_app_matches_the_driver_in_small_batches_with_state_wiped(
    spark, tmp_path, transport
):
    records = events(N, seed=5)
    wh = Warehouse(tmp_path / "wh")
    _produce(wh, records)
    state = tmp_path / "state"
    batches = 0
    while run_app(
        str(APP),
        warehouse=wh.root,
        state_dir=str(state),
        inprocess_max_records=TRANSPORTS[transport],
        max_records=7,
        max_batches=1,
        until_caught_up=False,
        say=lambda _: None,
    ).records:
        batches += 1
        if batches % 2:
            shutil.rmtree(state)
    assert batches >= 8
    expected = driver_outputs(
        "punctuated.py", records, PARTITIONS, ["totals-out"], with_partition=True
    )
    got = _per_partition(spark, wh)
    assert got == expected["totals-out"]
    assert sum(1 for _, _, v, _ in got if "total" in v) > 10  # the punctuator fired often
    for store in ("totals", "lifetime"):
        assert state_rows(spark, wh, "punctuated", store) == _driver_store(records, store)
