"""KIP-892 transactional state stores: one suite, run against every backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lakestate.errors import InvalidStateStoreException
from lakestate.state.base import IsolationLevel, TopicPartition, TransactionState
from lakestate.state.constants import ENTRY_OVERHEAD_BYTES
from state_backends import BACKENDS, StoreFactory, store_factories

RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
NS = "kv"
P0 = TopicPartition("orders", 0)
P1 = TopicPartition("orders", 1)
Q0 = TopicPartition("payments", 0)


@pytest.fixture(params=BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    yield from store_factories(request, tmp_path)


def _seed(store, items: dict[bytes, bytes], namespace: str = NS, offsets=None) -> None:
    txn = store.new_transaction()
    for key, value in items.items():
        txn.put(namespace, key, value)
    txn.commit(offsets)


# -- reading your own writes -----------------------------------------------------------------


def test_read_your_own_writes(store_factory: StoreFactory) -> None:
    store = store_factory()
    _seed(store, {b"a": b"1", b"c": b"3", b"e": b"5"})
    txn = store.new_transaction()
    txn.put(NS, b"b", b"2")
    txn.put(NS, b"c", b"33")
    txn.delete(NS, b"e")
    txn.put(NS, b"f", b"6")
    txn.delete(NS, b"zz")  # deleting a missing key is harmless
    assert txn.get(NS, b"a") == b"1"
    assert txn.get(NS, b"b") == b"2"
    assert txn.get(NS, b"c") == b"33"
    assert txn.get(NS, b"e") is None
    assert list(txn.iterate(NS)) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"33"), (b"f", b"6")]
    assert list(txn.iterate(NS, reverse=True)) == [
        (b"f", b"6"), (b"c", b"33"), (b"b", b"2"), (b"a", b"1")
    ]
    assert list(txn.iterate(NS, b"b", b"f")) == [(b"b", b"2"), (b"c", b"33")]
    assert list(txn.iterate(NS, b"b", b"f", reverse=True)) == [(b"c", b"33"), (b"b", b"2")]
    assert list(txn.iterate(NS, None, b"c")) == [(b"a", b"1"), (b"b", b"2")]
    assert list(txn.iterate(NS, b"c", None, reverse=True)) == [(b"f", b"6"), (b"c", b"33")]
    assert list(txn.iterate(NS, b"d", b"e")) == []
    # Other namespaces are separate.
    assert txn.get("other", b"a") is None
    assert list(txn.iterate("other")) == []


def test_delete_then_put_again_and_empty_values(store_factory: StoreFactory) -> None:
    store = store_factory()
    _seed(store, {b"k": b"old"})
    txn = store.new_transaction()
    txn.delete(NS, b"k")
    assert list(txn.iterate(NS)) == []
    txn.put(NS, b"k", b"")
    assert txn.get(NS, b"k") == b""
    assert list(txn.iterate(NS)) == [(b"k", b"")]
    txn.commit()
    assert store.get(NS, b"k") == b""


def test_all_deletes_shadow_all_committed(store_factory: StoreFactory) -> None:
    store = store_factory()
    _seed(store, {bytes([i]): bytes([i]) for i in range(10)})
    txn = store.new_transaction()
    for i in range(10):
        txn.delete(NS, bytes([i]))
    assert list(txn.iterate(NS)) == [] and list(txn.iterate(NS, reverse=True)) == []
    assert len(list(store.iterate(NS))) == 10
    txn.commit()
    assert list(store.iterate(NS)) == []


# -- isolation -------------------------------------------------------------------------------


def test_read_committed_hides_uncommitted_writes(store_factory: StoreFactory) -> None:
    store = store_factory(RC)
    _seed(store, {b"a": b"1", b"b": b"2"})
    writer = store.new_transaction()
    writer.put(NS, b"a", b"11")
    writer.delete(NS, b"b")
    writer.put(NS, b"c", b"3")
    reader = store.new_transaction()
    for view in (reader, store):
        assert view.get(NS, b"a") == b"1"
        assert view.get(NS, b"b") == b"2"
        assert view.get(NS, b"c") is None
        assert list(view.iterate(NS)) == [(b"a", b"1"), (b"b", b"2")]
        assert list(view.iterate(NS, reverse=True)) == [(b"b", b"2"), (b"a", b"1")]
    writer.commit()
    for view in (reader, store):
        assert view.get(NS, b"a") == b"11"
        assert view.get(NS, b"b") is None
        assert view.get(NS, b"c") == b"3"
        assert list(view.iterate(NS)) == [(b"a", b"11"), (b"c", b"3")]


def test_read_uncommitted_shows_open_writes(store_factory: StoreFactory) -> None:
    store = store_factory(RU)
    _seed(store, {b"a": b"1", b"b": b"2"})
    writer = store.new_transaction()
    writer.put(NS, b"a", b"11")
    writer.delete(NS, b"b")
    writer.put(NS, b"c", b"3")
    reader = store.new_transaction()
    for view in (reader, store):
        assert view.get(NS, b"a") == b"11"
        assert view.get(NS, b"b") is None
        assert view.get(NS, b"c") == b"3"
        assert list(view.iterate(NS)) == [(b"a", b"11"), (b"c", b"3")]
        assert list(view.iterate(NS, reverse=True)) == [(b"c", b"3"), (b"a", b"11")]
    # The reader's own writes win over the other transaction's.
    reader.put(NS, b"a", b"mine")
    reader.put(NS, b"b", b"back")
    assert reader.get(NS, b"a") == b"mine"
    assert list(reader.iterate(NS)) == [(b"a", b"mine"), (b"b", b"back"), (b"c", b"3")]
    # Rolling the writer back makes its writes disappear again.
    writer.close()
    assert list(reader.iterate(NS)) == [(b"a", b"mine"), (b"b", b"back")]
    assert list(store.iterate(NS)) == [(b"a", b"mine"), (b"b", b"back")]
    reader.close()
    assert store.get(NS, b"a") == b"1"
    assert list(store.iterate(NS)) == [(b"a", b"1"), (b"b", b"2")]


def test_isolation_level_is_exposed(store_factory: StoreFactory) -> None:
    assert store_factory(RC).new_transaction().isolation_level is RC
    assert store_factory(RU).new_transaction().isolation_level is RU


# -- rollback and lifecycle ------------------------------------------------------------------


@pytest.mark.parametrize("isolation", [RC, RU])
def test_close_rolls_back_and_is_idempotent(
    store_factory: StoreFactory, isolation: IsolationLevel
) -> None:
    store = store_factory(isolation)
    _seed(store, {b"a": b"1"}, offsets={P0: 1})
    txn = store.new_transaction()
    txn.put(NS, b"a", b"2")
    txn.put(NS, b"b", b"2")
    txn.set_stream_time(99)
    txn.close()
    txn.close()
    assert txn.state is TransactionState.CLOSED
    assert list(store.iterate(NS)) == [(b"a", b"1")]
    assert store.committed_offsets() == {P0: 1}
    assert store.stream_time() is None
    store = store_factory.reopen(store)
    assert list(store.iterate(NS)) == [(b"a", b"1")]


def test_context_manager_rolls_back_on_error(store_factory: StoreFactory) -> None:
    store = store_factory()
    with pytest.raises(RuntimeError), store.new_transaction() as txn:
        txn.put(NS, b"a", b"1")
        raise RuntimeError("processing failed")
    assert txn.state is TransactionState.CLOSED
    assert store.get(NS, b"a") is None
    with store.new_transaction() as txn:
        txn.put(NS, b"a", b"1")
        txn.commit()
    assert store.get(NS, b"a") == b"1"


@pytest.mark.parametrize("end", ["commit", "close"])
def test_ended_transaction_refuses_use(store_factory: StoreFactory, end: str) -> None:
    store = store_factory()
    txn = store.new_transaction()
    txn.put(NS, b"a", b"1")
    getattr(txn, end)()
    calls = [
        lambda: txn.get(NS, b"a"),
        lambda: txn.put(NS, b"a", b"2"),
        lambda: txn.delete(NS, b"a"),
        lambda: txn.iterate(NS),
        lambda: txn.commit(),
        lambda: txn.set_stream_time(1),
        lambda: txn.stream_time(),
    ]
    for call in calls:
        with pytest.raises(InvalidStateStoreException):
            call()
    txn.close()  # still idempotent
    assert txn.state is (TransactionState.COMMITTED if end == "commit" else TransactionState.CLOSED)


def test_closing_the_store_closes_open_transactions(store_factory: StoreFactory) -> None:
    store = store_factory()
    _seed(store, {b"a": b"1"})
    first, second = store.new_transaction(), store.new_transaction()
    first.put(NS, b"a", b"2")
    second.put(NS, b"b", b"2")
    store.close()
    store.close()  # idempotent
    for txn in (first, second):
        assert txn.state is TransactionState.CLOSED
        with pytest.raises(InvalidStateStoreException):
            txn.get(NS, b"a")
    for call in (
        store.new_transaction,
        lambda: store.get(NS, b"a"),
        lambda: store.iterate(NS),
        store.committed_offsets,
        lambda: store.committed_offset(P0),
    ):
        with pytest.raises(InvalidStateStoreException, match="closed"):
            call()
    store = store_factory.reopen(store)
    assert list(store.iterate(NS)) == [(b"a", b"1")]


def test_iterator_survives_later_writes_of_its_transaction(store_factory: StoreFactory) -> None:
    store = store_factory()
    _seed(store, {b"a": b"1", b"b": b"2"})
    txn = store.new_transaction()
    txn.put(NS, b"c", b"3")
    items = txn.iterate(NS)
    assert next(items) == (b"a", b"1")
    txn.put(NS, b"d", b"4")  # must not break the running iteration
    rest = list(items)
    assert rest[:2] == [(b"b", b"2"), (b"c", b"3")]


# -- offsets ---------------------------------------------------------------------------------


def test_committed_offsets(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert store.committed_offset(P0) is None
    assert store.committed_offsets() == {}
    _seed(store, {b"a": b"1"}, offsets={P0: 10, Q0: 0})
    assert store.committed_offset(P0) == 10
    assert store.committed_offset(Q0) == 0
    assert store.committed_offset(P1) is None
    _seed(store, {}, offsets={P0: 12, P1: 3})
    assert store.committed_offsets() == {P0: 12, P1: 3, Q0: 0}
    store.new_transaction().commit()  # no offsets: the committed ones stay
    assert store.committed_offsets() == {P0: 12, P1: 3, Q0: 0}
    store = store_factory.reopen(store)
    assert store.committed_offsets() == {P0: 12, P1: 3, Q0: 0}
    assert store.committed_offset(P1) == 3


def test_offsets_commit_atomically_with_data(store_factory: StoreFactory) -> None:
    store = store_factory()
    txn = store.new_transaction()
    txn.put(NS, b"a", b"1")
    assert store.committed_offsets() == {}
    txn.close()
    assert store.committed_offsets() == {} and store.get(NS, b"a") is None
    txn = store.new_transaction()
    txn.put(NS, b"a", b"1")
    txn.commit({P0: 7})
    assert store.get(NS, b"a") == b"1" and store.committed_offset(P0) == 7
    # A failing commit (a write the backend refuses) applies neither data nor offsets.
    txn = store.new_transaction()
    txn.put(NS, b"b", b"2")
    txn.put(NS, b"c", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017  (backend-specific error)
        txn.commit({P0: 8})
    assert store.get(NS, b"b") is None
    assert store.committed_offset(P0) == 7
    store = store_factory.reopen(store)
    assert store.get(NS, b"b") is None and store.committed_offset(P0) == 7
    assert store.get(NS, b"a") == b"1"


def test_topic_partition_encoding_round_trips() -> None:
    for tp in (P0, TopicPartition("a\x00b", 3), TopicPartition("", 0), TopicPartition("t", 12)):
        assert TopicPartition.decode(tp.encode()) == tp


def test_offsets_of_topics_with_odd_names(store_factory: StoreFactory) -> None:
    store = store_factory()
    odd = {TopicPartition("a\x00b", 1): 5, TopicPartition("ünïcode", 0): 2**40}
    _seed(store, {}, offsets=odd)
    assert store.committed_offsets() == odd


# -- uncommitted size (KIP-892 bounds) -------------------------------------------------------


def test_uncommitted_entries_and_bytes(store_factory: StoreFactory) -> None:
    store = store_factory()
    txn = store.new_transaction()
    assert txn.approximate_num_uncommitted_entries() == 0
    assert txn.approximate_num_uncommitted_bytes() == 0
    txn.put(NS, b"key", b"value")
    assert txn.approximate_num_uncommitted_entries() == 1
    first = txn.approximate_num_uncommitted_bytes()
    assert first >= len(b"key") + len(b"value")
    txn.put(NS, b"key", b"value")  # the same key again: not a new entry
    assert txn.approximate_num_uncommitted_entries() == 1
    assert txn.approximate_num_uncommitted_bytes() == first
    txn.put(NS, b"key", b"a much longer value")
    assert txn.approximate_num_uncommitted_entries() == 1
    assert txn.approximate_num_uncommitted_bytes() == first + len(b"a much longer value") - 5
    txn.delete(NS, b"key")  # a tombstone is still an entry to write
    assert txn.approximate_num_uncommitted_entries() == 1
    assert txn.approximate_num_uncommitted_bytes() == len(b"key") + ENTRY_OVERHEAD_BYTES
    txn.put("other", b"key", b"v")  # same key, other namespace: another entry
    txn.delete(NS, b"gone")
    assert txn.approximate_num_uncommitted_entries() == 3
    sizes = []
    for i in range(5):
        txn.put(NS, b"k%d" % i, b"x" * 100)
        sizes.append(txn.approximate_num_uncommitted_bytes())
    assert sizes == sorted(sizes) and sizes[-1] - sizes[0] >= 400
    assert txn.approximate_num_uncommitted_entries() == 8
    assert store.approximate_num_uncommitted_entries() == 8
    other = store.new_transaction()
    other.put(NS, b"z", b"z")
    assert store.approximate_num_uncommitted_entries() == 9
    assert store.approximate_num_uncommitted_bytes() == (
        txn.approximate_num_uncommitted_bytes() + other.approximate_num_uncommitted_bytes()
    )
    txn.commit()
    assert txn.approximate_num_uncommitted_entries() == 0
    assert txn.approximate_num_uncommitted_bytes() == 0
    assert store.approximate_num_uncommitted_entries() == 1
    other.close()
    assert other.approximate_num_uncommitted_entries() == 0
    assert other.approximate_num_uncommitted_bytes() == 0
    assert store.approximate_num_uncommitted_entries() == 0
    assert store.approximate_num_uncommitted_bytes() == 0


def test_changes_lists_what_commit_applies(store_factory: StoreFactory) -> None:
    store = store_factory()
    txn = store.new_transaction()
    txn.put("b", b"2", b"x")
    txn.put("a", b"9", b"y")
    txn.delete("b", b"1")
    assert list(txn.changes()) == [("a", b"9", b"y"), ("b", b"1", None), ("b", b"2", b"x")]


# -- stream time -----------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", [RC, RU])
def test_stream_time_persists_with_commit(
    store_factory: StoreFactory, isolation: IsolationLevel
) -> None:
    store = store_factory(isolation)
    assert store.stream_time() is None
    txn = store.new_transaction()
    assert txn.stream_time() is None
    txn.set_stream_time(1_700_000_000_000)
    assert txn.stream_time() == 1_700_000_000_000
    assert store.stream_time() is None  # the committed stream time, at any isolation level
    txn.commit({P0: 1})
    assert store.stream_time() == 1_700_000_000_000
    txn = store.new_transaction()
    assert txn.stream_time() == 1_700_000_000_000
    txn.set_stream_time(-5)  # negative timestamps are valid
    txn.close()
    assert store.stream_time() == 1_700_000_000_000
    txn = store.new_transaction()
    txn.set_stream_time(-5)
    txn.commit()
    store = store_factory.reopen(store)
    assert store.stream_time() == -5
    assert store.new_transaction().stream_time() == -5


# -- persistence -----------------------------------------------------------------------------


def test_reopen_keeps_committed_data_only(store_factory: StoreFactory) -> None:
    store = store_factory()
    _seed(store, {b"a": b"1", b"b": b"2"}, offsets={P0: 1})
    _seed(store, {b"x": b"9"}, namespace="other", offsets={P0: 2})
    txn = store.new_transaction()
    txn.put(NS, b"c", b"3")
    txn.delete(NS, b"a")
    store = store_factory.reopen(store)
    assert list(store.iterate(NS)) == [(b"a", b"1"), (b"b", b"2")]
    assert list(store.iterate("other")) == [(b"x", b"9")]
    assert store.committed_offsets() == {P0: 2}
    txn = store.new_transaction()
    txn.put("new-namespace", b"k", b"v")
    txn.commit({P0: 3})
    store = store_factory.reopen(store, RU)
    assert store.isolation_level is RU
    assert store.get("new-namespace", b"k") == b"v"
    assert store.committed_offset(P0) == 3


def test_many_keys_iterate_in_order(store_factory: StoreFactory) -> None:
    store = store_factory()
    keys = [i.to_bytes(2, "big") for i in range(0, 2000, 3)]
    _seed(store, {k: k for k in keys})
    txn = store.new_transaction()
    for i in range(1, 2000, 7):
        txn.put(NS, i.to_bytes(2, "big"), b"new")
    for k in keys[::5]:
        txn.delete(NS, k)
    expected = {k: k for k in keys}
    for i in range(1, 2000, 7):
        expected[i.to_bytes(2, "big")] = b"new"
    for k in keys[::5]:
        del expected[k]
    assert list(txn.iterate(NS)) == sorted(expected.items())
    assert list(txn.iterate(NS, reverse=True)) == sorted(expected.items(), reverse=True)
    lo, hi = (500).to_bytes(2, "big"), (900).to_bytes(2, "big")
    assert list(txn.iterate(NS, lo, hi)) == sorted(
        (k, v) for k, v in expected.items() if lo <= k < hi
    )


def test_open_iterators_do_not_outlive_the_store(store_factory: StoreFactory) -> None:
    store = store_factory()
    _seed(store, {b"a": b"1", b"b": b"2", b"c": b"3"})
    txn = store.new_transaction()
    in_txn = txn.iterate(NS)
    interactive = store.iterate(NS, reverse=True)
    assert next(in_txn) == (b"a", b"1")
    assert next(interactive) == (b"c", b"3")
    # A half-read iterator must not keep the database (and its lock) open after close.
    store = store_factory.reopen(store)
    assert list(store.iterate(NS)) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    if store_factory.kind == "rocksdb":
        for items in (in_txn, interactive):
            with pytest.raises(InvalidStateStoreException, match="closed"):
                next(items)
