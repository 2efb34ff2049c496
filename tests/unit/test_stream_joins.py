"""Stream-stream joins through the TopologyTestDriver: the cases of Kafka's own
KStreamKStreamJoinTest, KStreamKStreamLeftJoinTest and KStreamKStreamOuterJoinTest, re-told
with lakestate's DSL (Kafka's answers for random inputs are in tests/conformance, groups
join-stream_stream-*); then the DSL's checks, naming, repartitioning and the stores.
Every test runs on memory and on RocksDB stores."""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import JoinWindows, StreamJoined, StreamsBuilder, TopologyException
from lakestate.testing.driver import TestRecord, TopologyTestDriver

BACKENDS = [{}, {"lakestate.state.backend": "rocksdb"}]


@pytest.fixture(params=BACKENDS, ids=["memory", "rocksdb"])
def config(request):
    return dict(request.param)


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def plus(left, right) -> str:
    """Kafka's test joiner: "left+right", a missing side as "null"."""
    return f"{'null' if left is None else left}+{'null' if right is None else right}"


def topology(how: str, windows: JoinWindows, joined: StreamJoined | None = None):
    b = StreamsBuilder()
    one, two = b.stream("topic1"), b.stream("topic2")
    join = {"inner": one.join, "left": one.left_join, "outer": one.outer_join}[how]
    if joined is None:
        join(two, plus, windows).to("out")
    else:
        join(two, plus, windows, joined).to("out")
    return b.build()


class Pipes:
    """Pipes records into topic1/topic2 and reads what came out since the last read."""

    def __init__(self, driver: TopologyTestDriver) -> None:
        self.driver = driver
        self.out = driver.create_output_topic("out")

    def one(self, key, value, ts: int) -> None:
        self.driver.create_input_topic("topic1").pipe_input(key, value, ts)

    def two(self, key, value, ts: int) -> None:
        self.driver.create_input_topic("topic2").pipe_input(key, value, ts)

    def read(self) -> list[tuple]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


# -- inner ---------------------------------------------------------------------------------


def test_inner_join_pairs_records_within_the_difference_at_the_larger_timestamp(config):
    with TopologyTestDriver(
        topology("inner", JoinWindows.of_time_difference_without_grace(ms(100))), config
    ) as d:
        p = Pipes(d)
        for key in (0, 1):
            p.one(key, f"A{key}", 0)
        assert p.read() == []  # the other side is empty
        for key in (0, 1):
            p.two(key, f"a{key}", 50)
        assert p.read() == [(0, "A0+a0", 50), (1, "A1+a1", 50)]
        p.two(0, "b0", 100)  # 100 ms after A0: still within
        p.two(0, "c0", 101)  # 101 ms: not
        p.one(0, "B0", 200)  # joins b0 and c0 (within 100 before)... and only those
        assert p.read() == [(0, "A0+b0", 100), (0, "B0+b0", 200), (0, "B0+c0", 200)]


def test_inner_join_keeps_duplicates_and_joins_them_in_arrival_order(config):
    with TopologyTestDriver(
        topology("inner", JoinWindows.of_time_difference_without_grace(ms(10))), config
    ) as d:
        p = Pipes(d)
        p.one(0, "A", 5)
        p.one(0, "A'", 5)
        p.two(0, "x", 6)
        assert p.read() == [(0, "A+x", 6), (0, "A'+x", 6)]


def test_asymmetric_windows_look_before_and_after_from_the_left(config):
    # Kafka's testAsymmetricWindowingBefore/After: a left record at t joins right records
    # in [t - before, t + after]; a right record at t joins left records in [t - after, t + before].
    windows = JoinWindows.of_time_difference_without_grace(ms(0)).before(ms(100)).after(ms(0))
    with TopologyTestDriver(topology("inner", windows), config) as d:
        p = Pipes(d)
        p.one(0, "A", 1000)
        p.two(0, "early", 899)  # 101 before: out
        p.two(0, "edge", 900)  # exactly before
        p.two(0, "same", 1000)
        p.two(0, "late", 1001)  # after 0: out
        assert p.read() == [(0, "A+edge", 1000), (0, "A+same", 1000)]
        p.one(0, "B", 1001)
        assert p.read() == [(0, "B+same", 1001), (0, "B+late", 1001)]  # edge: 101 before


def test_inner_join_drops_null_keys_and_values_and_counts_them(config):
    with TopologyTestDriver(
        topology("inner", JoinWindows.of_time_difference_without_grace(ms(10))), config
    ) as d:
        p = Pipes(d)
        p.one(None, "A", 1)
        p.one(0, None, 1)
        p.two(0, "a", 1)
        p.two(None, "b", 1)
        assert p.read() == []
        assert d.metrics()["dropped-records"] == 3


