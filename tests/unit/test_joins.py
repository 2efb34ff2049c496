"""Joins through the TopologyTestDriver: stream-table (unversioned and versioned, KIP-914),
stream-global-table, and table-table (inner, left, outer), with Kafka 4's rules for null
keys and values; repartition on a key change; co-partitioning at build() and at run time.
Kafka's own answers for the same topologies are in tests/conformance (join groups)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import Materialized, StreamsBuilder, TopologyException
from lakestate.testing.driver import TestRecord, TopologyTestDriver
from lakestate.topology.copartition import CopartitionGroup, check, external_count

BACKENDS = [{}, {"lakestate.state.backend": "rocksdb"}]


@pytest.fixture(params=BACKENDS, ids=["memory", "rocksdb"])
def config(request):
    return dict(request.param)


def pair(left, right):
    return f"{left}|{right}"


def _pipe(driver, topic, records):
    source = driver.create_input_topic(topic)
    for key, value, ts in records:
        source.pipe_input(key, value, timestamp=ts)


def _out(driver, topic="out"):
    return [
        (r.key, r.value, r.timestamp)
        for r in driver.create_output_topic(topic).read_records_to_list()
    ]


def _stream_table(left: bool, versioned: bool, retention_ms: int = 100):
    b = StreamsBuilder()
    materialized = (
        Materialized.as_versioned("prices", timedelta(milliseconds=retention_ms))
        if versioned
        else Materialized.as_("prices")
    )
    table = b.table("prices", materialized)
    orders = b.stream("orders")
    (orders.left_join if left else orders.join)(table, pair).to("out")
    return b.build()


# -- stream-table --------------------------------------------------------------------------


def test_inner_join_drops_records_without_a_row_and_joins_the_latest_row(config):
    with TopologyTestDriver(_stream_table(False, False), config) as d:
        _pipe(d, "orders", [("a", "o1", 1)])  # no row yet: dropped, not counted
        _pipe(d, "prices", [("a", "p5", 5), ("a", "p3", 3)])  # offset order: p3 is latest
        _pipe(d, "orders", [("a", "o2", 4), ("b", "o3", 6)])
        assert _out(d) == [("a", "o2|p3", 4)]
        assert d.metrics().get("dropped-records", 0) == 0


def test_a_table_update_alone_emits_nothing(config):
    with TopologyTestDriver(_stream_table(True, False), config) as d:
        _pipe(d, "prices", [("a", "p1", 1), ("a", None, 2), ("a", "p3", 3)])
        assert _out(d) == []


def test_left_join_forwards_none_for_a_missing_row_and_after_a_delete(config):
    with TopologyTestDriver(_stream_table(True, False), config) as d:
        _pipe(d, "orders", [("a", "o1", 1)])
        _pipe(d, "prices", [("a", "p2", 2)])
        _pipe(d, "orders", [("a", "o2", 3)])
        _pipe(d, "prices", [("a", None, 4)])
        _pipe(d, "orders", [("a", "o3", 5)])
        assert _out(d) == [("a", "o1|None", 1), ("a", "o2|p2", 3), ("a", "o3|None", 5)]


@pytest.mark.parametrize("left", [False, True], ids=["inner", "left"])
def test_null_values_are_dropped_and_null_keys_dropped_by_inner_joins_only(config, left):
    """Kafka 4: a null value is never joined; a null key is "no row" to a left join."""
    with TopologyTestDriver(_stream_table(left, False), config) as d:
        _pipe(d, "prices", [("a", "p1", 1)])
        _pipe(d, "orders", [("a", None, 2), (None, "o", 3)])
        expected = [(None, "o|None", 3)] if left else []
        assert _out(d) == expected
        assert d.metrics()["dropped-records"] == (1 if left else 2)


@pytest.mark.parametrize("left", [False, True], ids=["inner", "left"])
def test_a_versioned_table_is_read_as_of_the_records_timestamp(config, left):
    """The table's updates arrive out of order; each order joins the version valid at its
    own timestamp (an unversioned table would give the latest by offset)."""
    with TopologyTestDriver(_stream_table(left, True), config) as d:
        _pipe(d, "prices", [("a", "p10", 10), ("a", "p30", 30), ("a", "p20", 20)])
        _pipe(d, "orders", [("a", "o", ts) for ts in (5, 10, 19, 20, 29, 30, 99)])
        joined = [
            ("a", f"o|p{v}", ts)
            for ts, v in ((10, 10), (19, 10), (20, 20), (29, 20), (30, 30), (99, 30))
        ]
        assert _out(d) == ([("a", "o|None", 5)] if left else []) + joined


def test_an_unversioned_table_gives_its_latest_row_by_offset(config):
    with TopologyTestDriver(_stream_table(False, False), config) as d:
        _pipe(d, "prices", [("a", "p10", 10), ("a", "p30", 30), ("a", "p20", 20)])
        _pipe(d, "orders", [("a", "o", 5), ("a", "o", 25)])
        assert _out(d) == [("a", "o|p20", 5), ("a", "o|p20", 25)]


@pytest.mark.parametrize("left", [False, True], ids=["inner", "left"])
def test_beyond_history_retention_inner_drops_and_left_joins_none(config, left):
    """KIP-914: a lookup older than the history retention finds nothing (unless the key's
    latest version was already valid then), handled as any other miss."""
    with TopologyTestDriver(_stream_table(left, True, retention_ms=10), config) as d:
        _pipe(d, "prices", [("a", "p0", 0), ("a", "p5", 5), ("b", "q0", 0), ("c", "x", 100)])
        # Stream time 100, retention 10: ts 50 is beyond it. "a"'s latest (p5, valid from 5)
        # still answers; "b"'s only version answers too; a time before any version does not.
        _pipe(d, "orders", [("a", "o", 50), ("b", "o", 50), ("a", "o", 3), ("a", "o", 95)])
        got = _out(d)
    expected = [("a", "o|p5", 50), ("b", "o|q0", 50)]
    expected += [("a", "o|None", 3)] if left else []
    expected += [("a", "o|p5", 95)]
    assert got == expected


def test_a_key_change_before_a_join_repartitions(config):
    b = StreamsBuilder()
    table = b.table("users")
    b.stream("clicks").select_key(lambda k, v: v["user"]).join(
        table, lambda click, user: (click["page"], user)
    ).to("out")
    topology = b.build()
    repartition = [s for s in topology.subtopologies if s.repartition_sources]
    assert [s.repartition_sources for s in repartition] == [
        ("KSTREAM-JOIN-0000000005-repartition",)
    ]
    assert "users" in repartition[0].source_topics  # read in the table's tasks
    with TopologyTestDriver(topology, config) as d:
        _pipe(d, "users", [("u1", "Ann", 1)])
        _pipe(d, "clicks", [("x", {"user": "u1", "page": "home"}, 2)])
        # Read through the repartition topic, now keyed by user.
        assert _out(d) == [("u1", ("home", "Ann"), 2)]


def test_without_a_key_change_no_repartition(config):
    topology = _stream_table(False, False)
    assert len(topology.subtopologies) == 1
    assert not topology.subtopologies[0].repartition_sources
    [group] = topology.copartition_groups
    assert (group.left, group.right) == (("orders",), ("prices",))


def test_joining_a_filtered_table_reads_the_filtered_rows(config):
    """An unmaterialized table gets a store for the join (Kafka reads it through value
    getters): rows the filter removes are not joined."""
    b = StreamsBuilder()
    table = b.table("prices").filter(lambda k, v: v != "hidden")
    b.stream("orders").left_join(table, pair).to("out")
    with TopologyTestDriver(b.build(), config) as d:
        _pipe(d, "prices", [("a", "p1", 1), ("b", "hidden", 1)])
        _pipe(d, "orders", [("a", "o", 2), ("b", "o", 2)])
        _pipe(d, "prices", [("a", "hidden", 3)])
        _pipe(d, "orders", [("a", "o", 4)])
        assert _out(d) == [("a", "o|p1", 2), ("b", "o|None", 2), ("a", "o|None", 4)]


def test_an_unmaterialized_versioned_table_cannot_be_joined_as_of():
    b = StreamsBuilder()
    versioned = b.table("prices", Materialized.as_versioned("p", timedelta(seconds=1)))
    with pytest.raises(TopologyException, match="as_versioned"):
        b.stream("orders").join(versioned.filter(lambda k, v: True), pair)


# -- stream-global-table ---------------------------------------------------------------------


@pytest.mark.parametrize("left", [False, True], ids=["inner", "left"])
def test_global_table_join_on_a_selected_key(config, left):
    b = StreamsBuilder()
    countries = b.global_table("countries")
    orders = b.stream("orders")
    (orders.left_join if left else orders.join)(
        countries, lambda k, v: v["country"], lambda o, c: (o["id"], c)
    ).to("out")
    topology = b.build()
    assert topology.copartition_groups == []  # every task holds the whole global table
    with TopologyTestDriver(topology, config) as d:
        _pipe(d, "countries", [("fr", "France", 1)])
        _pipe(
            d,
            "orders",
            [("k1", {"id": 1, "country": "fr"}, 2), ("k2", {"id": 2, "country": "xx"}, 3)],
        )
        _pipe(d, "orders", [("k3", {"id": 3, "country": None}, 4), ("k4", None, 5)])
        got = _out(d)
        # A null value, and a keyed record whose selected key is null, are dropped by
        # either join (Kafka's KStreamKTableJoinProcessor.maybeDropRecord).
        assert d.metrics()["dropped-records"] == 2
    if left:
        assert got == [("k1", (1, "France"), 2), ("k2", (2, None), 3)]
    else:
        assert got == [("k1", (1, "France"), 2)]


def test_global_join_takes_a_key_selector():
    b = StreamsBuilder()
    countries = b.global_table("countries")
    with pytest.raises(TopologyException, match="key_selector"):
        b.stream("orders").join(countries, pair)


# -- table-table -----------------------------------------------------------------------------


def _table_table(how: str, left_versioned=False, right_versioned=False, materialized=None):
    b = StreamsBuilder()

    def mat(name, versioned):
        return (
            Materialized.as_versioned(name, timedelta(seconds=1))
            if versioned
            else Materialized.as_(name)
        )

    a = b.table("a", mat("a-store", left_versioned))
    c = b.table("c", mat("c-store", right_versioned))
    getattr(a, how)(c, pair, materialized=materialized).to_stream().to("out")
    return b.build()


def test_inner_join_emits_when_both_sides_hold_the_key(config):
    with TopologyTestDriver(_table_table("join"), config) as d:
        _pipe(d, "a", [("k", "a1", 1)])
        _pipe(d, "c", [("k", "c5", 5)])
        _pipe(d, "a", [("k", "a2", 3)])  # the result's time: the larger of the two rows'
        _pipe(d, "a", [("k", None, 7)])
        _pipe(d, "c", [("k", "c8", 8)])  # nothing on the left: no result
        assert _out(d) == [("k", "a1|c5", 5), ("k", "a2|c5", 5), ("k", None, 7)]


def test_left_join_keeps_every_left_row(config):
    with TopologyTestDriver(_table_table("left_join"), config) as d:
        _pipe(d, "c", [("k", "c1", 1)])  # no left row: nothing
        _pipe(d, "a", [("k", "a2", 2), ("j", "a3", 3)])
        _pipe(d, "c", [("k", None, 4)])  # the left row stays, joined with None
        _pipe(d, "a", [("k", None, 5)])
        assert _out(d) == [
            ("k", "a2|c1", 2),
            ("j", "a3|None", 3),
            ("k", "a2|None", 4),
            ("k", None, 5),
        ]


def test_outer_join_keeps_rows_of_either_side(config):
    with TopologyTestDriver(_table_table("outer_join"), config) as d:
        _pipe(d, "c", [("k", "c1", 1)])
        _pipe(d, "a", [("k", "a2", 2)])
        _pipe(d, "a", [("k", None, 3)])
        _pipe(d, "c", [("k", None, 4)])
        assert _out(d) == [
            ("k", "None|c1", 1),
            ("k", "a2|c1", 2),
            ("k", "None|c1", 3),
            ("k", None, 4),
        ]


def test_table_join_drops_null_keys(config):
    with TopologyTestDriver(_table_table("join"), config) as d:
        _pipe(d, "a", [(None, "a1", 1)])
        assert _out(d) == []
        assert d.metrics()["dropped-records"] == 1  # the table source drops it


@pytest.mark.parametrize("versioned", [False, True], ids=["unversioned", "versioned"])
def test_out_of_order_update_of_a_side(config, versioned):
    """KIP-914's example: A at 0 and 5, B at 2, 3, 4, then A at 1 (out of order). From a
    versioned A it gives no new result; from an unversioned A it does (offset order)."""
    with TopologyTestDriver(_table_table("join", left_versioned=versioned), config) as d:
        _pipe(d, "a", [("k", "a0", 0), ("k", "a5", 5)])
        _pipe(d, "c", [("k", "b2", 2), ("k", "b3", 3), ("k", "b4", 4)])
        _pipe(d, "a", [("k", "a1", 1)])
        got = _out(d)
        dropped = d.metrics().get("dropped-records", 0)
    latest = [("k", "a5|b2", 5), ("k", "a5|b3", 5), ("k", "a5|b4", 5)]
    if versioned:
        assert got == latest
        assert dropped == 1
    else:
        assert got == latest + [("k", "a1|b4", 4)]
        assert dropped == 0


def test_out_of_order_update_of_the_other_versioned_side(config):
    """The right side versioned, the left not: only the right side's late update is skipped."""
    with TopologyTestDriver(_table_table("left_join", right_versioned=True), config) as d:
        _pipe(d, "a", [("k", "a1", 1)])
        _pipe(d, "c", [("k", "c9", 9), ("k", "c5", 5)])  # c5 is out of order: no result
        _pipe(d, "a", [("k", "a0", 0)])  # out of order on the unversioned side: joined
        assert _out(d) == [("k", "a1|None", 1), ("k", "a1|c9", 9), ("k", "a0|c9", 9)]


