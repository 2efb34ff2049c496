"""Building and validating topologies: sub-topologies, repartition topics, names, errors.

Kafka Streams semantics: a key-changing operation (select_key, map, group_by) marks the
stream for repartitioning; the next stateful operation reads through an internal topic
``<store>-repartition`` (really ``<application.id>-<store>-repartition``), which cuts the
graph into two sub-topologies. Node names are PREFIX + a 10-digit builder-wide counter.
"""

from __future__ import annotations

import re

import lakestate as ls
import pytest
from lakestate import Materialized, StreamsBuilder, TopologyException
from lakestate.testing.driver import TopologyTestDriver
from lakestate.topology.graph import SINK, SOURCE, internal_topic_name

NAME = re.compile(r"^(?P<prefix>[A-Z-]+-)(?P<index>\d{10})$")


def _by_prefix(topology: ls.Topology, prefix: str) -> list[str]:
    return [n for n in topology.nodes if re.fullmatch(re.escape(prefix) + r"\d{10}", n)]


def _one(topology: ls.Topology, prefix: str) -> str:
    names = _by_prefix(topology, prefix)
    assert len(names) == 1, (prefix, list(topology.nodes))
    return names[0]


def _ident(k, v):
    return v


# -- node and store naming -------------------------------------------------------------


def test_stateless_chain_is_named_like_kafka():
    b = StreamsBuilder()
    b.stream("in").filter(lambda k, v: True).map_values(str).to("out")
    t = b.build()
    assert list(t.nodes) == [
        "KSTREAM-SOURCE-0000000000",
        "KSTREAM-FILTER-0000000001",
        "KSTREAM-MAPVALUES-0000000002",
        "KSTREAM-SINK-0000000003",
    ]
    assert t.nodes["KSTREAM-SOURCE-0000000000"].kind == SOURCE
    assert t.nodes["KSTREAM-SINK-0000000003"].kind == SINK
    assert t.nodes["KSTREAM-SOURCE-0000000000"].children == ["KSTREAM-FILTER-0000000001"]
    assert t.nodes["KSTREAM-SINK-0000000003"].parents == ["KSTREAM-MAPVALUES-0000000002"]


def test_every_operator_uses_its_kafka_prefix():
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter_not(lambda k, v: False).select_key(_ident).map(lambda k, v: (k, v)).peek(
        lambda k, v: None
    ).to("out")
    s.group_by_key().count().to_stream().to("counts")
    s.group_by_key().reduce(lambda a, v: v)
    s.group_by(_ident).aggregate(lambda: 0, lambda k, v, a: a)
    s.to_table()
    table = b.table("tbl")
    table.filter(lambda k, v: True).map_values(str).to_stream().to("tbl-out")
    table.group_by(lambda k, v: (v, v)).count()
    table.group_by(lambda k, v: (v, v)).reduce(lambda a, v: v, lambda a, v: a)
    t = b.build()

    prefixes = {NAME.match(n).group("prefix") for n in t.nodes}
    for prefix in [
        "KSTREAM-SOURCE-",
        "KSTREAM-FILTER-",
        "KSTREAM-KEY-SELECT-",
        "KSTREAM-MAP-",
        "KSTREAM-PEEK-",
        "KSTREAM-SINK-",
        "KSTREAM-AGGREGATE-",
        "KSTREAM-REDUCE-",
        "KSTREAM-TOTABLE-",
        "KTABLE-TOSTREAM-",
        "KTABLE-SOURCE-",
        "KTABLE-FILTER-",
        "KTABLE-MAPVALUES-",
        "KTABLE-SELECT-",
        "KTABLE-AGGREGATE-",
        "KTABLE-REDUCE-",
    ]:
        assert prefix in prefixes, (prefix, sorted(prefixes))
    # One counter for the whole builder: every generated name has its own index.
    indexes = [int(NAME.match(n).group("index")) for n in t.nodes]
    store_indexes = [
        int(m.group(1)) for s in t.stores if (m := re.search(r"STATE-STORE-(\d{10})$", s))
    ]
    assert len(set(indexes + store_indexes)) == len(indexes) + len(store_indexes)


