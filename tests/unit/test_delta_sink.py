"""``ls.DeltaSink``: a record's typed row, the declared schema's check in processing (the
processing exception handler's), and the Delta sink topic kind: typed appends with txns
(a replay writes nothing), schema evolution, reading back as records."""

from __future__ import annotations

import json

import lakestate as ls
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from lakestate.errors import ProcessingException, StreamsException, TopologyException
from lakestate.io import deltasink, topics
from lakestate.io.deltasink import rows
from lakestate.io.topic_records import RECORD_SCHEMA, records_of
from lakestate.task_id import TaskId
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse


def test_a_record_row_scalar_and_dict_keys_and_values():
    sink = ls.DeltaSink("s", "/t")
    assert sink.row("k", {"a": 1, "b": "x"}) == {"key": "k", "a": 1, "b": "x"}
    assert sink.row("k", 5) == {"key": "k", "value": 5}
    assert sink.row("k", None) == {"key": "k"}
    by_fields = ls.DeltaSink("s", "/t", key=("id", "day"))
    assert by_fields.row({"id": 1, "day": "d"}, {"id": 1, "n": 2}) == {"id": 1, "day": "d", "n": 2}
    with pytest.raises(ValueError, match="not a dict with the fields"):
        by_fields.row("k", {"n": 1})
    with pytest.raises(ValueError, match="'id' that is also the key's column"):
        by_fields.row({"id": 1, "day": "d"}, {"id": 2})
    with pytest.raises(ValueError, match="'_offset', a column every row has"):
        sink.row("k", {"_offset": 1})
    with pytest.raises(ValueError, match="'key' that is also the key's column"):
        sink.row("k", {"key": "other"})


def test_a_declared_schema_is_checked_and_bad_declarations_refused():
    sink = ls.DeltaSink("s", "/t", schema={"key": "string", "n": "long", "at": "timestamp"})
    assert sink.schema.field("at").type == pa.timestamp("us", "UTC")
    sink.check("k", {"n": 3, "at": "2026-01-02T03:04:05Z"})
    sink.check("k", {"n": 3.0})  # JSON's 3.0 is the integer 3
    with pytest.raises(ValueError, match=r"field 'n' of the record with key 'k' is 2.5"):
        sink.check("k", {"n": 2.5})
    with pytest.raises(ValueError, match="field 'extra' that the declared schema does not have"):
        sink.check("k", {"extra": 1})
    strict = ls.DeltaSink("s", "/t", schema=pa.schema([pa.field("key", pa.string(), False)]))
    with pytest.raises(ValueError, match="is null, but the field is not nullable"):
        strict.check(None, None)
    with pytest.raises(ValueError, match="has type 'varchar'"):
        ls.DeltaSink("s", "/t", schema={"key": "varchar"})
    with pytest.raises(ValueError, match="no column 'day'"):
        ls.DeltaSink("s", "/t", schema={"key": "string"}, partition_by="day")


def _topology(sink: ls.DeltaSink):
    b = ls.StreamsBuilder()
    b.stream("in").to(sink)
    return b.build()


def test_a_value_that_does_not_fit_fails_or_goes_to_the_dead_letters():
    sink = ls.DeltaSink("typed", "/t", schema={"key": "string", "n": "long"})
    with TopologyTestDriver(_topology(sink), {"application.id": "a"}) as d:
        source = d.create_input_topic("in")
        source.pipe_input("a", {"n": 1})
        with pytest.raises(ProcessingException, match="DeltaSink 'typed': field 'n'.*'b'"):
            source.pipe_input("b", {"n": "x"})
        assert [r.key for r in d.create_output_topic("typed").read_records_to_list()] == ["a"]
    config = {"application.id": "a", "processing.exception.handler": "log_and_continue"}
    with TopologyTestDriver(_topology(sink), config) as d:
        source = d.create_input_topic("in")
        source.pipe_input("b", {"n": 2, "m": 1})
        source.pipe_input("c", {"n": 3})
        assert [r.key for r in d.create_output_topic("typed").read_records_to_list()] == ["c"]
        dead = d.create_output_topic("a-dead-letters").read_records_to_list()
        assert [r.key for r in dead] == ["b"]
        assert "'m'" in dead[0].headers["__streams.errors.message"]


def test_one_sink_name_given_two_ways_is_refused():
    b = ls.StreamsBuilder()
    b.stream("in").to(ls.DeltaSink("typed", "/t"))
    b.stream("in2").to("typed")
    with pytest.raises(TopologyException, match="is a DeltaSink elsewhere"):
        b.build().delta_sinks()


def _records(rows_: list[tuple]) -> pa.Table:
    """RECORD_SCHEMA rows (partition, offset, timestamp, key, value) with JSON texts."""
    cols = list(zip(*rows_, strict=True))
    return pa.table(
        {
            "partition": pa.array(cols[0], pa.int32()),
            "offset": pa.array(cols[1], pa.int64()),
            "timestamp": pa.array(cols[2], pa.int64()),
            "key": pa.array([json.dumps(k) for k in cols[3]], pa.string()),
            "value": pa.array([None if v is None else json.dumps(v) for v in cols[4]]),
            "headers": pa.nulls(len(rows_), pa.string()),
        },
        schema=RECORD_SCHEMA,
    )