def test_materialized_result_is_queryable(config):
    topology = _table_table("left_join", materialized=Materialized.as_("joined"))
    with TopologyTestDriver(topology, config) as d:
        _pipe(d, "a", [("k", "a1", 1), ("j", "a2", 2)])
        _pipe(d, "c", [("k", "c3", 3)])
        _pipe(d, "a", [("j", None, 4)])
        store = d.get_key_value_store("joined")
        assert store.get("k") == "a1|c3"
        assert store.get_with_timestamp("k").timestamp == 3
        assert store.get("j") is None


def test_materialized_versioned_result_keeps_history(config):
    topology = _table_table(
        "join", materialized=Materialized.as_versioned("joined", timedelta(seconds=1))
    )
    with TopologyTestDriver(topology, config) as d:
        _pipe(d, "a", [("k", "a1", 1)])
        _pipe(d, "c", [("k", "c3", 3)])
        _pipe(d, "a", [("k", "a7", 7)])
        store = d.get_versioned_key_value_store("joined")
        assert store.get("k").value == "a7|c3"
        assert store.get("k", 5).value == "a1|c3"


def test_join_results_feed_a_table_aggregation(config):
    """Old values flow too: a group_by aggregation moves a row's contribution."""
    b = StreamsBuilder()
    a, c = b.table("a"), b.table("c")
    a.join(c, lambda x, y: y).group_by(lambda k, v: (v, 1)).count().to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as d:
        _pipe(d, "a", [("k", "x", 1)])
        _pipe(d, "c", [("k", "red", 2)])
        _pipe(d, "c", [("k", "blue", 3)])
        assert _out(d) == [("red", 1, 2), ("red", 0, 3), ("blue", 1, 3)]


