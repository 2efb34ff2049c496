"""Serdes as Kafka Streams 4.3's KStreamImpl carries them: Consumed's serdes known
downstream until an operation changes the key's or value's type; Repartitioned and
StreamJoined serdes for repartition topics and join stores."""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import (
    Consumed,
    Grouped,
    JoinWindows,
    Materialized,
    Produced,
    Repartitioned,
    Serdes,
    SerializationException,
    StreamJoined,
    StreamsBuilder,
    TopologyException,
)
from lakestate.serdes import TopicSerdes
from lakestate.testing.driver import TopologyTestDriver
from lakestate.topology.graph import SINK, SOURCE

S, L, J, D = Serdes.String(), Serdes.Long(), Serdes.Json(), Serdes.Double()


def _typed(b: StreamsBuilder):
    return b.stream("in", Consumed.with_(S, L))


def _topics(topology) -> dict[str, TopicSerdes]:
    """Each repartition topic's serdes (its sink's, checked equal to its source's)."""
    found: dict[str, TopicSerdes] = {}
    for node in topology.nodes.values():
        if node.internal_topic and node.kind in (SOURCE, SINK):
            assert found.setdefault(node.topics[0], node.serdes) == node.serdes
    return found


def _sinks(topology) -> dict[str, TopicSerdes]:
    return {
        n.topics[0]: n.serdes
        for n in topology.nodes.values()
        if n.kind == SINK and not n.internal_topic
    }


# -- Repartitioned ---------------------------------------------------------------------------


def test_repartitioned_builders_chain_serdes_name_and_partitions():
    assert Repartitioned.with_(S, L) == Repartitioned(key_serde=S, value_serde=L)
    assert Repartitioned.with_key_serde(S) == Repartitioned(key_serde=S)  # on the class
    r = Repartitioned.as_("r").with_number_of_partitions(3).with_(S, None)
    assert (r.name, r.number_of_partitions, r.key_serde, r.value_serde) == ("r", 3, S, None)
    assert Repartitioned.with_value_serde(L).with_name("r") == Repartitioned("r", value_serde=L)
    with pytest.raises(TopologyException, match="Repartitioned key_serde must be a serde"):
        Repartitioned.with_("text", L)
    with pytest.raises(TopologyException, match="Repartitioned value_serde must be a serde"):
        Repartitioned.as_("r").with_value_serde(int)


def test_repartition_topic_takes_repartitioned_serdes_else_the_streams_value_serde():
    b = StreamsBuilder()
    b.stream("in").repartition(Repartitioned.as_("r").with_(S, L)).to("out")
    assert _topics(b.build()) == {"r-repartition": TopicSerdes(S, L)}
    # Kafka's doRepartition: the topic's value serde falls back to the stream's, its key
    # serde does not (the default); after the topic, the stream's key serde is known again.
    b = StreamsBuilder()
    _typed(b).repartition(Repartitioned.as_("r")).group_by_key().count(Materialized.as_("c"))
    topology = b.build()
    assert _topics(topology) == {"r-repartition": TopicSerdes(J, L)}
    assert topology.stores["c"].serdes == TopicSerdes(S, L)


def test_a_repartition_topic_refuses_a_value_its_serde_cannot_hold():
    b = StreamsBuilder()
    b.stream("in").repartition(Repartitioned.with_(S, L)).to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("k", 5)
        assert driver.create_output_topic("out").read_key_values_to_list() == [("k", 5)]
        with pytest.raises(SerializationException, match=r"Serdes\.Long\(\) cannot serialize"):
            source.pipe_input("k", "five")


