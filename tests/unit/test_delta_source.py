"""Delta sources (lakestate.io.deltasource): an existing Delta table, appended to by delta-rs,
read as a topic. Offsets are positions in the table's commit history: dense per partition,
each version's appended rows numbered on from the versions before; a commit that deletes
or rewrites rows fails with the choices, or is skipped; OPTIMIZE is not a change."""

from __future__ import annotations

from datetime import UTC, date, datetime

import lakestate as ls
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from lakestate.checkpoint.layout import kafka_topic_names
from lakestate.errors import StreamsException, TopologyException
from lakestate.io import topics
from lakestate.io.deltasource import DeltaSourceTopic, declare, offsets
from lakestate.io.partitioner import partition_for
from lakestate.io.topic_records import records_of
from lakestate.warehouse import Warehouse


def _append(path, ids, amounts, **extra):
    columns = {"id": pa.array(ids, pa.string()), "amount": pa.array(amounts, pa.int64())}
    columns.update(extra)
    write_deltalake(str(path), pa.table(columns), mode="append", schema_mode="merge")


def _source(path, **kw) -> ls.DeltaSource:
    kw.setdefault("key", "id")
    kw.setdefault("partitions", 3)
    return ls.DeltaSource("orders", str(path), **kw)


def _topic(wh: Warehouse, source: ls.DeltaSource):
    declare(wh, source)
    found = topics.topic(wh, source.name)
    assert isinstance(found, DeltaSourceTopic)
    return found


def _all(topic) -> list:
    return [r for t in topic.read_partitions() for r in records_of(t)]