# -- left ----------------------------------------------------------------------------------


def test_left_join_emits_unjoined_duplicates_only_once_their_window_closed(config):
    # Kafka's testLeftJoinDuplicates.
    windows = JoinWindows.of_time_difference_and_grace(ms(100), ms(10))
    with TopologyTestDriver(topology("left", windows), config) as d:
        p = Pipes(d)
        p.one(0, "A0", 0)
        p.one(0, "A0-0", 0)
        p.two(1, "a0", 110)
        assert p.read() == []  # 110 = 0 + 100 + 10: not closed yet
        p.two(1, "a0", 111)
        p.two(2, "dummy", 500)
        assert p.read() == [(0, "A0+null", 0), (0, "A0-0+null", 0)]
        p.one(2, "A2", 1000)
        p.one(2, "A2-0", 1000)
        p.two(2, "a2", 1001)
        assert p.read() == [(2, "A2+a2", 1001), (2, "A2-0+a2", 1001)]
        p.two(3, "a3", 315)  # out of order: nothing is emitted twice
        assert p.read() == []


@pytest.mark.parametrize("bump", ["topic1", "topic2"])
def test_left_join_unjoined_records_are_emitted_by_either_side(config, bump):
    # Kafka's testLeftExpiredNonJoinedRecordsAreEmittedByTheLeft/RightProcessor.
    with TopologyTestDriver(
        topology("left", JoinWindows.of_time_difference_and_grace(ms(100), ms(0))), config
    ) as d:
        p = Pipes(d)
        p.one(0, "A0", 1)
        p.one(1, "A1", 2)
        p.one(0, "A0-0", 3)
        p.two(1, "a1", 3)
        assert p.read() == [(1, "A1+a1", 3)]
        (p.one if bump == "topic1" else p.two)(2, "dummy", 401)
        assert p.read() == [(0, "A0+null", 1), (0, "A0-0+null", 3)]


def test_left_join_never_emits_the_right_sides_unjoined_records(config):
    # Kafka's testRightNonJoinedRecordsAreNeverEmittedBy...
    with TopologyTestDriver(
        topology("left", JoinWindows.of_time_difference_without_grace(ms(100))), config
    ) as d:
        p = Pipes(d)
        p.two(0, "A0", 1)
        p.two(1, "A1", 2)
        p.one(1, "a1", 3)
        assert p.read() == [(1, "a1+A1", 3)]
        p.two(2, "dummy", 401)
        p.one(3, "late", 402)
        assert p.read() == []


def test_left_join_grace_keeps_a_window_open_after_it_ended(config):
    # Kafka's testGracePeriod: right records 101 ms after the left ones join nothing, and
    # the left ones come out only once stream time passes 0 + 100 + 10.
    with TopologyTestDriver(
        topology("left", JoinWindows.of_time_difference_and_grace(ms(100), ms(10))), config
    ) as d:
        p = Pipes(d)
        p.one(0, "A0", 0)
        p.one(1, "A1", 0)
        for key in range(4):
            p.two(key, f"a{key}", 101)
        assert p.read() == []
        p.two(0, "dummy", 1201)
        assert p.read() == [(0, "A0+null", 0), (1, "A1+null", 0)]


def test_left_join_forwards_a_null_key_at_once_and_drops_a_null_value(config):
    with TopologyTestDriver(
        topology("left", JoinWindows.of_time_difference_without_grace(ms(10))), config
    ) as d:
        p = Pipes(d)
        p.one(None, "A", 5)
        p.one(0, None, 5)
        p.two(None, "b", 5)
        assert p.read() == [(None, "A+null", 5)]
        assert d.metrics()["dropped-records"] == 2


def test_an_out_of_order_record_whose_window_ended_is_emitted_at_once(config):
    with TopologyTestDriver(
        topology("left", JoinWindows.of_time_difference_and_grace(ms(10), ms(50))), config
    ) as d:
        p = Pipes(d)
        p.one(0, "A", 100)
        p.one(1, "B", 80)  # 80 + 10 < 100: its window has ended, grace or not
        assert p.read() == [(1, "B+null", 80)]
        p.one(2, "C", 95)  # 95 + 10 >= 100: waits
        assert p.read() == []


# -- outer ---------------------------------------------------------------------------------