def test_generated_store_names_follow_kafka():
    b = StreamsBuilder()
    s = b.stream("in")
    s.group_by_key().count()
    s.group_by_key().reduce(lambda a, v: v)
    b.table("users")
    b.table("regions").group_by(lambda k, v: (v, v)).count()
    b.table("prices").group_by(lambda k, v: (v, v)).reduce(lambda a, v: v, lambda a, v: a)
    stores = set(b.build().stores)
    patterns = [
        r"KSTREAM-AGGREGATE-STATE-STORE-\d{10}",
        r"KSTREAM-REDUCE-STATE-STORE-\d{10}",
        r"users-STATE-STORE-\d{10}",
        r"regions-STATE-STORE-\d{10}",
        r"prices-STATE-STORE-\d{10}",
        r"KTABLE-AGGREGATE-STATE-STORE-\d{10}",
    ]
    for pattern in patterns:
        assert any(re.fullmatch(pattern, s) for s in stores), (pattern, stores)
    # Two table aggregations: both stores are KTABLE-AGGREGATE-STATE-STORE-* (reduce too).
    assert sum(bool(re.fullmatch(patterns[-1], s)) for s in stores) == 2
    assert len(stores) == 7


def test_materialized_as_names_the_store():
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(materialized=Materialized.as_("counts"))
    b.table("users", materialized=Materialized.as_("users-store"))
    t = b.build()
    assert set(t.stores) == {"counts", "users-store"}
    agg = _one(t, "KSTREAM-AGGREGATE-")
    assert t.nodes[agg].stores == ["counts"]
    assert t.nodes[_one(t, "KTABLE-SOURCE-")].stores == ["users-store"]


@pytest.mark.parametrize("bad", ["", "   ", "a/b", "a b", "a\\b", 42, None])
def test_materialized_rejects_bad_store_names(bad):
    with pytest.raises(TopologyException):
        Materialized.as_(bad)


# -- sub-topologies and repartition topics ----------------------------------------------


def test_select_key_then_aggregation_splits_at_a_repartition_topic():
    b = StreamsBuilder()
    b.stream("in").select_key(_ident).group_by_key().count(
        Materialized.as_("counts")
    ).to_stream().to("out")
    t = b.build()
    assert len(t.subtopologies) == 2
    first, second = t.subtopologies
    assert (first.id, second.id) == (0, 1)
    assert first.source_topics == ("in",)
    assert first.repartition_sources == ()
    assert first.repartition_sinks == ("counts-repartition",)
    assert first.sink_topics == ()
    assert first.stores == ()
    assert second.source_topics == ()
    assert second.repartition_sources == ("counts-repartition",)
    assert second.stores == ("counts",)
    assert second.sink_topics == ("out",)
    assert "KSTREAM-KEY-SELECT-0000000001" in first.nodes
    assert _one(t, "KSTREAM-AGGREGATE-") in second.nodes
    # The repartition topic is internal: not an input or output of the application.
    assert t.source_topics() == ["in"]
    assert t.sink_topics() == ["out"]
    # Parents come before children inside a sub-topology.
    for sub in t.subtopologies:
        position = {n: i for i, n in enumerate(sub.nodes)}
        for name in sub.nodes:
            for child in t.nodes[name].children:
                if child in position:
                    assert position[name] < position[child]


def test_unnamed_store_names_its_repartition_topic():
    b = StreamsBuilder()
    b.stream("in").map(lambda k, v: (v, k)).group_by_key().count()
    t = b.build()
    (store,) = t.stores
    assert re.fullmatch(r"KSTREAM-AGGREGATE-STATE-STORE-\d{10}", store)
    assert t.subtopologies[0].repartition_sinks == (f"{store}-repartition",)
    assert t.subtopologies[1].repartition_sources == (f"{store}-repartition",)


@pytest.mark.parametrize(
    "key_change",
    [
        lambda s: s.select_key(_ident).group_by_key(),
        lambda s: s.map(lambda k, v: (v, k)).group_by_key(),
        lambda s: s.group_by(_ident),
        lambda s: (
            s.select_key(_ident)
            .filter(lambda k, v: True)
            .map_values(str)
            .peek(lambda k, v: None)
            .group_by_key()
        ),
    ],
    ids=["select_key", "map", "group_by", "select_key-then-stateless"],
)
@pytest.mark.parametrize(
    "aggregation",
    [
        lambda g: g.count(Materialized.as_("agg")),
        lambda g: g.aggregate(lambda: 0, lambda k, v, a: a, Materialized.as_("agg")),
        lambda g: g.reduce(lambda a, v: v, Materialized.as_("agg")),
    ],
    ids=["count", "aggregate", "reduce"],
)
def test_key_change_before_aggregation_repartitions(key_change, aggregation):
    b = StreamsBuilder()
    aggregation(key_change(b.stream("in")))
    t = b.build()
    assert len(t.subtopologies) == 2
    assert t.subtopologies[0].repartition_sinks == ("agg-repartition",)
    assert t.subtopologies[1].repartition_sources == ("agg-repartition",)
    assert t.subtopologies[1].stores == ("agg",)