# -- Consumed serdes carried forward ----------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "store", "topic"),
    [
        # Kafka's KStreamImpl: filter and peek keep both serdes, map_values the key serde,
        # select_key the value serde, map and merge neither. A count's store: the grouped
        # key serde and Long; its repartition topic (after a key change): the grouped serdes.
        (lambda s: s.filter(lambda k, v: True), TopicSerdes(S, L), None),
        (lambda s: s.peek(lambda k, v: None), TopicSerdes(S, L), None),
        (lambda s: s.map_values(lambda v: v), TopicSerdes(S, L), None),
        (lambda s: s.flat_map_values(lambda v: [v]), TopicSerdes(S, L), None),
        (lambda s: s.select_key(lambda k, v: k), TopicSerdes(J, L), TopicSerdes(J, L)),
        (lambda s: s.map(lambda k, v: (k, v)), TopicSerdes(J, J), TopicSerdes(J, J)),
        (lambda s: s.merge(s), TopicSerdes(J, J), None),
        (lambda s: s.repartition(), TopicSerdes(S, L), None),
    ],
)
def test_group_by_key_takes_the_serdes_the_stream_still_knows(operation, store, topic):
    b = StreamsBuilder()
    operation(_typed(b)).group_by_key().count(Materialized.as_("c"))
    topology = b.build()
    assert topology.stores["c"].serdes == store
    if topic is not None:
        assert _topics(topology) == {"c-repartition": topic}


def test_group_by_takes_the_value_serde_and_a_given_grouped_only_its_own():
    b = StreamsBuilder()
    _typed(b).group_by(lambda k, v: k).reduce(lambda a, v: a + v, Materialized.as_("r"))
    topology = b.build()
    # Kafka's groupBy(selector): Grouped.with(null, valueSerde).
    assert topology.stores["r"].serdes == TopicSerdes(J, L)
    assert _topics(topology) == {"r-repartition": TopicSerdes(J, L)}
    b = StreamsBuilder()
    _typed(b).group_by_key(Grouped.as_("g")).count(Materialized.as_("c"))
    assert b.build().stores["c"].serdes == TopicSerdes()  # a given Grouped: its serdes only


def test_to_and_to_table_take_the_streams_serdes_where_none_is_given():
    b = StreamsBuilder()
    typed = _typed(b)
    typed.to("same")
    typed.map_values(str).to("values-changed")
    typed.map_values(str).to("value-given", Produced.with_(None, S))
    typed.filter(lambda k, v: True).to_table(Materialized.as_("t"))
    topology = b.build()
    assert _sinks(topology) == {
        "same": TopicSerdes(S, L),
        "values-changed": TopicSerdes(S, J),
        "value-given": TopicSerdes(S, S),
    }
    assert topology.stores["t"].serdes == TopicSerdes(S, L)
    with TopologyTestDriver(topology, {"application.id": "app"}) as driver:
        driver.create_input_topic("in").pipe_input("k", 3)
        assert driver.get_key_value_store("t").get("k") == 3
        assert driver.create_output_topic("values-changed").read_key_values_to_list() == [
            ("k", "3")
        ]


def test_an_explicit_produced_serde_wins_over_a_carried_one_json_too():
    from lakestate.io.kafka.appends import wire_bytes

    b = StreamsBuilder()
    typed = _typed(b)
    typed.to("json", Produced.with_(J, J))
    typed.to("json-value", Produced.with_value_serde(J))  # on the class: key not given
    typed.to("json-key", Produced.with_(J, None))
    typed.to("carried", Produced.with_(None, None))
    topology = b.build()
    assert _sinks(topology) == {
        "json": TopicSerdes(J, J),
        "json-value": TopicSerdes(S, J),
        "json-key": TopicSerdes(J, L),
        "carried": TopicSerdes(S, L),
    }
    # What a Kafka sink writes: JSON text where Json was given, Kafka's Long where carried.
    assert wire_bytes(topology.serdes_of("json").value, "5") == b"5"
    assert wire_bytes(topology.serdes_of("carried").value, "5") == (5).to_bytes(8, "big")
    assert wire_bytes(topology.serdes_of("json-key").key, '"k"') == b'"k"'
    assert Produced.with_(J, None) == Produced(J, None) and Produced().serdes == TopicSerdes()
    with pytest.raises(TopologyException, match="Produced.with_ value_serde must be a serde"):
        Produced.with_(S, "json")


def test_a_tables_serdes_reach_its_stream_as_kafkas_ktable_passes_them_on():
    b = StreamsBuilder()
    # A count's table: its store's serdes (the carried String key, Long), kept by to_stream.
    _typed(b).group_by_key().count().to_stream().to("counts")
    table = b.table("t", Consumed.with_(S, D))
    table.filter(lambda k, v: True).to_stream().to("filtered")
    table.map_values(str).to_stream().to("mapped")
    table.filter(lambda k, v: v > 0, Materialized.as_("f"))
    table.map_values(str, Materialized.as_("m"))
    topology = b.build()
    assert _sinks(topology) == {
        "counts": TopicSerdes(S, L),
        "filtered": TopicSerdes(S, D),
        "mapped": TopicSerdes(S, J),
    }
    # Materialized results (Kafka's doFilter/doMapValues): the serdes the result knows.
    assert topology.stores["f"].serdes == TopicSerdes(S, D)
    assert topology.stores["m"].serdes == TopicSerdes(S, J)


