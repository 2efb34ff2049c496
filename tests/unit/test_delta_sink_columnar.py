"""The Delta sink's columnar conversion (io/deltasink/columnar.py) gives the table the
row-by-row conversion gives, or leaves the batch to it: a hypothesis property test over
keys and values of every JSON kind, declared schemas and existing tables' columns."""

from __future__ import annotations

import json

import lakestate as ls
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.errors import StreamsException
from lakestate.io.deltasink import columnar, rows
from lakestate.io.topic_records import RECORD_SCHEMA

_TEXTS = st.text(alphabet=st.sampled_from('ab"\\é\n -0'), max_size=4)
_SCALARS = st.one_of(
    st.none(),
    _TEXTS,
    st.integers(-(2**64), 2**64),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.dictionaries(st.sampled_from(["a", "value", "key"]), st.integers(0, 3), max_size=2),
)
# Mostly one kind per batch (the shape the columnar path takes), sometimes mixed.
_KINDS = [st.none() | _TEXTS, st.none() | st.integers(-(2**64), 2**64), _SCALARS]
_TYPES = [None, pa.string(), pa.int64(), pa.float64(), pa.large_string()]


def _table(pairs: list[tuple[object, object]], raw_null: bool) -> pa.Table:
    def text(v: object) -> str | None:
        return None if v is None and raw_null else json.dumps(v)

    n = len(pairs)
    return pa.table(
        {
            "partition": pa.array([i % 2 for i in range(n)], pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000 + i for i in range(n)], pa.int64()),
            "key": pa.array([text(k) for k, _ in pairs], pa.string()),
            "value": pa.array([text(v) for _, v in pairs], pa.string()),
            "headers": pa.nulls(n, pa.string()),
        },
        schema=RECORD_SCHEMA,
    )


@st.composite
def _batches(draw):
    keys = draw(st.sampled_from(_KINDS))
    values = draw(st.sampled_from(_KINDS))
    pairs = draw(st.lists(st.tuples(keys, values), min_size=1, max_size=12))
    key_type, value_type = draw(st.sampled_from(_TYPES)), draw(st.sampled_from(_TYPES))
    declared = {}
    if key_type is not None:
        declared["key"] = key_type
    if value_type is not None:
        declared["value"] = value_type
    if draw(st.booleans()):
        declared["extra"] = pa.int32()
    how = draw(st.sampled_from(["declared", "existing", "neither"]))
    if "key" not in declared and how == "declared":
        how = "existing"  # a declared schema names the key's column
    schema = pa.schema(declared) if declared and how == "declared" else None
    existing = pa.schema(declared) if declared and how == "existing" else None
    return pairs, draw(st.booleans()), schema, existing


def _outcome(convert, sink, records, existing):
    try:
        return convert(sink, records, existing)
    except StreamsException as exc:
        return str(exc)


@settings(max_examples=400, deadline=None)
@given(_batches())
def test_the_columnar_conversion_equals_the_row_by_row_one(batch):
    pairs, raw_null, schema, existing = batch
    sink = ls.DeltaSink("out", "/tmp/never-written", schema=schema)
    records = _table(pairs, raw_null)
    fast = _outcome(rows.typed, sink, records, existing)
    slow = _outcome(rows.typed_by_rows, sink, records, existing)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
    else:
        assert fast.schema == slow.schema
        assert fast.to_pylist() == slow.to_pylist()


@pytest.mark.parametrize(
    ("keys", "values", "taken"),
    [
        (['"u-1"', '"u-2"'], ["1", "20"], True),
        (['"u-1"', None], ["1", "null"], True),
        (["7", "-3"], ['"x"', '"y"'], True),
        (['"a\\"b"', '"u"'], ["1", "2"], False),  # an escape: row by row
        (['"u"', '"v"'], ["1.0", "2"], False),  # a float
        (['"u"', '"v"'], ['{"n": 1}', "2"], False),  # a dict value
        (['"u"', '"v"'], ["99999999999999999999", "2"], False),  # beyond int64
        (['"u"', '"v"'], [None, None], False),  # no value says the column's type
    ],
)
def test_which_batches_take_the_columnar_path(keys, values, taken):
    sink = ls.DeltaSink("out", "/tmp/never-written")
    n = len(keys)
    records = pa.table(
        {
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([0] * n, pa.int64()),
            "key": pa.array(keys, pa.string()),
            "value": pa.array(values, pa.string()),
            "headers": pa.nulls(n, pa.string()),
        },
        schema=RECORD_SCHEMA,
    )
    assert (columnar.typed_columns(sink, records, {}) is not None) is taken


_CHECKED_TYPES = [
    pa.string(), pa.large_string(), pa.int8(), pa.int16(), pa.int32(), pa.int64(),
    pa.uint8(), pa.uint32(), pa.uint64(), pa.float32(), pa.float64(), pa.bool_(),
    pa.timestamp("ms", "UTC"), pa.date32(),
]  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(_SCALARS, st.integers(-(2**65), 2**65), st.floats()),
    st.sampled_from(_CHECKED_TYPES),
)
def test_the_quick_fit_check_agrees_with_arrow(value, type_):
    """``fit_problem``'s shortcut (no Arrow conversion for plain values) says a value fits
    only where the full check (its kind, then Arrow's conversion) finds no problem."""
    from lakestate import delta_sink

    if delta_sink._plainly_fits(value, type_):
        assert delta_sink.kind_problem(value, type_) is None
        assert delta_sink.conversion_problem(value, type_) is None
