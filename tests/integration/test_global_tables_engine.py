"""Global tables through the engine and Spark: a stream left-joined with a global table
gives what the test driver gives, in one batch, in many small batches, and with the local
state wiped before every fourth batch (a restored store holds no global data: its tasks
read the global topic again from offset 0, within the batch's record budget, so with 7
records a batch the global table takes three batches to rebuild before purchases advance).

Each batch applies the global topic's records up to its planned end before its stream
records, so a stream record is joined with the global table as of that end. Here the
global topic is always written before the stream records that should see it, so the
result does not depend on the batch boundaries (docs/architecture.md, "Global tables")."""

from __future__ import annotations

import random
import shutil

import pytest
from engine_helpers import APPS, local_state, topic_rows
from lakestate.app import load_app
from lakestate.engine import progress
from lakestate.engine.runner import run_app
from lakestate.io import logtable
from lakestate.task_id import TaskId
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = str(APPS / "global_join.py")


def _phases(seed: int = 5) -> list[tuple[str, list[dict]]]:
    """Products, purchases, products changed (updates and deletes), more purchases."""
    rng = random.Random(seed)

    def products(n: int, version: str) -> list[dict]:
        return [
            {
                "key": f"p{rng.randrange(8)}",
                "value": rng.choice([{"name": f"{version}{i}", "price": i}, None]),
                "timestamp": 500 + i,
            }
            for i in range(n)
        ]

    def purchases(first: int, n: int) -> list[dict]:
        return [
            {
                "key": f"o{first + i}",
                "value": {"product": f"p{rng.randrange(9)}", "qty": rng.randrange(1, 4)},
                "timestamp": 1_000 + first + i,
            }
            for i in range(n)
        ]

    return [
        ("products", products(10, "a")),
        ("purchases", purchases(0, 30)),
        ("products", products(8, "b")),
        ("purchases", purchases(30, 30)),
    ]


def _run(wh: Warehouse, state, *, max_records: int | None, wipe: bool) -> None:
    for i in range(100):
        result = run_app(
            APP,
            warehouse=wh.root,
            state_dir=str(state),
            max_records=max_records,
            max_batches=1,
            say=lambda _: None,
        )
        if not result.batches:
            return
        if wipe and i % 4 == 3:
            shutil.rmtree(state)
    raise AssertionError("the app did not catch up")


@pytest.mark.parametrize(
    ("max_records", "wipe"), [(None, False), (7, False), (7, True)], ids=["one", "many", "wiped"]
)
def test_global_table_join_matches_the_driver(spark, tmp_path, max_records, wipe):
    wh = Warehouse(tmp_path / "wh")
    logtable.create_topic(spark, wh, "products", 3)
    logtable.create_topic(spark, wh, "purchases", 2)
    state = tmp_path / "state"
    phases = _phases()
    if max_records is None:  # one batch: every product before every purchase
        phases = sorted(phases, key=lambda phase: phase[0] != "products")
    app = load_app(APP)
    with TopologyTestDriver(app.topology, {"application.id": app.name}) as driver:
        for topic, records in phases:
            logtable.append_records(spark, wh, topic, records)
            if max_records is not None:
                _run(wh, state, max_records=max_records, wipe=wipe)
            source = driver.create_input_topic(topic)
            for r in records:
                source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        expected = driver.create_output_topic("priced").read_records_to_list()
        products = dict(driver.get_key_value_store("products").all())
    if max_records is None:
        result = run_app(APP, warehouse=wh.root, state_dir=str(state), say=lambda _: None)
        assert len(result.batches) == 1 and result.records == 60
    # One record per purchase key: compared by key (the tasks' output interleaves).
    got = sorted(((k, v, ts) for _p, _o, k, v, ts in topic_rows(spark, wh, "priced")), key=str)
    assert got == sorted(((x.key, x.value, x.timestamp) for x in expected), key=str)
    assert len(got) == 60
    # Some purchases found their product, some did not (deleted or never there).
    found = [v["product"] for _k, v, _ts in got]
    assert None in found and any(found)
    # Every task holds the whole global table in its local store.
    for task in ("0_0", "0_1"):
        held = local_state(state, "global_join", task, "products", "timestamped_key_value")
        assert held == products
    # The global offsets reached are in the progress rows.
    rows = progress.read(wh.progress_path("global_join"), [TaskId(0, 0)], "global_join")
    offsets = rows.last(TaskId(0, 0)).offsets
    assert {k for k in offsets if k.startswith("products@")} == {
        "products@0",
        "products@1",
        "products@2",
    }