def test_outer_join_emits_both_sides_unjoined_records_in_the_stores_order(config):
    # Kafka's testOuterJoinDuplicates: at one timestamp the right side's come first.
    windows = JoinWindows.of_time_difference_and_grace(ms(100), ms(10))
    with TopologyTestDriver(topology("outer", windows), config) as d:
        p = Pipes(d)
        p.one(0, "A0", 0)
        p.one(0, "A0-0", 0)
        p.two(1, 11, 0)
        p.two(1, 12, 0)
        p.two(1, 10, 111)
        p.two(3, 100, 211)
        assert p.read() == [
            (1, "null+11", 0),
            (1, "null+12", 0),
            (0, "A0+null", 0),
            (0, "A0-0+null", 0),
        ]
        p.one(2, "A2", 200)
        p.one(2, "A2-0", 200)
        p.two(2, 13, 201)
        p.two(2, 14, 201)
        assert p.read() == [
            (2, "A2+13", 201),
            (2, "A2-0+13", 201),
            (2, "A2+14", 201),
            (2, "A2-0+14", 201),
        ]
        p.two(3, 100, 1500)
        assert p.read() == [(1, "null+10", 111), (3, "null+100", 211)]


def test_outer_join_closes_each_side_by_its_own_look_ahead(config):
    # Kafka's testEmitAllNonJoinedResultsForAsymmetricWindow: before 5, after 20. A left
    # record waits 20 ms, a right one 5 ms.
    windows = JoinWindows.of_time_difference_without_grace(ms(5)).after(ms(20))
    with TopologyTestDriver(topology("outer", windows), config) as d:
        p = Pipes(d)
        p.one(0, "A0", 29)
        p.one(1, "A1", 30)
        p.two(2, 12, 31)
        p.two(3, 13, 36)
        assert p.read() == []
        p.two(4, 14, 37)
        assert p.read() == [(2, "null+12", 31)]
        p.two(5, 15, 50)
        assert p.read() == [(0, "A0+null", 29), (3, "null+13", 36), (4, "null+14", 37)]


def test_chunks_give_what_records_one_by_one_give(config):
    windows = JoinWindows.of_time_difference_and_grace(ms(3), ms(2))
    inputs = [
        ("topic1", [(0, "A", 10), (1, "B", 11), (0, "C", 9), (None, "N", 12), (2, None, 12)]),
        ("topic2", [(0, "a", 12), (1, "b", 20), (3, "c", 30), (0, "d", 11)]),
        ("topic1", [(3, "D", 31), (4, "E", 40), (0, "F", 8)]),
    ]

    def play(chunked: bool) -> tuple[list, float]:
        with TopologyTestDriver(topology("outer", windows), config) as d:
            out = d.create_output_topic("out")
            for topic, records in inputs:
                source = d.create_input_topic(topic)
                if chunked:
                    source.pipe_record_list([TestRecord(k, v, t) for k, v, t in records])
                else:
                    for k, v, t in records:
                        source.pipe_input(k, v, t)
            return out.read_records_to_list(), d.metrics()["dropped-records"]

    one_by_one = play(False)
    assert one_by_one[0] and one_by_one == play(True)


# -- the DSL -------------------------------------------------------------------------------


def test_join_windows_check_their_bounds():
    with pytest.raises(TopologyException, match="must not be negative"):
        JoinWindows.of_time_difference_without_grace(ms(-1))
    with pytest.raises(TopologyException, match="grace"):
        JoinWindows.of_time_difference_and_grace(ms(1), ms(-1))
    with pytest.raises(TopologyException, match="before \\+ after"):
        JoinWindows.of_time_difference_without_grace(ms(2)).after(ms(-3))
    with pytest.raises(TopologyException, match="timedelta"):
        JoinWindows.of_time_difference_without_grace(5)
    w = JoinWindows.of_time_difference_and_grace(ms(5), ms(2)).before(ms(7)).after(ms(-1))
    assert (w.before_ms, w.after_ms, w.grace_ms, w.size(), w.retention_ms) == (7, -1, 2, 6, 8)


def test_a_join_with_a_stream_needs_windows():
    b = StreamsBuilder()
    one, two = b.stream("topic1"), b.stream("topic2")
    with pytest.raises(TopologyException, match="JoinWindows"):
        one.join(two, plus, ms(5))
    with pytest.raises(TopologyException, match="other_stream, joiner, JoinWindows"):
        one.left_join(two, plus)
    with pytest.raises(TopologyException, match="joiner must be callable"):
        one.outer_join(two, "plus", JoinWindows.of_time_difference_without_grace(ms(1)))


