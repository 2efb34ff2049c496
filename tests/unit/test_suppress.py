"""``KTable.suppress`` (KIP-328) through the test driver: the KIP's examples, each
BufferConfig and emit strategy, grace boundaries, tombstones, the forwarded change, the
shut-down error, restarts, metrics and the DSL's checks.

Windowed tables come from a table whose keys are piped as ``Windowed`` objects, wrapped in
a KTable that knows its windows' grace (what a windowed aggregation will produce).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import (
    BufferConfig,
    KTable,
    ProcessingException,
    StreamsBuilder,
    StreamsException,
    Suppressed,
    TopologyException,
    Window,
    Windowed,
)
from lakestate.dsl.builder import GraphBuilder
from lakestate.dsl.suppressed import add_suppression
from lakestate.processors.suppress import (
    COUNT_AVG,
    COUNT_CURRENT,
    COUNT_MAX,
    EMIT_RATE,
    EMIT_TOTAL,
    SIZE_CURRENT,
    SIZE_MAX,
)
from lakestate.state import processor_metadata
from lakestate.testing.driver import TestRecord, TopologyTestDriver

BACKENDS = {"memory": {}, "rocksdb": {"lakestate.state.backend": "rocksdb"}}
MS = timedelta(milliseconds=1)
# Every kind of buffer that never emits early, in memory and on disk.
STRICT = {
    "unbounded": BufferConfig.unbounded(),
    "shut_down": BufferConfig.max_records(1000).shut_down_when_full(),
    "spill": BufferConfig.max_records(1).spill_to_disk_when_full(),
}


def time_limited(ms: int, config: BufferConfig, name: str | None = None):
    b = StreamsBuilder()
    suppressed = Suppressed.until_time_limit(ms * MS, config)
    if name:
        suppressed = suppressed.with_name(name)
    b.table("in").suppress(suppressed).to_stream().to("out")
    return b.build()


def final_results(grace_ms: int, config: BufferConfig):
    b = StreamsBuilder()
    table = b.table("in")
    windowed = KTable(
        table._graph, table.node_name, table.query_store_name, window_grace_ms=grace_ms
    )
    windowed.suppress(Suppressed.until_window_closes(config)).to_stream().to("out")
    return b.build()


def W(key, start, end):  # noqa: N802 - reads like the KIP's notation
    return Windowed(key, Window(start, end))


def run(topology, records, config=None):
    """Pipe (key, value, ts) records one by one; returns the output as (key, value, ts)."""
    with TopologyTestDriver(topology, config or {}) as d:
        source = d.create_input_topic("in")
        for key, value, ts in records:
            source.pipe_input(key, value, timestamp=ts)
        return [
            (r.key, r.value, r.timestamp)
            for r in d.create_output_topic("out").read_records_to_list()
        ]


@pytest.fixture(params=list(BACKENDS))
def backend(request):
    return BACKENDS[request.param]


@pytest.fixture(params=["memory", "disk"])
def strict(request):
    """A strict unbounded buffer held in memory, or on disk."""
    if request.param == "memory":
        return BufferConfig.unbounded()
    return BufferConfig.unbounded().spill_to_disk_when_full()


# -- the KIP's examples ------------------------------------------------------------------


def test_kip_emit_after_2ms(backend, strict):
    out = run(
        time_limited(2, strict),
        [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 3)],
        backend,
    )
    # Stream time 3: A (buffered at 0, updated at 1) is due; B (2) and C (3) are not.
    assert out == [("A", "x", 1)]


def test_kip_late_events_are_evicted_at_once(backend, strict):
    out = run(time_limited(2, strict), [("A", "w", 3), ("A", "x", 1), ("B", "y", 1)], backend)
    # A keeps the buffer time of its first update (3) although its timestamp is now 1 ...
    assert out == [("B", "y", 1)]
    # ... so it leaves at stream time 5, with its latest value and timestamp.
    out = run(
        time_limited(2, strict),
        [("A", "w", 3), ("A", "x", 1), ("B", "y", 1), ("C", "z", 5)],
        backend,
    )
    assert out == [("B", "y", 1), ("A", "x", 1)]


def test_kip_key_limit_evicts_the_oldest(backend):
    config = BufferConfig.max_records(2)
    records = [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 3)]
    assert run(time_limited(1000, config), records, backend) == [("A", "x", 1)]
    # C is the newest record but the oldest by buffer time when the limit is passed. (The
    # KIP's table starts A at 0 and shows it at 1: by its prose, followed here, A keeps the
    # buffer time of its first update, 0, and would tie with C; so A starts at 1 here.)
    records = [("A", "x", 1), ("B", "y", 2), ("C", "z", 0)]
    assert run(time_limited(1000, config), records, backend) == [("C", "z", 0)]
    # On a tie of buffer times the least key leaves first.
    records = [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 0)]
    assert run(time_limited(1000, config), records, backend) == [("A", "x", 1)]


def _entry_size(key, value, ts, prior=None):
    """The bytes an entry takes in the buffer: its stored key and value."""
    from lakestate.state.keys import encode_key
    from lakestate.state.serde import encode_value

    return 1 + len(encode_key(key)) + len(encode_value([ts, ts, value, prior, None]))


def test_kip_byte_limit_evicts_oldest_until_it_fits(backend):
    a, b = _entry_size("A", "x", 0), _entry_size("B", "y", 1)
    limit = a + b  # A and B fit; a big C pushes both out, oldest first
    records = [("A", "x", 0), ("B", "y", 1), ("C", "zzz", 2)]
    assert run(time_limited(1000, BufferConfig.max_bytes(limit)), records, backend) == [
        ("A", "x", 0),
        ("B", "y", 1),
    ]
    # A record too big for the buffer on its own leaves at once, after the older ones.
    records = [("A", "x", 0), ("B", "y", 1), ("C", "z" * (limit + 1), 2)]
    assert run(time_limited(1000, BufferConfig.max_bytes(limit)), records, backend) == [
        ("A", "x", 0),
        ("B", "y", 1),
        ("C", "z" * (limit + 1), 2),
    ]


def test_with_max_records_and_bytes_combine(backend):
    config = BufferConfig.max_records(2).with_max_bytes(10_000)
    records = [("A", 1, 0), ("B", 2, 1), ("C", 3, 2)]
    assert run(time_limited(1000, config), records, backend) == [("A", 1, 0)]
    tight = BufferConfig.max_records(10).with_max_bytes(_entry_size("A", 1, 0))
    assert run(time_limited(1000, tight), records, backend) == [("A", 1, 0), ("B", 2, 1)]


# -- time limits --------------------------------------------------------------------------


def test_time_limit_zero_forwards_everything(backend):
    records = [("A", 1, 5), ("A", 2, 3), ("B", 3, 9), ("A", None, 1)]
    assert run(time_limited(0, BufferConfig.unbounded()), records, backend) == records


def test_an_update_keeps_the_buffer_time(backend, strict):
    topology = time_limited(10, strict)
    records = [("A", 1, 0), ("A", 2, 5), ("B", 0, 9)]
    assert run(topology, records, backend) == []
    # Due at 0 + 10, not 5 + 10: the timer is not restarted by the update.
    assert run(topology, [*records, ("B", 0, 10)], backend) == [("A", 2, 5)]


def test_time_limit_boundary_is_inclusive(backend, strict):
    topology = time_limited(10, strict)
    assert run(topology, [("A", 1, 100), ("B", 1, 109)], backend) == []
    assert run(topology, [("A", 1, 100), ("B", 1, 110)], backend) == [("A", 1, 100)]


def test_out_of_order_records_leave_in_buffer_time_order(backend, strict):
    records = [("C", 3, 30), ("A", 1, 10), ("B", 2, 20), ("D", 4, 100)]
    # At stream time 100 with a limit of 50 everything but D is due: by buffer time.
    out = run(time_limited(50, strict), records, backend)
    assert out == [("A", 1, 10), ("B", 2, 20), ("C", 3, 30)]


def test_time_limit_forwards_tombstones(backend):
    out = run(
        time_limited(5, BufferConfig.unbounded()),
        [("A", 1, 0), ("A", None, 1), ("B", 1, 9)],
        backend,
    )
    assert out == [("A", None, 1)]


def test_emit_early_drops_nothing_it_is_not_told_to(backend):
    # An eager buffer of 1 forwards the previous key whenever another one arrives.
    records = [("A", 1, 0), ("A", 2, 1), ("B", 3, 2), ("A", 4, 3)]
    out = run(time_limited(1000, BufferConfig.max_records(1)), records, backend)
    assert out == [("A", 2, 1), ("B", 3, 2)]


# -- final results ------------------------------------------------------------------------


def test_final_results_at_the_grace_boundary(backend, strict):
    topology = final_results(5, strict)
    first = [(W("a", 0, 10), 1, 3), (W("a", 0, 10), 2, 8)]
    # The window [0, 10) with grace 5 closes at stream time 15, not before.
    assert run(topology, [*first, (W("a", 10, 20), 1, 14)], backend) == []
    out = run(topology, [*first, (W("a", 10, 20), 1, 15)], backend)
    assert out == [(W("a", 0, 10), 2, 8)]


def test_final_results_with_zero_grace(backend, strict):
    topology = final_results(0, strict)
    # Buffered until the window end even with no grace ...
    assert run(topology, [(W("a", 0, 10), 1, 9)], backend) == []
    # ... and a record at the window end closes it at once.
    assert run(topology, [(W("a", 0, 10), 1, 10)], backend) == [(W("a", 0, 10), 1, 10)]


def test_final_results_drop_tombstones(backend, strict):
    records = [(W("a", 0, 10), 1, 1), (W("a", 0, 10), None, 2), (W("b", 0, 10), 5, 3)]
    out = run(final_results(0, strict), [*records, (W("c", 20, 30), 1, 25)], backend)
    assert out == [(W("b", 0, 10), 5, 3)]


def test_final_results_one_per_window_in_window_end_order(backend, strict):
    records = [
        (W("a", 10, 20), 1, 12),
        (W("b", 0, 10), 1, 5),
        (W("a", 0, 10), 1, 6),
        (W("a", 0, 10), 2, 7),
        (W("a", 10, 20), 2, 15),  # stream time 15 >= 10 + 3: the windows ending at 10 close
        (W("a", 0, 10), 3, 8),  # late: buffered and emitted at once (upstream drops these)
        (W("z", 100, 110), 1, 100),
    ]
    out = run(final_results(3, strict), records, backend)
    assert out == [
        (W("a", 0, 10), 2, 7),
        (W("b", 0, 10), 1, 5),
        (W("a", 0, 10), 3, 8),
        (W("a", 10, 20), 2, 15),
    ]


@pytest.mark.parametrize("name", list(STRICT))
def test_every_strict_config_gives_the_same_final_results(name, backend):
    windows = (100, 110, 120)
    records = [(W(k, s, s + 10), v, 100 + v) for v in range(3) for k in "ba" for s in windows]
    records.append((W("z", 200, 210), 0, 200))
    # By window end, then by key.
    expected = [(W(k, s, s + 10), 2, 102) for s in windows for k in "ab"]
    assert run(final_results(1, STRICT[name]), records, backend) == expected


# -- what is forwarded ------------------------------------------------------------------------


def test_forwards_the_prior_value_of_the_first_buffered_update():
    """A downstream table aggregation subtracts the old value it is given: suppress gives
    the value the key had before its first buffered update (what was last forwarded)."""
    b = StreamsBuilder()
    (
        b.table("in")
        .suppress(Suppressed.until_time_limit(10 * MS, BufferConfig.unbounded()))
        .group_by(lambda k, v: ("total", v))
        .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v)
        .to_stream()
        .to("out")
    )
    records = [("B", 10, 0), ("A", 1, 20), ("A", 2, 21), ("C", 0, 40)]
    out = run(b.build(), records)
    # B (10) at stream time 20; A's 1 -> 2 at 40 as Change(2, None): the total is 12.
    assert [v for _, v, _ in out] == [10, 12]


def test_headers_and_timestamp_of_the_latest_update_are_forwarded():
    with TopologyTestDriver(time_limited(5, BufferConfig.unbounded())) as d:
        source = d.create_input_topic("in")
        source.pipe_input("A", 1, timestamp=0, headers={"h": 1})
        source.pipe_input("A", 2, timestamp=2, headers={"h": 2})
        source.pipe_input("B", 0, timestamp=5)
        assert d.create_output_topic("out").read_records_to_list() == [
            TestRecord("A", 2, 2, {"h": 2})
        ]


# -- shut down when full ------------------------------------------------------------------


@pytest.mark.parametrize("config_name", ["records", "bytes"])
def test_shut_down_when_full_names_the_buffer_and_commits_nothing(config_name, backend):
    if config_name == "records":
        config, bound = BufferConfig.max_records(1).shut_down_when_full(), "max_records 1"
    else:
        limit = _entry_size("A", 1, 0)
        config, bound = BufferConfig.max_bytes(limit).shut_down_when_full(), f"max_bytes {limit}"
    topology = time_limited(100, config, name="limited")
    with TopologyTestDriver(topology, backend) as d:
        source = d.create_input_topic("in")
        source.pipe_input("A", 1, timestamp=0)
        with pytest.raises(ProcessingException) as raised:
            source.pipe_input("B", 1, timestamp=1)
        message = str(raised.value)
        assert "'limited-store'" in message and bound in message
        assert "shut_down_when_full" in message and "nothing of this batch is committed" in message
        # The record's effects were rolled back: the upstream table and the buffer.
        assert d.get_key_value_store("in-STATE-STORE-0000000001").get("B") is None
        buffer = d.get_state_store("limited-store")
        assert [r.key for r in buffer.all()] == ["A"]
        committed = processor_metadata.read(d._tasks[0].store)
        assert committed["limited-store.stream_time"] == 0
        assert d.metrics()[COUNT_CURRENT] == 1
        # The task carries on from the committed buffer: A is due at 100.
        source.pipe_input("A", 2, timestamp=100)
        assert d.create_output_topic("out").read_records_to_list() == [TestRecord("A", 2, 100)]


def test_unbounded_and_spill_never_emit_early(backend):
    records = [(k, i, i) for i, k in enumerate("ABCDEFGHIJ")]
    for config in (BufferConfig.unbounded(), BufferConfig.max_records(2).spill_to_disk_when_full()):
        assert run(time_limited(1000, config), records, backend) == []


# -- durability -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config", [BufferConfig.unbounded(), BufferConfig.unbounded().spill_to_disk_when_full()]
)
def test_buffer_and_stream_time_survive_a_restart(config, tmp_path):
    settings = {"lakestate.state.backend": "rocksdb", "state.dir": str(tmp_path)}
    topology = time_limited(10, config)
    with TopologyTestDriver(topology, settings) as d:
        d.create_input_topic("in").pipe_input("A", 1, timestamp=100)
        d.create_input_topic("in").pipe_input("B", 1, timestamp=105)
        assert d.create_output_topic("out").is_empty()
        emitted_before = d.metrics()[EMIT_TOTAL] if EMIT_TOTAL in d.metrics() else 0
    with TopologyTestDriver(topology, settings) as d:
        # The observed stream time (105) was committed: a record at 0 does not lower it,
        # and one at 110 makes A due (100 + 10), as without the restart.
        d.create_input_topic("in").pipe_input("C", 1, timestamp=0)
        out = d.create_output_topic("out").read_records_to_list()
        assert out == [TestRecord("C", 1, 0)]  # 0 <= 105 - 10: due at once
        d.create_input_topic("in").pipe_input("D", 1, timestamp=110)
        assert d.create_output_topic("out").read_records_to_list() == [TestRecord("A", 1, 100)]
        assert d.metrics()[EMIT_TOTAL] == emitted_before + 2
        assert d.metrics()[COUNT_MAX] == 2  # sampled after each record's evictions


def test_wall_clock_time_drives_nothing():
    with TopologyTestDriver(time_limited(10, BufferConfig.unbounded())) as d:
        d.create_input_topic("in").pipe_input("A", 1, timestamp=0)
        d.advance_wall_clock_time(timedelta(hours=1))
        d.advance_wall_clock_time(timedelta(seconds=5))
        d.create_input_topic("in").pipe_input("B", 1, timestamp=1)
        assert d.create_output_topic("out").is_empty()
        with pytest.raises(Exception, match="negative"):
            d.advance_wall_clock_time(timedelta(milliseconds=-1))
        # Durations are timedeltas everywhere: an int is not taken as milliseconds.
        with pytest.raises(StreamsException, match=r"timedelta\(milliseconds=5000\)"):
            d.advance_wall_clock_time(5_000)


# -- metrics ------------------------------------------------------------------------------------


def test_buffer_metrics(backend):
    with TopologyTestDriver(time_limited(2, BufferConfig.unbounded()), backend) as d:
        source = d.create_input_topic("in")
        for key, ts in (("A", 0), ("A", 1), ("B", 2), ("C", 3)):
            source.pipe_input(key, "v", timestamp=ts)
        m = d.metrics()
        # Counts after each record: 1, 1, 1 (A, buffered at 0, left at 2), 2.
        assert m[COUNT_CURRENT] == 2 and m[COUNT_MAX] == 2
        assert m[COUNT_AVG] == pytest.approx(1.25)
        assert (
            m[SIZE_CURRENT]
            == d.get_state_store("KTABLE-SUPPRESS-STATE-STORE-0000000004").buffer_size()
        )
        assert m[SIZE_MAX] >= m[SIZE_CURRENT] > 0
        assert m[EMIT_TOTAL] == 1
        assert m[EMIT_RATE] == pytest.approx(
            1.0
        )  # one record in (at least) a second of stream time


# -- the DSL ------------------------------------------------------------------------------------


def test_buffer_configs_are_immutable_and_validated():
    eager = BufferConfig.max_records(5)
    assert not eager.is_strict and eager.when_full == "emit_early"
    strict = eager.shut_down_when_full()
    assert strict.is_strict and eager.when_full == "emit_early"
    assert strict.with_max_bytes(7).record_limit == 5
    assert BufferConfig.max_bytes(3).spill_to_disk_when_full().is_strict
    assert BufferConfig.max_records(3).with_no_bound() == BufferConfig.unbounded()
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(TopologyException, match="max_records"):
            BufferConfig.max_records(bad)
    with pytest.raises(TopologyException, match="strict"):
        Suppressed.until_window_closes(BufferConfig.max_records(3))
    with pytest.raises(TopologyException, match="strict"):
        Suppressed.until_window_closes(BufferConfig.unbounded().emit_early_when_full())
    with pytest.raises(TopologyException, match="BufferConfig"):
        Suppressed.until_time_limit(MS, None)
    with pytest.raises(TopologyException, match="negative"):
        Suppressed.until_time_limit(-MS, BufferConfig.unbounded())
    with pytest.raises(TopologyException, match="name"):
        Suppressed.until_time_limit(MS, BufferConfig.unbounded()).with_name("a b")


def test_until_window_closes_needs_a_windowed_table():
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="windowed"):
        b.table("in").suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    b = StreamsBuilder()
    counts = b.stream("s").group_by_key().count()
    with pytest.raises(TopologyException, match="windowed"):
        counts.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with pytest.raises(TopologyException, match="Suppressed"):
        counts.suppress(BufferConfig.unbounded())


def test_suppress_on_a_versioned_table_is_refused():
    graph = GraphBuilder()
    graph.add_source("src", ["in"])
    with pytest.raises(TopologyException, match="versioned"):
        add_suppression(
            graph,
            "src",
            Suppressed.until_time_limit(MS, BufferConfig.unbounded()),
            None,
            "versioned",
        )


def test_names_follow_kafka():
    topology = time_limited(1, BufferConfig.unbounded())
    assert "KTABLE-SUPPRESS-0000000003" in topology.nodes
    assert topology.stores["KTABLE-SUPPRESS-STATE-STORE-0000000004"].kind == "suppression_buffer"
    named = time_limited(1, BufferConfig.unbounded(), name="rate-limit")
    assert named.nodes["rate-limit"].stores == ["rate-limit-store"]
    spill = time_limited(1, BufferConfig.unbounded().spill_to_disk_when_full())
    assert spill.stores["KTABLE-SUPPRESS-STATE-STORE-0000000004"].options == {"spill_to_disk": True}
    b = StreamsBuilder()
    t = b.table("in")
    t.suppress(Suppressed.until_time_limit(MS, BufferConfig.unbounded()).with_name("x"))
    with pytest.raises(TopologyException, match="already exists"):
        t.suppress(Suppressed.until_time_limit(MS, BufferConfig.unbounded()).with_name("x"))


def test_count_then_suppress_windowed_grace_is_kept():
    b = StreamsBuilder()
    table = b.table("in")
    windowed = KTable(table._graph, table.node_name, None, window_grace_ms=7)
    assert (
        windowed.suppress(Suppressed.until_window_closes(BufferConfig.unbounded())).window_grace_ms
        == 7
    )


def test_rate_limited_count(backend):
    """until_time_limit on a count: at most one update per key per limit, the latest."""
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .count()
        .suppress(Suppressed.until_time_limit(10 * MS, BufferConfig.unbounded()))
        .to_stream()
        .to("out")
    )
    records = [("a", "x", t) for t in (0, 3, 6, 9)] + [
        ("b", "x", 10),
        ("a", "x", 12),
        ("b", "x", 30),
    ]
    out = run(b.build(), records, backend)
    # b@10 makes a (buffered at 0) due; b@30 first updates b (buffered at 10), then both
    # buffered keys are due: b (10) before a (12).
    assert out == [("a", 4, 9), ("b", 2, 30), ("a", 5, 12)]


def test_kip_final_window_results_of_a_windowed_count(backend, strict):
    """The KIP's example: alert on users with fewer than 3 events in an hour, waiting 10
    minutes after the hour for late events; one final count per user and window."""
    from lakestate import TimeWindows

    hour, minute = 3_600_000, 60_000
    b = StreamsBuilder()
    (
        b.stream("events")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(minutes=10)))
        .count()
        .suppress(Suppressed.until_window_closes(strict))
        .to_stream()
        .filter(lambda key, count: count < 3)
        .to("alerts")
    )
    with TopologyTestDriver(b.build(), backend) as d:
        events = d.create_input_topic("events")
        for user, ts in [
            ("ann", 5),
            ("bob", 10),
            ("ann", 20),
            ("bob", 30),
            ("bob", 40),
            ("ann", 65),
        ]:
            events.pipe_input(user, "e", timestamp=ts * minute)
        events.pipe_input("ann", "late", timestamp=55 * minute)  # within the grace: counted
        assert d.create_output_topic("alerts").is_empty()
        events.pipe_input("cat", "e", timestamp=hour + 10 * minute - 1)
        assert d.create_output_topic("alerts").is_empty()  # the first hour closes at 70 min
        events.pipe_input("cat", "e", timestamp=hour + 10 * minute)
        alerts = d.create_output_topic("alerts").read_records_to_list()
        # bob had 3 events; ann 3 (one late but within grace): no alert for the first hour.
        assert alerts == []
        events.pipe_input("dan", "e", timestamp=3 * hour)  # closes the second hour
        alerts = d.create_output_topic("alerts").read_key_values_to_list()
        assert alerts == [
            (Windowed("ann", Window(hour, 2 * hour)), 1),
            (Windowed("cat", Window(hour, 2 * hour)), 2),
        ]
