"""Windowed aggregations (KIP-328 grace periods) through the test driver: time windows
(tumbling, hopping) and session windows, their grace boundaries, metrics and stores."""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.records import Window, Windowed
from lakestate.testing import TopologyTestDriver

MS = timedelta(milliseconds=1)


def ms(n: int) -> timedelta:
    return n * MS


def W(key, start, end):  # noqa: N802 - reads like the type it builds
    return Windowed(key, Window(start, end))


def windowed_count(windows, store="counts"):
    b = ls.StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(windows)
        .count(ls.Materialized.as_(store))
        .to_stream()
        .to("out")
    )
    return b.build()


def run(topology, records, config=None):
    """Pipe (key, value, ts) records one by one; the output records as tuples."""
    with TopologyTestDriver(topology, config or {}) as d:
        topic = d.create_input_topic("in")
        for key, value, ts in records:
            topic.pipe_input(key, value, timestamp=ts)
        out = [
            (r.key, r.value, r.timestamp)
            for r in d.create_output_topic("out").read_records_to_list()
        ]
        return out, d.metrics()


# -- window specs ------------------------------------------------------------------------


def test_time_windows_are_aligned_to_the_epoch_and_hop_by_advance():
    tumbling = ls.TimeWindows.of_size_with_no_grace(ms(10))
    assert tumbling.windows_for(0) == [Window(0, 10)]
    assert tumbling.windows_for(19) == [Window(10, 20)]
    hopping = ls.TimeWindows.of_size_and_grace(ms(10), ms(2)).advance_by(ms(5))
    assert hopping.windows_for(12) == [Window(5, 15), Window(10, 20)]
    assert hopping.windows_for(3) == [Window(0, 10)]  # no window starts before the epoch
    assert (hopping.size_ms, hopping.advance_ms, hopping.grace_ms) == (10, 5, 2)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ls.TimeWindows.of_size_with_no_grace(ms(0)), "window size must be positive"),
        (lambda: ls.TimeWindows.of_size_and_grace(ms(5), ms(-1)), "grace period must be zero"),
        (lambda: ls.TimeWindows.of_size_with_no_grace(ms(5)).advance_by(ms(6)), "must not exceed"),
        (lambda: ls.TimeWindows.of_size_with_no_grace(5), "must be a timedelta"),
        (lambda: ls.SessionWindows.of_inactivity_gap_with_no_grace(ms(0)), "inactivity gap"),
    ],
)
def test_bad_window_specs_are_rejected_with_a_clear_error(make, message):
    with pytest.raises(ls.TopologyException, match=message):
        make()


def test_windowed_by_takes_windows_only():
    b = ls.StreamsBuilder()
    with pytest.raises(ls.TopologyException, match="TimeWindows, SlidingWindows or SessionWindows"):
        b.stream("in").group_by_key().windowed_by(timedelta(seconds=1))


# -- time windows ------------------------------------------------------------------------


def test_tumbling_count_forwards_each_update_with_the_max_timestamp_of_the_window():
    out, _ = run(
        windowed_count(ls.TimeWindows.of_size_with_no_grace(ms(10))),
        [("a", "x", 5), ("a", "x", 2), ("b", "x", 3), ("a", "x", 12)],
    )
    assert out == [
        (W("a", 0, 10), 1, 5),
        (W("a", 0, 10), 2, 5),  # max(5, 2)
        (W("b", 0, 10), 1, 3),
        (W("a", 10, 20), 1, 12),
    ]


def test_grace_boundary_a_window_closes_when_stream_time_reaches_end_plus_grace():
    topology = windowed_count(ls.TimeWindows.of_size_and_grace(ms(10), ms(5)))
    # Window [0, 10) with grace 5 closes at stream time 15 (end + grace <= stream time).
    out, metrics = run(topology, [("a", "x", 1), ("b", "x", 14), ("a", "x", 9)])
    assert out[-1] == (W("a", 0, 10), 2, 9)  # stream time 14 < 15: still open
    assert metrics.get("late-record-drop-total", 0) == 0
    out, metrics = run(topology, [("a", "x", 1), ("b", "x", 15), ("a", "x", 9)])
    assert out == [(W("a", 0, 10), 1, 1), (W("b", 10, 20), 1, 15)]  # dropped
    assert metrics["late-record-drop-total"] == 1
    assert metrics["dropped-records"] == 1