def test_a_carried_key_serde_types_the_store_and_a_cogroup_still_builds():
    b = StreamsBuilder()
    counts = _typed(b).group_by_key().count(Materialized.as_("c"))
    counts.to_stream().to("out")
    _typed_other = b.stream("in2", Consumed.with_(S, L)).group_by_key()
    _typed_other.cogroup(lambda k, v, a: a + v).aggregate(lambda: 0)
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        driver.create_input_topic("in").pipe_key_value_list([("a", 1), ("a", 2)])
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("a", 1),
            ("a", 2),
        ]


# -- StreamJoined ---------------------------------------------------------------------------


def test_stream_joined_builders_chain_serdes_and_names():
    j = StreamJoined.with_(S, L, D)
    assert (j.key_serde, j.value_serde, j.other_value_serde) == (S, L, D)
    named = StreamJoined.as_("st").with_name("jn").with_(S, None, D)
    assert (named.store_name, named.name, named.value_serde) == ("st", "jn", None)
    assert StreamJoined.with_other_value_serde(D) == StreamJoined(other_value_serde=D)
    assert StreamJoined.with_key_serde(S).with_store_name("st").store_name == "st"
    with pytest.raises(TopologyException, match="StreamJoined other_value_serde must be a serde"):
        StreamJoined.with_(S, L, "double")
    with pytest.raises(TopologyException, match="StreamJoined key_serde must be a serde"):
        StreamJoined.with_key_serde(3)


def _join(b: StreamsBuilder, stream_joined: StreamJoined | None):
    left = _typed(b).select_key(lambda k, v: k)
    right = b.stream("right", Consumed.with_(S, D)).select_key(lambda k, v: k)
    window = JoinWindows.of_time_difference_without_grace(timedelta(milliseconds=10))
    args = (lambda v, o: f"{v}|{o}", window) + ((stream_joined,) if stream_joined else ())
    return left.join(right, *args)


def test_join_repartition_topics_take_stream_joined_serdes_else_the_sides():
    b = StreamsBuilder()
    _join(b, StreamJoined.with_name("j").with_(S, None, None)).to("out")
    topology = b.build()
    # select_key dropped the key serde; StreamJoined's key serde, each side's value serde.
    assert _topics(topology) == {
        "j-left-repartition": TopicSerdes(S, L),
        "j-right-repartition": TopicSerdes(S, D),
    }
    assert _sinks(topology) == {"out": TopicSerdes(S, J)}  # the join keeps the key serde
    b = StreamsBuilder()
    _join(b, StreamJoined.with_name("j").with_(None, J, Serdes.Integer())).to("out")
    topics = _topics(b.build())
    assert topics["j-left-repartition"] == TopicSerdes(J, J)
    assert topics["j-right-repartition"] == TopicSerdes(J, Serdes.Integer())


def test_join_stores_refuse_what_their_serdes_cannot_hold():
    b = StreamsBuilder()
    left, right = b.stream("in"), b.stream("right")
    window = JoinWindows.of_time_difference_without_grace(timedelta(milliseconds=10))
    left.join(right, lambda v, o: [v, o], window, StreamJoined.with_(S, L, S)).to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        source, other = driver.create_input_topic("in"), driver.create_input_topic("right")
        source.pipe_input("k", 1, 1)
        other.pipe_input("k", "x", 2)
        assert driver.create_output_topic("out").read_key_values_to_list() == [("k", [1, "x"])]
        with pytest.raises(SerializationException) as info:
            other.pipe_input("k", 7, 3)
        text = str(info.value)
        assert "store 'KSTREAM-JOINOTHER-0000000005-store' has value serde Serdes.String()" in text
        assert "cannot serialize an int" in text
        with pytest.raises(SerializationException, match="key serde Serdes.String()"):
            source.pipe_input(5, 1, 4)
