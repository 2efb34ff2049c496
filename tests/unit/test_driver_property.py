"""Property tests: the driver agrees with a plain-dict model of Kafka Streams semantics.

Stream aggregations: a record with a null key or value is dropped; otherwise the key's
aggregate is updated and emitted with timestamp max(record ts, previous aggregate ts).
Table re-grouping (KIP-904): an update whose old and new row fall in the same group is one
combined update; otherwise the old group is decremented (and emitted) first, then the new
group incremented; a delete decrements; a tombstone for an absent row does nothing.
Both state backends.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Materialized, StreamsBuilder
from lakestate.testing.driver import TestRecord, TopologyTestDriver

BACKENDS = {"memory": {}, "rocksdb": {"lakestate.state.backend": "rocksdb"}}

KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
VALUES = st.one_of(st.none(), st.integers(-1000, 1000))
TIMESTAMPS = st.integers(0, 1000)
RECORDS = st.lists(st.tuples(KEYS, VALUES, TIMESTAMPS), max_size=30)
SETTINGS = settings(max_examples=40, deadline=None, database=None)


def _stream_topology():
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key()
    grouped.aggregate(
        lambda: 0, lambda k, v, total: total + v, Materialized.as_("sum")
    ).to_stream().to("sum-out")
    grouped.count(Materialized.as_("count")).to_stream().to("count-out")
    grouped.reduce(max, Materialized.as_("max")).to_stream().to("max-out")
    return b.build()


def _stream_model(records):
    aggs = {"sum": {}, "count": {}, "max": {}}
    steps = {
        "sum": lambda agg, v: v if agg is None else agg + v,
        "count": lambda agg, v: 1 if agg is None else agg + 1,
        "max": lambda agg, v: v if agg is None else max(agg, v),
    }
    outputs = {name: [] for name in aggs}
    dropped = 0
    for key, value, ts in records:
        if key is None or value is None:
            dropped += 1
            continue
        for name, state in aggs.items():
            old = state.get(key)
            new_ts = ts if old is None else max(ts, old[1])
            new = steps[name](None if old is None else old[0], value)
            state[key] = (new, new_ts)
            outputs[name].append(TestRecord(key, new, new_ts))
    stores = {name: {k: v for k, (v, _) in state.items()} for name, state in aggs.items()}
    return outputs, stores, dropped


@pytest.mark.parametrize("backend", list(BACKENDS))
@SETTINGS
@given(records=RECORDS)
def test_stream_aggregations_match_the_model(backend, records):
    expected_outputs, expected_stores, dropped = _stream_model(records)
    with TopologyTestDriver(_stream_topology(), BACKENDS[backend]) as driver:
        source = driver.create_input_topic("in")
        for key, value, ts in records:
            source.pipe_input(key, value, timestamp=ts)
        for name in ("sum", "count", "max"):
            out = driver.create_output_topic(f"{name}-out").read_records_to_list()
            assert out == expected_outputs[name], name
            assert dict(driver.get_key_value_store(name).all()) == expected_stores[name], name
            for key, value in expected_stores[name].items():
                assert driver.get_key_value_store(name).get(key) == value
        # Each of the three aggregations drops each null-key or null-value record.
        assert driver.metrics().get("dropped-records", 0) == 3 * dropped


def _table_topology():
    b = StreamsBuilder()
    b.table("rows", Materialized.as_("rows")).group_by(lambda k, v: (v % 3, v)).count(
        Materialized.as_("per-residue")
    ).to_stream().to("out")
    return b.build()


def _table_model(records):
    rows: dict = {}
    counts: dict = {}  # group -> (count, timestamp)
    outputs = []
    dropped = 0

    def update(group, delta, ts):
        old = counts.get(group)
        new_ts = ts if old is None else max(ts, old[1])
        counts[group] = ((0 if old is None else old[0]) + delta, new_ts)
        outputs.append(TestRecord(group, counts[group][0], new_ts))

    for key, value, ts in records:
        if key is None:
            dropped += 1
            continue
        old = rows.get(key)
        if value is None:
            rows.pop(key, None)
        else:
            rows[key] = value
        old_group = None if old is None else old % 3
        new_group = None if value is None else value % 3
        if old_group is not None and old_group == new_group:
            update(new_group, 0, ts)  # one combined update: subtract and add
            continue
        if old_group is not None:
            update(old_group, -1, ts)
        if new_group is not None:
            update(new_group, +1, ts)
    return outputs, rows, {g: c for g, (c, _) in counts.items()}, dropped


@pytest.mark.parametrize("backend", list(BACKENDS))
@SETTINGS
@given(records=RECORDS)
def test_table_group_by_count_matches_the_model(backend, records):
    expected_out, expected_rows, expected_counts, dropped = _table_model(records)
    with TopologyTestDriver(_table_topology(), BACKENDS[backend]) as driver:
        source = driver.create_input_topic("rows")
        for key, value, ts in records:
            source.pipe_input(key, value, timestamp=ts)
        assert driver.create_output_topic("out").read_records_to_list() == expected_out
        assert dict(driver.get_key_value_store("rows").all()) == expected_rows
        assert dict(driver.get_key_value_store("per-residue").all()) == expected_counts
        assert driver.metrics().get("dropped-records", 0) == dropped
        # Counts always equal the number of live rows per group.
        live = {}
        for value in expected_rows.values():
            live[value % 3] = live.get(value % 3, 0) + 1
        assert {g: c for g, c in expected_counts.items() if c} == live
