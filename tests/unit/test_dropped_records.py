"""``dropped-records`` wherever Kafka Streams counts it (``TaskMetrics.droppedRecordsSensor``
in Kafka's streams/src/main/java), counted by the node that drops the record, through the
TopologyTestDriver; and nowhere Kafka does not count (records an operator skips by design).

Kafka's sites and lakestate's nodes:
- KStreamAggregate / KStreamReduce: null key or null value (StreamAggregate)
- KStreamWindowAggregate / KStreamSessionWindowAggregate: null key, and a record for a
  closed window (late) (the windowed aggregations)
- KTableSource: null key (TableSource)
- RocksDBVersionedStore: a put or delete beyond history retention (every writer of a
  versioned store: table sources, materialized filter/map_values, a join's merge)
- KStreamKTableJoinProcessor: null value, null join key (inner), a keyed record whose
  global-table key selector returns null (left too)
- KTableKTable*Join: null key, an out-of-order change of a versioned side (KIP-914)
- ProcessorNode's processing exception handler continuing (tests/unit/test_exception_handlers.py)
Kafka's RecordQueue (negative timestamps, which lakestate refuses), RecordCollector
(serialization and production handlers) and stream-stream / foreign-key joins have no
counterpart in lakestate.
"""

from __future__ import annotations

import re
from datetime import timedelta

from lakestate import Materialized, SessionWindows, StreamsBuilder, TimeWindows
from lakestate.testing.driver import TopologyTestDriver

MS = timedelta(milliseconds=1)


def _pipe(driver, topic, records):
    source = driver.create_input_topic(topic)
    for key, value, ts in records:
        source.pipe_input(key, value, timestamp=ts)


def dropped_by(driver) -> dict[str, float]:
    """``dropped-records`` per node, by node kind (the node name without its number)."""
    nodes = driver.scoped_metrics().get("nodes", {})
    found: dict[str, float] = {}
    for node, named in nodes.items():
        if named.get("dropped-records"):
            kind = re.sub(r"-\d+$", "", node)
            found[kind] = found.get(kind, 0) + named["dropped-records"]
    return found


def test_a_stream_aggregation_drops_null_keys_and_values():
    b = StreamsBuilder()
    b.stream("in").group_by_key().reduce(lambda a, v: a + v).to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "in", [("a", 1, 1), (None, 2, 2), ("a", None, 3), ("a", 4, 4)])
        assert dropped_by(d) == {"KSTREAM-REDUCE": 2}
        assert d.metrics()["dropped-records"] == 2


def test_a_time_window_aggregation_drops_null_keys_and_late_records():
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(10 * MS, 0 * MS)
    ).count().to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "in", [("a", "x", 5), (None, "x", 6), ("a", "x", 25), ("a", "x", 3)])
        assert dropped_by(d) == {"KSTREAM-AGGREGATE": 2}
        assert d.metrics()["late-record-drop-total"] == 1


def test_a_session_aggregation_drops_null_keys_and_late_records():
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(
        SessionWindows.of_inactivity_gap_and_grace(5 * MS, 0 * MS)
    ).count().to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "in", [("a", "x", 100), (None, "x", 101), ("b", "x", 200), ("a", "x", 50)])
        assert dropped_by(d) == {"KSTREAM-AGGREGATE": 2}


def test_a_table_source_drops_null_keys():
    b = StreamsBuilder()
    b.table("in", Materialized.as_("t")).to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "in", [(None, "v", 1), ("a", "v", 2)])
        assert dropped_by(d) == {"KTABLE-SOURCE": 1}


