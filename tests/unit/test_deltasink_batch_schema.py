"""A Delta sink's batch typed in pieces (each Spark task's rows where they are): the
table's columns then (``rows.batch_schema``) are those the whole batch typed at once would
give."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from lakestate.delta_sink import META_SCHEMA, DeltaSink
from lakestate.errors import StreamsException
from lakestate.io.deltasink.rows import batch_schema, typed
from lakestate.io.topic_records import RECORD_SCHEMA

SINK = DeltaSink("s", "/tmp/unused")


def _records(values: list) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([1] * n, pa.int64()),
            "key": pa.array([json.dumps(f"k{i}") for i in range(n)], pa.string()),
            "value": pa.array([json.dumps(v) for v in values], pa.string()),
            "headers": pa.nulls(n, pa.string()),
        },
        schema=RECORD_SCHEMA,
    )


def _pieces(*pieces: list) -> list[pa.Schema]:
    return [typed(SINK, _records(p), None).schema for p in pieces]


def test_pieces_typed_apart_get_the_types_of_the_batch_typed_at_once():
    pieces = ([{"n": 1}, {"n": 2}], [{"n": 2.5, "note": "x"}])
    whole = typed(SINK, _records([v for p in pieces for v in p]), None).schema
    schema = batch_schema(SINK, _pieces(*pieces), None)
    assert schema == whole
    assert schema.field("n").type == pa.float64()
    assert schema.names[-3:] == META_SCHEMA.names


def test_the_tables_columns_keep_their_types_and_order_new_ones_follow():
    existing = pa.schema([("key", pa.string()), ("n", pa.int64()), *META_SCHEMA])
    schema = batch_schema(SINK, _pieces([{"n": 1, "b": True}], [{"c": "x", "b": False}]), existing)
    assert [(f.name, f.type) for f in schema] == [
        ("key", pa.string()),
        ("n", pa.int64()),
        ("b", pa.bool_()),
        ("c", pa.string()),
        *[(f.name, f.type) for f in META_SCHEMA],
    ]


def test_pieces_whose_types_do_not_unify_fail_as_one_batch_would():
    with pytest.raises(StreamsException, match="field 'n' has values of different types"):
        typed(SINK, _records([{"n": 1}, {"n": "one"}]), None)
    with pytest.raises(StreamsException, match="field 'n' has values of different types"):
        batch_schema(SINK, _pieces([{"n": 1}], [{"n": "one"}]), None)