def test_stream_time_includes_the_current_record():
    # With no grace, a record at 10 closes [0, 10) before a record at 9 is looked at; the
    # record at 10 itself opens [10, 20).
    out, metrics = run(
        windowed_count(ls.TimeWindows.of_size_with_no_grace(ms(10))),
        [("a", "x", 10), ("a", "x", 9)],
    )
    assert out == [(W("a", 10, 20), 1, 10)]
    assert metrics["late-record-drop-total"] == 1


def test_hopping_windows_count_a_record_in_every_window_containing_it():
    out, _ = run(
        windowed_count(ls.TimeWindows.of_size_with_no_grace(ms(10)).advance_by(ms(5))),
        [("a", "x", 7), ("a", "x", 12)],
    )
    assert out == [
        (W("a", 0, 10), 1, 7),
        (W("a", 5, 15), 1, 7),
        (W("a", 5, 15), 2, 12),
        (W("a", 10, 20), 1, 12),
    ]


def test_hopping_late_drops_count_once_per_closed_window():
    out, metrics = run(
        windowed_count(ls.TimeWindows.of_size_with_no_grace(ms(10)).advance_by(ms(5))),
        [("a", "x", 14), ("a", "x", 9)],
    )
    # 9 is in [0, 10) (closed at 14 > 10) and [5, 15) (open).
    assert out[-1] == (W("a", 5, 15), 2, 14)
    assert metrics["late-record-drop-total"] == 1


def test_null_keys_are_dropped_and_null_values_are_counted():
    out, metrics = run(
        windowed_count(ls.TimeWindows.of_size_with_no_grace(ms(10))),
        [(None, "x", 1), ("a", None, 2)],
    )
    assert out == [(W("a", 0, 10), 1, 2)]
    assert metrics["dropped-records"] == 1
    assert metrics.get("late-record-drop-total", 0) == 0


def test_lateness_metrics():
    _, metrics = run(
        windowed_count(ls.TimeWindows.of_size_and_grace(ms(100), ms(100))),
        [("a", "x", 50), ("a", "x", 40), ("a", "x", 20), ("a", "x", 60)],
    )
    assert metrics["record-lateness-max"] == 30
    assert metrics["record-lateness-avg"] == pytest.approx((0 + 10 + 30 + 0) / 4)


def test_aggregate_and_reduce():
    b = ls.StreamsBuilder()
    grouped = (
        b.stream("in").group_by_key().windowed_by(ls.TimeWindows.of_size_with_no_grace(ms(10)))
    )
    grouped.aggregate(lambda: "", lambda k, v, agg: agg + v).to_stream().to("out")
    out, _ = run(b.build(), [("a", "x", 1), ("a", "y", 2)])
    assert [v for _, v, _ in out] == ["x", "xy"]
    b = ls.StreamsBuilder()
    grouped = (
        b.stream("in").group_by_key().windowed_by(ls.TimeWindows.of_size_with_no_grace(ms(10)))
    )
    grouped.reduce(lambda agg, v: agg + v).to_stream().to("out")
    out, _ = run(b.build(), [("a", 1, 1), ("a", 2, 2), ("a", 4, 11)])
    assert out == [(W("a", 0, 10), 1, 1), (W("a", 0, 10), 3, 2), (W("a", 10, 20), 4, 11)]