# -- co-partitioning -------------------------------------------------------------------------


def test_join_sides_share_a_sub_topology_and_a_copartition_group():
    topology = _table_table("join")
    assert len(topology.subtopologies) == 1
    [group] = topology.copartition_groups
    assert (group.left, group.right, group.internal) == (("a",), ("c",), frozenset())


def test_partition_counts_that_differ_name_both_sides():
    group = CopartitionGroup("KSTREAM-JOIN-0000000002", ("orders",), ("prices",))
    check(group, {"orders": 3, "prices": 3}, str)
    with pytest.raises(
        TopologyException, match=r"'orders' \(4 partitions\).*'prices' \(2 partitions\)"
    ):
        check(group, {"orders": 4, "prices": 2}, str)


def test_a_repartition_topic_takes_the_external_sides_count():
    group = CopartitionGroup("J", ("J-repartition",), ("prices",), frozenset({"J-repartition"}))
    assert (
        external_count(group, {"prices": 6}, lambda t: f"app-{t}" if t.startswith("J") else t) == 6
    )
    with pytest.raises(TopologyException, match="app-J-repartition"):
        check(
            group,
            {"app-J-repartition": 4, "prices": 6},
            lambda t: f"app-{t}" if t.startswith("J") else t,
        )


def test_joiner_must_be_callable():
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="joiner must be callable"):
        b.stream("s").join(b.table("t"), "nope")


def test_records_are_plain_test_records(config):
    with TopologyTestDriver(_stream_table(True, False), config) as d:
        _pipe(d, "orders", [("a", "o", 1)])
        assert d.create_output_topic("out").read_records_to_list() == [TestRecord("a", "o|None", 1)]
