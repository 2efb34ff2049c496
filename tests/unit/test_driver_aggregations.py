"""Stream aggregations (count, aggregate, reduce) through the TopologyTestDriver.

Kafka Streams semantics, without record caching (the driver commits after every record):
every update of an aggregate is forwarded; the result's timestamp is the max of the record's
and the previous aggregate's; records with a null key or a null value are dropped and
counted in the "dropped-records" metric; a key change before the aggregation goes through a
repartition topic.
"""

from __future__ import annotations

import pytest
from lakestate import Materialized, StreamsBuilder, StreamsException
from lakestate.testing.driver import TestRecord, TopologyTestDriver

BACKENDS = [{}, {"lakestate.state.backend": "rocksdb"}]
BACKEND_IDS = ["memory", "rocksdb"]


@pytest.fixture(params=BACKENDS, ids=BACKEND_IDS)
def config(request):
    return dict(request.param)


def _pipe(driver, records, topic="in"):
    source = driver.create_input_topic(topic)
    for key, value, ts in records:
        source.pipe_input(key, value, timestamp=ts)


def _count_topology(materialized=None):
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(materialized).to_stream().to("out")
    return b.build()


def test_count_emits_every_update(config):
    with TopologyTestDriver(_count_topology(Materialized.as_("counts")), config) as driver:
        _pipe(driver, [("a", "x", 1), ("b", "y", 2), ("a", "z", 3), ("a", "w", 4)])
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("a", 1, 1),
            TestRecord("b", 1, 2),
            TestRecord("a", 2, 3),
            TestRecord("a", 3, 4),
        ]
        store = driver.get_key_value_store("counts")
        assert store.get("a") == 3
        assert store.get("b") == 1
        assert store.get("never") is None


def test_output_timestamp_is_max_of_record_and_previous_aggregate(config):
    with TopologyTestDriver(_count_topology(Materialized.as_("counts")), config) as driver:
        _pipe(driver, [("a", 1, 10), ("a", 1, 5), ("a", 1, 20), ("a", 1, 15), ("b", 1, 3)])
        out = driver.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in out] == [
            ("a", 1, 10),
            ("a", 2, 10),
            ("a", 3, 20),
            ("a", 4, 20),
            ("b", 1, 3),  # per key: b's first record sets its own timestamp
        ]
        assert driver.get_key_value_store("counts").get_with_timestamp("a") == (4, 20)


def test_aggregate_folds_values_from_the_initializer(config):
    init_calls = []

    def initializer():
        init_calls.append(1)
        return {"sum": 0, "seen": []}

    def aggregator(key, value, agg):
        return {"sum": agg["sum"] + value, "seen": agg["seen"] + [f"{key}:{value}"]}

    b = StreamsBuilder()
    b.stream("in").group_by_key().aggregate(
        initializer, aggregator, Materialized.as_("sums")
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("a", 1, 1), ("b", 10, 2), ("a", 2, 3)])
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("a", {"sum": 1, "seen": ["a:1"]}),
            ("b", {"sum": 10, "seen": ["b:10"]}),
            ("a", {"sum": 3, "seen": ["a:1", "a:2"]}),
        ]
        assert len(init_calls) == 2  # once per new key
        assert driver.get_key_value_store("sums").get("a") == {"sum": 3, "seen": ["a:1", "a:2"]}


def test_reduce_starts_from_the_first_value(config):
    calls = []

    def reducer(agg, value):
        calls.append((agg, value))
        return agg + value

    b = StreamsBuilder()
    b.stream("in").group_by_key().reduce(reducer, Materialized.as_("r")).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("a", "x", 1), ("a", "y", 2), ("b", "q", 3), ("a", "z", 0)])
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("a", "x", 1),
            TestRecord("a", "xy", 2),
            TestRecord("b", "q", 3),
            TestRecord("a", "xyz", 2),
        ]
        assert calls == [("x", "y"), ("xy", "z")]  # never called for a key's first value
        assert driver.get_key_value_store("r").get("a") == "xyz"


