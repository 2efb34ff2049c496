"""Sliding windows (KIP-450) through the test driver: Kafka's own examples from its
KStreamSlidingWindowAggregateTest, the window spec, null and late records, the store and
its retention, suppression, and a plain model of what the windows hold."""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.records import Window, Windowed
from lakestate.testing import TestRecord, TopologyTestDriver

MS = timedelta(milliseconds=1)


def ms(n: int) -> timedelta:
    return n * MS


def W(key, start, end):  # noqa: N802 - reads like the type it builds
    return Windowed(key, Window(start, end))


def append(_key, value, agg):
    return f"{agg}+{value}"


def sliding(windows, op="aggregate", store="sliding-store", suppressed=None):
    """in -> group_by_key -> windowed_by(windows).op -> (suppress) -> out."""
    b = ls.StreamsBuilder()
    windowed = b.stream("in").group_by_key().windowed_by(windows)
    materialized = ls.Materialized.as_(store)
    if op == "count":
        table = windowed.count(materialized)
    elif op == "reduce":
        table = windowed.reduce(lambda agg, v: f"{agg}+{v}", materialized)
    else:
        table = windowed.aggregate(lambda: "0", append, materialized)
    if suppressed is not None:
        table = table.suppress(suppressed)
    table.to_stream().to("out")
    return b.build()


def run(topology, records, config=None):
    """Pipe (key, value, ts) one by one: the output as (Windowed, value, ts), the metrics."""
    with TopologyTestDriver(topology, config or {}) as d:
        topic = d.create_input_topic("in")
        for key, value, ts in records:
            topic.pipe_input(key, value, timestamp=ts)
        out = [
            (r.key, r.value, r.timestamp)
            for r in d.create_output_topic("out").read_records_to_list()
        ]
        return out, d.metrics()


def by_start(out):
    """Kafka's test reads the output as window start -> {(value, timestamp)}."""
    gathered: dict[int, set] = {}
    for key, value, ts in out:
        gathered.setdefault(key.window.start, set()).add((value, ts))
    return gathered


# -- the window spec ---------------------------------------------------------------------


def test_the_spec_holds_time_difference_grace_and_kafkas_retention():
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(10), ms(5))
    assert (windows.time_difference_ms, windows.grace_ms, windows.close_after_ms) == (10, 5, 5)
    assert windows.retention_ms == 25  # 2 * time difference + grace
    no_grace = ls.SlidingWindows.of_time_difference_with_no_grace(timedelta(seconds=1))
    assert (no_grace.time_difference_ms, no_grace.grace_ms) == (1000, 0)
    assert ls.SlidingWindows.of_time_difference_without_grace(ms(7)) == (
        ls.SlidingWindows.of_time_difference_with_no_grace(ms(7))
    )


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ls.SlidingWindows.of_time_difference_with_no_grace(ms(0)), "must be positive"),
        (lambda: ls.SlidingWindows.of_time_difference_with_no_grace(ms(-1)), "must be positive"),
        (lambda: ls.SlidingWindows.of_time_difference_and_grace(ms(5), ms(-1)), "grace period"),
        (lambda: ls.SlidingWindows.of_time_difference_with_no_grace(10), "must be a timedelta"),
    ],
)
def test_bad_sliding_specs_are_rejected_with_a_clear_error(make, message):
    with pytest.raises(ls.TopologyException, match=message):
        make()


def test_windowed_by_sliding_windows_is_a_time_windowed_stream_with_a_window_store():
    b = ls.StreamsBuilder()
    windowed = (
        b.stream("in")
        .group_by_key()
        .windowed_by(ls.SlidingWindows.of_time_difference_with_no_grace(ms(10)))
    )
    assert isinstance(windowed, ls.TimeWindowedKStream)  # as in Kafka
    table = windowed.count()
    assert table.window_grace_ms == 0
    topology = b.build()
    (store,) = topology.stores.values()
    assert store.kind == "window"
    assert store.name == "KSTREAM-AGGREGATE-STATE-STORE-0000000002"


# -- Kafka's examples (KStreamSlidingWindowAggregateTest, emit eagerly) --------------------