def test_key_change_before_to_table_repartitions():
    b = StreamsBuilder()
    b.stream("in").select_key(_ident).to_table(Materialized.as_("latest"))
    t = b.build()
    assert len(t.subtopologies) == 2
    assert t.subtopologies[1].repartition_sources == ("latest-repartition",)


def test_select_key_followed_only_by_stateless_ops_does_not_repartition():
    b = StreamsBuilder()
    b.stream("in").select_key(_ident).map_values(str).filter(lambda k, v: True).to("out")
    b.stream("other").map(lambda k, v: (v, k)).peek(lambda k, v: None).to("out2")
    t = b.build()
    assert len(t.subtopologies) == 2  # two unconnected inputs, no repartition
    for sub in t.subtopologies:
        assert sub.repartition_sinks == ()
        assert sub.repartition_sources == ()
    assert t.subtopologies[0].source_topics == ("in",)
    assert t.subtopologies[0].sink_topics == ("out",)
    assert t.subtopologies[1].source_topics == ("other",)


@pytest.mark.parametrize(
    "grouped",
    [
        lambda s: s.group_by_key(),
        lambda s: (
            s.filter(lambda k, v: True).map_values(str).peek(lambda k, v: None).group_by_key()
        ),
    ],
    ids=["direct", "after-value-only-ops"],
)
def test_group_by_key_without_key_change_does_not_repartition(grouped):
    b = StreamsBuilder()
    grouped(b.stream("in")).count(Materialized.as_("counts")).to_stream().to("out")
    t = b.build()
    assert len(t.subtopologies) == 1
    (sub,) = t.subtopologies
    assert sub.repartition_sinks == () and sub.repartition_sources == ()
    assert sub.source_topics == ("in",)
    assert sub.stores == ("counts",)
    assert sub.sink_topics == ("out",)


@pytest.mark.parametrize(
    "aggregation",
    [
        lambda g: g.count(Materialized.as_("agg")),
        lambda g: g.aggregate(
            lambda: 0, lambda k, v, a: a, lambda k, v, a: a, Materialized.as_("agg")
        ),
        lambda g: g.reduce(lambda a, v: v, lambda a, v: a, Materialized.as_("agg")),
    ],
    ids=["count", "aggregate", "reduce"],
)
def test_table_group_by_always_repartitions(aggregation):
    b = StreamsBuilder()
    # Even a selector that keeps the key goes through the repartition topic.
    aggregation(b.table("users", Materialized.as_("users")).group_by(lambda k, v: (k, v)))
    t = b.build()
    assert len(t.subtopologies) == 2
    first, second = t.subtopologies
    assert first.source_topics == ("users",)
    assert first.stores == ("users",)
    assert first.repartition_sinks == ("agg-repartition",)
    assert second.repartition_sources == ("agg-repartition",)
    assert second.stores == ("agg",)
    assert _one(t, "KTABLE-SELECT-") in first.nodes


def test_repartition_topic_is_prefixed_with_the_application_id_at_runtime():
    b = StreamsBuilder()
    b.stream("in").select_key(_ident).group_by_key().count(
        Materialized.as_("counts")
    ).to_stream().to("out")
    t = b.build()
    assert internal_topic_name("my-app", "counts-repartition") == "my-app-counts-repartition"
    assert t.subtopology_for_topic("in", "my-app").id == 0
    assert t.subtopology_for_topic("my-app-counts-repartition", "my-app").id == 1
    assert t.subtopology_for_topic("counts-repartition", "my-app") is None
    assert t.subtopology_for_topic("other-app-counts-repartition", "my-app") is None

    with TopologyTestDriver(t, {"application.id": "my-app"}) as driver:
        driver.create_input_topic("in").pipe_input("k1", "x", timestamp=1)
        driver.create_input_topic("in").pipe_input("k2", "x", timestamp=2)
        out = driver.create_output_topic("out")
        assert out.read_key_values_to_list() == [("x", 1), ("x", 2)]
        # Repartition records are internal: consumed by the next sub-topology, never output.
        assert driver.create_output_topic("my-app-counts-repartition").is_empty()
        assert driver.create_output_topic("counts-repartition").is_empty()


# -- validation errors ----------------------------------------------------------------


def _agg(k, v, a):
    return a