def test_versioned_stores_drop_puts_beyond_history_retention_wherever_written():
    """Kafka counts a put or delete older than stream time - history retention in the
    versioned store itself, so every node writing one counts it: the table source, a
    versioned filter's materialization, a table-table join's versioned result."""
    retention = Materialized.as_versioned
    b = StreamsBuilder()
    source = b.table("in", retention("src", 10 * MS))
    source.filter(lambda k, v: True, retention("kept", 20 * MS)).to_stream().to("kept-out")
    other = b.table("other", Materialized.as_("other-store"))
    source.join(other, lambda a, c: f"{a}|{c}", materialized=retention("joined", 5 * MS))
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "other", [("a", "o", 0), ("b", "o", 0)])
        # After stream time 100: 85 is beyond the source's 10 ms (85 < 90); 92 passes the
        # source and the filter (>= 80) and is beyond the joined store's 5 ms (92 < 95).
        _pipe(d, "in", [("a", "v1", 100), ("a", "v0", 85), ("b", "w", 92)])
        assert dropped_by(d) == {"KTABLE-SOURCE": 1, "KTABLE-MERGE": 1}

    b = StreamsBuilder()
    src = b.table("in", retention("src", 50 * MS))
    src.filter(lambda k, v: True, retention("kept", 10 * MS)).to_stream().to("kept-out")
    with TopologyTestDriver(b.build()) as d:
        # 60 passes the source (>= 50) and is beyond the filter's 10 ms (< 90).
        _pipe(d, "in", [("a", "v1", 100), ("b", "w", 60)])
        assert dropped_by(d) == {"KTABLE-FILTER": 1}


def test_a_stream_table_join_drops_null_values_and_null_join_keys():
    for left in (False, True):
        b = StreamsBuilder()
        table = b.table("t", Materialized.as_("t-store"))
        orders = b.stream("in")
        (orders.left_join if left else orders.join)(table, lambda o, t: (o, t)).to("out")
        with TopologyTestDriver(b.build()) as d:
            _pipe(d, "in", [("a", None, 1), (None, "o", 2), ("b", "o", 3)])
            # Kafka: a left join joins a null-key record with null; an inner join drops it.
            # A missing table row is not a drop for either.
            assert dropped_by(d) == ({"KSTREAM-LEFTJOIN": 1} if left else {"KSTREAM-JOIN": 2})
            assert len(d.create_output_topic("out").read_records_to_list()) == (2 if left else 0)


def test_a_global_table_join_drops_keyed_records_whose_selected_key_is_null():
    for left in (False, True):
        b = StreamsBuilder()
        countries = b.global_table("countries")
        orders = b.stream("in")
        (orders.left_join if left else orders.join)(
            countries, lambda k, v: v.get("c"), lambda o, c: (o["id"], c)
        ).to("out")
        with TopologyTestDriver(b.build()) as d:
            _pipe(d, "countries", [("fr", "France", 1)])
            _pipe(d, "in", [("k1", {"id": 1, "c": None}, 2), (None, {"id": 2, "c": None}, 3)])
            out = [r.value for r in d.create_output_topic("out").read_records_to_list()]
            if left:  # the null-key record is joined with null; the keyed one dropped
                assert out == [(2, None)] and dropped_by(d) == {"KSTREAM-LEFTJOIN": 1}
            else:
                assert out == [] and dropped_by(d) == {"KSTREAM-JOIN": 2}


def test_a_table_table_join_drops_out_of_order_changes_of_a_versioned_side():
    b = StreamsBuilder()
    a = b.table("a", Materialized.as_versioned("a-store", timedelta(seconds=1)))
    c = b.table("c", Materialized.as_("c-store"))
    a.join(c, lambda x, y: f"{x}|{y}").to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "c", [("k", "c", 0)])
        _pipe(d, "a", [("k", "a5", 5), ("k", "a1", 1)])
        assert dropped_by(d) == {"KTABLE-JOINTHIS": 1}


def test_a_table_regrouping_skips_null_keys_and_values_uncounted():
    """Kafka's KTableRepartitionMap skips pairs with a null key or value without counting
    them, and the aggregation sees nothing of them (no spurious update)."""
    b = StreamsBuilder()
    b.table("in", Materialized.as_("t")).group_by(lambda k, v: (v.get("g"), v.get("n"))).aggregate(
        lambda: 0, lambda k, v, agg: agg + v, lambda k, v, agg: agg - v
    ).to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(
            d,
            "in",
            [("a", {"g": "x", "n": 1}, 1), ("b", {"g": None, "n": 2}, 2), ("c", {"g": "y"}, 3)],
        )
        out = [(r.key, r.value) for r in d.create_output_topic("out").read_records_to_list()]
        assert out == [("x", 1)]
        assert d.metrics().get("dropped-records", 0) == 0


def test_dropped_records_add_up_over_commits_in_the_driver():
    b = StreamsBuilder()
    b.table("in", Materialized.as_("t")).to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        for i in range(3):
            _pipe(d, "in", [(None, "v", i)])
        assert d.metrics()["dropped-records"] == 3