@pytest.mark.parametrize(
    "aggregation",
    [
        lambda g: g.count(Materialized.as_("agg")),
        lambda g: g.aggregate(lambda: 0, lambda k, v, a: a + v, Materialized.as_("agg")),
        lambda g: g.reduce(lambda a, v: a + v, Materialized.as_("agg")),
    ],
    ids=["count", "aggregate", "reduce"],
)
def test_null_keys_and_null_values_are_dropped_and_counted(aggregation, config):
    b = StreamsBuilder()
    aggregation(b.stream("in").group_by_key()).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("a", 1, 1), (None, 5, 2), ("a", None, 3), (None, None, 4), ("a", 2, 5)])
        out = driver.create_output_topic("out").read_records_to_list()
        assert [r.key for r in out] == ["a", "a"]
        assert [r.timestamp for r in out] == [1, 5]
        assert driver.metrics()["dropped-records"] == 3
        store = driver.get_key_value_store("agg")
        assert store.get(None) is None
        assert [k for k, _ in store.all()] == ["a"]


def test_no_dropped_records_metric_when_nothing_is_dropped():
    with TopologyTestDriver(_count_topology()) as driver:
        _pipe(driver, [("a", 1, 1)])
        assert driver.metrics().get("dropped-records", 0) == 0


def test_select_key_then_group_by_key_goes_through_the_repartition_topic(config):
    # Orders keyed by order id; total amount per customer.
    b = StreamsBuilder()
    b.stream("orders").select_key(lambda k, v: v["customer"]).map_values(
        lambda v: v["amount"]
    ).group_by_key().aggregate(
        lambda: 0, lambda k, v, total: total + v, Materialized.as_("totals")
    ).to_stream().to("totals-out")
    topology = b.build()
    assert len(topology.subtopologies) == 2
    assert topology.subtopologies[0].repartition_sinks == ("totals-repartition",)
    with TopologyTestDriver(topology, config) as driver:
        _pipe(
            driver,
            [
                ("o1", {"customer": "ann", "amount": 10}, 1),
                ("o2", {"customer": "bob", "amount": 5}, 2),
                ("o3", {"customer": "ann", "amount": 7}, 3),
                ("o4", {"customer": None, "amount": 100}, 4),  # null new key: not aggregated
                ("o5", {"customer": "bob", "amount": None}, 5),  # null value: dropped
                ("o6", {"customer": "ann", "amount": 1}, 6),
            ],
            topic="orders",
        )
        assert driver.create_output_topic("totals-out").read_records_to_list() == [
            TestRecord("ann", 10, 1),
            TestRecord("bob", 5, 2),
            TestRecord("ann", 17, 3),
            TestRecord("ann", 18, 6),
        ]
        store = driver.get_key_value_store("totals")
        assert dict(store.all()) == {"ann": 18, "bob": 5}
        # The repartition topic is internal, never an output.
        assert driver.create_output_topic("test-app-totals-repartition").is_empty()


def test_map_then_count_repartitions_by_the_new_key(config):
    b = StreamsBuilder()
    b.stream("in").map(lambda k, v: (v, k)).group_by_key().count(
        Materialized.as_("c")
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("1", "x", 1), ("2", "y", 2), ("3", "x", 3)])
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("x", 1),
            ("y", 1),
            ("x", 2),
        ]


def test_group_by_selector_on_a_stream(config):
    # Word count by lower-cased word, and the selector sees key and value.
    seen = []

    def selector(key, value):
        seen.append((key, value))
        return value.lower()

    b = StreamsBuilder()
    b.stream("words").group_by(selector).count(Materialized.as_("word-counts")).to_stream().to(
        "counts"
    )
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(
            driver, [(1, "Kafka", 1), (2, "delta", 2), (3, "KAFKA", 3), (None, "kafka", 4)], "words"
        )
        assert seen == [(1, "Kafka"), (2, "delta"), (3, "KAFKA"), (None, "kafka")]
        # A null input key does not matter: the record is grouped by the selected key.
        assert driver.create_output_topic("counts").read_key_values_to_list() == [
            ("kafka", 1),
            ("delta", 1),
            ("kafka", 2),
            ("kafka", 3),
        ]
        assert driver.get_key_value_store("word-counts").get("kafka") == 3


