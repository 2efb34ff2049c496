"""Write buffers of transactions past the size where they keep a sorted index, put_all,
and the in-memory backend's index (state/base.py, state/memory.py)."""

from __future__ import annotations

from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.state import base
from lakestate.state.base import IsolationLevel
from lakestate.state.memory import in_memory_store
from state_backends import BACKENDS, store_factories

NS = "ns"
KEYS = [bytes([a, b]) for a in range(9) for b in range(9)]  # 81 keys, > 2 * base._INDEX_MIN


@pytest.fixture(params=BACKENDS)
def store_factory(request, tmp_path):
    yield from store_factories(request, tmp_path)


def _expected(model: dict, lo, hi, reverse: bool) -> list:
    items = sorted(
        (k, v)
        for k, v in model.items()
        if v is not None and (lo is None or k >= lo) and (hi is None or k < hi)
    )
    return items[::-1] if reverse else items


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), st.binary(min_size=1, max_size=2)),
        st.tuples(st.just("delete"), st.sampled_from(KEYS)),
        st.tuples(
            st.just("iterate"),
            st.none() | st.sampled_from(KEYS),
            st.none() | st.sampled_from(KEYS),
            st.booleans(),
        ),
        st.tuples(st.just("commit")),
    ),
    max_size=150,
)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), st.binary(min_size=1, max_size=2)), OPS)
def test_large_buffers_iterate_like_a_model(committed: dict, ops: list) -> None:
    store = in_memory_store("m")
    with store.new_transaction() as txn:
        for k, v in committed.items():
            txn.put(NS, k, v)
        txn.commit()
    model = dict(committed)
    own: dict = {}
    txn = store.new_transaction()
    for op in ops:
        if op[0] == "put":
            txn.put(NS, op[1], op[2])
            own[op[1]] = op[2]
        elif op[0] == "delete":
            txn.delete(NS, op[1])
            own[op[1]] = None
        elif op[0] == "iterate":
            _, lo, hi, reverse = op
            assert list(txn.iterate(NS, lo, hi, reverse)) == _expected(
                {**model, **own}, lo, hi, reverse
            )
        else:
            assert [k for _, k, _ in txn.changes()] == sorted(own)
            txn.commit()
            model.update(own)
            own = {}
            txn = store.new_transaction()
        assert txn.approximate_num_uncommitted_entries() == len(own)
    assert list(store.iterate(NS)) == _expected(model, None, None, False)


def test_an_indexed_buffer_stays_in_order(store_factory) -> None:
    store = store_factory()
    txn = store.new_transaction()
    for k in KEYS[::2]:
        txn.put(NS, k, b"a")
    assert [k for k, _ in txn.iterate(NS)] == KEYS[::2]
    assert NS in txn._indexes  # large enough: indexed from the first iteration on
    items = txn.iterate(NS)
    assert next(items) == (KEYS[0], b"a")
    for k in KEYS[1::2]:
        txn.put(NS, k, b"b")  # new keys after the index exists
    txn.delete(NS, KEYS[2])
    # The running scan goes on in order, never twice over a key, without the deleted key;
    # keys written ahead of it may be read (it reads the index in chunks).
    rest = [k for k, _ in items]
    assert rest == sorted(set(rest))
    assert set(KEYS[4::2]) <= set(rest) <= {k for k in KEYS[1:] if k != KEYS[2]}
    assert [k for k, _ in txn.iterate(NS)] == [k for k in KEYS if k != KEYS[2]]
    assert [k for _, k, _ in txn.changes()] == KEYS
    txn.commit()
    assert [k for k, _ in store.iterate(NS)] == [k for k in KEYS if k != KEYS[2]]


def test_read_uncommitted_sees_a_large_open_buffer_in_order(store_factory) -> None:
    store = store_factory(IsolationLevel.READ_UNCOMMITTED)
    writer = store.new_transaction()
    for k in reversed(KEYS):
        writer.put(NS, k, b"w")
    reader = store.new_transaction()
    assert [k for k, _ in reader.iterate(NS, KEYS[3], KEYS[70])] == KEYS[3:70]
    assert [k for k, _ in store.iterate(NS, reverse=True)] == KEYS[::-1]
    writer.close()
    assert list(reader.iterate(NS)) == []


