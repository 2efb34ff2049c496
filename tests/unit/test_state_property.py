"""Property: the in-memory store, the RocksDB store and a plain-dict model agree.

Random sequences of operations — writes and reads in a transaction, interactive reads,
commit, rollback, a second concurrent transaction, reopen — are applied to all three; every
observable result must be the same.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.state.base import IsolationLevel, StateStore, TopicPartition
from lakestate.state.memory import in_memory_store
from lakestate.state.rocksdb import rocksdb_store

NAMESPACES = ["a", "b"]
KEYS = [b"", b"\x00", b"a", b"a\x00", b"ab", b"b", b"\xff", b"\xff\xff"]
PARTITION = TopicPartition("in", 0)

ns = st.sampled_from(NAMESPACES)
key = st.sampled_from(KEYS)
bound = st.none() | key
txn_id = st.sampled_from([0, 1])  # two transactions may be open at once
value = st.binary(max_size=3)

OPS = st.one_of(
    st.tuples(st.just("put"), txn_id, ns, key, value),
    st.tuples(st.just("delete"), txn_id, ns, key),
    st.tuples(st.just("get"), txn_id, ns, key),
    st.tuples(st.just("iterate"), txn_id, ns, bound, bound, st.booleans()),
    st.tuples(st.just("store_get"), ns, key),
    st.tuples(st.just("store_iterate"), ns, bound, bound, st.booleans()),
    st.tuples(st.just("commit"), txn_id, st.none() | st.integers(0, 1000)),
    st.tuples(st.just("rollback"), txn_id),
    st.tuples(st.just("uncommitted"), txn_id),
    st.tuples(st.just("offsets")),
    st.tuples(st.just("reopen")),
)


class Model:
    """A dict per namespace for committed data, one write buffer per open transaction."""

    def __init__(self, isolation: IsolationLevel) -> None:
        self.isolation = isolation
        self.committed: dict[str, dict[bytes, bytes]] = {n: {} for n in NAMESPACES}
        self.offsets: dict[TopicPartition, int] = {}
        self.open: dict[int, dict[tuple[str, bytes], bytes | None]] = {}
        self.order: list[int] = []  # open transactions, oldest first

    def _txn(self, t: int) -> dict:
        if t not in self.open:
            self.open[t] = {}
            self.order.append(t)
        return self.open[t]

    def _view(self, namespace: str, me: int | None) -> dict[bytes, bytes]:
        view = dict(self.committed[namespace])
        layers = [t for t in self.order if t != me] if self._dirty_reads() else []
        if me is not None:
            layers.append(me)
        for t in layers:
            for (n, k), v in self.open[t].items():
                if n == namespace:
                    if v is None:
                        view.pop(k, None)
                    else:
                        view[k] = v
        return view

    def _dirty_reads(self) -> bool:
        return self.isolation is IsolationLevel.READ_UNCOMMITTED

    def apply(self, op: tuple):
        kind = op[0]
        if kind == "put":
            _, t, n, k, v = op
            self._txn(t)[(n, k)] = v
        elif kind == "delete":
            _, t, n, k = op
            self._txn(t)[(n, k)] = None
        elif kind == "get":
            _, t, n, k = op
            self._txn(t)
            return self._view(n, t).get(k)
        elif kind == "iterate":
            _, t, n, lo, hi, reverse = op
            self._txn(t)
            return _range(self._view(n, t), lo, hi, reverse)
        elif kind == "store_get":
            _, n, k = op
            return self._view(n, None).get(k)
        elif kind == "store_iterate":
            _, n, lo, hi, reverse = op
            return _range(self._view(n, None), lo, hi, reverse)
        elif kind == "commit":
            _, t, offset = op
            for (n, k), v in sorted(self._txn(t).items()):
                if v is None:
                    self.committed[n].pop(k, None)
                else:
                    self.committed[n][k] = v
            if offset is not None:
                self.offsets[PARTITION] = offset
            self._end(t)
        elif kind == "rollback":
            _, t = op
            if t in self.open:
                self._end(t)
        elif kind == "uncommitted":
            _, t = op
            return len(self.open.get(t, {}))
        elif kind == "offsets":
            return dict(self.offsets)
        elif kind == "reopen":
            self.open.clear()
            self.order.clear()

    def _end(self, t: int) -> None:
        del self.open[t]
        self.order.remove(t)


def _range(view: dict, lo: bytes | None, hi: bytes | None, reverse: bool) -> list:
    items = sorted(
        (k, v) for k, v in view.items() if (lo is None or k >= lo) and (hi is None or k < hi)
    )
    return items[::-1] if reverse else items


class Real:
    """The same operations on a StateStore; transactions opened on first use."""

    def __init__(self, store: StateStore, reopen) -> None:
        self.store = store
        self._reopen = reopen
        self.txns: dict = {}

    def _txn(self, t: int):
        if t not in self.txns:
            self.txns[t] = self.store.new_transaction()
        return self.txns[t]

    def apply(self, op: tuple):
        kind = op[0]
        if kind == "put":
            _, t, n, k, v = op
            self._txn(t).put(n, k, v)
        elif kind == "delete":
            _, t, n, k = op
            self._txn(t).delete(n, k)
        elif kind == "get":
            _, t, n, k = op
            return self._txn(t).get(n, k)
        elif kind == "iterate":
            _, t, n, lo, hi, reverse = op
            return list(self._txn(t).iterate(n, lo, hi, reverse))
        elif kind == "store_get":
            _, n, k = op
            return self.store.get(n, k)
        elif kind == "store_iterate":
            _, n, lo, hi, reverse = op
            return list(self.store.iterate(n, lo, hi, reverse))
        elif kind == "commit":
            _, t, offset = op
            self._txn(t).commit(None if offset is None else {PARTITION: offset})
            del self.txns[t]
        elif kind == "rollback":
            _, t = op
            if t in self.txns:
                self.txns.pop(t).close()
        elif kind == "uncommitted":
            _, t = op
            txn = self.txns.get(t)
            return 0 if txn is None else txn.approximate_num_uncommitted_entries()
        elif kind == "offsets":
            return self.store.committed_offsets()
        elif kind == "reopen":
            self.txns.clear()
            self.store = self._reopen(self.store)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED]),
    st.lists(OPS, max_size=40),
)
def test_backends_agree_with_the_model(isolation: IsolationLevel, ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "db"
        memory = Real(
            in_memory_store("m", isolation),
            lambda old: (old.close(), StateStore("m", old._backend, isolation))[1],
        )
        rocks = Real(
            rocksdb_store("r", path, isolation),
            lambda old: (old.close(), rocksdb_store("r", path, isolation))[1],
        )
        model = Model(isolation)
        try:
            for i, op in enumerate(ops):
                expected = model.apply(op)
                assert memory.apply(op) == expected, (i, op, "memory")
                assert rocks.apply(op) == expected, (i, op, "rocksdb")
            # Whatever happened, a reopened store holds exactly the committed data.
            model.apply(("reopen",))
            memory.apply(("reopen",))
            rocks.apply(("reopen",))
            for n in NAMESPACES:
                expected = _range(model.committed[n], None, None, False)
                assert list(memory.store.iterate(n)) == expected
                assert list(rocks.store.iterate(n)) == expected
            assert rocks.store.committed_offsets() == model.offsets
        finally:
            memory.store.close()
            rocks.store.close()
