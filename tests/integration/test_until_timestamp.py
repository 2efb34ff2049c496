"""A run with a cut (``run_app(until_timestamp=T)``, what a backfill of an interval ending
at T runs) processes each input partition in offset order up to its first record stamped at
or after T, through every sub-topology (the repartition topic is cut by its records'
timestamps too, so a record reaches its sink in the run), exactly once: runs with cuts in
order, out of order or repeated, then an uncut run, equal one uninterrupted run.

The input spans three intervals and holds late records: a record stamped inside an earlier
interval after records of a later one, in offset order. Such a record is processed by the
run that reaches it in offset order, not by its interval's run."""

from __future__ import annotations

from collections import Counter

import pytest
from engine_helpers import APPS, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.io.partitioner import partition_for
from lakestate.runtime.cutoff import format_timestamp, parse_timestamp
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

PARTITIONS = 2
T1, T2, T3 = 2_000, 3_000, 4_000  # interval ends: [1000, 2000), [2000, 3000), [3000, 4000)


def _records() -> list[dict]:
    """90 records, 30 per interval, every 7th one late by 400 ms (some of them stamped in
    the interval before, after records of the next one)."""
    out = []
    for i in range(90):
        ts = 1_000 + i * 33 - (400 if i % 7 == 6 else 0)
        out.append({"key": f"k{i % 5}", "value": {"user": f"u{i % 4}", "amount": 1}, "timestamp": ts})
    return out


def _processed_before(records: list[dict], cut: int) -> list[dict]:
    """What a run cut at ``cut`` processes from scratch: per partition, the records before
    its first record stamped at or after the cut, in offset order."""
    out, stopped = [], set()
    for r in records:
        p = partition_for(r["key"], PARTITIONS)
        if p in stopped:
            continue
        if r["timestamp"] >= cut:
            stopped.add(p)
            continue
        out.append(r)
    return out


def _run(wh: Warehouse, state, app: str, until: int | None, said: list[str] | None = None):
    return run_app(
        str(APPS / app),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=7,  # several batches per cut
        until_caught_up=True,
        until_timestamp=until,
        say=(said.append if said is not None else lambda _: None),
    )


def _users(records: list[dict]) -> dict[str, int]:
    return dict(Counter(r["value"]["user"] for r in records))


def test_the_input_has_late_records_across_cuts() -> None:
    records = _records()
    for cut in (T1, T2):
        before = _processed_before(records, cut)
        assert all(r["timestamp"] < cut for r in before)
        stamped_before = [r for r in records if r["timestamp"] < cut]
        assert len(before) < len(stamped_before), "no late record left for a later run"


@pytest.mark.parametrize("order", [(T1, T2, T3), (T2, T1, T3), (T1, T1, T3, T2)])
def test_cuts_in_any_order_then_an_uncut_run_equal_one_run(spark, tmp_path, order) -> None:
    records = _records()
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=PARTITIONS)
    _run(reference, tmp_path / "ref-state", "regroup.py", None)

    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=PARTITIONS)
    state = tmp_path / "state"
    reached = 0  # the latest cut run so far
    for cut in order:
        said: list[str] = []
        result = _run(wh, state, "regroup.py", cut, said)
        assert result.caught_up, said
        if cut <= reached:
            # Already processed: nothing to do.
            assert result.batches == [] and result.records == 0, said
        reached = max(reached, cut)
        expected = _processed_before(records, reached)
        # Every record before the cut crossed the repartition topic and reached the count
        # (the second sub-topology) in the same run; none after it.
        assert state_rows(spark, wh, "regroup", "per-user") == _users(expected), (cut, said)
        assert len(topic_rows(spark, wh, "regroup-per-user-repartition")) == len(expected)
        assert len(topic_rows(spark, wh, "per-user-out")) == len(expected)
        assert "caught up to the cut" in said[-1]

    rest = _run(wh, state, "regroup.py", None)
    assert rest.caught_up
    assert state_rows(spark, wh, "regroup", "per-user") == state_rows(
        spark, reference, "regroup", "per-user"
    )
    # The sink holds every update exactly once (the repartition topic's interleaving of
    # the upstream tasks' records depends on batch boundaries; each key's counts do not).
    def updates(w: Warehouse) -> list:
        return sorted((key, value) for _, _, key, value, _ in topic_rows(spark, w, "per-user-out"))

    assert updates(wh) == updates(reference)
    assert len(topic_rows(spark, wh, "regroup-per-user-repartition")) == len(records)


def test_a_single_subtopology_cut_in_steps_equals_one_run_exactly(spark, tmp_path) -> None:
    records = [dict(r, value={"user": r["value"]["user"], "amount": 1 + i % 3})
               for i, r in enumerate(_records())]  # fmt: skip
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=PARTITIONS)
    _run(reference, tmp_path / "ref-state", "counts.py", None)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=PARTITIONS)
    for cut in (T1, T2, T3, None):
        _run(wh, tmp_path / "state", "counts.py", cut)
    for topic in ("counts-out", "sums-out"):
        assert topic_rows(spark, wh, topic) == topic_rows(spark, reference, topic)


def test_timestamps_parse_from_milliseconds_or_iso() -> None:
    assert parse_timestamp("1764000000000") == 1_764_000_000_000
    assert parse_timestamp("2025-11-24T16:00:00Z") == 1_764_000_000_000
    assert parse_timestamp("2025-11-24T17:00:00+01:00") == 1_764_000_000_000
    assert parse_timestamp("2025-11-24T16:00:00") == 1_764_000_000_000  # UTC
    assert format_timestamp(1_764_000_000_000) == "2025-11-24T16:00:00Z"
    with pytest.raises(ValueError, match="not a timestamp: 'yesterday'"):
        parse_timestamp("yesterday")
