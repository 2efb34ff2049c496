"""Failures while processing: the error names the node and the record, and the failed record
leaves nothing behind (no state change, no output); the next record processes normally."""

from __future__ import annotations

import re

import pytest
from lakestate import (
    Materialized,
    ProcessingException,
    SerializationException,
    StreamsBuilder,
    StreamsException,
)
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.memory import in_memory_store
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


def _assert_names_record(message, topic, offset, key, partition=0):
    assert topic in message, message
    assert re.search(rf"partition\W*{partition}\b", message), message
    assert re.search(rf"offset\W*{offset}\b", message), message
    assert repr(key) in message, message


# -- user function failures -----------------------------------------------------------------


def test_failing_user_function_raises_processing_exception_naming_node_and_record(config):
    b = StreamsBuilder()
    b.stream("orders").filter(lambda k, v: True).map_values(lambda v: 100 // v).to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("k0", 1, 1), ("k1", 2, 2)], "orders")
        with pytest.raises(ProcessingException) as info:
            _pipe(driver, [("user-42", 0, 3)], "orders")
        message = str(info.value)
        assert "KSTREAM-MAPVALUES-0000000002" in message
        _assert_names_record(message, "orders", 2, "user-42")
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        assert isinstance(info.value, StreamsException)
        out = driver.create_output_topic("out")
        assert out.read_values_to_list() == [100, 50]
        # The next record processes normally.
        _pipe(driver, [("k3", 4, 4)], "orders")
        assert out.read_records_to_list() == [TestRecord("k3", 25, 4)]


def _check(value, bad="bad"):
    """Raises on the bad value; returns None so that ``_check(v) or result`` gives result."""
    if value == bad:
        raise ValueError(f"boom on {value!r}")


def _grouped_table(s):
    return s.to_table().group_by(lambda k, v: ("g", v))


@pytest.mark.parametrize(
    ("build", "node", "key"),
    [
        (lambda s: s.filter(lambda k, v: _check(v) or True).to("out"), "KSTREAM-FILTER-", "k"),
        (lambda s: s.filter_not(lambda k, v: _check(v)).to("out"), "KSTREAM-FILTER-", "k"),
        (lambda s: s.map_values(lambda v: _check(v) or v).to("out"), "KSTREAM-MAPVALUES-", "k"),
        (
            lambda s: s.select_key(lambda k, v: _check(v) or k).to("out"),
            "KSTREAM-KEY-SELECT-",
            "k",
        ),
        (lambda s: s.map(lambda k, v: _check(v) or (k, v)).to("out"), "KSTREAM-MAP-", "k"),
        (lambda s: s.peek(lambda k, v: _check(v)).to("out"), "KSTREAM-PEEK-", "k"),
        (
            lambda s: s.group_by(lambda k, v: _check(v) or k).count(),
            "KSTREAM-KEY-SELECT-",
            "k",
        ),
        (
            lambda s: s.group_by_key().aggregate(lambda: 0, lambda k, v, a: _check(v) or a),
            "KSTREAM-AGGREGATE-",
            "k",
        ),
        (
            lambda s: s.group_by_key().reduce(lambda a, v: _check(v) or a),
            "KSTREAM-REDUCE-",
            "k",
        ),
        (lambda s: s.to_table().filter(lambda k, v: _check(v) or True), "KTABLE-FILTER-", "k"),
        (lambda s: s.to_table().map_values(lambda v: _check(v) or v), "KTABLE-MAPVALUES-", "k"),
        (
            lambda s: s.to_table().group_by(lambda k, v: _check(v) or (k, v)).count(),
            "KTABLE-SELECT-",
            "k",
        ),
        (
            lambda s: _grouped_table(s).aggregate(
                lambda: 0, lambda k, v, a: _check(v) or a, lambda k, v, a: a
            ),
            "KTABLE-AGGREGATE-",
            "g",  # the record reaching the aggregate carries the selected key
        ),
        (
            # The subtractor sees the replaced value: "ok" when "bad" replaces it.
            lambda s: _grouped_table(s).reduce(lambda a, v: a, lambda a, v: _check(v, "ok") or a),
            "KTABLE-REDUCE-",
            "g",
        ),
    ],
)
def test_each_kind_of_user_function_failure_names_its_node(build, node, key):
    b = StreamsBuilder()
    build(b.stream("in"))
    with TopologyTestDriver(b.build()) as driver:
        _pipe(driver, [("k", "ok", 1)])
        with pytest.raises(ProcessingException) as info:
            _pipe(driver, [("k", "bad", 2)])
        message = str(info.value)
        assert re.search(re.escape(node) + r"\d{10}", message), message
        assert repr(key) in message, message
        assert isinstance(info.value.__cause__, ValueError)
        _pipe(driver, [("k2", "fine", 3)])  # the driver keeps working


def test_failed_record_leaves_the_store_unchanged_and_emits_nothing(config):
    # The aggregate writes to its store, then a later node raises: the write is rolled back.
    b = StreamsBuilder()
    s = b.stream("in")
    s.to("audit")  # a branch that runs (and outputs) before the failing branch
    s.group_by_key().aggregate(
        lambda: 0, lambda k, v, total: total + v, Materialized.as_("sums")
    ).to_stream().map_values(lambda total: total if total <= 100 else 1 // 0).to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        store = driver.get_key_value_store("sums")
        out, audit = driver.create_output_topic("out"), driver.create_output_topic("audit")
        _pipe(driver, [("a", 10, 1), ("b", 1, 2)])
        assert out.read_key_values_to_list() == [("a", 10), ("b", 1)]
        assert audit.read_key_values_to_list() == [("a", 10), ("b", 1)]

        with pytest.raises(ProcessingException) as info:
            _pipe(driver, [("a", 200, 5)])
        assert "KSTREAM-MAPVALUES-" in str(info.value)
        _assert_names_record(str(info.value), "in", 2, "a")
        assert store.get("a") == 10
        assert store.get_with_timestamp("a") == (10, 1)
        assert out.is_empty()
        assert audit.is_empty()  # output of the failed record is not emitted at all

        _pipe(driver, [("a", 5, 6)])
        assert out.read_records_to_list() == [TestRecord("a", 15, 6)]
        assert audit.read_key_values_to_list() == [("a", 5)]
        assert dict(store.all()) == {"a": 15, "b": 1}


def test_failing_aggregator_leaves_the_store_unchanged(config):
    def aggregator(key, value, agg):
        if value < 0:
            raise ValueError("negative")
        return agg + value

    b = StreamsBuilder()
    b.stream("in").group_by_key().aggregate(
        lambda: 0, aggregator, Materialized.as_("sums")
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("a", 1, 1)])
        with pytest.raises(ProcessingException, match="KSTREAM-AGGREGATE-"):
            _pipe(driver, [("a", -1, 2)])
        with pytest.raises(ProcessingException):
            _pipe(driver, [("new-key", -1, 3)])  # fails on a key's first record too
        store = driver.get_key_value_store("sums")
        assert dict(store.all()) == {"a": 1}
        _pipe(driver, [("a", 2, 4)])
        assert driver.create_output_topic("out").read_key_values_to_list() == [("a", 1), ("a", 3)]


def test_failure_after_a_repartition_names_the_repartition_topic(config):
    def aggregator(key, value, agg):
        if value == "bad":
            raise ValueError("bad value")
        return agg + 1

    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: k.upper()).group_by_key().aggregate(
        lambda: 0, aggregator, Materialized.as_("counts")
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), {**config, "application.id": "shop"}) as driver:
        _pipe(driver, [("a", "ok", 1)])
        with pytest.raises(ProcessingException) as info:
            _pipe(driver, [("a", "bad", 2)])
        message = str(info.value)
        assert re.search(r"KSTREAM-AGGREGATE-\d{10}", message), message
        assert "shop-counts-repartition" in message
        assert "'A'" in message
        assert driver.get_key_value_store("counts").get("A") == 1
        _pipe(driver, [("a", "ok", 3)])
        assert driver.create_output_topic("out").read_key_values_to_list() == [("A", 1), ("A", 2)]