def test_group_by_then_reduce_keeps_the_max(config):
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v["sensor"]).reduce(
        lambda a, v: v if v["temp"] > a["temp"] else a, Materialized.as_("max-temp")
    ).to_stream().map_values(lambda v: v["temp"]).to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(
            driver,
            [
                (None, {"sensor": "s1", "temp": 20}, 1),
                (None, {"sensor": "s1", "temp": 18}, 2),
                (None, {"sensor": "s2", "temp": 30}, 3),
                (None, {"sensor": "s1", "temp": 25}, 4),
            ],
        )
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("s1", 20),
            ("s1", 20),  # every update is emitted, even when the aggregate did not change
            ("s2", 30),
            ("s1", 25),
        ]
        assert driver.get_key_value_store("max-temp").get("s1") == {"sensor": "s1", "temp": 25}


def test_store_sees_each_committed_aggregate(config):
    with TopologyTestDriver(_count_topology(Materialized.as_("counts")), config) as driver:
        store = driver.get_key_value_store("counts")
        source = driver.create_input_topic("in")
        assert store.get("a") is None
        for expected in range(1, 4):
            source.pipe_input("a", "v", timestamp=expected)
            assert store.get("a") == expected
        assert list(store.all()) == [("a", 3)]
        assert store.approximate_num_entries() == 1


def test_unnamed_store_is_reachable_by_its_generated_name():
    topology = _count_topology()
    (store_name,) = topology.stores
    with TopologyTestDriver(topology) as driver:
        _pipe(driver, [("a", 1, 1), ("a", 1, 2)])
        assert driver.get_key_value_store(store_name).get("a") == 2
        with pytest.raises(StreamsException):
            driver.get_key_value_store("counts")


def test_several_aggregations_of_one_stream():
    b = StreamsBuilder()
    s = b.stream("in")
    s.group_by_key().count(Materialized.as_("count")).to_stream().to("counts")
    s.group_by_key().aggregate(
        lambda: 0, lambda k, v, a: a + v, Materialized.as_("sum")
    ).to_stream().to("sums")
    s.group_by(lambda k, v: v % 2 == 0).count(Materialized.as_("parity"))
    with TopologyTestDriver(b.build()) as driver:
        _pipe(driver, [("a", 1, 1), ("a", 2, 2), ("b", 4, 3)])
        assert driver.create_output_topic("counts").read_key_values_to_list() == [
            ("a", 1),
            ("a", 2),
            ("b", 1),
        ]
        assert driver.create_output_topic("sums").read_key_values_to_list() == [
            ("a", 1),
            ("a", 3),
            ("b", 4),
        ]
        parity = driver.get_key_value_store("parity")
        assert (parity.get(True), parity.get(False)) == (2, 1)


def test_aggregation_result_feeds_table_operators():
    b = StreamsBuilder()
    b.stream("in").group_by_key().count().filter(lambda k, c: c >= 2).to_stream().to("frequent")
    with TopologyTestDriver(b.build()) as driver:
        _pipe(driver, [("a", 1, 1), ("a", 1, 2), ("b", 1, 3), ("a", 1, 4)])
        assert driver.create_output_topic("frequent").read_key_values_to_list() == [
            ("a", 2),
            ("a", 3),
        ]


def test_keys_of_different_types_are_different_groups():
    with TopologyTestDriver(_count_topology(Materialized.as_("c"))) as driver:
        _pipe(driver, [(1, "x", 1), ("1", "x", 2), (1.5, "x", 3), (1, "x", 4), (("t", 1), "x", 5)])
        out = driver.create_output_topic("out").read_key_values_to_list()
        assert out == [(1, 1), ("1", 1), (1.5, 1), (1, 2), (("t", 1), 1)]
        store = driver.get_key_value_store("c")
        assert (store.get(1), store.get("1"), store.get(1.5)) == (2, 1, 1)
