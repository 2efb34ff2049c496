"""A versioned table app (apps/versioned_tiers.py) on the engine equals the test driver:
out-of-order updates go into the history and are forwarded flagged not latest (not counted
per tier), updates beyond history retention are dropped, deletes of customers never seen are
forwarded, across many batches with the local state wiped between runs (so the versioned
store's observed stream time, which decides what is too late, comes back from Delta)."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter

import pytest
from engine_helpers import APPS, driver_outputs, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io.partitioner import partition_for
from lakestate.read.spark_engine import state_frame
from lakestate.testing import TopologyTestDriver

pytestmark = pytest.mark.integration

MIN = 60_000
PARTITIONS = 2


def tier_updates(n: int, seed: int = 914) -> list[dict]:
    """Customers' tier updates: mostly in order, some up to 90 minutes late (the history
    retention is an hour: some are dropped), some deletes, of customers never seen too."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        minute = i * 2 - (rng.randrange(90) if rng.random() < 0.3 else 0)
        tier = None if rng.random() < 0.1 else rng.choice(["bronze", "silver", "gold"])
        out.append({"key": rng.randrange(12), "value": tier, "timestamp": max(minute, 0) * MIN})
    return out


def driver_model(records: list[dict]) -> tuple[Counter, dict]:
    """Per-tier counts and each customer's versions (as_of each update), one driver per
    input partition as the engine runs one task per partition."""
    app = load_app(APPS / "versioned_tiers.py")
    counts: Counter = Counter()
    versions: dict = {}
    for p in range(PARTITIONS):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            topic = d.create_input_topic("tier-updates")
            mine = [r for r in records if partition_for(r["key"], PARTITIONS) == p]
            for r in mine:
                topic.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            counts.update(dict(d.get_key_value_store("per-tier").all()))
            store = d.get_versioned_key_value_store("tiers")
            # Queries within history retention only: beyond it only the latest answers.
            horizon = store.observed_stream_time() - 60 * MIN
            for r in mine:
                if r["timestamp"] < horizon:
                    continue
                found = store.get(r["key"], r["timestamp"])
                versions[(r["key"], r["timestamp"])] = found and tuple(found)
    assert len(versions) > 20
    return counts, versions


def test_versioned_table_app_equals_the_driver_across_batches_and_lost_state(spark, tmp_path):
    from lakestate.warehouse import Warehouse

    records = tier_updates(80)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "tier-updates", records, partitions=PARTITIONS)
    state = tmp_path / "state"
    batches = 0
    while True:  # 2 batches of 6 records per task per run, then the instance loses its disk
        result = run_app(
            str(APPS / "versioned_tiers.py"),
            warehouse=wh.root,
            state_dir=str(state),
            max_records=6,
            max_batches=2,
            say=lambda _: None,
        )
        batches += len(result.batches)
        shutil.rmtree(state)
        if result.caught_up or not result.batches:
            break
    assert batches >= 6

    expected = driver_outputs(
        "versioned_tiers.py", records, PARTITIONS, ["tier-changes"], in_topic="tier-updates"
    )["tier-changes"]
    got = [(k, v, ts) for _, _, k, v, ts in topic_rows(spark, wh, "tier-changes")]

    def per_key(rows):
        seqs: dict = {}
        for key, value, ts in rows:
            seqs.setdefault(key, []).append((value, ts))
        return seqs

    assert per_key(got) == per_key(expected)
    # Some updates were too late (dropped), some out of order (forwarded, not counted).
    assert len(got) < len(records)
    counts, versions = driver_model(records)
    assert state_rows(spark, wh, "tiers", "per-tier") == counts
    # The SQL history answers "the tier of customer k at time t" as the driver's store.
    rows = state_frame(spark, wh, "tiers", "tiers").collect()
    for (key, ts), found in versions.items():
        matching = [
            r
            for r in rows
            if json.loads(r["key"]) == key
            and r["valid_from"] <= ts
            and (r["valid_to"] is None or r["valid_to"] > ts)
            and r["value"] is not None
        ]
        sql = [(json.loads(r["value"]), r["valid_from"], r["valid_to"]) for r in matching]
        assert sql == ([] if found is None else [found]), (key, ts)
