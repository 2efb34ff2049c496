"""Restoring a wiped store from Arrow columns (``restore_columns`` + ``StateStore.bulk_load``)
leaves exactly the entries that restoring through transactions (``restore_entries``, the
model) leaves: the dedup store's id entries, time index and count, byte for byte, for the
values its writes produce and for any other encoding the model reads."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.errors import InvalidStateStoreException
from lakestate.state.dedup import COUNT_KEY, FLOOR_KEY, DedupStore, source_tag
from lakestate.state.keys import encode_key
from lakestate.state.registry import columnar_restore, view_class
from lakestate.state.serde import encode_value
from state_backends import BACKENDS, store_factories

NAME = "seen"
I64 = st.integers(-(2**63), 2**63 - 1)
OPTIONAL = st.none() | st.integers(-(2**70), 2**70)


@pytest.fixture(params=BACKENDS)
def store_factory(request, tmp_path):
    yield from store_factories(request, tmp_path)


def _model(store, kind: str, rows: dict[bytes, bytes]) -> None:
    """The restore through transactions, in chunks, as recovery did it."""
    items = list(rows.items())
    for start in range(0, len(items), 3):
        with store.new_transaction() as txn:
            view_class(kind).restore_entries(txn, NAME, items[start : start + 3])
            txn.commit()


def _columns(store, kind: str, rows: dict[bytes, bytes]) -> None:
    keys, values = columnar_restore(kind)(
        pa.array(list(rows), pa.binary()), pa.array(list(rows.values()), pa.binary())
    )
    order = pc.sort_indices(keys)
    keys, values = keys.take(order), values.take(order)
    store.bulk_load(
        NAME,
        (
            (keys.slice(start, 4).to_pylist(), values.slice(start, 4).to_pylist())
            for start in range(0, len(keys), 4)
        ),
    )


def _everything(store) -> dict[str, dict[bytes, bytes]]:
    return {ns: dict(store.iterate(ns)) for ns in (NAME, "other")}


def _same_both_ways(store_factory, kind: str, rows: dict[bytes, bytes]) -> dict[bytes, bytes]:
    model, columns = store_factory(), store_factory()
    _model(model, kind, rows)
    _columns(columns, kind, rows)
    assert _everything(columns) == _everything(model)
    return _everything(columns)[NAME]


def _entry_text(ts: int, offset: int | None, source: int | None, style: int) -> bytes:
    """An entry as the store writes it (style 0) or in encodings it never writes but reads."""
    if style == 0:
        return b"[%d,%b,%b]" % (
            ts,
            b"null" if offset is None else b"%d" % offset,
            b"null" if source is None else b"%d" % source,
        )
    if style == 1:
        return encode_value([ts, offset, source])
    return b"[ %d , %b, %b ]" % (
        ts,
        b"null" if offset is None else b"%d" % offset,
        b"null" if source is None else b"7",
    )


@settings(max_examples=60, deadline=None)
@given(
    entries=st.dictionaries(
        st.text(max_size=4) | I64 | st.tuples(st.text(max_size=2), I64),
        st.tuples(I64, OPTIONAL, OPTIONAL, st.sampled_from([0, 0, 0, 1, 2])),
        max_size=12,
    )
)
def test_dedup_restore_from_columns_equals_restore_through_transactions(entries):
    from lakestate.state.memory import in_memory_store

    rows = {
        b"i" + encode_key(dedup_id): _entry_text(ts, offset, source, style)
        for dedup_id, (ts, offset, source, style) in entries.items()
    }
    model, columns = in_memory_store("m"), in_memory_store("c")
    _model(model, "dedup", rows)
    _columns(columns, "dedup", rows)
    assert _everything(columns) == _everything(model)


def test_dedup_restore_from_columns_on_both_backends(store_factory):
    tag = source_tag("in")
    rows = {
        b"i" + encode_key("a"): b"[5,0,%d]" % tag,
        b"i" + encode_key(("b", 2)): b"[-3,1,null]",
        b"i" + encode_key("c"): b"[0,null,null]",
        b"i" + encode_key("d"): b"[9223372036854775807,2,1]",  # 19 digits: decoded
        b"i" + encode_key("e"): b"[-9223372036854775808,3,1]",
        b"i" + encode_key("f"): b"[ 7, 5, 1]",  # other encodings: decoded and encoded again
        b"i" + encode_key("g"): b"[-0,-0,1]",
        b"i" + encode_key("h"): b"[-0,5,1]",
        b"n": b"99",  # index-only entries are never changelog rows, and are skipped
    }
    stored = _same_both_ways(store_factory, "dedup", rows)
    assert stored[COUNT_KEY] == b"8"
    assert FLOOR_KEY not in stored
    assert len(stored) == 8 * 2 + 1


def test_dedup_restore_of_nothing_writes_nothing(store_factory):
    assert _same_both_ways(store_factory, "dedup", {}) == {}


def test_dedup_restore_of_a_bad_timestamp_fails_like_the_model(store_factory):
    rows = {b"i" + encode_key("a"): b"[1,0,0]", b"i" + encode_key("x"): b"[true,0,0]"}
    with pytest.raises(Exception) as model_error:
        _model(store_factory(), "dedup", rows)
    with pytest.raises(type(model_error.value)):
        _columns(store_factory(), "dedup", rows)


def test_key_value_restore_from_columns(store_factory):
    rows = {encode_key(k): encode_value([k * 2, 100 + k]) for k in range(10)}
    assert len(_same_both_ways(store_factory, "timestamped_key_value", rows)) == 10


def test_kinds_without_columns_restore_through_transactions():
    assert columnar_restore("dedup") is DedupStore.restore_columns
    assert columnar_restore("window") is None


def test_bulk_load_refuses_while_a_transaction_is_open(store_factory):
    store = store_factory()
    txn = store.new_transaction()
    with pytest.raises(InvalidStateStoreException):
        store.bulk_load(NAME, [([b"k"], [b"v"])])
    txn.close()
    store.bulk_load(NAME, [([b"a", b"k"], [b"1", b"v"]), ([b"m"], [b"2"])])
    store.bulk_load(NAME, [])
    assert dict(store.iterate(NAME)) == {b"a": b"1", b"k": b"v", b"m": b"2"}
    assert store.get(NAME, b"k") == b"v"


def test_rocksdb_bulk_load_survives_a_reopen_and_refuses_keys_out_of_order(tmp_path):
    from lakestate.state.rocksdb import rocksdb_store

    store = rocksdb_store("t", tmp_path / "db")
    store.bulk_load(NAME, [([b"a", b"b"], [b"1", b"2"])])
    with pytest.raises(Exception, match="ascending"):
        store.bulk_load("other", [([b"b", b"a"], [b"1", b"2"])])
    store.close()
    store = rocksdb_store("t", tmp_path / "db")
    try:
        assert dict(store.iterate(NAME)) == {b"a": b"1", b"b": b"2"}
        assert dict(store.iterate("other")) == {}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]  # no SST file left
    finally:
        store.close()
