"""Versioned tables in the DSL (KIP-914), through the TopologyTestDriver.

A table is versioned when materialized ``as_versioned`` (``table``, ``to_table``,
``filter``/``map_values``) and stays so through unmaterialized ``filter``/``map_values``.
Its source forwards every accepted record, out-of-order ones flagged
``Change.is_latest=False``; aggregations skip those, the filter forwards every tombstone,
``suppress`` and versioned global tables are refused.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from lakestate import Materialized, StreamsBuilder, VersionedRecord
from lakestate.dsl.suppressed import BufferConfig, Suppressed
from lakestate.errors import TopologyException
from lakestate.processors.api import Processor
from lakestate.records import Change, Record
from lakestate.testing.driver import TestRecord, TopologyTestDriver

BACKENDS = [{}, {"lakestate.state.backend": "rocksdb"}]
BACKEND_IDS = ["memory", "rocksdb"]
RETENTION = timedelta(milliseconds=100)


@pytest.fixture(params=BACKENDS, ids=BACKEND_IDS)
def config(request):
    return dict(request.param)


def versioned(name: str = "v") -> Materialized:
    return Materialized.as_versioned(name, RETENTION)


class ChangeRecorder(Processor):
    """Test-only: records each (key, Change, timestamp) reaching it."""

    def __init__(self, seen: list) -> None:
        self.seen = seen

    def process(self, record: Record) -> None:
        self.seen.append((record.key, record.value, record.timestamp))


def record_changes(b: StreamsBuilder, table) -> list:
    seen: list = []
    name = b._graph.new_name("TEST-CHANGES-")
    b._graph.add_processor(name, table.node_name, lambda: ChangeRecorder(seen))
    return seen


def pipe(driver, topic: str, records) -> None:
    source = driver.create_input_topic(topic)
    for key, value, ts in records:
        source.pipe_input(key, value, timestamp=ts)


# -- the versioned source -----------------------------------------------------------------


def test_source_flags_out_of_order_records_not_latest_and_keeps_them_in_history(config):
    b = StreamsBuilder()
    table = b.table("t", versioned("tiers"))
    seen = record_changes(b, table)
    table.to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        pipe(driver, "t", [("k", "silver", 10), ("k", "gold", 50), ("k", "bronze", 30)])
        assert seen == [
            ("k", Change("silver", None, True), 10),
            ("k", Change("gold", "silver", True), 50),
            # Older than gold: history, not an update of the latest value. The old value
            # is the latest (gold), as Kafka's source gives it.
            ("k", Change("bronze", "gold", False), 30),
        ]
        store = driver.get_versioned_key_value_store("tiers")
        assert store.get("k") == VersionedRecord("gold", 50, None)
        assert store.get("k", 40) == VersionedRecord("bronze", 30, 50)
        assert store.get("k", 20) == VersionedRecord("silver", 10, 30)
        # to_stream forwards the change's new value, whatever its is_latest (as Kafka).
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("k", "silver"),
            ("k", "gold"),
            ("k", "bronze"),
        ]


def test_records_beyond_history_retention_are_dropped(config):
    b = StreamsBuilder()
    table = b.table("t", versioned())
    seen = record_changes(b, table)
    with TopologyTestDriver(b.build(), config) as driver:
        pipe(driver, "t", [("k", "a", 500), ("other", "b", 399), ("k", "c", 400)])
        # 399 < 500 - 100: not put, not forwarded; 400 is at the boundary: put.
        assert [(k, c.new_value, c.is_latest) for k, c, _ in seen] == [
            ("k", "a", True),
            ("k", "c", False),
        ]
        assert driver.metrics()["dropped-records"] == 1
        assert driver.get_versioned_key_value_store("v").get("other") is None


def test_to_table_materialized_versioned_is_a_versioned_source(config):
    b = StreamsBuilder()
    table = b.stream("s").to_table(versioned("latest"))
    seen = record_changes(b, table)
    assert table.is_versioned
    with TopologyTestDriver(b.build(), config) as driver:
        pipe(driver, "s", [("k", 1, 20), ("k", 2, 10)])
        assert [c.is_latest for _, c, _ in seen] == [True, False]
        assert driver.get_versioned_key_value_store("latest").get("k").value == 1


def test_a_tombstone_for_a_key_never_held_is_forwarded(config):
    """Kafka 4's KTableSource forwards Change(null, null) for it; to_stream a null value."""
    b = StreamsBuilder()
    plain = b.table("plain")
    plain.to_stream().to("plain-out")
    table = b.table("t", versioned())
    seen = record_changes(b, table)
    table.to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        pipe(driver, "plain", [("ghost", None, 5)])
        pipe(driver, "t", [("ghost", None, 5)])
        assert driver.create_output_topic("plain-out").read_records_to_list() == [
            TestRecord("ghost", None, 5)
        ]
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("ghost", None, 5)
        ]
        assert seen == [("ghost", Change(None, None, True), 5)]


