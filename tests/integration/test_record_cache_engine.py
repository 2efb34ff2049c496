"""The record cache (statestore.cache.max.bytes) in the engine, in process and in Spark: each batch's
sinks hold one update per key (its last, in order of last update), so the sinks are the
uncached run's updates coalesced per batch; and exactly-once holds through kills in the
middle of a batch's commit (the replayed batch flushes the same updates)."""

from __future__ import annotations

import pytest
from engine_helpers import APPS, events, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.warehouse import Warehouse
from test_exactly_once import _run_in_subprocess

pytestmark = pytest.mark.integration

N = 120
MAX_RECORDS = 15
APP = "counts_cached.py"
KILLS = ["after_sink:counts-out@2", "after_tables@3"]


def _coalesced(inputs: list[tuple]) -> dict[int, list[tuple]]:
    """Per partition, the sinks' model: the input in batches of MAX_RECORDS records per
    partition, per batch each key's running count and sum after its last record, in order
    of last update."""
    out: dict[int, list[tuple]] = {}
    for partition in sorted({p for p, *_ in inputs}):
        rows = [r for r in inputs if r[0] == partition]
        counts: dict = {}
        sums: dict = {}
        seen = out.setdefault(partition, [])
        for start in range(0, len(rows), MAX_RECORDS):
            last: dict = {}
            for _p, _offset, key, value, _ts in rows[start : start + MAX_RECORDS]:
                if value["amount"] > 0:
                    counts[key] = counts.get(key, 0) + 1
                    sums[key] = sums.get(key, 0) + value["amount"]
                    last.pop(key, None)
                    last[key] = None
            seen.extend((key, counts[key], sums[key]) for key in last)
    return out


def _sinks(spark, wh: Warehouse) -> dict[int, list[tuple]]:
    counts = topic_rows(spark, wh, "counts-out")
    sums = topic_rows(spark, wh, "sums-out")
    assert [(p, k) for p, _, k, _, _ in counts] == [(p, k) for p, _, k, _, _ in sums]
    out: dict[int, list[tuple]] = {}
    for (p, _, key, count, _), (_, _, _, total, _) in zip(counts, sums, strict=True):
        out.setdefault(p, []).append((key, count, total))
    return out


# inprocess_max_records per transport: 0 processes every batch in Spark.
TRANSPORTS = {"in_process": 10**9, "spark": 0}


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_cached_sinks_hold_one_update_per_key_per_batch_through_kills(spark, tmp_path, transport):
    limit = TRANSPORTS[transport]
    where = "in this process" if transport == "in_process" else "in Spark"
    records = events(N, seed=21)
    # The uninterrupted run, in process whatever the chain's transport (a transport cannot
    # change a result): it equals the model, and the chain's last run must equal it.
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    run_app(
        str(APPS / APP),
        warehouse=reference.root,
        state_dir=str(tmp_path / "ref"),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        inprocess_max_records=TRANSPORTS["in_process"],
        say=lambda _: None,
    )
    inputs = topic_rows(spark, reference, "events")
    expected = _sinks(spark, reference)
    assert expected == _coalesced(inputs)
    # Coalesced: fewer updates than positive records.
    assert sum(map(len, expected.values())) < sum(1 for r in records if r["value"]["amount"] > 0)
    final = state_rows(spark, reference, "counts_cached", "counts")

    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    state = tmp_path / "state"
    for point in KILLS:
        proc = _run_in_subprocess(
            wh, state, point, app=APP, max_records=MAX_RECORDS, inprocess_max_records=limit
        )
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        assert f"transport: {where}" in proc.stdout
    proc = _run_in_subprocess(
        wh, state, None, app=APP, max_records=MAX_RECORDS, inprocess_max_records=limit
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _sinks(spark, wh) == expected
    assert state_rows(spark, wh, "counts_cached", "counts") == final
