"""Grouped and Materialized serdes (Kafka Streams 4.3's): the DSL objects, the serdes of the
repartition topic and of the store an aggregation gets by Kafka's defaulting rules, and a
store refusing a value its serde cannot hold."""

from __future__ import annotations

import pytest
from lakestate import (
    Consumed,
    Grouped,
    Materialized,
    Serdes,
    SerializationException,
    StreamsBuilder,
    TopologyException,
)
from lakestate.serdes import TopicSerdes
from lakestate.testing.driver import TopologyTestDriver
from lakestate.topology.graph import SINK, SOURCE

S, L, J = Serdes.String(), Serdes.Long(), Serdes.Json()


def test_grouped_builders_chain_name_and_serdes_as_kafkas():
    assert Grouped.with_(S, L) == Grouped(None, S, L)
    assert Grouped.with_("g", S, L) == Grouped("g", S, L)
    assert Grouped.as_("g").with_key_serde(S).with_value_serde(L) == Grouped("g", S, L)
    assert Grouped.with_key_serde(S) == Grouped(None, S, None)  # on the class too
    assert Grouped.with_value_serde(L).with_name("g") == Grouped("g", None, L)
    assert Grouped.with_(S, None).serdes == TopicSerdes(S, J)
    assert Grouped.as_("g").with_(S, L) == Grouped("g", S, L)  # an instance keeps its name
    with pytest.raises(TopologyException, match="must be a serde"):
        Grouped.with_("not a serde", L)
    with pytest.raises(TopologyException, match="takes"):
        Grouped.with_(S)


def test_materialized_serdes_chain_with_a_name():
    m = Materialized.as_("counts").with_key_serde(S).with_value_serde(L)
    assert (m.store_name, m.key_serde, m.value_serde) == ("counts", S, L)
    assert Materialized.with_(S, L) == Materialized(None, key_serde=S, value_serde=L)
    assert Materialized.with_(None, None).has_serdes is False
    assert Materialized.as_("counts").with_(S, L) == m  # an instance keeps its name
    with pytest.raises(TopologyException, match="must be a serde"):
        Materialized.as_("x").with_value_serde(int)


def _stores_and_repartition(build) -> tuple[dict, TopicSerdes | None]:
    b = StreamsBuilder()
    build(b)
    topology = b.build()
    internal = [
        n.serdes for n in topology.nodes.values() if n.internal_topic and n.kind in (SOURCE, SINK)
    ]
    assert len(set(internal)) <= 1  # the topic's sink and source agree
    return {n: s.serdes for n, s in topology.stores.items()}, (internal or [None])[0]


def test_store_serdes_follow_kafkas_defaults():
    by_user = lambda k, v: v["user"]  # noqa: E731
    # count: the Grouped key serde, a Long value; the repartition topic: Grouped's serdes.
    stores, topic = _stores_and_repartition(
        lambda b: b.stream("in").group_by(by_user, Grouped.with_(S, J)).count(Materialized.as_("c"))
    )
    assert stores == {"c": TopicSerdes(S, L)} and topic == TopicSerdes(S, J)
    # reduce: the Grouped value serde; Materialized's win over Grouped's.
    stores, _ = _stores_and_repartition(
        lambda b: (
            b.stream("in")
            .group_by_key(Grouped.with_(S, L))
            .reduce(lambda a, v: a + v, Materialized.as_("r").with_key_serde(J))
        )
    )
    assert stores == {"r": TopicSerdes(J, L)}
    # aggregate: the value serde is the default (Json) unless Materialized gives one.
    stores, _ = _stores_and_repartition(
        lambda b: (
            b.stream("in")
            .group_by_key(Grouped.with_(S, L))
            .aggregate(lambda: 0, lambda k, v, a: a + v, Materialized.as_("a"))
        )
    )
    assert stores == {"a": TopicSerdes(S, J)}
    # No serde anywhere: the store stays Json, as it always was.
    stores, topic = _stores_and_repartition(
        lambda b: b.stream("in").group_by(by_user).count(Materialized.as_("c"))
    )
    assert stores == {"c": TopicSerdes()} and topic == TopicSerdes()
    # A table's store takes Materialized's serdes, else its topic's (Consumed).
    stores, _ = _stores_and_repartition(
        lambda b: b.table("t", Consumed.with_(S, L), Materialized.as_("t1"))
    )
    assert stores == {"t1": TopicSerdes(S, L)}
    # A re-grouped table's count: Grouped's key serde, a Long value.
    stores, topic = _stores_and_repartition(
        lambda b: (
            b.table("t")
            .group_by(lambda k, v: (v, 1), Grouped.with_(S, L))
            .count(Materialized.as_("tc"))
        )
    )
    assert stores["tc"] == TopicSerdes(S, L) and topic == TopicSerdes(S, J)


def test_bytes_stores_take_kafkas_serdes_given_or_carried():
    from datetime import timedelta

    from lakestate import TimeWindows

    B = Serdes.Bytes()
    stores, _ = _stores_and_repartition(
        lambda b: b.stream("in").group_by_key(Grouped.with_(B, J)).count(Materialized.as_("c"))
    )
    assert stores["c"] == TopicSerdes(B, L)
    stores, _ = _stores_and_repartition(
        lambda b: b.table("t", Consumed.with_(S, B), Materialized.as_("t"))
    )
    assert stores["t"] == TopicSerdes(S, B)
    # Carried from Consumed (Kafka's store takes it), on a window store too.
    stores, _ = _stores_and_repartition(
        lambda b: (
            b.stream("in", Consumed.with_(B, L))
            .group_by_key()
            .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=1)))
            .count(Materialized.as_("w"))
        )
    )
    assert stores["w"] == TopicSerdes(B, L)