def test_kafka_aggregate_small_input():
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(10), ms(5))
    records = [("A", str(i), ts) for i, ts in enumerate((10, 10, 14, 15, 20, 22, 30), 1)]
    out, _ = run(sliding(windows), records)
    assert by_start(out) == {
        0: {("0+1", 10), ("0+1+2", 10)},
        4: {("0+1+2+3", 14)},
        5: {("0+1+2+3+4", 15)},
        10: {("0+1+2+3+4+5", 20)},
        11: {("0+3", 14), ("0+3+4", 15), ("0+3+4+5", 20)},
        12: {("0+3+4+5+6", 22)},
        15: {("0+4", 15), ("0+4+5", 20), ("0+4+5+6", 22)},
        16: {("0+5", 20), ("0+5+6", 22)},
        20: {("0+5+6+7", 30)},
        21: {("0+6", 22), ("0+6+7", 30)},
        23: {("0+7", 30)},
    }
    # Every window is [start, start + 10], the end inclusive.
    assert {key.window.end - key.window.start for key, _, _ in out} == {10}


def test_kafka_reduce_small_input():
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(10), ms(5))
    records = [("A", str(i), ts) for i, ts in enumerate((10, 14, 15, 22, 26, 30), 1)]
    out, _ = run(sliding(windows, "reduce"), records)
    assert by_start(out) == {
        0: {("1", 10)},
        4: {("1+2", 14)},
        5: {("1+2+3", 15)},
        11: {("2", 14), ("2+3", 15)},
        12: {("2+3+4", 22)},
        15: {("3", 15), ("3+4", 22)},
        16: {("4", 22), ("4+5", 26)},
        20: {("4+5+6", 30)},
        23: {("5", 26), ("5+6", 30)},
        27: {("6", 30)},
    }


def test_kafka_early_records_small_input():
    """Records before the time difference share the window [0, d]."""
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(50), ms(0))
    records = [("A", str(i), ts) for i, ts in enumerate((0, 5, 6, 3, 13, 10, 70), 1)]
    out, _ = run(sliding(windows), records)
    assert by_start(out) == {
        0: {("0+1", 0), ("0+1+2", 5), ("0+1+2+3", 6), ("0+1+2+3+4", 6)}
        | {("0+1+2+3+4+5", 13), ("0+1+2+3+4+5+6", 13)},
        1: {("0+2", 5), ("0+2+3", 6), ("0+2+3+4", 6), ("0+2+3+4+5", 13), ("0+2+3+4+5+6", 13)},
        4: {("0+2+3", 6), ("0+2+3+5", 13), ("0+2+3+5+6", 13)},
        6: {("0+3", 6), ("0+3+5", 13), ("0+3+5+6", 13)},
        7: {("0+5", 13), ("0+5+6", 13)},
        11: {("0+5", 13)},
        20: {("0+7", 70)},
    }


def test_kafka_early_records_repeated_input():
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(5), ms(0))
    records = [("A", str(i), ts) for i, ts in enumerate((0, 2, 4, 0, 2, 2, 0, 7), 1)]
    out, _ = run(sliding(windows), records)
    assert by_start(out) == {
        0: {("0+1", 0), ("0+1+2", 2), ("0+1+2+3", 4), ("0+1+2+3+4", 4), ("0+1+2+3+4+5", 4)}
        | {("0+1+2+3+4+5+6", 4), ("0+1+2+3+4+5+6+7", 4)},
        1: {("0+2", 2), ("0+2+3", 4), ("0+2+3+5", 4), ("0+2+3+5+6", 4)},
        2: {("0+2+3+5+6+8", 7)},
        3: {("0+3", 4), ("0+3+8", 7)},
        5: {("0+8", 7)},
    }


def test_kafka_no_grace_period_small_input():
    windows = ls.SlidingWindows.of_time_difference_with_no_grace(ms(50))
    records = [("A", str(i), ts) for i, ts in enumerate((100, 105, 106, 103, 113, 110), 1)]
    out, _ = run(sliding(windows), records)
    assert by_start(out) == {
        50: {("0+1", 100)},
        55: {("0+1+2", 105)},
        56: {("0+1+2+3", 106), ("0+1+2+3+4", 106)},
        63: {("0+1+2+3+4+5", 113), ("0+1+2+3+4+5+6", 113)},
        101: {("0+2", 105), ("0+2+3", 106), ("0+2+3+4", 106)}
        | {("0+2+3+4+5", 113), ("0+2+3+4+5+6", 113)},
        104: {("0+2+3", 106), ("0+2+3+5", 113), ("0+2+3+5+6", 113)},
        106: {("0+3", 106), ("0+3+5", 113), ("0+3+5+6", 113)},
        107: {("0+5", 113), ("0+5+6", 113)},
        111: {("0+5", 113)},
    }