def test_window_store_holds_the_open_windows_and_answers_fetches():
    topology = windowed_count(ls.TimeWindows.of_size_and_grace(ms(10), ms(5)).advance_by(ms(5)))
    with TopologyTestDriver(topology) as d:
        topic = d.create_input_topic("in")
        for key, ts in [("a", 3), ("a", 8), ("b", 9)]:
            topic.pipe_input(key, "x", timestamp=ts)
        store = d.get_window_store("counts")
        assert list(store.fetch("a", 0, 5)) == [(0, 2), (5, 1)]
        assert list(store.fetch("a", 1, 5)) == [(5, 1)]
        assert sorted(store.fetch_all(0, 100), key=str) == sorted(
            [(W("a", 0, 10), 2), (W("a", 5, 15), 1), (W("b", 0, 10), 1), (W("b", 5, 15), 1)],
            key=str,
        )
        topic.pipe_input("c", "x", timestamp=15)  # closes [0, 10): it leaves the store
        assert all(w.window.end > 10 for w, _ in store.all())
        with pytest.raises(ls.StreamsException, match="not a session store"):
            d.get_session_store("counts")


def test_a_longer_retention_keeps_closed_windows_in_the_store_until_it_passes():
    # Tumbling 10 ms, grace 5, kept 30 ms from each window's start (Kafka's withRetention):
    # [0, 10) closes at stream time 15 but stays until stream time 30; output is unchanged.
    windows = ls.TimeWindows.of_size_and_grace(ms(10), ms(5))
    b = ls.StreamsBuilder()
    kept = ls.Materialized.as_("counts").with_retention(ms(30))
    b.stream("in").group_by_key().windowed_by(windows).count(kept).to_stream().to("out")
    records = [("a", "x", 3), ("b", "x", 15), ("a", "x", 9), ("b", "x", 29), ("b", "x", 30)]
    with TopologyTestDriver(b.build()) as d:
        topic = d.create_input_topic("in")
        store = d.get_window_store("counts")
        for key, value, ts in records[:3]:
            topic.pipe_input(key, value, timestamp=ts)
        # Closed at 15: the late record for it was dropped, and the window is still there.
        assert list(store.fetch("a", 0, 0)) == [(0, 1)]
        topic.pipe_input(*records[3][:2], timestamp=records[3][2])
        assert list(store.fetch("a", 0, 0)) == [(0, 1)]  # 29: 0 > 29 - 30, kept
        topic.pipe_input(*records[4][:2], timestamp=records[4][2])
        assert list(store.fetch("a", 0, 0)) == []  # 30: its start is 30 behind, gone
        assert all(w.window.start > 0 for w, _ in store.all())
    assert run(b.build(), records) == run(windowed_count(windows), records)


@pytest.mark.parametrize(
    ("windows", "retention", "least"),
    [
        (ls.TimeWindows.of_size_and_grace(ms(10), ms(5)), 14, "window size plus grace (15 ms)"),
        (
            ls.SessionWindows.of_inactivity_gap_and_grace(ms(3), ms(2)),
            4,
            "inactivity gap plus grace (5 ms)",
        ),
    ],
)
def test_a_retention_shorter_than_the_window_is_refused(windows, retention, least):
    b = ls.StreamsBuilder()
    grouped = b.stream("in").group_by_key().windowed_by(windows)
    with pytest.raises(ValueError, match=rf"with_retention\({retention} ms\).*") as caught:
        grouped.count(ls.Materialized.as_("w").with_retention(ms(retention)))
    assert least in str(caught.value) and "give at least" in str(caught.value)


def test_sliding_windows_refuse_a_retention_for_now():
    b = ls.StreamsBuilder()
    grouped = (
        b.stream("in")
        .group_by_key()
        .windowed_by(ls.SlidingWindows.of_time_difference_and_grace(ms(5), ms(1)))
    )
    with pytest.raises(ValueError, match="not supported for SlidingWindows"):
        grouped.count(ls.Materialized.as_("w").with_retention(ms(100)))


# -- session windows ---------------------------------------------------------------------


