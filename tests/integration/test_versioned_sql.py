"""A versioned store through the engine and Spark: its SQL view is an SCD type 2 table that
answers "the value at event time T" and "all versions of a key" as the store does."""

from __future__ import annotations

import json

import pytest
from engine_helpers import APPS, produce
from lakestate import run_app
from lakestate.read.spark_engine import sql, state_frame
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

MIN = 60_000


def test_versioned_store_view_answers_as_of_and_history_queries(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    updates = [  # customer 42's tier over event time (minutes), one arriving out of order
        (42, "silver", 0),
        (7, "bronze", 1),
        (42, "gold", 10),
        (42, "platinum", 20),
        (42, "silver-plus", 5),  # late: between silver and gold
        (7, None, 12),  # deleted
    ]
    records = [{"key": k, "value": v, "timestamp": m * MIN} for k, v, m in updates]
    produce(spark, wh, "tier-updates", records, partitions=1)
    result = run_app(
        str(APPS / "versioned_tiers.py"),
        warehouse=wh.root,
        state_dir=str(tmp_path / "state"),
        max_records=2,  # several batches: earlier versions' rows are rewritten later
        until_caught_up=True,
        say=lambda _: None,
    )
    assert len(result.batches) >= 3

    def tier_at(key: int, minute: int) -> list:
        t = minute * MIN
        rows = sql(
            spark,
            wh,
            f"SELECT value FROM tiers__tiers WHERE key = '{key}' AND valid_from <= {t} "
            f"AND (valid_to IS NULL OR valid_to > {t})",
        ).collect()
        return [None if r["value"] is None else json.loads(r["value"]) for r in rows]

    assert tier_at(42, 3) == ["silver"]
    assert tier_at(42, 5) == ["silver-plus"]
    assert tier_at(42, 10) == ["gold"]
    assert tier_at(42, 25) == ["platinum"]
    assert tier_at(7, 11) == ["bronze"]
    assert tier_at(7, 12) == [None]  # deleted at minute 12
    history = sql(
        spark,
        wh,
        "SELECT value, valid_from, valid_to FROM tiers__tiers WHERE key = '42' ORDER BY valid_from",
    ).collect()
    assert [(json.loads(r["value"]), r["valid_from"], r["valid_to"]) for r in history] == [
        ("silver", 0, 5 * MIN),
        ("silver-plus", 5 * MIN, 10 * MIN),
        ("gold", 10 * MIN, 20 * MIN),
        ("platinum", 20 * MIN, None),
    ]
    # The plain-Spark helper gives the same table.
    frame = state_frame(spark, wh, "tiers", "tiers")
    assert frame.where("key = '42'").count() == 4 and frame.count() == 6