def test_index_threshold_is_small() -> None:
    assert 2 * base._INDEX_MIN < len(KEYS) - 1


# -- the in-memory backend's index -----------------------------------------------------------


def _commit(store, puts=(), deletes=()) -> None:
    with store.new_transaction() as txn:
        for k in puts:
            txn.put(NS, k, k)
        for k in deletes:
            txn.delete(NS, k)
        txn.commit()


def _key(i: int) -> bytes:
    return b"%06d" % i


@pytest.mark.parametrize("reverse", [False, True])
def test_memory_scans_span_chunks_and_commits(reverse: bool) -> None:
    store = in_memory_store("m")
    _commit(store, [_key(i) for i in range(0, 20000, 2)])
    scan = store.iterate(NS, _key(100), _key(19000), reverse)
    first = [k for k, _ in islice(scan, 700)]
    # Commits while the scan runs: keys ahead of it added and removed, keys behind too.
    ahead = range(1000, 18000)
    _commit(store, [_key(i) for i in ahead if i % 2], [_key(i) for i in ahead if i % 10 == 0])
    rest = [k for k, _ in scan]
    seen = first + rest
    assert seen == sorted(set(seen), reverse=reverse)  # in order, nothing twice
    final = {k for k, _ in store.iterate(NS)}
    assert all(k in final for k in rest)  # nothing removed ahead of the scan is read
    # Everything that stayed the whole time was read.
    stayed = {_key(i) for i in range(100, 19000, 2) if not (1000 <= i < 18000 and i % 10 == 0)}
    assert stayed <= set(seen)


def test_memory_index_is_dropped_when_not_scanned(monkeypatch) -> None:
    from lakestate.state import memory

    monkeypatch.setattr(memory, "_STALE_MIN", 10)
    store = in_memory_store("m")
    backend = store._backend
    _commit(store, [_key(i) for i in range(5)])
    assert [k for k, _ in store.iterate(NS)] == [_key(i) for i in range(5)]
    assert NS in backend._indexes
    _commit(store, [_key(i) for i in range(100, 90, -1)], [_key(0)])  # kept up to date
    assert [k for k, _ in store.iterate(NS, _key(3))] == [_key(i) for i in (3, 4, *range(91, 101))]
    for i in range(200, 240):
        _commit(store, [_key(i)], [_key(i - 1)] if i % 3 == 0 else ())
    assert NS not in backend._indexes  # written a lot, never scanned: dropped
    assert [k for k, _ in store.iterate(NS, reverse=True)] == sorted(
        dict(store.iterate(NS)), reverse=True
    )
    assert NS in backend._indexes


# -- put_all, and commits that cannot be applied ---------------------------------------------


def test_put_all_is_puts_in_order(store_factory) -> None:
    store = store_factory()
    one, many = store.new_transaction(), store.new_transaction()
    items = [(b"b", b"1"), (b"a", None), (b"b", b"22"), (b"c", b"")]
    for k, v in items:
        one.put(NS, k, v)
    many.put_all(NS, items)
    assert list(many.changes()) == list(one.changes())
    assert many.approximate_num_uncommitted_entries() == one.approximate_num_uncommitted_entries()
    assert many.approximate_num_uncommitted_bytes() == one.approximate_num_uncommitted_bytes()
    many.put_all(NS, [(b"d", b"4")])
    one.close()
    many.commit()
    assert list(store.iterate(NS)) == [(b"b", b"22"), (b"c", b""), (b"d", b"4")]


@pytest.mark.parametrize("indexed", [False, True])
def test_a_write_that_is_not_bytes_fails_the_whole_commit(indexed: bool) -> None:
    store = in_memory_store("m")
    _commit(store, [b"k"])
    if indexed:
        assert list(store.iterate(NS)) == [(b"k", b"k")]
    txn = store.new_transaction()
    txn.put(NS, b"a", b"1")
    txn.delete(NS, b"k")
    txn.put("other", b"b", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes"):
        txn.commit({base.TopicPartition("in", 0): 5})
    assert list(store.iterate(NS)) == [(b"k", b"k")]
    assert list(store.iterate("other")) == [] and store.committed_offsets() == {}