@pytest.mark.parametrize(
    ("build", "node", "what"),
    [
        (lambda b: b.stream("in").filter(42), "KSTREAM-FILTER-0000000001", "predicate"),
        (lambda b: b.stream("in").filter_not("x"), "KSTREAM-FILTER-0000000001", "predicate"),
        (lambda b: b.stream("in").map_values(None), "KSTREAM-MAPVALUES-0000000001", "mapper"),
        (lambda b: b.stream("in").select_key(1), "KSTREAM-KEY-SELECT-0000000001", "selector"),
        (lambda b: b.stream("in").map({}), "KSTREAM-MAP-0000000001", "mapper"),
        (lambda b: b.stream("in").peek(3), "KSTREAM-PEEK-0000000001", "action"),
        (lambda b: b.stream("in").group_by(None), "KSTREAM-KEY-SELECT-0000000001", "selector"),
        (
            lambda b: b.stream("in").filter(lambda k, v: True).map_values(7),
            "KSTREAM-MAPVALUES-0000000002",
            "mapper",
        ),
        (
            lambda b: b.stream("in").group_by_key().aggregate(0, _agg),
            r"KSTREAM-AGGREGATE-\d{10}",
            "initializer",
        ),
        (
            lambda b: b.stream("in").group_by_key().aggregate(lambda: 0, "sum"),
            r"KSTREAM-AGGREGATE-\d{10}",
            "aggregator",
        ),
        (
            lambda b: b.stream("in").group_by_key().reduce(None),
            r"KSTREAM-REDUCE-\d{10}",
            "reducer",
        ),
        (lambda b: b.table("t").filter(1), r"KTABLE-FILTER-\d{10}", "predicate"),
        (lambda b: b.table("t").filter_not(1), r"KTABLE-FILTER-\d{10}", "predicate"),
        (lambda b: b.table("t").map_values(1), r"KTABLE-MAPVALUES-\d{10}", "mapper"),
        (lambda b: b.table("t").group_by("region"), r"KTABLE-SELECT-\d{10}", "selector"),
        (
            lambda b: b.table("t").group_by(lambda k, v: (v, v)).aggregate(None, _agg, _agg),
            r"KTABLE-AGGREGATE-\d{10}",
            "initializer",
        ),
        (
            lambda b: b.table("t").group_by(lambda k, v: (v, v)).aggregate(lambda: 0, 1, _agg),
            r"KTABLE-AGGREGATE-\d{10}",
            "adder",
        ),
        (
            lambda b: b.table("t").group_by(lambda k, v: (v, v)).aggregate(lambda: 0, _agg, 1),
            r"KTABLE-AGGREGATE-\d{10}",
            "subtractor",
        ),
        (
            lambda b: b.table("t").group_by(lambda k, v: (v, v)).reduce(lambda a, v: a, None),
            r"KTABLE-REDUCE-\d{10}",
            "subtractor",
        ),
    ],
)
def test_non_callable_function_is_rejected_naming_the_node(build, node, what):
    b = StreamsBuilder()
    with pytest.raises(TopologyException) as info:
        build(b)
        b.build()  # whether the DSL call or build() checks, the error names the node
    message = str(info.value)
    assert re.search(node, message), message
    assert what in message, message


@pytest.mark.parametrize(
    "second",
    [
        lambda b: b.stream("orders"),
        lambda b: b.table("orders"),
        lambda b: b.stream(["payments", "orders"]),
        lambda b: b.global_table("orders"),
    ],
    ids=["stream", "table", "multi-topic-stream", "global-table"],
)
def test_same_topic_read_by_two_sources_is_rejected(second):
    b = StreamsBuilder()
    b.stream("orders").to("out")
    second(b)
    with pytest.raises(TopologyException) as info:
        b.build()
    message = str(info.value)
    assert "orders" in message
    assert "KSTREAM-SOURCE-0000000000" in message  # the first reader
    assert re.search(r"KSTREAM-SOURCE-000000000[1-9]", message), message  # the second one


def test_same_store_name_materialized_twice_is_rejected():
    b = StreamsBuilder()
    b.stream("a").group_by_key().count(Materialized.as_("counts"))
    b.stream("b").group_by_key().count(Materialized.as_("counts"))
    with pytest.raises(TopologyException) as info:
        b.build()
    message = str(info.value)
    assert "counts" in message
    assert len(re.findall(r"KSTREAM-AGGREGATE-\d{10}", message)) == 2, message


def test_same_store_name_for_a_table_and_an_aggregation_is_rejected():
    b = StreamsBuilder()
    b.table("users", Materialized.as_("shared"))
    with pytest.raises(TopologyException, match="shared"):
        b.stream("clicks").group_by_key().reduce(lambda a, v: v, Materialized.as_("shared"))
        b.build()