def test_nodes_and_stores_are_named_as_kafka_names_them():
    windows = JoinWindows.of_time_difference_without_grace(ms(1))
    left = topology("left", windows)
    assert set(left.stores) == {
        "KSTREAM-JOINTHIS-0000000004-store",
        "KSTREAM-OUTEROTHER-0000000005-store",
        "KSTREAM-OUTERSHARED-0000000004-store",
    }
    assert "KSTREAM-MERGE-0000000006" in left.nodes
    assert set(topology("inner", windows).stores) == {
        "KSTREAM-JOINTHIS-0000000004-store",
        "KSTREAM-JOINOTHER-0000000005-store",
    }
    named = topology("outer", windows, StreamJoined.as_("pairs").with_name("pairing"))
    assert set(named.stores) == {
        "pairs-outer-this-join-store",
        "pairs-outer-other-join-store",
        "pairs-outer-shared-join-store",
    }
    assert {"pairing-this-windowed", "pairing-outer-this-join", "pairing-merge"} <= set(named.nodes)
    assert named.stores["pairs-outer-shared-join-store"].kind == "stream_join_waiting"


def test_a_key_change_repartitions_and_both_sides_are_copartitioned():
    b = StreamsBuilder()
    one = b.stream("topic1").select_key(lambda k, v: v)
    two = b.stream("topic2")
    one.join(two, plus, JoinWindows.of_time_difference_without_grace(ms(5))).to("out")
    t = b.build()
    assert len(t.subtopologies) == 2
    (group,) = t.copartition_groups
    assert group.left == ("KSTREAM-KEY-SELECT-0000000001-repartition",)
    assert group.right == ("topic2",)
    with TopologyTestDriver(t) as d:
        d.create_input_topic("topic2").pipe_input("x", "two", 1)
        d.create_input_topic("topic1").pipe_input("k", "x", 2)
        assert [(r.key, r.value) for r in d.create_output_topic("out").read_records_to_list()] == [
            ("x", "x+two")
        ]


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_null_keys_cross_a_left_or_outer_joins_repartition_topics_only(how, config):
    # KIP-962, as Kafka 4.4 plays it (conformance groups bytes_stream_join-*): a left or
    # outer join's repartition topics carry null keys (both sides'), and the join emits a
    # null key of an outer side joined with None or counts it dropped; an inner join's
    # topics drop them, uncounted.
    b = StreamsBuilder()
    one = b.stream("topic1").select_key(lambda k, v: k)
    two = b.stream("topic2").select_key(lambda k, v: k)
    join = {"inner": one.join, "left": one.left_join, "outer": one.outer_join}[how]
    join(two, plus, JoinWindows.of_time_difference_without_grace(ms(5))).to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        pipes = Pipes(driver)
        pipes.one(None, "A", 1)
        pipes.two(None, "b", 2)
        out = {
            "inner": [],
            "left": [(None, "A+null", 1)],
            "outer": [(None, "A+null", 1), (None, "null+b", 2)],
        }[how]
        assert pipes.read() == out
        dropped = {"inner": 0, "left": 1, "outer": 0}[how]  # left: the right side's null key
        assert int(driver.metrics().get("dropped-records", 0)) == dropped


def test_a_stream_joined_with_itself(config):
    b = StreamsBuilder()
    s = b.stream("topic1")
    s.join(s, plus, JoinWindows.of_time_difference_without_grace(ms(1))).to("out")
    with TopologyTestDriver(b.build(), config) as d:
        p = Pipes(d)
        p.one(0, "A", 1)
        assert p.read() == [(0, "A+A", 1)]
        p.one(0, "B", 2)
        assert p.read() == [(0, "B+A", 2), (0, "A+B", 2), (0, "B+B", 2)]


def test_the_stores_show_who_waits_and_what_is_buffered(config):
    windows = JoinWindows.of_time_difference_and_grace(ms(10), ms(5))
    with TopologyTestDriver(topology("outer", windows), config) as d:
        p = Pipes(d)
        p.one("k", "A", 100)
        p.two("j", "b", 101)
        p.two("k", "c", 105)  # joins A: A no longer waits
        waiting = d.get_state_store("KSTREAM-OUTERSHARED-0000000004-store")
        assert [(ts, is_left, key, value) for _, ts, is_left, key, value in waiting.scan()] == [
            (101, False, "j", "b")
        ]
        buffer = d.get_state_store("KSTREAM-OUTERTHIS-0000000004-store")
        assert list(buffer.all()) == [("k", 100, 0, "A")]
        p.one("z", "late", 200)  # closes b's window and A's buffer retention (25 ms)
        assert p.read()[-1] == ("j", "null+b", 101)
        assert list(waiting.scan())[0][3] == "z"
        assert [key for key, *_ in buffer.all()] == ["z"]