def test_table_failure_leaves_table_and_aggregate_unchanged(config):
    def selector(key, value):
        if value["region"] == "boom":
            raise RuntimeError("no such region")
        return value["region"], value

    b = StreamsBuilder()
    b.table("users", Materialized.as_("users")).group_by(selector).count(
        Materialized.as_("per-region")
    )
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("u1", {"region": "eu"}, 1)], "users")
        with pytest.raises(ProcessingException, match="KTABLE-SELECT-"):
            _pipe(driver, [("u1", {"region": "boom"}, 2)], "users")
        assert driver.get_key_value_store("users").get("u1") == {"region": "eu"}
        assert dict(driver.get_key_value_store("per-region").all()) == {"eu": 1}
        _pipe(driver, [("u1", {"region": "us"}, 3)], "users")
        assert dict(driver.get_key_value_store("per-region").all()) == {"eu": 0, "us": 1}


# -- serialization failures -----------------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    "bad",
    [{1, 2}, Opaque(), {1: "non-str key"}, float("nan"), b"bytes", [1, {2}]],
    ids=["set", "object", "int-dict-key", "nan", "bytes", "nested-set"],
)
def test_unserializable_value_at_a_sink_names_the_sink(bad, config):
    b = StreamsBuilder()
    b.stream("in").filter(lambda k, v: True).map_values(lambda v: bad if v == "bad" else v).to(
        "out"
    )
    with TopologyTestDriver(b.build(), config) as driver:
        with pytest.raises(SerializationException) as info:
            _pipe(driver, [("k", "bad", 1)])
        message = str(info.value)
        assert "KSTREAM-SINK-0000000003" in message
        # The failing node is the one named first, not one of its ancestors.
        assert message.index("KSTREAM-SINK-0000000003") < min(
            (
                message.find(n)
                for n in ("KSTREAM-SOURCE-", "KSTREAM-FILTER-", "KSTREAM-MAPVALUES-")
                if n in message
            ),
            default=len(message),
        )
        _assert_names_record(message, "in", 0, "k")
        out = driver.create_output_topic("out")
        assert out.is_empty()
        _pipe(driver, [("k", "good", 2)])
        assert out.read_records_to_list() == [TestRecord("k", "good", 2)]


