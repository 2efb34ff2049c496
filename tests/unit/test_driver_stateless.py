"""Stateless stream operators through the TopologyTestDriver, and the driver's topic API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from lakestate import ProcessingException, StreamsBuilder, StreamsException
from lakestate.testing.driver import TestRecord, TopologyTestDriver


def _driver(build, config=None) -> TopologyTestDriver:
    b = StreamsBuilder()
    build(b.stream("in"))
    return TopologyTestDriver(b.build(), config or {})


def _run(build, records, topic="out"):
    """Pipe (key, value, timestamp) records into "in"; return what ``topic`` received."""
    with _driver(build) as driver:
        source = driver.create_input_topic("in")
        for key, value, ts in records:
            source.pipe_input(key, value, timestamp=ts)
        return driver.create_output_topic(topic).read_records_to_list()


RECORDS = [("a", 1, 10), ("b", 2, 20), ("c", 3, 15), ("d", 4, 40)]


# -- operators ----------------------------------------------------------------------------


def test_filter_keeps_matching_records_in_order():
    out = _run(lambda s: s.filter(lambda k, v: v % 2 == 1).to("out"), RECORDS)
    assert out == [TestRecord("a", 1, 10), TestRecord("c", 3, 15)]


def test_filter_not_drops_matching_records():
    out = _run(lambda s: s.filter_not(lambda k, v: v % 2 == 1).to("out"), RECORDS)
    assert out == [TestRecord("b", 2, 20), TestRecord("d", 4, 40)]


def test_filter_predicate_sees_key_and_value_and_truthiness_counts():
    seen = []

    def predicate(key, value):
        seen.append((key, value))
        return value  # truthy / falsy, not only bool

    out = _run(lambda s: s.filter(predicate).to("out"), [("a", 0, 1), ("b", "x", 2), ("c", [], 3)])
    assert seen == [("a", 0), ("b", "x"), ("c", [])]
    assert [(r.key, r.value) for r in out] == [("b", "x")]


def test_map_values_changes_only_values():
    out = _run(lambda s: s.map_values(lambda v: {"doubled": v * 2}).to("out"), RECORDS[:2])
    assert out == [TestRecord("a", {"doubled": 2}, 10), TestRecord("b", {"doubled": 4}, 20)]


def test_select_key_changes_only_keys():
    out = _run(lambda s: s.select_key(lambda k, v: f"{k}-{v}").to("out"), RECORDS[:2])
    assert out == [TestRecord("a-1", 1, 10), TestRecord("b-2", 2, 20)]


def test_map_changes_key_and_value():
    out = _run(lambda s: s.map(lambda k, v: (v, k)).to("out"), RECORDS[:2])
    assert out == [TestRecord(1, "a", 10), TestRecord(2, "b", 20)]


def test_map_must_return_a_key_value_pair():
    with _driver(lambda s: s.map(lambda k, v: v).to("out")) as driver:
        with pytest.raises(ProcessingException, match="KSTREAM-MAP-0000000001"):
            driver.create_input_topic("in").pipe_input("a", 1, timestamp=1)
        assert driver.create_output_topic("out").is_empty()


def test_peek_sees_every_record_in_order_and_forwards_it_unchanged():
    seen = []
    out = _run(
        lambda s: (
            s.peek(lambda k, v: seen.append(("first", k, v)))
            .filter(lambda k, v: v > 1)
            .peek(lambda k, v: seen.append(("second", k, v)))
            .to("out")
        ),
        RECORDS[:3],
    )
    assert seen == [
        ("first", "a", 1),
        ("first", "b", 2),
        ("second", "b", 2),
        ("first", "c", 3),
        ("second", "c", 3),
    ]
    assert out == [TestRecord("b", 2, 20), TestRecord("c", 3, 15)]


def test_a_stream_can_be_written_to_several_topics_and_branch():
    def build(s):
        s.to("all")
        s.filter(lambda k, v: v > 2).to("big")
        s.map_values(lambda v: -v).to("negated")

    with _driver(build) as driver:
        source = driver.create_input_topic("in")
        for key, value, ts in RECORDS:
            source.pipe_input(key, value, timestamp=ts)
        assert driver.create_output_topic("all").read_values_to_list() == [1, 2, 3, 4]
        assert driver.create_output_topic("big").read_values_to_list() == [3, 4]
        assert driver.create_output_topic("negated").read_values_to_list() == [-1, -2, -3, -4]


def test_chained_operators_compose():
    out = _run(
        lambda s: (
            s.filter(lambda k, v: v != 3)
            .map_values(lambda v: v * 10)
            .select_key(lambda k, v: k.upper())
            .map(lambda k, v: (k + "!", v + 1))
            .filter_not(lambda k, v: v > 40)
            .to("out")
        ),
        RECORDS,
    )
    assert out == [TestRecord("A!", 11, 10), TestRecord("B!", 21, 20)]


# -- null keys and values, timestamps, headers -------------------------------------------


def test_null_keys_are_forwarded_by_stateless_operators():
    out = _run(
        lambda s: (
            s.filter(lambda k, v: True)
            .map_values(lambda v: v + 1)
            .peek(lambda k, v: None)
            .filter_not(lambda k, v: False)
            .to("out")
        ),
        [(None, 1, 5), ("k", 2, 6), (None, 3, 7)],
    )
    assert out == [TestRecord(None, 2, 5), TestRecord("k", 3, 6), TestRecord(None, 4, 7)]


def test_select_key_and_map_see_and_can_produce_null_keys():
    seen = []

    def selector(key, value):
        seen.append(key)
        return None if value == 2 else f"k{value}"

    out = _run(lambda s: s.select_key(selector).to("out"), [(None, 1, 1), ("x", 2, 2)])
    assert seen == [None, "x"]
    # A stream (unlike a repartition topic) keeps records with null keys.
    assert out == [TestRecord("k1", 1, 1), TestRecord(None, 2, 2)]
    out = _run(lambda s: s.map(lambda k, v: (None, v)).to("out"), [("a", 1, 1)])
    assert out == [TestRecord(None, 1, 1)]


def test_null_values_are_forwarded_by_stateless_operators():
    out = _run(
        lambda s: s.filter(lambda k, v: True).select_key(lambda k, v: k * 2).to("out"),
        [("a", None, 1)],
    )
    assert out == [TestRecord("aa", None, 1)]
    out = _run(lambda s: s.map_values(lambda v: None).to("out"), [("a", 1, 1)])
    assert out == [TestRecord("a", None, 1)]


def test_timestamps_propagate_unchanged_including_out_of_order_ones():
    records = [("a", 1, 100), ("b", 2, 50), ("c", 3, 0), ("d", 4, 2**40)]
    out = _run(
        lambda s: s.map(lambda k, v: (v, k)).select_key(lambda k, v: k).map_values(str).to("out"),
        records,
    )
    assert [r.timestamp for r in out] == [100, 50, 0, 2**40]


def test_pipe_input_accepts_datetime_timestamps():
    moment = datetime(2024, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)
    epoch_ms = 1709296215250
    other_zone = datetime(2024, 3, 1, 14, 30, 15, 250_000, tzinfo=timezone(timedelta(hours=2)))
    out = _run(lambda s: s.to("out"), [("a", 1, moment), ("b", 2, other_zone)])
    assert out == [TestRecord("a", 1, epoch_ms), TestRecord("b", 2, epoch_ms)]
    assert isinstance(out[0].timestamp, int)


def test_headers_propagate_through_stateless_operators():
    with _driver(lambda s: s.map(lambda k, v: (v, k)).map_values(str).to("out")) as driver:
        driver.create_input_topic("in").pipe_input("a", 1, timestamp=3, headers={"trace": "t1"})
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord(1, "a", 3, {"trace": "t1"})
        ]


# -- input and output topic API -----------------------------------------------------------


def test_output_topic_api():
    with _driver(lambda s: s.to("out")) as driver:
        source = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        assert out.is_empty()
        assert out.read_records_to_list() == []
        for key, value, ts in RECORDS:
            source.pipe_input(key, value, timestamp=ts)
        assert not out.is_empty()
        assert out.get_queue_size() == 4
        assert out.read_value() == 1
        assert out.read_key_value() == ("b", 2)
        record = out.read_record()
        assert record == TestRecord("c", 3, 15)
        assert (record.key, record.value, record.timestamp) == ("c", 3, 15)
        assert out.read_records_to_list() == [TestRecord("d", 4, 40)]
        assert out.is_empty()
        with pytest.raises(StreamsException):
            out.read_value()

        for key, value, ts in RECORDS:
            source.pipe_input(key, value, timestamp=ts)
        assert out.read_key_values_to_list() == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
        assert out.read_key_values_to_list() == []
        for key, value, ts in RECORDS:
            source.pipe_input(key, value, timestamp=ts)
        assert out.read_values_to_list() == [1, 2, 3, 4]
        assert out.is_empty()
        source.pipe_input("a", 1, timestamp=1)
        source.pipe_input("a", 2, timestamp=2)
        assert out.read_key_values_to_map() == {"a": 2}


def test_two_output_topic_handles_share_the_topic():
    with _driver(lambda s: s.to("out")) as driver:
        driver.create_input_topic("in").pipe_input("a", 1, timestamp=1)
        first, second = driver.create_output_topic("out"), driver.create_output_topic("out")
        assert first.read_value() == 1
        assert second.is_empty()


def test_pipe_lists():
    with _driver(lambda s: s.to("out")) as driver:
        source = driver.create_input_topic("in")
        source.pipe_key_value_list([("a", 1), ("b", 2)], timestamp=100, advance_ms=10)
        source.pipe_value_list([3, 4])
        out = driver.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value) for r in out] == [("a", 1), ("b", 2), (None, 3), (None, 4)]
        assert [r.timestamp for r in out[:2]] == [100, 110]


def test_create_input_topic_on_an_unknown_topic_errors():
    with _driver(lambda s: s.to("out")) as driver:
        with pytest.raises(StreamsException, match="nope"):
            driver.create_input_topic("nope")
        with pytest.raises(StreamsException, match="out"):
            driver.create_input_topic("out")  # a sink, not an input


def test_driver_is_a_context_manager_and_close_is_idempotent():
    with _driver(lambda s: s.to("out")) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("a", 1, timestamp=1)
    driver.close()
    driver.close()
    with pytest.raises(StreamsException):
        source.pipe_input("b", 2, timestamp=2)

    driver = _driver(lambda s: s.to("out"), {"lakestate.state.backend": "rocksdb"})
    driver.create_input_topic("in").pipe_input("a", 1, timestamp=1)
    assert driver.create_output_topic("out").read_values_to_list() == [1]
    driver.close()
    driver.close()


def test_unknown_state_backend_is_rejected():
    with pytest.raises(StreamsException, match="backend"):
        _driver(lambda s: s.to("out"), {"lakestate.state.backend": "cassandra"})


def test_select_key_then_to_needs_no_repartition_and_outputs_immediately():
    with _driver(lambda s: s.select_key(lambda k, v: v).to("out")) as driver:
        assert len(driver.topology.subtopologies) == 1
        driver.create_input_topic("in").pipe_input("a", "x", timestamp=7)
        assert driver.create_output_topic("out").read_records_to_list() == [TestRecord("x", "x", 7)]