def test_kafka_skipping_expired_windows_by_grace_drops_and_meters():
    """Stream time 200 with grace 90 closes every window ending before 110: the records
    at 100..105 each lose their left window (one dropped record each); the one at 15 is
    dropped whole. Lateness is measured against stream time, as Kafka's metrics."""
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(10), ms(90))
    timed = ((100, 200), (0, 100), (1, 101), (2, 102), (3, 103), (4, 104), (5, 105), (6, 15))
    records = [("k", str(v), ts) for v, ts in (*timed, (101, 300), (102, 400))]
    out, metrics = run(sliding(windows), records)
    assert out == [
        (W("k", 190, 200), "0+100", 200),
        (W("k", 290, 300), "0+101", 300),
        (W("k", 390, 400), "0+102", 400),
    ]
    assert metrics["dropped-records"] == 7
    assert metrics["late-record-drop-total"] == 7
    assert metrics["record-lateness-max"] == 185
    assert metrics["record-lateness-avg"] == pytest.approx(77)


# -- edges ---------------------------------------------------------------------------------


def test_null_keys_and_null_values_are_dropped_and_counted():
    """Unlike time windows, sliding windows drop a null value (as Kafka does); neither
    advances stream time."""
    windows = ls.SlidingWindows.of_time_difference_with_no_grace(ms(10))
    records = [(None, "x", 50), ("a", None, 60), ("a", "x", 5)]
    out, metrics = run(sliding(windows, "count"), records)
    assert out == [(W("a", 0, 10), 1, 5)]  # stream time is still 5: nothing closed
    assert metrics["dropped-records"] == 2


def test_a_window_is_open_while_its_end_is_at_least_stream_time_minus_grace():
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(10), ms(2))
    # Stream time 32, grace 2: a window ending at 30 is open. The record at 30 updates
    # [22, 32], opens its left window [20, 30], and its right window takes the record at 32.
    out, metrics = run(sliding(windows, "count"), [("a", "x", 32), ("a", "x", 30)])
    assert out == [
        (W("a", 22, 32), 1, 32),
        (W("a", 22, 32), 2, 32),
        (W("a", 20, 30), 1, 30),
        (W("a", 31, 41), 1, 32),
    ]
    assert metrics.get("dropped-records", 0) == 0
    # At 29 its left window [19, 29] has closed (one dropped record); the rest happens.
    out, metrics = run(sliding(windows, "count"), [("a", "x", 32), ("a", "x", 29)])
    assert out == [(W("a", 22, 32), 1, 32), (W("a", 22, 32), 2, 32), (W("a", 30, 40), 1, 32)]
    assert metrics["dropped-records"] == 1
    # At 19 even its left window would end before 30: dropped whole, once.
    out, metrics = run(sliding(windows, "count"), [("a", "x", 32), ("a", "x", 19)])
    assert out == [(W("a", 22, 32), 1, 32)]
    assert metrics["dropped-records"] == 1


def test_the_store_keeps_kafkas_retention_after_its_latest_window():
    """The store holds each window as [start, start + d]; a window starting at or before
    the latest written start minus 2d + grace is deleted (Kafka's retention)."""
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(10), ms(5))
    topology = sliding(windows, "count", store="sliding-counts")
    with TopologyTestDriver(topology) as d:
        topic = d.create_input_topic("in")
        topic.pipe_input("a", "x", timestamp=20)
        topic.pipe_input("a", "x", timestamp=25)
        store = d.get_window_store("sliding-counts")
        assert sorted(store.all(), key=lambda kv: kv[0].window.start) == [
            (W("a", 10, 20), 1),
            (W("a", 15, 25), 2),
            (W("a", 21, 31), 1),
        ]
        assert list(store.fetch("a", 15, 21)) == [(15, 2), (21, 1)]
        topic.pipe_input("a", "x", timestamp=46)  # latest start 46 - 10 = 36: keeps > 11
        assert [w.window.start for w, _ in store.all()] == [15, 21, 36]
        topic.pipe_input("b", "x", timestamp=60)  # latest start 50: keeps > 25
        assert [w.window.start for w, _ in store.all()] == [36, 50]