def session_topology(windows, op="count"):
    b = ls.StreamsBuilder()
    grouped = b.stream("in").group_by_key().windowed_by(windows)
    if op == "count":
        table = grouped.count(ls.Materialized.as_("sessions"))
    elif op == "reduce":
        table = grouped.reduce(lambda a, v: a + v, ls.Materialized.as_("sessions"))
    else:
        table = grouped.aggregate(
            lambda: "",
            lambda k, v, agg: agg + str(v),
            lambda k, a1, a2: a1 + "|" + a2,
            ls.Materialized.as_("sessions"),
        )
    table.to_stream().to("out")
    return b.build()


def test_sessions_merge_and_each_merged_session_is_retracted():
    out, _ = run(
        session_topology(ls.SessionWindows.of_inactivity_gap_and_grace(ms(5), ms(20))),
        [("a", "x", 1), ("a", "x", 10), ("a", "x", 6)],
    )
    assert out == [
        (W("a", 1, 1), 1, 1),
        (W("a", 10, 10), 1, 10),
        (W("a", 1, 1), None, 1),  # merged away: a tombstone at the session's end
        (W("a", 10, 10), None, 10),
        (W("a", 1, 10), 3, 10),
    ]


def test_session_aggregate_merges_older_sessions_first():
    out, _ = run(
        session_topology(ls.SessionWindows.of_inactivity_gap_and_grace(ms(5), ms(20)), "aggregate"),
        [("a", "p", 1), ("a", "q", 10), ("a", "r", 6)],
    )
    assert out[-1] == (W("a", 1, 10), "|p|qr", 10)


def test_session_reduce():
    out, _ = run(
        session_topology(ls.SessionWindows.of_inactivity_gap_with_no_grace(ms(5)), "reduce"),
        [("a", 1, 1), ("a", 2, 3), ("a", 4, 20)],
    )
    assert out == [
        (W("a", 1, 1), 1, 1),
        (W("a", 1, 1), None, 1),
        (W("a", 1, 3), 3, 3),
        (W("a", 20, 20), 4, 20),
    ]


def test_session_grace_boundary():
    windows = ls.SessionWindows.of_inactivity_gap_and_grace(ms(5), ms(3))
    # A session closes when its end < stream time - gap - grace.
    out, metrics = run(session_topology(windows), [("b", "x", 20), ("a", "x", 12)])
    assert out[-1] == (W("a", 12, 12), 1, 12)  # 12 == 20 - 5 - 3: still open
    out, metrics = run(session_topology(windows), [("b", "x", 20), ("a", "x", 11)])
    assert out == [(W("b", 20, 20), 1, 20)]
    assert metrics["late-record-drop-total"] == 1


def test_a_late_record_extending_an_open_session_is_accepted():
    windows = ls.SessionWindows.of_inactivity_gap_with_no_grace(ms(5))
    out, metrics = run(session_topology(windows), [("a", "x", 10), ("b", "x", 14), ("a", "x", 7)])
    assert out[-1] == (W("a", 7, 10), 2, 10)
    assert metrics.get("late-record-drop-total", 0) == 0


def test_session_store_reads():
    windows = ls.SessionWindows.of_inactivity_gap_with_no_grace(ms(5))
    with TopologyTestDriver(session_topology(windows)) as d:
        topic = d.create_input_topic("in")
        for ts in (1, 3, 30):
            topic.pipe_input("a", "x", timestamp=ts)
        store = d.get_session_store("sessions")
        assert list(store.fetch("a")) == [(W("a", 30, 30), 1)]  # [1, 3] closed and gone
        assert store.fetch_session("a", 30, 30) == 1
        assert store.find_sessions("a", 25, 35) == [(Window(30, 30), 1)]


# -- one batch or many, memory or RocksDB, restarts --------------------------------------

records_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 3), st.integers(0, 60)),
    max_size=30,
)


