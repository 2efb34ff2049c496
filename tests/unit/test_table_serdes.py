"""Serdes of cogroups, windowed aggregations, table-table joins and suppress, as Kafka
Streams 4.3's CogroupedKStreamImpl, TimeWindowedKStreamImpl, SessionWindowedKStreamImpl and
KTableImpl (doJoin, doJoinOnForeignKey, suppress) pass them: the stores' serdes, the
repartition topics', and what the result table knows (to_stream().to() takes it)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import (
    BufferConfig,
    Consumed,
    Grouped,
    Materialized,
    Serdes,
    SerializationException,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
)
from lakestate.serdes import SessionWindowedSerde, TimeWindowedSerde, TopicSerdes
from lakestate.testing.driver import TopologyTestDriver
from lakestate.topology.graph import SINK, SOURCE

S, L, J, D = Serdes.String(), Serdes.Long(), Serdes.Json(), Serdes.Double()
CONFIG = {"application.id": "app"}
_10MS = timedelta(milliseconds=10)


def _repartitions(topology) -> dict[str, TopicSerdes]:
    found: dict[str, TopicSerdes] = {}
    for node in topology.nodes.values():
        if node.internal_topic and node.kind in (SOURCE, SINK):
            assert found.setdefault(node.topics[0], node.serdes) == node.serdes
    return found


def _sink(topology, topic: str = "out") -> TopicSerdes:
    (node,) = [n for n in topology.nodes.values() if n.kind == SINK and n.topics == [topic]]
    return node.serdes


# -- cogroup ---------------------------------------------------------------------------------


def _cogroup(b: StreamsBuilder, materialized, grouped=None):
    first = b.stream("in", Consumed.with_(S, L)).group_by_key()
    rekeyed = b.stream("other", Consumed.with_(S, L)).select_key(lambda k, v: k)
    second = rekeyed.group_by_key(grouped) if grouped is not None else rekeyed.group_by_key()
    return (
        first.cogroup(lambda k, v, a: a + v)
        .cogroup(second, lambda k, v, a: a - v)
        .aggregate(lambda: 0, materialized)
    )


def test_a_cogroup_repartition_topic_takes_the_grouped_name_and_serdes():
    b = StreamsBuilder()
    _cogroup(b, Materialized.as_("cg"), Grouped.with_("by-key", S, D))
    topology = b.build()
    assert _repartitions(topology) == {"by-key-repartition": TopicSerdes(S, D)}
    assert "Sink: by-key-repartition-sink (topic: by-key-repartition)" in topology.describe()
    # Not given: the serdes the grouped stream carried (select_key keeps the value's).
    b = StreamsBuilder()
    _cogroup(b, Materialized.as_("cg"))
    assert _repartitions(b.build()) == {"cg-repartition": TopicSerdes(J, L)}


def test_a_cogroup_store_takes_the_materialized_serdes_only():
    b = StreamsBuilder()
    table = _cogroup(b, Materialized.as_("cg"), Grouped.with_(S, L))
    # Kafka's cogroup knows no serdes of its own: no Materialized serde, a Json store.
    assert b.build().stores["cg"].serdes == TopicSerdes() and table.serdes == TopicSerdes()
    b = StreamsBuilder()
    table = _cogroup(b, Materialized.as_("cg").with_(S, L))
    table.to_stream().to("out")
    topology = b.build()
    assert topology.stores["cg"].serdes == TopicSerdes(S, L) == table.serdes
    assert _sink(topology) == TopicSerdes(S, L)  # to() takes the table's serdes
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("a", 5)
        driver.create_input_topic("other").pipe_input("a", 2)
        assert driver.create_output_topic("out").read_key_values_to_list() == [("a", 5), ("a", 3)]


def test_a_cogroup_store_and_repartition_topic_refuse_what_their_serdes_cannot_hold():
    b = StreamsBuilder()
    _cogroup(b, Materialized.as_("cg").with_value_serde(S))
    with TopologyTestDriver(b.build(), CONFIG) as driver:
        with pytest.raises(SerializationException, match=r"store 'cg' has value serde Serdes"):
            driver.create_input_topic("in").pipe_input("a", 5)
    b = StreamsBuilder()
    _cogroup(b, Materialized.as_("cg"), Grouped.with_(S, S))
    with TopologyTestDriver(b.build(), CONFIG) as driver:
        with pytest.raises(SerializationException, match=r"Serdes\.String\(\) cannot serialize"):
            driver.create_input_topic("other").pipe_input("a", 5)


def test_a_windowed_cogroup_store_takes_the_materialized_serdes():
    b = StreamsBuilder()
    grouped = b.stream("in", Consumed.with_(S, L)).group_by_key()
    table = (
        grouped.cogroup(lambda k, v, a: a + v)
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10)))
        .aggregate(lambda: 0, Materialized.as_("w").with_(S, L))
    )
    assert b.build().stores["w"].serdes == TopicSerdes(S, L)
    assert table.serdes == TopicSerdes(TimeWindowedSerde(S, 10), L)  # Kafka's FullTimeWindowedSerde


# -- windowed aggregations -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("windows", "keys"),
    [
        (TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10)), TimeWindowedSerde(S, 10)),
        (
            SlidingWindows.of_time_difference_with_no_grace(timedelta(milliseconds=10)),
            TimeWindowedSerde(S, 10),
        ),
        (
            SessionWindows.of_inactivity_gap_with_no_grace(timedelta(milliseconds=10)),
            SessionWindowedSerde(S),
        ),
    ],
    ids=["time", "sliding", "session"],
)
def test_windowed_stores_take_kafkas_serdes_and_the_table_passes_them_on(windows, keys):
    b = StreamsBuilder()
    grouped = b.stream("in", Consumed.with_(S, D)).group_by_key()
    counts = grouped.windowed_by(windows).count(Materialized.as_("c"))
    counts.to_stream().to("out")
    grouped.windowed_by(windows).reduce(lambda a, v: a + v, Materialized.as_("r"))
    merger = (lambda k, a, c: a + c,) if isinstance(windows, SessionWindows) else ()
    grouped.windowed_by(windows).aggregate(
        lambda: "", lambda k, v, a: a + str(v), *merger, Materialized.as_("a").with_value_serde(S)
    )
    topology = b.build()
    # Kafka's: the carried (Grouped) key serde; a count's Long, a reduce's Grouped value serde.
    assert topology.stores["c"].serdes == TopicSerdes(S, L)
    assert topology.stores["r"].serdes == TopicSerdes(S, D)
    assert topology.stores["a"].serdes == TopicSerdes(S, S)
    # The table: a windowed serde of the store's key serde, and its value serde; to() takes them.
    assert counts.serdes == TopicSerdes(keys, L) and _sink(topology) == TopicSerdes(keys, L)
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("k", 1.5, 5)
        ((key, value),) = driver.create_output_topic("out").read_key_values_to_list()
        assert (key.key, value) == ("k", 1)


def test_a_window_store_refuses_a_key_or_value_its_serdes_cannot_hold():
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(
        TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10))
    ).aggregate(lambda: 0, lambda k, v, a: v, Materialized.as_("w").with_(S, L))
    with TopologyTestDriver(b.build(), CONFIG) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("k", 7, 1)  # fits
        assert list(driver.get_window_store("w").fetch("k", 0, 10)) == [(0, 7)]
        with pytest.raises(SerializationException) as info:
            source.pipe_input("k", "x", 2)
        assert "store 'w' has value serde Serdes.Long()" in str(info.value)
        with pytest.raises(SerializationException, match="store 'w' has key serde"):
            source.pipe_input(3, 1, 3)


# -- table-table joins and suppress ----------------------------------------------------------


def _tables(b: StreamsBuilder):
    return b.table("left", Consumed.with_(S, L)), b.table("right", Consumed.with_(S, D))


def test_a_table_join_result_knows_the_key_serde_or_its_stores_serdes():
    b = StreamsBuilder()
    left, right = _tables(b)
    plain = left.join(right, lambda a, c: f"{a}|{c}")
    assert plain.serdes == TopicSerdes(S, J)  # Kafka's doJoin: no value serde known
    kept = left.left_join(right, lambda a, c: f"{a}|{c}", Materialized.as_("j"))
    typed = left.outer_join(right, lambda a, c: 1.5, Materialized.as_("o").with_value_serde(D))
    typed.to_stream().to("out")
    fk = left.join(right, lambda v: "x", lambda a, c: 2.5, Materialized.as_("fk"))
    topology = b.build()
    assert topology.stores["j"].serdes == TopicSerdes(S, J) == kept.serdes
    assert topology.stores["o"].serdes == TopicSerdes(S, D) == typed.serdes
    assert topology.stores["fk"].serdes == TopicSerdes(S, J) == fk.serdes
    assert _sink(topology) == TopicSerdes(S, D)
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("left").pipe_input("a", 1)
        assert driver.create_output_topic("out").read_key_values_to_list() == [("a", 1.5)]
    b = StreamsBuilder()
    left, right = _tables(b)
    left.join(right, lambda a, c: "text", Materialized.as_("j").with_value_serde(L))
    with TopologyTestDriver(b.build(), CONFIG) as driver:
        driver.create_input_topic("left").pipe_input("a", 1)
        with pytest.raises(SerializationException, match="store 'j' has value serde"):
            driver.create_input_topic("right").pipe_input("a", 2.0)


def test_suppress_keeps_its_tables_serdes():
    b = StreamsBuilder()
    counts = b.stream("in", Consumed.with_(S, L)).group_by_key().count()
    held = counts.suppress(Suppressed.until_time_limit(timedelta(0), BufferConfig.unbounded()))
    assert held.serdes == counts.serdes == TopicSerdes(S, L)
    windowed = (
        b.stream("w", Consumed.with_(S, L))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10)))
        .count()
    )
    final = windowed.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    assert final.serdes == windowed.serdes == TopicSerdes(TimeWindowedSerde(S, 10), L)
    final.to_stream().to("out")
    assert _sink(b.build()) == TopicSerdes(TimeWindowedSerde(S, 10), L)
    # No serde anywhere: a Json store, so the windowed table knows none (Kafka's null).
    b = StreamsBuilder()
    plain = b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(_10MS))
    assert plain.count().serdes == TopicSerdes()


# -- windowed serdes -------------------------------------------------------------------------


def test_windowed_serdes_write_kafkas_layouts_and_their_json_form():
    from lakestate import Window, Windowed, WindowedSerdes
    from lakestate.io.kafka.appends import wire_bytes
    from lakestate.serdes import base_key_serde

    key = Windowed("k", Window(5, 15))
    timed = WindowedSerdes.time_windowed_serde_from(S, timedelta(milliseconds=10))
    session = WindowedSerdes.session_windowed_serde_from(L)
    # TimeWindowedSerializer: the key's bytes, then the start; the end from the size.
    assert timed.serialize(key) == b"k" + (5).to_bytes(8, "big")
    assert timed.deserialize(b"k" + (5).to_bytes(8, "big")) == key
    # SessionWindowedSerializer (SessionKeySchema): the key's bytes, then end, then start.
    sess = Windowed(7, Window(5, 9))
    raw = (7).to_bytes(8, "big") + (9).to_bytes(8, "big") + (5).to_bytes(8, "big")
    assert session.serialize(sess) == raw and session.deserialize(raw) == sess
    # The JSON form is a windowed key's fields, as every sink writes them; a Kafka sink's
    # bytes come from it, and its partition from the inner key's bytes alone.
    assert timed.to_json(key) == {"key": "k", "window_start": 5, "window_end": 15}
    text = '{"key":"k","window_end":15,"window_start":5}'
    assert wire_bytes(timed, text) == b"k" + (5).to_bytes(8, "big")
    assert base_key_serde(timed) == S and base_key_serde(L) == L
    assert timed == TimeWindowedSerde(S, 10) != TimeWindowedSerde(S, 11)
    assert timed != TimeWindowedSerde(L, 10) and hash(timed) == hash(TimeWindowedSerde(S, 10))
    with pytest.raises(SerializationException, match="takes a Windowed key"):
        timed.serialize("k")
    with pytest.raises(SerializationException, match="no window start"):
        timed.deserialize(b"k")
    with pytest.raises(SerializationException, match="reads a log table's key as its fields"):
        timed.from_json("k")