# -- which tables are versioned -----------------------------------------------------------


def test_versioned_ness_follows_the_upstream_materializations():
    b = StreamsBuilder()
    source = b.table("t", versioned("src"))
    assert source.is_versioned and not b.table("u").is_versioned
    assert not b.table("w", Materialized.as_("plain")).is_versioned
    filtered = source.filter(lambda k, v: True)
    assert filtered.is_versioned and filtered.filter_not(lambda k, v: False).is_versioned
    assert filtered.map_values(str).is_versioned
    # An unversioned materialization in between ends it; a versioned one starts it again.
    plain = filtered.map_values(str, Materialized.as_("mapped"))
    assert not plain.is_versioned and not plain.filter(lambda k, v: True).is_versioned
    assert plain.filter(lambda k, v: True, versioned("again")).is_versioned
    # A stream in between ends it, unless to_table is materialized versioned.
    assert not source.to_stream().to_table().is_versioned
    assert source.to_stream().to_table(versioned("tt")).is_versioned
    # Aggregations give unversioned tables; they cannot be materialized versioned (yet).
    assert not source.group_by(lambda k, v: (v, 1)).count().is_versioned
    with pytest.raises(TopologyException, match="KTABLE-AGGREGATE-.*versioned"):
        source.group_by(lambda k, v: (v, 1)).count(versioned("agg"))
    with pytest.raises(TopologyException, match="KSTREAM-AGGREGATE-.*versioned"):
        b.stream("s").group_by_key().count(versioned("agg2"))
    topology = b.build()
    assert topology.stores["src"].kind == "versioned"
    assert topology.stores["src"].options == {"history_retention_ms": 100}
    assert topology.stores["mapped"].kind == "timestamped_key_value"
    assert topology.stores["again"].kind == "versioned"


# -- is_latest through filter and map_values ----------------------------------------------


def test_is_latest_flows_through_unmaterialized_filter_and_map_values(config):
    b = StreamsBuilder()
    mapped = b.table("t", versioned()).filter(lambda k, v: v > 0).map_values(lambda v: v * 10)
    seen = record_changes(b, mapped)
    with TopologyTestDriver(b.build(), config) as driver:
        pipe(driver, "t", [("k", 1, 10), ("k", 2, 30), ("k", 3, 20), ("k", -1, 25)])
        assert [(c.new_value, c.old_value, c.is_latest) for _, c, _ in seen] == [
            (10, None, True),
            (20, 10, True),
            (30, 20, False),
            (None, 20, False),  # filtered out, older than the latest: still flagged
        ]