def test_a_grouped_name_names_the_repartition_topic_and_the_key_selector():
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, Grouped.as_("by-value")).count()
    described = b.build().describe()
    assert "Processor: by-value" in described
    assert "Sink: by-value-repartition-sink (topic: by-value-repartition)" in described
    assert "Source: by-value-repartition-source (topics: ['by-value-repartition'])" in described


def test_a_global_tables_store_takes_materialized_serdes_and_checks_them():
    b = StreamsBuilder()
    b.global_table("g", Consumed.with_(S, J), Materialized.as_("g").with_value_serde(L))
    b.global_table("h", Consumed.with_(S, L), Materialized.as_("h"))  # decoded already
    topology = b.build()
    assert topology.stores["g"].serdes == TopicSerdes(S, L)
    assert topology.stores["h"].serdes == TopicSerdes()
    with TopologyTestDriver(topology, {"application.id": "app"}) as driver:
        source = driver.create_input_topic("g")
        source.pipe_input("k", 5)
        with pytest.raises(SerializationException, match="store 'g' has value serde Serdes"):
            source.pipe_input("k", "x")


def test_a_count_by_string_key_runs_and_its_store_holds_longs():
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v["user"], Grouped.with_(S, J)).count(
        Materialized.as_("counts")
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        source = driver.create_input_topic("in")
        source.pipe_key_value_list([("k", {"user": "c1"}), ("k", {"user": "c1"})])
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("c1", 1),
            ("c1", 2),
        ]
        assert driver.get_key_value_store("counts").get("c1") == 2
        # The repartition topic's key serde is String: a key of another type fails there.
        with pytest.raises(SerializationException, match=r"Serdes\.String\(\) cannot serialize"):
            source.pipe_input("k", {"user": 7})


@pytest.mark.parametrize(
    ("fold", "bad"),
    [
        (lambda b: b.reduce(lambda a, v: v, Materialized.as_("s").with_value_serde(L)), "x"),
        (lambda b: b.aggregate(lambda: 0, lambda k, v, a: v, Materialized.with_(None, L)), "x"),
        (lambda b: b.aggregate(lambda: 0, lambda k, v, a: v, Materialized.with_(None, L)), {}),
        (lambda b: b.count(Materialized.as_("s").with_key_serde(Serdes.Integer())), None),
    ],
)
def test_a_store_refuses_a_value_its_serde_cannot_hold_naming_store_serde_and_type(fold, bad):
    b = StreamsBuilder()
    fold(b.stream("in").group_by_key())
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input(1, 5)  # fits every store above
        if bad is None:  # the Integer key store, given a str key
            with pytest.raises(SerializationException) as info:
                source.pipe_input("k", 5)
            assert "key serde Serdes.Integer()" in str(info.value)
            assert "a str" in str(info.value)
            return
        with pytest.raises(SerializationException) as info:
            source.pipe_input(1, bad)
        text = str(info.value)
        assert "store '" in text and "value serde Serdes.Long()" in text
        assert ("a str" if bad == "x" else "a dict") in text


@pytest.mark.parametrize(
    ("serde", "json_text", "shown"),
    [
        ("Serdes.String()", '"c1"', "c1"),
        ("Serdes.String()", '"é \\"q\\""', 'é "q"'),
        ("Serdes.Long()", "9007199254740993", 9007199254740993),
        ("Serdes.Integer()", "-7", -7),
        ("Serdes.Double()", "1.5", 1.5),
        ("Serdes.Double()", "1e+20", 1e20),
        ("Serdes.Bytes()", '"AP8="', b"\x00\xff"),
        ("Serdes.Json()", '"c1"', '"c1"'),
        (None, '{"a":1}', '{"a":1}'),
    ],
)
def test_a_state_view_column_is_typed_by_its_serde_on_duckdb(serde, json_text, shown):
    from lakestate.read import duckdb_engine
    from lakestate.read.views import typed_column

    con = duckdb_engine.connect()
    column = typed_column("key", serde, duckdb_engine.quote)
    row = con.execute(f"SELECT {column} FROM (SELECT ? AS key) AS t", [json_text]).fetchone()
    assert row[0] == shown and type(row[0]) is type(shown)


def test_the_layout_records_store_serdes_and_reads_an_older_layout_as_json(tmp_path):
    from deltalake import write_deltalake
    from lakestate.checkpoint import recorded_layout
    from lakestate.checkpoint.recorded_layout import RecordedLayout
    from lakestate.serdes import serde_named

    layout = RecordedLayout(
        {0: ("in",), 1: ("app-c-repartition",)},
        {0: (), 1: ("c", "plain")},
        (),
        {"c": ("Serdes.String()", "Serdes.Long()")},
    )
    recorded_layout.record(str(tmp_path / "new"), layout)
    assert recorded_layout.read(str(tmp_path / "new")) == layout
    assert serde_named("Serdes.Long()") == Serdes.Long()
    with pytest.raises(ValueError, match="no serde is named"):
        serde_named("Serdes.Short()")
    # A layout written before serdes were recorded: no serde columns, every store Json.
    old = layout.to_table().drop_columns(["store_key_serdes", "store_value_serdes"])
    write_deltalake(str(tmp_path / "old"), old)
    assert recorded_layout.read(str(tmp_path / "old")).store_serdes == {}