def test_offsets_are_dense_per_partition_in_commit_order(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    batches = [(["a", "b", "c"], [1, 2, 3]), (["a", "d"], [4, 5]), (["e", "b", "a"], [6, 7, 8])]
    _append(table, *batches[0])
    topic = _topic(wh, _source(table))
    for ids, amounts in batches[1:]:
        _append(table, ids, amounts)
    rows = [(i, a) for ids, amounts in batches for i, a in zip(ids, amounts, strict=True)]
    # Each row in the partition of murmur2 of its key, in append order within it.
    expected = {p: [r for r in rows if partition_for(r[0], 3) == p] for p in range(3)}
    assert topic.end_offsets() == {p: len(expected[p]) for p in range(3)}
    got = _all(topic)
    for p in range(3):
        mine = [r for r in got if r.partition == p]
        assert [r.offset for r in mine] == list(range(len(expected[p])))
        assert [(r.key, r.value["amount"]) for r in mine] == expected[p]
    assert got[0].value == {"id": got[0].key, "amount": got[0].value["amount"]}
    # A range reads exactly its offsets.
    p = max(expected, key=lambda q: len(expected[q]))
    part = records_of(topic.reader().read_range({p: (1, len(expected[p]))}))
    assert sorted(r.offset for r in part) == list(range(1, len(expected[p])))


def test_starting_positions(tmp_path):
    table = tmp_path / "bronze"
    _append(table, ["a"], [1])  # version 0
    _append(table, ["b"], [2])  # version 1
    between = datetime.now(UTC)
    _append(table, ["c"], [3])  # version 2
    cases = {"earliest": "abc", "latest": "", 1: "bc", between: "c"}
    for i, (starting, ids) in enumerate(cases.items()):
        wh = Warehouse(tmp_path / f"wh{i}")
        topic = _topic(wh, _source(table, starting=starting, partitions=1))
        assert "".join(r.key for r in _all(topic)) == ids, starting
    _append(table, ["d"], [4])  # after every declaration: every source reads it
    for i, (_, ids) in enumerate(cases.items()):
        topic = topics.topic(Warehouse(tmp_path / f"wh{i}"), "orders")
        assert "".join(r.key for r in _all(topic)) == ids + "d"
    with pytest.raises(StreamsException, match="past the table's next version 4"):
        declare(Warehouse(tmp_path / "far"), _source(table, starting=9))
    with pytest.raises(ValueError, match="starting must be"):
        _source(table, starting="yesterday")


def test_a_delete_fails_with_the_choices_and_skip_change_commits_skips_it(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a", "b"], [1, 2])
    topic = _topic(wh, _source(table))
    DeltaTable(str(table)).delete("amount = 1")  # version 1
    _append(table, ["c"], [3])
    with pytest.raises(StreamsException) as failed:
        topic.end_offsets()
    message = str(failed.value)
    for part in ("'orders'", "version 1", str(table), "DELETE", "skip_change_commits=True"):
        assert part in message
    # Skipping: the delete's commit is passed over whole, the rows before and after read.
    topic = _topic(wh, _source(table, skip_change_commits=True))
    assert sorted((r.key, r.value["amount"]) for r in _all(topic)) == [
        ("a", 1),
        ("b", 2),
        ("c", 3),
    ]


@pytest.mark.parametrize("change", ["update", "overwrite"])
def test_updates_and_overwrites_are_changes_too(tmp_path, change):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a", "b"], [1, 2])
    topic = _topic(wh, _source(table))
    if change == "update":
        DeltaTable(str(table)).update({"amount": "amount + 1"})
    else:
        write_deltalake(str(table), pa.table({"id": ["z"], "amount": [9]}), mode="overwrite")
    with pytest.raises(StreamsException, match="version 1 .* deletes or rewrites rows"):
        topic.end_offsets()


def test_optimize_is_not_a_change(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    for i in range(3):
        _append(table, [f"k{i}"], [i])
    topic = _topic(wh, _source(table))
    before = topic.end_offsets()
    DeltaTable(str(table)).optimize.compact()
    assert DeltaTable(str(table)).version() == 3
    _append(table, ["k9"], [9])
    after = topic.end_offsets()
    assert sum(after.values()) == sum(before.values()) + 1
    assert sorted(r.key for r in _all(topic)) == ["k0", "k1", "k2", "k9"]


def test_added_columns_become_fields_of_later_rows(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a"], [1])
    topic = _topic(wh, _source(table, partitions=1))
    _append(table, ["b"], [2], country=pa.array(["NL"]))
    assert [r.value for r in _all(topic)] == [
        {"id": "a", "amount": 1},
        {"id": "b", "amount": 2, "country": "NL"},
    ]


def test_key_columns_timestamps_and_typed_values(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ms = int(when.timestamp() * 1000)
    _append(
        table,
        ["a", "a"],
        [1, 2],
        region=pa.array(["eu", "us"]),
        at=pa.array([when, None], pa.timestamp("us", "UTC")),
        day=pa.array([date(2026, 1, 2), None]),
    )
    topic = _topic(wh, _source(table, key=["id", "region"], timestamp="at", partitions=4))
    got = sorted(_all(topic), key=lambda r: r.value["amount"])
    assert [r.key for r in got] == [{"id": "a", "region": "eu"}, {"id": "a", "region": "us"}]
    assert [r.partition for r in got] == [partition_for(r.key, 4) for r in got]
    assert got[0].timestamp == ms
    commit_ms = DeltaTable(str(table)).history()[0]["timestamp"]
    assert got[1].timestamp == commit_ms  # a NULL event time: the commit's
    assert got[0].value["at"] == "2026-01-02T03:04:05+00:00"
    assert got[0].value["day"] == "2026-01-02"
    # A date column as event time: midnight UTC.
    by_day = _topic(Warehouse(tmp_path / "wh2"), _source(table, timestamp="day", partitions=1))
    assert _all(by_day)[0].timestamp == ms - (3 * 3600 + 4 * 60 + 5) * 1000


def test_a_missing_key_or_timestamp_column_is_named(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a"], [1])
    topic = _topic(wh, _source(table, key="user", timestamp="at"))
    with pytest.raises(StreamsException, match="no column 'user', 'at'.*id, amount"):
        topic.check_columns()
    with pytest.raises(StreamsException, match="no key column 'user'"):
        topic.end_offsets()


def test_a_declaration_keeps_its_offsets_fixed(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a"], [1])
    declare(wh, _source(table, starting="latest"))
    _append(table, ["b"], [2])
    # Declared again (a later run): the start stays the version resolved the first time.
    declared = declare(wh, _source(table, starting="latest"))
    assert declared.start_version == 1
    with pytest.raises(StreamsException, match="partitions=3, now given partitions=4"):
        declare(wh, _source(table, partitions=4, starting="latest"))
    with pytest.raises(StreamsException, match="log-table topic of that name"):
        topics.topic(wh, "events").create(1)
        declare(wh, ls.DeltaSource("events", str(table), key="id"))


def test_a_delta_source_is_read_only(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a"], [1])
    topic = _topic(wh, _source(table))
    with pytest.raises(StreamsException, match="read-only"):
        topic.append([{"key": "x", "value": 1}])
    with pytest.raises(StreamsException, match="read-only"):
        topic.create(3)


def test_counts_are_stored_so_a_later_run_reads_only_new_versions(tmp_path, monkeypatch):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a"], [1])
    _append(table, ["b"], [2])
    topic = _topic(wh, _source(table))
    ends = topic.end_offsets()
    offsets._CACHE.clear()
    read: list[int] = []
    real = offsets.records
    monkeypatch.setattr(offsets, "records", lambda d, v, s=None: read.append(v) or real(d, v, s))
    _append(table, ["c"], [3])
    assert sum(topics.topic(wh, "orders").end_offsets().values()) == sum(ends.values()) + 1
    assert read == [2]


def test_builder_stream_takes_a_delta_source(tmp_path):
    source = _source(tmp_path / "bronze")
    b = ls.StreamsBuilder()
    b.stream(source).to("out")
    topology = b.build()
    assert topology.delta_sources() == {"orders": source}
    assert topology.source_topics() == ["orders"]
    app = ls.App("a", topology, {"bootstrap.servers": "localhost:1"})
    # With a Kafka cluster, the sources are the cluster's, a Delta source aside.
    assert kafka_topic_names(app) == {"out"}
    b2 = ls.StreamsBuilder()
    b2.stream(source).to("out")
    b2.table(_source(tmp_path / "other"), ls.Materialized.as_("t"))
    with pytest.raises(TopologyException, match="a topic can have one source"):
        b2.build()


def test_the_offset_index_numbers_versions_on_per_partition():
    index = offsets.OffsetIndex(2, {3: (2, 1), 4: (0, 0), 5: (1, 3), 6: (0, 2)})
    assert index.ends() == {0: 3, 1: 6}
    # A version appending nothing has no base; each base sums the versions before.
    assert index.bases() == [(3, (0, 0)), (5, (2, 1)), (6, (3, 4))]
    assert [v for v, _ in index.versions_for({0: (1, 3)})] == [3, 5]
    assert [v for v, _ in index.versions_for({1: (1, 4)})] == [5]
    assert [v for v, _ in index.versions_for({1: (4, 6)})] == [6]
    assert index.versions_for({0: (3, 3), 1: (6, 6)}) == []


def test_a_replayed_range_is_read_from_the_stored_counts_past_a_later_change(tmp_path):
    table, wh = tmp_path / "bronze", Warehouse(tmp_path / "wh")
    _append(table, ["a", "b", "c"], [1, 2, 3])
    topic = _topic(wh, _source(table, partitions=1))
    assert topic.end_offsets() == {0: 3}  # a batch planned (0, 3)
    DeltaTable(str(table)).delete("amount = 2")
    # Its replay reads its rows; a plan past them fails at the change.
    rows = records_of(topics.topic(wh, "orders").reader().read_range({0: (0, 3)}))
    assert [r.key for r in rows] == ["a", "b", "c"]
    with pytest.raises(StreamsException, match="version 1 .* DELETE"):
        topics.topic(wh, "orders").end_offsets()