def test_a_materialized_operator_flags_by_its_own_store(config):
    """A versioned materialization decides is_latest by its own put; an unversioned one
    makes the result unversioned: everything it forwards is latest (offset order)."""
    b = StreamsBuilder()
    source = b.table("t", versioned())
    own = source.map_values(lambda v: v, versioned("own"))
    plain = source.map_values(lambda v: v, Materialized.as_("plain"))
    seen_own, seen_plain = record_changes(b, own), record_changes(b, plain)
    with TopologyTestDriver(b.build(), config) as driver:
        pipe(driver, "t", [("k", "a", 10), ("k", "b", 30), ("k", "c", 20)])
        assert [c.is_latest for _, c, _ in seen_own] == [True, True, False]
        assert [c.is_latest for _, c, _ in seen_plain] == [True, True, True]
        assert driver.get_versioned_key_value_store("own").get("k").value == "b"
        assert driver.get_key_value_store("plain").get("k") == "c"  # the last by offset


# -- the filter forwards every tombstone --------------------------------------------------


def _filter_tombstones(source_materialized: Materialized | None, config: dict):
    """The seed's example: (v1, 1), (null, 2), (null, 4), (v2, 3) through a filter into a
    versioned table."""
    b = StreamsBuilder()
    b.table("t", source_materialized).filter(
        lambda k, v: True, versioned("filtered")
    ).to_stream().to("out")
    driver = TopologyTestDriver(b.build(), config)
    pipe(driver, "t", [("k", "v1", 1), ("k", None, 2), ("k", None, 4), ("k", "v2", 3)])
    out = [(r.value, r.timestamp) for r in driver.create_output_topic("out").read_records_to_list()]
    latest = driver.get_versioned_key_value_store("filtered").get("k")
    driver.close()
    return out, latest


def test_filter_on_a_versioned_table_forwards_every_tombstone(config):
    out, latest = _filter_tombstones(versioned("src"), config)
    assert out == [("v1", 1), (None, 2), (None, 4), ("v2", 3)]
    assert latest is None  # the tombstone at 4 is the latest: v2 (at 3) is history


def test_filter_on_an_unversioned_table_drops_the_duplicate_tombstone(config):
    out, latest = _filter_tombstones(None, config)
    assert out == [("v1", 1), (None, 2), ("v2", 3)]
    assert latest == VersionedRecord("v2", 3, None)  # KIP-914's reason for the rule


# -- table aggregations ignore out-of-order records ---------------------------------------


def _aggregations(source_materialized: Materialized | None, records, config: dict) -> dict:
    """count, aggregate and reduce of the same grouped table; their final values."""
    b = StreamsBuilder()
    grouped = b.table("t", source_materialized).group_by(lambda k, v: (v["g"], v["n"]))
    grouped.count(Materialized.as_("count"))
    grouped.aggregate(
        lambda: 0, lambda k, v, agg: agg + v, lambda k, v, agg: agg - v, Materialized.as_("sum")
    )
    grouped.reduce(lambda agg, v: agg + v, lambda agg, v: agg - v, Materialized.as_("reduced"))
    with TopologyTestDriver(b.build(), config) as driver:
        pipe(driver, "t", records)
        return {
            name: dict(driver.get_key_value_store(name).all())
            for name in ("count", "sum", "reduced")
        }


def test_aggregations_of_a_versioned_table_ignore_out_of_order_records(config):
    # The seed's table: v1 at 1, v2 at 10, then v3 at 5 (older than v2).
    records = [
        ("k", {"g": "a", "n": 1}, 1),
        ("k", {"g": "a", "n": 2}, 10),
        ("k", {"g": "b", "n": 3}, 5),
    ]
    assert _aggregations(versioned("src"), records, config) == {
        "count": {"a": 1},  # v3 is not added: b never gets a row
        "sum": {"a": 2},
        "reduced": {"a": 2},
    }
    # Unversioned: v3 replaces v2 (offset order).
    assert _aggregations(None, records, config) == {
        "count": {"a": 0, "b": 1},
        "sum": {"a": 0, "b": 3},
        "reduced": {"a": 0, "b": 3},
    }


