"""KIP-655 deduplication on the engine: the driver's output exactly, in one batch or many;
``deduplicate`` meets duplicates from different partitions; the dedup state is queryable
and its expired rows leave the state table."""

from __future__ import annotations

import random

import pytest
from engine_helpers import APPS, driver_outputs, produce, topic_rows
from lakestate import run_app
from lakestate.io.partitioner import partition_for
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration


def _random_events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = rng.choice([f"k{j}" for j in range(6)] + [None])
        # Out of order by up to 25 s around a clock advancing 2 s per record.
        ts = 100_000 + i * 2_000 + rng.randrange(-25_000, 25_000)
        out.append({"key": key, "value": {"n": i}, "timestamp": max(ts, 0)})
    return out


@pytest.mark.parametrize("max_records", [10_000, 14])
def test_engine_deduplicates_like_the_driver(spark, tmp_path, max_records):
    records = _random_events(80, seed=21)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    result = run_app(
        str(APPS / "dedup.py"),
        warehouse=wh.root,
        state_dir=str(tmp_path / "s"),
        max_records=max_records,
        until_caught_up=True,
        say=lambda _: None,
    )
    assert (len(result.batches) == 1) == (max_records == 10_000)
    got = [(p, k, v, ts) for p, _, k, v, ts in topic_rows(spark, wh, "unique-events")]
    expected = driver_outputs("dedup.py", records, 2, ["unique-events"], with_partition=True)
    assert got == expected["unique-events"]
    # SQL users can ask which ids are held, and expired ids are gone from the view.
    from lakestate.read.spark_engine import state_frame

    df = state_frame(spark, wh, "dedup", "seen-keys")
    assert set(df.columns) >= {"task", "dedup_id", "ts", "offset"}
    rows = df.collect()
    stream_time_max = max(r["timestamp"] for r in records)
    assert rows, "some ids must still be held"
    assert all(r["ts"] >= stream_time_max - 10_000 - 25_000 for r in rows)
    assert len({(r["task"], r["dedup_id"]) for r in rows}) == len(rows)


def test_deduplicate_meets_duplicates_across_four_partitions(spark, tmp_path):
    ids = [f"order-{i}" for i in range(15)]
    records = []
    for i, order in enumerate(ids):
        for copy in range(3):  # the same id under three different keys
            # Everything within the 30 s interval: after the repartition, a task reads one
            # upstream task's records before another's, and a record older than stream time
            # minus the interval would be late (forwarded, KIP-655) rather than a duplicate.
            records.append(
                {
                    "key": f"{order}-src{copy}",
                    "value": {"id": order, "copy": copy},
                    "timestamp": 1_000_000 + i * 1_000 + copy * 100,
                }
            )
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=4)
    keys = {partition_for(r["key"], 4) for r in records}
    assert len(keys) > 1  # the copies really are spread over partitions
    run_app(
        str(APPS / "dedup_by_id.py"),
        warehouse=wh.root,
        state_dir=str(tmp_path / "s"),
        until_caught_up=True,
        say=lambda _: None,
    )
    out = topic_rows(spark, wh, "unique-ids")
    assert sorted(v["id"] for _, _, _, v, _ in out) == sorted(ids)
    # The forwarded records keep their original key and value.
    originals = {(r["key"], r["value"]["copy"]) for r in records}
    assert all((k, v["copy"]) in originals for _, _, k, v, _ in out)