def model_time_window_count(records, size, advance, grace):
    """Kafka's windowed count, written plainly: per record, every window containing it
    that is still open gets one more, with the max timestamp."""
    observed = -1
    windows: dict[tuple, tuple[int, int]] = {}
    out = []
    for key, _value, ts in records:
        if key is None:
            continue
        observed = max(observed, ts)
        start = max(0, ts - size + advance) // advance * advance
        while start <= ts:
            end = start + size
            if end > observed - grace:
                count, held_ts = windows.get((key, start), (0, ts))
                windows[(key, start)] = (count + 1, max(ts, held_ts))
                out.append((W(key, start, end), count + 1, max(ts, held_ts)))
            start += advance
    return out


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.sampled_from([(10, 10, 0), (10, 10, 5), (10, 5, 3), (6, 2, 0)]))
def test_time_window_count_matches_a_plain_model(records, spec):
    size, advance, grace = spec
    windows = ls.TimeWindows.of_size_and_grace(ms(size), ms(grace)).advance_by(ms(advance))
    out, _ = run(windowed_count(windows), records)
    assert out == model_time_window_count(records, size, advance, grace)


def _all_outputs_in_batches(topology, records, cut_every, config):
    with TopologyTestDriver(topology, config) as d:
        topic = d.create_input_topic("in")
        for i in range(0, len(records), cut_every):
            topic.pipe_record_list(
                [ls.testing.TestRecord(k, v, ts) for k, v, ts in records[i : i + cut_every]]
            )
        return [
            (r.key, r.value, r.timestamp)
            for r in d.create_output_topic("out").read_records_to_list()
        ]


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
@settings(max_examples=25, deadline=None)
@given(records=records_strategy, cut=st.integers(1, 8))
def test_batches_and_backends_give_the_same_output(backend, records, cut, tmp_path_factory):
    config = {"lakestate.state.backend": backend}
    if backend == "rocksdb":
        config["state.dir"] = str(tmp_path_factory.mktemp("state"))
    for topology in (
        windowed_count(ls.TimeWindows.of_size_and_grace(ms(10), ms(4)).advance_by(ms(5))),
        session_topology(ls.SessionWindows.of_inactivity_gap_and_grace(ms(4), ms(3)), "aggregate"),
    ):
        one_by_one, _ = run(topology, records)
        assert _all_outputs_in_batches(topology, records, cut, dict(config)) == one_by_one


@settings(max_examples=20, deadline=None)
@given(records=records_strategy, cut=st.integers(0, 30))
def test_a_restart_keeps_the_observed_stream_time(records, cut, tmp_path_factory):
    """A second driver over the same RocksDB directory goes on where the first stopped:
    windows closed before the restart stay closed (observed stream time is committed)."""
    topology = session_topology(ls.SessionWindows.of_inactivity_gap_and_grace(ms(4), ms(2)))
    expected, _ = run(topology, records)
    config = {"lakestate.state.backend": "rocksdb", "state.dir": str(tmp_path_factory.mktemp("s"))}
    first, _ = run(topology, records[:cut], config)
    second, _ = run(topology, records[cut:], config)
    assert first + second == expected


def test_metric_totals_add_up_over_restarts(tmp_path):
    """The late-drop and lateness totals are committed with the state: a second driver over
    the same RocksDB directory goes on counting from them."""
    topology = windowed_count(ls.TimeWindows.of_size_with_no_grace(ms(10)))
    config = {"lakestate.state.backend": "rocksdb", "state.dir": str(tmp_path)}
    _, first = run(topology, [("a", "x", 20), ("a", "x", 5)], config)
    _, second = run(topology, [("a", "x", 3), ("a", "x", 2021)], config)
    assert first["late-record-drop-total"] == 1
    assert second["late-record-drop-total"] == 2
    assert second["record-lateness-max"] == 17
    assert second["record-lateness-avg"] == pytest.approx((0 + 15 + 17 + 0) / 4)
    # Per second of stream time the node has seen (20 ms .. 2021 ms: 2 s).
    assert second["late-record-drop-rate"] == pytest.approx(2 / 2.001)
