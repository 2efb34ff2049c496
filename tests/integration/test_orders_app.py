"""The orders demo app (jobs/orders.py) through the engine on real Spark + Delta: the
customers' tier history (some changes out of order) loaded into the versioned table, then
orders (some an hour late) in many small batches; every order comes out once, with the
tier valid at its time (a plain Python reference over the whole history), late ones
included; the SQL over the version history gives the same tiers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_helpers import produce, topic_rows
from lakestate import run_app
from lakestate.app import load_module
from lakestate.read.spark_engine import sql
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

CUSTOMERS = 30
N = 300
JOB = str(Path(__file__).resolve().parents[2] / "jobs" / "orders.py")


def _run(wh: Warehouse, state: Path, max_records: int) -> int:
    result = run_app(
        JOB,
        warehouse=wh.root,
        state_dir=str(state),
        max_records=max_records,
        until_caught_up=True,
        say=lambda _: None,
    )
    return len(result.batches)


def test_orders_app_joins_each_order_with_the_tier_at_its_time(spark, tmp_path):
    orders = load_module(JOB)
    history = orders.sample_customers(CUSTOMERS, seed=3)
    placed = list(orders.sample_orders(N, CUSTOMERS, seed=3))

    # The sample has what the app is for: tier changes arriving out of order, and late
    # orders whose tier at their time is not the tier at the time they arrive.
    newest: dict[str, int] = {}
    out_of_order = 0
    for key, _, ts in history:
        out_of_order += ts < newest.get(key, ts)
        newest[key] = max(ts, newest.get(key, ts))
    assert out_of_order >= 2
    arrived, late_changed = 0, 0
    for key, _, ts in placed:
        arrived = max(arrived, ts)
        if ts < arrived - 60_000:
            late_changed += orders.tier_as_of(history, key, ts) != orders.tier_as_of(
                history, key, arrived
            )
    assert late_changed >= 3

    wh, state = Warehouse(tmp_path / "wh"), tmp_path / "state"
    customers = [{"key": k, "value": v, "timestamp": t} for k, v, t in history]
    produce(spark, wh, orders.CUSTOMERS_TOPIC, customers, partitions=2)
    produce(spark, wh, orders.INPUT_TOPIC, [], partitions=2)
    _run(wh, state, max_records=1000)
    records = [{"key": k, "value": v, "timestamp": t} for k, v, t in placed]
    produce(spark, wh, orders.INPUT_TOPIC, records, partitions=2)
    assert _run(wh, state, max_records=40) > 3

    got = {}
    for _, _, key, value, ts in topic_rows(spark, wh, orders.OUTPUT_TOPIC):
        assert value["order"] not in got
        got[value["order"]] = (key, value, ts)
    assert len(got) == N
    latest = {k: orders.tier_as_of(history, k, max(newest.values())) for k in newest}
    for key, order, ts in placed:
        expected = orders.tier_as_of(history, key, ts)
        assert got[order["order"]] == (key, {**order, "tier": expected}, ts)
    assert sum(v["tier"] != latest[k] for k, v, _ in got.values()) >= N // 10

    # The tier as of each order's time from the version history, in SQL (README).
    rows = sql(
        spark,
        wh,
        "SELECT get_json_object(o.value, '$.order') AS order_id, h.value AS tier "
        "FROM enriched_orders o LEFT JOIN orders__customers h ON h.key = o.key "
        "AND h.valid_from <= o.timestamp AND (h.valid_to IS NULL OR h.valid_to > o.timestamp)",
    ).collect()
    assert len(rows) == N
    assert all(json.loads(r.tier) == got[r.order_id][1]["tier"] for r in rows)