def test_unserializable_key_at_a_sink_names_the_sink():
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: Opaque()).to("out")
    with TopologyTestDriver(b.build()) as driver:
        with pytest.raises(SerializationException, match="KSTREAM-SINK-0000000002"):
            _pipe(driver, [("k", 1, 1)])
        assert driver.create_output_topic("out").is_empty()


def test_unserializable_aggregate_names_the_aggregate_node_and_changes_nothing(config):
    b = StreamsBuilder()
    b.stream("in").group_by_key().aggregate(
        lambda: [], lambda k, v, agg: agg + [v], Materialized.as_("lists")
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("k", 1, 1)])
        with pytest.raises(SerializationException) as info:
            _pipe(driver, [("k", {"a", "set"}, 2)])
        assert re.search(r"KSTREAM-AGGREGATE-\d{10}", str(info.value))
        assert driver.get_key_value_store("lists").get("k") == [1]
        _pipe(driver, [("k", 2, 3)])
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("k", [1]),
            ("k", [1, 2]),
        ]


# -- invalid timestamps ----------------------------------------------------------------------


def test_negative_timestamp_is_rejected_naming_topic_and_key(config):
    b = StreamsBuilder()
    b.stream("clicks").group_by_key().count(Materialized.as_("c")).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        with pytest.raises(StreamsException) as info:
            _pipe(driver, [("user-7", "x", -5)], "clicks")
        message = str(info.value)
        assert "clicks" in message and "'user-7'" in message
        assert "-5" in message
        assert driver.get_key_value_store("c").get("user-7") is None
        assert driver.create_output_topic("out").is_empty()
        _pipe(driver, [("user-7", "x", 5)], "clicks")
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("user-7", 1, 5)
        ]


@pytest.mark.parametrize("ts", ["yesterday", 1.5, True])
def test_non_integer_timestamp_is_rejected(ts):
    b = StreamsBuilder()
    b.stream("in").to("out")
    with TopologyTestDriver(b.build()) as driver:
        with pytest.raises(StreamsException, match="in"):
            _pipe(driver, [("k", 1, ts)])
        assert driver.create_output_topic("out").is_empty()


def test_task_rejects_a_negative_timestamp_naming_topic_and_key():
    b = StreamsBuilder()
    b.stream("clicks").group_by_key().count(Materialized.as_("c"))
    topology = b.build()
    store = in_memory_store("0_0")
    task = Task(topology, 0, 0, store, {}, "app")
    with pytest.raises(ProcessingException) as info:
        task.process("clicks", 3, Record("user-7", "x", -1))
    message = str(info.value)
    assert "clicks" in message and "'user-7'" in message
    task.abort()
    assert task.stream_time == -1
    task.process("clicks", 3, Record("user-7", "x", 10))
    task.commit({})
    assert store.stream_time() == 10
    task.close()
    store.close()
