"""A foreign-key join (KIP-213) through the engine, with each transport: the subscription
and response topics make a cycle between the two sub-topologies, so a batch's answers come
back in a later batch; an order that changed in between gets a stale answer, which is
dropped (its hash is not the order's), and a newer one follows. So the output record by
record depends on where batches end (as in Kafka, where it depends on timing), but the
result converges (every change of a left join's row subscribes again, so the last
answer matches the row's last value): after many small batches with the local state wiped before every other
one, the result table, the subscription store (their SQL views) and each order's last
output equal the test driver's."""

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

APP = APPS / "fk_join.py"
PARTITIONS = 2
CUSTOMERS = ("c1", "c2", "c3", "c4", "c5")
TRANSPORTS = {"spark": 0, "in_process": 10**9}


def _phases(seed: int) -> list[tuple[str, list[dict]]]:
    """Customers, orders, then both changing: orders change customer, lose it or are
    deleted; customers change and are deleted."""
    rng = random.Random(seed)
    now = 1_000
    phases = []
    for topic in ("customers", "orders", "orders", "customers", "orders", "customers"):
        records = []
        for _ in range(12):
            now += rng.randrange(10)
            if topic == "customers":
                key = rng.choice(CUSTOMERS)
                value = None if rng.random() < 0.15 else f"name{rng.randrange(100)}"
            else:
                key = f"o{rng.randrange(8)}"
                customer = None if rng.random() < 0.1 else rng.choice(CUSTOMERS)
                value = None if rng.random() < 0.1 else {"customer": customer, "item": f"i{now}"}
            records.append({"key": key, "value": value, "timestamp": now})
        phases.append((topic, records))
    return phases


def _driver_model(phases) -> tuple[dict, list, list]:
    """The driver (one task for both tables: every partition at once): each order's last
    output, the result store's rows and the subscription store's rows."""
    app = load_app(APP)
    with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
        for topic, records in phases:
            source = d.create_input_topic(topic)
            for r in records:
                source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        last = {
            x.key: x.value for x in d.create_output_topic("enriched-orders").read_records_to_list()
        }
        result = _listed(d.get_key_value_store("enriched").all())
        subscriptions = _listed(d.get_key_value_store(_subscription_store(app)).all())
    return last, result, subscriptions


def _subscription_store(app) -> str:
    return next(s for s in app.topology.stores if "SUBSCRIPTION-STATE-STORE" in s)


def _view(spark, wh: Warehouse, store: str) -> list:
    rows = state_frame(spark, wh, "fk_join", store).collect()
    return sorted((json.loads(r["key"]), json.loads(r["value"])) for r in rows)


def _listed(rows) -> list:
    """Store rows as their SQL view gives them: a tuple key as a JSON list."""
    return sorted((list(k) if isinstance(k, tuple) else k, v) for k, v in rows)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_fk_join_converges_to_the_driver_in_small_batches_with_state_wiped(
    spark, tmp_path, transport
):
    phases = _phases(seed=3)
    wh = Warehouse(tmp_path / "wh")
    for topic in ("orders", "customers"):
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
            max_records=5,
            max_batches=1,
            until_caught_up=False,
        ).records:
            batches += 1
            if batches % 2:
                shutil.rmtree(state)
    last, result, subscriptions = _driver_model(phases)
    got_last: dict = {}
    for partition, _offset, key, value, _ts in topic_rows(spark, wh, "enriched-orders"):
        assert partition == partition_for(key, PARTITIONS)
        got_last[key] = value
    assert got_last == last
    assert any(v is None for v in last.values())  # deleted orders
    assert any(v.endswith(" for None") for v in last.values() if v)  # no customer
    assert any(v and not v.endswith(" for None") for v in last.values())  # joined
    assert _view(spark, wh, "enriched") == result
    assert _view(spark, wh, _subscription_store(load_app(APP))) == subscriptions
    assert result and subscriptions


def test_describe_shows_the_fk_join_nodes():
    described = load_app(APP).topology.describe()
    for node in (
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-",
        "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-",
        "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-",
        "KTABLE-FK-JOIN-OUTPUT-",
        "-topic",
    ):
        assert node in described, node


def test_tables_with_other_partition_counts_join_as_in_the_driver(tmp_path):
    """The subscription topic takes the other table's partition count and the response
    topic this table's, as Kafka sizes them, whichever sub-topology the run resolves
    first."""
    phases = _phases(seed=4)
    wh = Warehouse(tmp_path / "wh")
    counts = {"orders": 2, "customers": 3}
    for topic, n in counts.items():
        io_topics.topic(wh, topic).create(n)
    for topic, records in phases:
        io_topics.topic(wh, topic).append(records)
        run_app(
            str(APP),
            warehouse=wh.root,
            state_dir=str(tmp_path / "state"),
            inprocess_max_records=TRANSPORTS["in_process"],
            say=lambda _: None,
            max_records=5,
            until_caught_up=True,
        )
    internal = {t: io_topics.topic(wh, t).partitions() for t in wh.list_topics() if "-FK-" in t}
    assert sorted(n for t, n in internal.items() if "REGISTRATION" in t) == [3], internal
    assert sorted(n for t, n in internal.items() if "RESPONSE" in t) == [2], internal
    last, _, _ = _driver_model(phases)
    got = {}
    for part in io_topics.topic(wh, "enriched-orders").read_partitions():
        for row in part.to_pylist():
            assert row["partition"] == partition_for(json.loads(row["key"]), 2)
            got[json.loads(row["key"])] = None if row["value"] is None else json.loads(row["value"])
    assert got == last and last