def test_empty_builder_is_rejected():
    with pytest.raises(TopologyException):
        StreamsBuilder().build()


@pytest.mark.parametrize("topic", ["", "  ", None, 42])
def test_bad_topic_names_are_rejected(topic):
    b = StreamsBuilder()
    with pytest.raises(TopologyException):
        b.stream(topic)
        b.build()
    b2 = StreamsBuilder()
    with pytest.raises(TopologyException, match="KSTREAM-SINK-0000000001"):
        b2.stream("in").to(topic)
        b2.build()


def test_stream_without_topics_is_rejected():
    with pytest.raises(TopologyException):
        b = StreamsBuilder()
        b.stream([])
        b.build()


# -- immutability and describe -----------------------------------------------------------


def test_built_topology_is_not_changed_by_later_builder_calls():
    b = StreamsBuilder()
    s = b.stream("in")
    s.map_values(str.upper).to("out")
    t = b.build()
    before_describe = t.describe()
    before_nodes = {name: list(node.children) for name, node in t.nodes.items()}
    before_subs = list(t.subtopologies)

    s.filter(lambda k, v: True).to("later")
    s.group_by_key().count(Materialized.as_("late-counts"))
    b.stream("other").to("out2")
    t2 = b.build()

    assert t.describe() == before_describe
    assert {name: list(node.children) for name, node in t.nodes.items()} == before_nodes
    assert t.subtopologies == before_subs
    assert t.stores == {}
    assert len(t2.nodes) > len(t.nodes)
    assert "late-counts" in t2.stores

    with TopologyTestDriver(t) as driver:
        with pytest.raises(ls.StreamsException):
            driver.create_input_topic("other")
        driver.create_input_topic("in").pipe_input("k", "v", timestamp=1)
        assert driver.create_output_topic("out").read_key_values_to_list() == [("k", "V")]
        assert driver.create_output_topic("later").is_empty()
    with TopologyTestDriver(t2) as driver:
        driver.create_input_topic("in").pipe_input("k", "v", timestamp=1)
        assert driver.create_output_topic("later").read_key_values_to_list() == [("k", "v")]
        assert driver.get_key_value_store("late-counts").get("k") == 1


def test_build_twice_gives_equal_independent_topologies():
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("c")).to_stream().to("out")
    t1, t2 = b.build(), b.build()
    assert t1 is not t2
    assert t1.describe() == t2.describe()
    for t in (t1, t2):
        with TopologyTestDriver(t) as driver:
            driver.create_input_topic("in").pipe_input("k", 1, timestamp=1)
            assert driver.create_output_topic("out").read_key_values_to_list() == [("k", 1)]


def test_describe_lists_sub_topologies_nodes_topics_and_stores():
    b = StreamsBuilder()
    b.stream("in").select_key(_ident).group_by_key().count(
        Materialized.as_("counts")
    ).to_stream().to("out")
    b.global_table("countries", Materialized.as_("countries-store"))
    t = b.build()
    text = t.describe()
    assert text.startswith("Topologies:")
    assert "Sub-topology: 0" in text and "Sub-topology: 1" in text
    assert "Sub-topology: 2" not in text
    for name in t.nodes:
        if name in {g.source_node for g in t.global_tables}:
            continue
        assert name in text, name
    assert "Source: KSTREAM-SOURCE-0000000000" in text
    assert "'in'" in text and "out" in text
    assert "counts-repartition" in text
    assert "counts" in text
    assert "-->" in text
    assert "countries" in text and "countries-store" in text
    assert repr(t) == text
    # Sub-topology 0 is described before sub-topology 1, with the key selector in 0.
    assert text.index("Sub-topology: 0") < text.index("KSTREAM-KEY-SELECT-0000000001")
    assert text.index("KSTREAM-KEY-SELECT-0000000001") < text.index("Sub-topology: 1")


def test_multi_topic_stream_is_one_source():
    b = StreamsBuilder()
    b.stream(["a", "b"]).to("out")
    t = b.build()
    assert len(t.subtopologies) == 1
    assert t.subtopologies[0].source_topics == ("a", "b")
    with TopologyTestDriver(t) as driver:
        driver.create_input_topic("a").pipe_input("k", 1, timestamp=1)
        driver.create_input_topic("b").pipe_input("k", 2, timestamp=2)
        assert driver.create_output_topic("out").read_values_to_list() == [1, 2]
