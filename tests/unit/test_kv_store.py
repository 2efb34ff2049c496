"""The typed KeyValueStore over both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lakestate.errors import InvalidStateStoreException, SerializationException
from lakestate.state.base import IsolationLevel, StateStore, TopicPartition, Transaction
from lakestate.state.kv import KeyValueStore
from state_backends import BACKENDS, StoreFactory, store_factories


class Task:
    """What a processor context does: hand out the current transaction of the task."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.txn: Transaction = store.new_transaction()

    def commit(self, offset: int | None = None) -> None:
        self.txn.commit(None if offset is None else {TopicPartition("in", 0): offset})
        self.txn = self.store.new_transaction()

    def kv(self, name: str = "counts") -> KeyValueStore:
        return KeyValueStore(name, lambda: self.txn)


@pytest.fixture(params=BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    yield from store_factories(request, tmp_path)


@pytest.fixture
def task(store_factory: StoreFactory) -> Task:
    return Task(store_factory())


def test_get_put_delete(task: Task) -> None:
    kv = task.kv()
    assert kv.get("a") is None
    kv.put("a", 1)
    kv.put("b", {"n": [1, 2], "s": "é"})
    assert kv.get("a") == 1
    assert kv.get("b") == {"n": [1, 2], "s": "é"}
    assert kv.delete("a") == 1
    assert kv.get("a") is None
    assert kv.delete("a") is None
    kv.put("b", None)  # put None = delete
    assert kv.get("b") is None
    assert list(kv.all()) == []


def test_falsy_values_are_values(task: Task) -> None:
    kv = task.kv()
    for key, value in [("zero", 0), ("false", False), ("empty", ""), ("list", []), ("d", {})]:
        kv.put(key, value)
        assert kv.get(key) == value and type(kv.get(key)) is type(value)
        assert kv.put_if_absent(key, "other") == value
        assert kv.get(key) == value


def test_put_if_absent(task: Task) -> None:
    kv = task.kv()
    assert kv.put_if_absent("k", "first") is None
    assert kv.put_if_absent("k", "second") == "first"
    assert kv.get("k") == "first"


def test_put_all_and_typed_keys(task: Task) -> None:
    kv = task.kv()
    kv.put_all([(1, "int"), (1.0, "float"), (True, "bool"), ("1", "str"), ((1,), "tuple")])
    assert kv.get(1) == "int" and kv.get(1.0) == "float" and kv.get(True) == "bool"
    assert kv.get("1") == "str" and kv.get((1,)) == "tuple"
    assert kv.approximate_num_entries() == 5


def test_ranges_follow_natural_key_order(task: Task) -> None:
    kv = task.kv()
    for n in [5, -3, 100, 0, -100, 7, 2**40]:
        kv.put(n, n * 2)
    task.commit()
    kv.put(6, 12)  # uncommitted, still visible to the task
    kv.delete(7)
    assert [k for k, _ in kv.all()] == [-100, -3, 0, 5, 6, 100, 2**40]
    assert [k for k, _ in kv.reverse_all()] == [2**40, 100, 6, 5, 0, -3, -100]
    assert list(kv.range(-3, 6)) == [(-3, -6), (0, 0), (5, 10), (6, 12)]  # both inclusive
    assert list(kv.reverse_range(-3, 6)) == [(6, 12), (5, 10), (0, 0), (-3, -6)]
    assert list(kv.range(None, 0)) == [(-100, -200), (-3, -6), (0, 0)]
    assert list(kv.range(6, None)) == [(6, 12), (100, 200), (2**40, 2**41)]
    assert list(kv.reverse_range(None, -3)) == [(-3, -6), (-100, -200)]
    assert list(kv.range(1, 4)) == []
    assert list(kv.range(6, -3)) == []  # from > to: empty, as in Kafka
    assert list(kv.range(5, 5)) == [(5, 10)]
    assert kv.approximate_num_entries() == 7


def test_string_ranges(task: Task) -> None:
    kv = task.kv()
    for s in ["b", "a", "a\x00", "ab", "", "é", "B"]:
        kv.put(s, s)
    assert [k for k, _ in kv.all()] == sorted(["b", "a", "a\x00", "ab", "", "é", "B"])
    assert [k for k, _ in kv.range("a", "ab")] == ["a", "a\x00", "ab"]


def test_prefix_scan_over_tuple_keys(task: Task) -> None:
    kv = task.kv("windows")
    for user in ["alice", "bob", "al"]:
        for start in [0, 60_000, -60_000]:
            kv.put((user, start), f"{user}@{start}")
    kv.put(("alice",), "bare")
    kv.put(("alice", 0, "extra"), "deeper")
    assert list(kv.prefix_scan(("alice",))) == [
        (("alice",), "bare"),
        (("alice", -60_000), "alice@-60000"),
        (("alice", 0), "alice@0"),
        (("alice", 0, "extra"), "deeper"),
        (("alice", 60_000), "alice@60000"),
    ]
    assert [k for k, _ in kv.prefix_scan(("alice", 0))] == [("alice", 0), ("alice", 0, "extra")]
    assert [k for k, _ in kv.prefix_scan(("alice",), reverse=True)][0] == ("alice", 60_000)
    assert [k for k, _ in kv.prefix_scan(("al",))] == [("al", -60_000), ("al", 0), ("al", 60_000)]
    assert len(list(kv.prefix_scan(()))) == 11
    assert list(kv.prefix_scan(("carol",))) == []
    # A window range of one key: (key, start) between two bounds.
    assert [k for k, _ in kv.range(("bob", -60_000), ("bob", 0))] == [
        ("bob", -60_000),
        ("bob", 0),
    ]


def test_stores_are_separate_namespaces(task: Task) -> None:
    a, b = task.kv("a"), task.kv("b")
    a.put("k", 1)
    b.put("k", 2)
    assert a.get("k") == 1 and b.get("k") == 2
    assert list(a.all()) == [("k", 1)]
    assert a.approximate_num_entries() == 1


def test_reserved_names_are_refused(task: Task) -> None:
    with pytest.raises(InvalidStateStoreException, match="reserved"):
        KeyValueStore("__offsets__", lambda: task.txn)


def test_interactive_reads_are_read_only_and_committed(store_factory: StoreFactory) -> None:
    store = store_factory(IsolationLevel.READ_COMMITTED)
    task = Task(store)
    kv = task.kv()
    query = KeyValueStore("counts", lambda: store)
    kv.put("a", 1)
    assert query.get("a") is None and list(query.all()) == []
    task.commit(offset=1)
    assert query.get("a") == 1 and list(query.all()) == [("a", 1)]
    assert query.approximate_num_entries() == 1
    for write in (
        lambda: query.put("a", 2),
        lambda: query.put_if_absent("b", 2),
        lambda: query.delete("a"),
        lambda: query.put_all([("c", 3)]),
    ):
        with pytest.raises(InvalidStateStoreException, match="'counts' is read-only here"):
            write()
    assert query.get("a") == 1 and query.get("b") is None


def test_read_uncommitted_interactive_reads(store_factory: StoreFactory) -> None:
    store = store_factory(IsolationLevel.READ_UNCOMMITTED)
    task = Task(store)
    task.kv().put("a", 1)
    assert KeyValueStore("counts", lambda: store).get("a") == 1


def test_source_is_asked_on_every_call(store_factory: StoreFactory) -> None:
    store = store_factory()
    task = Task(store)
    kv = task.kv()  # bound to "the current transaction", not to one transaction
    kv.put("a", 1)
    task.commit(offset=1)
    kv.put("a", 2)
    assert kv.get("a") == 2
    task.txn.close()
    task.txn = store.new_transaction()
    assert kv.get("a") == 1
    store = store_factory.reopen(store)
    assert KeyValueStore("counts", lambda: store).get("a") == 1
    assert store.committed_offset(TopicPartition("in", 0)) == 1


def test_writes_to_an_ended_transaction_raise(task: Task) -> None:
    kv = task.kv()
    txn = task.txn
    kv.put("a", 1)
    txn.commit()
    with pytest.raises(InvalidStateStoreException):
        kv.put("a", 2)
    with pytest.raises(InvalidStateStoreException):
        kv.get("a")


def test_bad_keys_and_values(task: Task) -> None:
    kv = task.kv()
    with pytest.raises(SerializationException, match="key is a set"):
        kv.put({1}, 1)
    with pytest.raises(SerializationException, match=r"value\['a'\] is a set"):
        kv.put("k", {"a": {1}})
    with pytest.raises(SerializationException, match="key is a set"):
        kv.get({1})
    assert task.txn.approximate_num_uncommitted_entries() == 0  # nothing half-written


def test_dict_and_list_keys(task: Task) -> None:
    kv = task.kv()
    kv.put({"b": 1, "a": 2}, "dict")
    kv.put([1, 2], "list")
    assert kv.get({"a": 2, "b": 1}) == "dict"
    assert kv.get([1, 2]) == "list"
    assert kv.get((1, 2)) is None  # a tuple is not a list
    assert sorted(v for _, v in kv.all()) == ["dict", "list"]