def test_aggregation_downstream_of_a_versioned_filter_ignores_out_of_order():
    b = StreamsBuilder()
    source = b.table("t", versioned("src")).map_values(lambda v: v * 2)
    source.group_by(lambda k, v: ("all", v)).reduce(
        lambda agg, v: agg + v, lambda agg, v: agg - v, Materialized.as_("total")
    )
    with TopologyTestDriver(b.build()) as driver:
        pipe(driver, "t", [("x", 1, 10), ("y", 5, 10), ("x", 100, 5), ("x", 3, 20)])
        assert driver.get_key_value_store("total").get("all") == 16  # 2*3 + 2*5


# -- suppress and global tables -----------------------------------------------------------


def test_suppress_on_a_versioned_table_is_refused_naming_the_node():
    limit = Suppressed.until_time_limit(timedelta(seconds=1), BufferConfig.unbounded())
    b = StreamsBuilder()
    table = b.table("t", versioned())
    with pytest.raises(TopologyException, match="node KTABLE-SUPPRESS-.*versioned"):
        table.suppress(limit)
    # Inherited through an unmaterialized filter, which has no store of its own.
    with pytest.raises(TopologyException, match="node rate.*versioned"):
        table.filter(lambda k, v: True).suppress(limit.with_name("rate"))
    # An unversioned materialization in between makes it allowed.
    table.map_values(str, Materialized.as_("plain")).suppress(limit)


def test_a_versioned_global_table_is_refused_naming_the_node():
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="node KSTREAM-SOURCE-.*global table cannot"):
        b.global_table("g", versioned())
    assert b.global_table("g2", Materialized.as_("plain")).query_store_name == "plain"


# -- backends and batches agree -----------------------------------------------------------


def _outputs(config: dict, records: list, one_by_one: bool) -> tuple:
    b = StreamsBuilder()
    table = b.table("t", versioned("src"))
    table.filter(lambda k, v: v % 3 != 0).map_values(lambda v: v + 1).to_stream().to("out")
    table.group_by(lambda k, v: (v % 2, v)).aggregate(
        lambda: 0, lambda k, v, a: a + v, lambda k, v, a: a - v, Materialized.as_("sums")
    ).to_stream().to("sums-out")
    with TopologyTestDriver(b.build(), config) as driver:
        source = driver.create_input_topic("t")
        if one_by_one:
            for key, value, ts in records:
                source.pipe_input(key, value, timestamp=ts)
        else:
            source.pipe_record_list([TestRecord(k, v, ts) for k, v, ts in records])
        src = driver.get_versioned_key_value_store("src")
        history = {k: [src.get(k, t) for t in range(0, 400, 7)] for k in "abcde"}
        return (
            driver.create_output_topic("out").read_records_to_list(),
            driver.create_output_topic("sums-out").read_records_to_list(),
            history,
            driver.metrics().get("dropped-records", 0),
        )


def test_backends_and_batching_give_the_same_outputs():
    rng = random.Random(914)
    records = []
    for i in range(300):
        value = None if rng.random() < 0.1 else rng.randrange(20)
        records.append((rng.choice("abcde"), value, i + rng.randrange(-150, 10)))
    records = [(k, v, max(ts, 0)) for k, v, ts in records]
    runs = [
        _outputs(config, records, one_by_one) for config in BACKENDS for one_by_one in (True, False)
    ]
    assert all(run == runs[0] for run in runs[1:])
    out, sums, _, dropped = runs[0]
    # The input has out-of-order and too-late records: both paths are exercised.
    latest: dict = {}
    out_of_order = 0
    for key, _, ts in records:
        out_of_order += ts < latest.get(key, -1)
        latest[key] = max(ts, latest.get(key, -1))
    assert dropped > 0 and out_of_order > dropped
    # A versioned filter forwards every accepted record (tombstones included).
    assert len(out) == len(records) - dropped
    assert len(sums) > 0