def test_typed_rows_infer_types_skip_all_null_columns_and_read_back():
    sink = ls.DeltaSink("s", "/t")
    batch = _records([(0, 0, 1000, "a", {"n": 1, "x": None}), (1, 0, 2000, "b", None)])
    typed = rows.typed(sink, batch, None)
    assert typed.column_names == ["key", "n", "_timestamp", "_partition", "_offset"]
    assert typed.schema.field("n").type == pa.int64()
    back = [(r.key, r.value, r.timestamp) for r in records_of(rows.records(sink, typed))]
    assert back == [("a", {"n": 1}, 1000), ("b", None, 2000)]
    mixed = _records([(0, 0, 1, "a", {"n": 1}), (0, 1, 1, "b", {"n": "x"})])
    with pytest.raises(StreamsException, match="'n' has values of different types"):
        rows.typed(sink, mixed, None)
    existing = pa.schema([("key", pa.string()), ("n", pa.int64())])
    with pytest.raises(StreamsException, match="field 'n' of the record with key 'a' is 1.5"):
        rows.typed(sink, _records([(0, 0, 1, "a", {"n": 1.5})]), existing)


def test_appends_carry_txns_evolve_the_schema_and_a_replay_writes_nothing(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    sink = ls.DeltaSink("typed", str(tmp_path / "table"))
    deltasink.declare(wh, sink)
    topic = topics.topic(wh, "typed")
    assert topic.kind == "delta_sink" and not topic.exists()
    topic.create(2)
    assert topics.topic(wh, "typed").partitions() == 2
    task = TaskId(0, 0)

    def build(values):
        def rows_of(todo, ends):
            return _records([(0, ends[0] + i, 1000 + i, "k", v) for i, v in enumerate(values)])

        return rows_of

    first = topic.append_batch("app", {task: 1}, build([{"n": 1}, {"n": 2}]), {"batch": 1})
    assert first.ranges == {0: (0, 2)}
    assert topic.append_batch("app", {task: 1}, build([{"n": 9}]), {}).skipped
    topic.append_batch("app", {task: 2}, build([{"n": 3, "label": "new"}]), {"batch": 2})
    table = DeltaTable(str(tmp_path / "table"))
    assert pa.schema(table.schema().to_arrow()).field("label").type == pa.string()
    back = [(r.offset, r.value) for p in topic.read_partitions() for r in records_of(p)]
    assert back == [(0, {"n": 1}), (1, {"n": 2}), (2, {"n": 3, "label": "new"})]
    assert topic.end_offsets() == {0: 3, 1: 0}
    with pytest.raises(StreamsException, match="written by the app that declares it"):
        topic.append([{"key": "k", "value": 1}])
    with pytest.raises(StreamsException, match="they never change"):
        deltasink.declare(wh, ls.DeltaSink("typed", str(tmp_path / "other")))


def test_the_latest_view_keeps_each_keys_last_row_and_drops_tombstones():
    import duckdb
    from lakestate.read.views import latest_sql

    rows_ = pa.table(
        {
            "key": ["a", "b", "a", "b", "c"],
            "n": [1, 1, 2, None, 5],
            "_timestamp": pa.array([1, 2, 3, 4, 5], pa.timestamp("us", "UTC")),
            "_partition": pa.array([0, 1, 0, 1, 0], pa.int32()),
            "_offset": pa.array([0, 0, 1, 1, 2], pa.int64()),
        }
    )
    con = duckdb.connect()
    con.register("src", rows_)
    select = latest_sql("src", ("key",), rows_.column_names, lambda c: f'"{c}"')
    assert sorted(con.sql(f"select key, n from ({select})").fetchall()) == [("a", 2), ("c", 5)]


def test_two_instances_appending_from_one_snapshot_conflict_and_the_loser_renumbers(
    tmp_path, monkeypatch
):
    # Two instances (other tasks) writing one sink on a bucket share no local lock: the
    # loser of a race from one snapshot conflicts on the sink's append txn and renumbers,
    # so _offset stays dense and unique per partition.
    wh = Warehouse(tmp_path / "wh")
    deltasink.declare(wh, ls.DeltaSink("typed", str(tmp_path / "table")))
    topic = topics.topic(wh, "typed")
    topic.create(1)

    def build(key):
        def rows_of(todo, ends):
            return _records([(0, ends[0], 1000, key, {"n": 1})])

        return rows_of

    topic.append_batch("app", {TaskId(0, 0): 1}, build("a"), {})
    stale = [topic._table()]
    topic.append_batch("app", {TaskId(0, 1): 1}, build("b"), {})  # the other instance's
    fresh = type(topic)._table
    opened = []

    def table_of(self):
        opened.append(1)
        return stale.pop() if stale else fresh(self)

    monkeypatch.setattr(type(topic), "_table", table_of)
    result = topic.append_batch("app", {TaskId(0, 0): 2}, build("c"), {})
    assert len(opened) == 2 and result.ranges == {0: (2, 3)}  # lost once, renumbered
    back = sorted((r.offset, r.key) for p in topic.read_partitions() for r in records_of(p))
    assert back == [(0, "a"), (1, "b"), (2, "c")]


def test_typed_rows_name_the_record_whose_value_does_not_convert():
    """A column converts at once; a failure names its record as a value-by-value check
    would: a Python type the column does not take, or a value out of the column's range."""
    sink = ls.DeltaSink("s", "/t")
    existing = pa.schema([("key", pa.string()), ("n", pa.int32()), ("ok", pa.bool_())])
    fine = rows.typed(sink, _records([(0, 0, 1, "a", {"n": 7, "ok": True})]), existing)
    assert fine.column("n").to_pylist() == [7] and fine.schema.field("n").type == pa.int32()
    bool_as_int = _records([(0, 0, 1, "a", {"n": 1}), (0, 1, 1, "b", {"n": True})])
    with pytest.raises(StreamsException, match="key 'b' is True \\(bool\\), not int32"):
        rows.typed(sink, bool_as_int, existing)
    too_big = _records([(0, 0, 1, "a", {"n": 1}), (0, 1, 1, "c", {"n": 2**40})])
    with pytest.raises(StreamsException, match="key 'c' is 1099511627776, which is not int32"):
        rows.typed(sink, too_big, existing)