def test_until_window_closes_emits_when_stream_time_reaches_end_plus_grace():
    """Suppress closes a window at end + grace, as for time windows, though a sliding
    window's end is inclusive: a record at the end still updates it and emits again."""
    windows = ls.SlidingWindows.of_time_difference_with_no_grace(ms(10))
    final = ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded())
    topology = sliding(windows, "count", suppressed=final)
    records = [("a", "x", 10), ("a", "x", 10), ("a", "x", 11), ("a", "x", 25)]
    out, _ = run(topology, records)
    assert out == [
        (W("a", 0, 10), 1, 10),
        (W("a", 0, 10), 2, 10),
        (W("a", 1, 11), 3, 11),
        (W("a", 11, 21), 1, 11),
        (W("a", 15, 25), 1, 25),
    ]


# -- a plain model ---------------------------------------------------------------------------


records_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 3), st.integers(0, 60)),
    max_size=30,
)


def model_sliding_windows(records, d):
    """What the windows of each key hold once every record is in (none late): a left
    window [t - d, t] per record time t >= d, [0, d] for the records before d, and a
    right window [t + 1, t + 1 + d] per record t with a later record within d of it;
    each with its records' count and max timestamp."""
    times: dict[str, list[int]] = {}
    for key, _, ts in records:
        if key is not None:
            times.setdefault(key, []).append(ts)
    expected = {}
    for key, ts_list in times.items():
        starts = {max(0, t - d) for t in ts_list}
        starts |= {t + 1 for t in ts_list if any(t < u <= t + 1 + d for u in ts_list)}
        for start in starts:
            inside = [u for u in ts_list if start <= u <= start + d]
            expected[W(key, start, start + d)] = (len(inside), max(inside))
    return expected


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.sampled_from([1, 2, 5, 10]))
def test_windows_hold_what_a_plain_model_says_when_nothing_is_late(records, d):
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(d), ms(1000))
    topology = sliding(windows, "count", store="counts")
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        for key, value, ts in records:
            topic.pipe_input(key, value, timestamp=ts)
        held = {
            w: (found.value, found.timestamp)
            for w, found in driver.get_window_store("counts").all_with_timestamps()
        }
        latest = {}
        for r in driver.create_output_topic("out").read_records_to_list():
            latest[r.key] = (r.value, r.timestamp)
    expected = model_sliding_windows(records, d)
    assert held == expected
    assert latest == expected  # the last update of each window is what it holds


def _outputs(topology, records, cut, config):
    with TopologyTestDriver(topology, config) as d:
        topic = d.create_input_topic("in")
        for i in range(0, len(records), cut):
            topic.pipe_record_list([TestRecord(k, v, ts) for k, v, ts in records[i : i + cut]])
        return [
            (r.key, r.value, r.timestamp)
            for r in d.create_output_topic("out").read_records_to_list()
        ]


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
@settings(max_examples=20, deadline=None)
@given(records=records_strategy, cut=st.integers(1, 8), restart=st.integers(0, 30))
def test_batches_backends_and_restarts_give_the_same_output(
    backend, records, cut, restart, tmp_path_factory
):
    """Where batches end, the backend, and a restart between two drivers over the same
    RocksDB directory (both stream times are committed) change nothing."""
    windows = ls.SlidingWindows.of_time_difference_and_grace(ms(4), ms(3))
    topology = sliding(windows, "aggregate")
    expected, _ = run(topology, records)
    config = {"lakestate.state.backend": backend}
    if backend == "rocksdb":
        config["state.dir"] = str(tmp_path_factory.mktemp("state"))
    assert _outputs(topology, records, cut, dict(config)) == expected
    config = {"lakestate.state.backend": "rocksdb", "state.dir": str(tmp_path_factory.mktemp("r"))}
    first = _outputs(topology, records[:restart], 1, config)
    second = _outputs(topology, records[restart:], 1, config)
    assert first + second == expected
