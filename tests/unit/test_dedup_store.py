"""The dedup store (state/dedup.py) over both backends: id entries, the time index, the
size, purging by a range scan of the index from its floor, state-table rows, and rebuilding
the index and the size when a store is restored or caught up from its state-table rows."""

from __future__ import annotations

import pytest
from lakestate.errors import InvalidStateStoreException
from lakestate.state.base import Transaction
from lakestate.state.dedup import (
    COUNT_KEY,
    FLOOR_KEY,
    ID_PREFIX,
    TIME_PREFIX,
    DedupEntry,
    DedupStore,
    source_tag,
)
from lakestate.state.keys import decode_i64_be, encode_i64_be, encode_key
from lakestate.state.registry import restore_entry, view_class
from lakestate.state.serde import decode_value
from state_backends import BACKENDS, store_factories

NAME = "seen"
TIME_END = b"u"  # the smallest key above every index entry


@pytest.fixture(params=BACKENDS)
def store_factory(request, tmp_path):
    yield from store_factories(request, tmp_path)


class Holder:
    """Hands out the current transaction, as a task does."""

    def __init__(self, store) -> None:
        self.store = store
        self.txn: Transaction = store.new_transaction()

    def commit(self) -> None:
        self.txn.commit()
        self.txn = self.store.new_transaction()

    def view(self) -> DedupStore:
        return DedupStore(NAME, lambda: self.txn)


class SpyReader:
    """Wraps a transaction and records the ranges iterated."""

    def __init__(self, txn) -> None:
        self.txn = txn
        self.ranges: list[tuple] = []

    def get(self, namespace, key):
        return self.txn.get(namespace, key)

    def put(self, namespace, key, value):
        self.txn.put(namespace, key, value)

    def iterate(self, namespace, start=None, end=None, reverse=False):
        self.ranges.append((start, end))
        return self.txn.iterate(namespace, start, end, reverse)


def raw(store, name=NAME) -> dict[bytes, bytes]:
    return dict(store.iterate(name))


def floor(reader) -> int | None:
    """The purge floor that ``reader`` (a store or a transaction) sees, None if absent."""
    value = reader.get(NAME, FLOOR_KEY)
    return None if value is None else decode_i64_be(value)


def without_floor(entries: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {k: v for k, v in entries.items() if k != FLOOR_KEY}


def test_put_get_delete_and_size(store_factory):
    h = Holder(store_factory())
    s = h.view()
    assert s.get("a") is None and s.size() == 0
    assert s.put("a", 10, 0, source_tag("in")) == 1
    assert s.put(("k", 2), 20, None) == 1
    assert s.put("a", 30, 5, source_tag("in")) == 0  # overwrite: same size
    assert s.get("a") == DedupEntry(30, 5, source_tag("in"))
    assert s.get(("k", 2)) == DedupEntry(20, None, None)
    assert s.size() == 2
    h.commit()
    assert list(s.all()) == [("a", DedupEntry(30, 5, source_tag("in"))), (("k", 2), DedupEntry(20))]
    assert list(s.by_time()) == [(20, ("k", 2)), (30, "a")]  # the old index entry is gone
    assert s.delete("a") == -1 and s.delete("a") == 0
    assert s.size() == 1 and list(s.by_time()) == [(20, ("k", 2))]


def test_put_many_with_the_held_entries_writes_what_it_writes_after_reading_them(
    store_factory,
):
    def run(pass_held: bool) -> dict[bytes, bytes]:
        store = store_factory()
        h = Holder(store)
        s = h.view()
        s.put("a", 10, 0, None)
        s.put("b", 20, 1, None)
        h.commit()
        keys = [s.id_key(k) for k in ("a", "b", "c")]
        held = {k: s.get_by_key(k) for k in keys} if pass_held else None
        # "a" moves in time (its old index entry goes), "b" keeps its ts, "c" is new.
        entries = zip(keys, (15, 20, 30), (2, 3, 4), (None,) * 3, strict=True)
        assert s.put_many(entries, held) == 1
        h.commit()
        assert s.size() == 3
        return raw(store)

    with_held = run(True)
    assert with_held == run(False)
    assert TIME_PREFIX + encode_i64_be(10) + encode_key("a") not in with_held


def test_layout_of_the_namespace(store_factory):
    store = store_factory()
    h = Holder(store)
    h.view().put("x", 7, 3, None)
    h.commit()
    rid = encode_key("x")
    assert raw(store) == {
        ID_PREFIX + rid: b"[7,3,null]",
        TIME_PREFIX + encode_i64_be(7) + rid: b"",
        COUNT_KEY: b"1",
        FLOOR_KEY: encode_i64_be(7),  # the store held no id: its least timestamp is known
    }
    assert h.view().purge_expired(5) == 0
    h.commit()
    assert raw(store)[FLOOR_KEY] == encode_i64_be(7)


def test_purge_is_a_range_scan_of_the_index(store_factory):
    h = Holder(store_factory())
    s = h.view()
    for i, ts in enumerate([5, 1, 9, 3, 7]):
        s.put(f"id{i}", ts, i)
    h.commit()
    spy = SpyReader(h.txn)
    view = DedupStore(NAME, lambda: spy)
    assert view.purge_expired(6) == 3  # ts 5, 1, 3
    # One scan from the floor (the first put set it, the lower ones lowered it), which
    # stops at the first entry not expired.
    assert spy.ranges == [(TIME_PREFIX + encode_i64_be(1), TIME_END)]
    assert sorted(k for k, _ in view.all()) == ["id2", "id4"]
    assert view.size() == 2
    # That entry (ts 7) is the floor: a purge up to it has nothing to do and reads nothing.
    spy.ranges.clear()
    assert view.purge_expired(6) == 0 and view.purge_expired(4) == 0
    assert view.purge_expired(7) == 0
    assert spy.ranges == []
    # A later cutoff scans again, from the floor.
    assert view.purge_expired(8) == 1
    assert spy.ranges == [(TIME_PREFIX + encode_i64_be(7), TIME_END)]
    # The index is empty now: any purge is free until a put.
    assert view.purge_expired(100) == 1 and view.purge_expired(10**12) == 0
    spy.ranges.clear()
    view.put("late", 50, 9)  # below the floor: lowers it
    assert view.purge_expired(60) == 1 and view.size() == 0
    assert spy.ranges == [(TIME_PREFIX + encode_i64_be(50), TIME_END)]


def test_a_rolled_back_purge_leaves_the_floor_before_it(store_factory):
    h = Holder(store_factory())
    s = h.view()
    s.put("a", 1, 0)
    h.commit()
    assert floor(h.txn) == 1  # the put's (the store held no id)
    assert s.purge_expired(5) == 1 and floor(h.txn) != 1
    h.txn.close()  # rolled back: the purge and its floor
    h.txn = h.store.new_transaction()
    assert s.get("a") is not None and floor(h.txn) == 1
    assert s.purge_expired(5) == 1  # a new transaction: purged again
    assert s.get("a") is None and s.size() == 0


def test_stale_index_entries_are_dropped_without_touching_the_entry(store_factory):
    store = store_factory()
    h = Holder(store)
    s = h.view()
    s.put("a", 10, 0)
    h.txn.put(NAME, FLOOR_KEY, None)  # unknown, as a restored store's
    # An index entry left behind (e.g. by a catch-up that overwrote "a" elsewhere).
    h.txn.put(NAME, TIME_PREFIX + encode_i64_be(2) + encode_key("a"), b"")
    h.txn.put(NAME, TIME_PREFIX + encode_i64_be(3) + encode_key("gone"), b"")
    assert s.purge_expired(5) == 0
    assert s.get("a") == DedupEntry(10, 0) and s.size() == 1
    assert list(s.by_time()) == [(10, "a")]


def test_state_table_rows_are_id_entries_only(store_factory):
    store = store_factory()
    h = Holder(store)
    s = h.view()
    s.put("a", 10, 4, source_tag("t"))
    s.put({"order": 1}, 12, None)
    s.put(("k", "x"), 14, 0)
    h.commit()
    rows = []
    for raw_key, raw_value in store.iterate(NAME):
        row = DedupStore.changelog_row(raw_key, raw_value)
        assert (row is None) == view_class("dedup").is_index_only(raw_key)
        if row is not None:
            rows.append(row)
    assert rows == [
        {"dedup_id": '"a"', "ts": 10, "offset": 4},
        {"dedup_id": '["k","x"]', "ts": 14, "offset": 0},
        {"dedup_id": '{"order":1}', "ts": 12, "offset": None},
    ]
    assert DedupStore.is_index_only(FLOOR_KEY) and DedupStore.is_index_only(COUNT_KEY)
    assert not view_class("timestamped_key_value").is_index_only(TIME_PREFIX)


def _fill(h: Holder, entries) -> None:
    s = h.view()
    for dedup_id, ts, offset in entries:
        s.put(dedup_id, ts, offset, source_tag("in"))
    h.commit()


def _rows(store) -> dict[bytes, bytes]:
    """What the Delta state table holds for the store: its id entries."""
    return {k: v for k, v in store.iterate(NAME) if not view_class("dedup").is_index_only(k)}


def test_restore_from_rows_rebuilds_index_and_size(store_factory):
    source = store_factory()
    h = Holder(source)
    _fill(h, [("a", 5, 0), ("b", 1, 1), (("c", 1), 9, 2)])
    h.view().purge_expired(2)  # b goes
    h.commit()
    target = store_factory()
    with target.new_transaction() as txn:
        for raw_key, raw_value in _rows(source).items():
            restore_entry("dedup", txn, NAME, raw_key, raw_value)
        txn.commit()
    assert floor(source) == 5
    assert raw(target) == without_floor(raw(source))  # the floor is not restored
    assert decode_value(raw(target)[COUNT_KEY]) == 2


def test_catch_up_from_net_changes_keeps_index_and_size_exact(store_factory):
    source = store_factory()
    h = Holder(source)
    _fill(h, [("a", 5, 0), ("b", 1, 1), ("c", 9, 2)])
    before = _rows(source)
    local = store_factory()
    with local.new_transaction() as txn:
        for raw_key, raw_value in before.items():
            restore_entry("dedup", txn, NAME, raw_key, raw_value)
        txn.commit()
    # The source moves on: b purged, a overwritten at a new ts, d added.
    s = h.view()
    s.purge_expired(2)
    s.put("a", 20, 7, source_tag("in"))
    s.put("d", 15, 8, source_tag("in"))
    h.commit()
    after = _rows(source)
    changes = {k: v for k, v in after.items() if before.get(k) != v}
    changes.update({k: None for k in before if k not in after})
    with local.new_transaction() as txn:
        for raw_key, raw_value in changes.items():
            restore_entry("dedup", txn, NAME, raw_key, raw_value)
        txn.commit()
    assert raw(local) == without_floor(raw(source))


def test_ensure_index_rebuilds_after_a_plain_restore(store_factory):
    source = store_factory()
    _fill(Holder(source), [("a", 5, 0), ("b", 1, 1)])
    target = store_factory()
    with target.new_transaction() as txn:
        for raw_key, raw_value in _rows(source).items():
            txn.put(NAME, raw_key, raw_value)  # what a restore unaware of the index does
        txn.commit()
    h = Holder(target)
    assert h.view().ensure_index() == 2
    h.commit()
    assert raw(target) == without_floor(raw(source))  # a restored store's floor: unknown
    assert floor(target) is None
    assert h.view().ensure_index() == 0  # the size is there: O(1), nothing to do


def test_ensure_index_on_an_empty_store_writes_nothing(store_factory):
    store = store_factory()
    h = Holder(store)
    assert h.view().ensure_index() == 0
    assert list(h.txn.changes()) == []


def test_read_only_and_reserved_names(store_factory):
    store = store_factory()
    _fill(Holder(store), [("a", 5, 0)])
    view = DedupStore(NAME, lambda: store)
    assert view.get("a") == DedupEntry(5, 0, source_tag("in"))
    assert view.size() == 1
    with pytest.raises(InvalidStateStoreException, match="read-only"):
        view.put("b", 1)
    with pytest.raises(InvalidStateStoreException, match="reserved"):
        DedupStore("__offsets__", lambda: store)


# -- the purge floor across transactions ---------------------------------------------------


class CountingScans:
    """Counts the range scans that reach the backend of ``store``."""

    def __init__(self, store) -> None:
        self.count = 0
        backend = store._backend
        iterate = backend.iterate

        def counted(*args):
            self.count += 1
            return iterate(*args)

        backend.iterate = counted


def test_purge_floor_carries_over_commits(store_factory):
    store = store_factory()
    h = Holder(store)
    s = h.view()
    s.put("a", 10, 0)
    s.put("b", 20, 1)
    h.commit()
    scans = CountingScans(store)
    assert floor(store) == 10  # the first put into the empty store set it, with the data
    assert s.purge_expired(5) == 0
    assert scans.count == 0  # below the floor: nothing read
    for cutoff in (6, 8, 10):  # one transaction per record, as in the test driver
        assert s.purge_expired(cutoff) == 0
        s.put(f"x{cutoff}", 30 + cutoff, cutoff)
        h.commit()
    assert scans.count == 0  # the floor came with each commit: nothing read
    assert s.purge_expired(15) == 1  # a passes
    assert scans.count == 1 and [k for k, _ in s.all()] == ["b", "x10", "x6", "x8"]
    assert floor(h.txn) == 20


def test_rollback_keeps_the_committed_floor(store_factory):
    store = store_factory()
    h = Holder(store)
    s = h.view()
    s.put("a", 10, 0)
    h.commit()
    assert s.purge_expired(5) == 0
    h.commit()
    s.put("early", 7, 1)  # lowers the floor of this transaction only
    assert floor(h.txn) == 7 and floor(store) == 10
    h.txn.close()
    h.txn = store.new_transaction()
    assert floor(h.txn) == 10
    scans = CountingScans(store)
    assert s.purge_expired(9) == 0 and scans.count == 0
    assert s.purge_expired(11) == 1 and s.size() == 0


@pytest.mark.parametrize("bulk", [False, True])
def test_a_catch_up_below_the_floor_lowers_it(store_factory, bulk: bool):
    store = store_factory()
    h = Holder(store)
    s = h.view()
    s.put("a", 10, 0)
    h.commit()
    assert s.purge_expired(5) == 0  # floor 10
    h.commit()
    # Another transaction adds an older id without a view (a catch-up from state rows).
    row = (ID_PREFIX + encode_key("old"), b"[3,9,null]")
    with store.new_transaction() as other:
        if bulk:
            view_class("dedup").restore_entries(other, NAME, [row])
        else:
            restore_entry("dedup", other, NAME, *row)
        other.commit()
    assert floor(store) == 3
    assert s.purge_expired(5) == 1  # the scan starts low enough to find "old"
    assert [k for k, _ in s.all()] == ["a"] and s.size() == 1
    h.commit()
    # Through a view, the other writer lowers it the same way.
    assert s.purge_expired(5) == 0
    h.commit()
    with store.new_transaction() as other:
        DedupStore(NAME, lambda: other).put("old", 4, 9)
        other.commit()
    assert s.purge_expired(5) == 1 and s.size() == 1


def test_read_uncommitted_purge_sees_open_writes_of_others(store_factory):
    from lakestate.state.base import IsolationLevel

    store = store_factory(IsolationLevel.READ_UNCOMMITTED)
    h = Holder(store)
    s = h.view()
    s.put("a", 10, 0)
    h.commit()
    assert s.purge_expired(5) == 0  # floor 10
    h.commit()
    other = store.new_transaction()
    DedupStore(NAME, lambda: other).put("old", 3, 9)  # uncommitted, visible to h.txn...
    assert floor(h.txn) == 3  # ... with the floor it lowered
    assert s.purge_expired(5) == 1  # so the open write is purged here too
    other.close()
    assert [k for k, _ in s.all()] == ["a"] and s.size() == 1
    h.commit()
    assert floor(store) == 10 and DedupStore(NAME, lambda: store).size() == 1
    # An open write rolled back takes the floor it lowered with it.
    other = store.new_transaction()
    DedupStore(NAME, lambda: other).put("old", 2, 9)
    other.close()
    scans = CountingScans(store)
    assert s.purge_expired(5) == 0 and scans.count == 0


def test_put_below_the_floor_lowers_it(store_factory):
    h = Holder(store_factory())
    s = h.view()
    s.put("a", 10, 0)
    assert s.purge_expired(5) == 0 and floor(h.txn) == 10
    s.put("c", 12, 2)  # above: the floor stays
    assert floor(h.txn) == 10
    ids = [s.id_key(k) for k in ("b", "d")]
    s.put_many(zip(ids, (8, 6), (1, 3), (None, None), strict=True))  # to the least of them
    assert floor(h.txn) == 6
    h.commit()
    assert s.purge_expired(9) == 2
    assert [k for k, _ in s.all()] == ["a", "c"] and floor(h.txn) == 10
    assert s.delete("a") == -1 and floor(h.txn) == 10  # deletes leave it: still a floor
    assert s.purge_expired(13) == 1 and s.size() == 0


def test_a_restored_store_has_no_floor_until_its_next_purge(store_factory):
    source = store_factory()
    h = Holder(source)
    _fill(h, [("a", 5, 0), ("b", 8, 1)])
    assert h.view().purge_expired(2) == 0
    h.commit()
    assert floor(source) == 5
    target = store_factory()
    with target.new_transaction() as txn:
        view_class("dedup").restore_entries(txn, NAME, _rows(source).items())
        txn.commit()
    assert floor(target) is None  # unknown
    t = Holder(target)
    spy = SpyReader(t.txn)
    view = DedupStore(NAME, lambda: spy)
    assert view.purge_expired(2) == 0
    assert spy.ranges == [(TIME_PREFIX, TIME_END)]  # from the start of the index
    assert floor(t.txn) == 5
    assert view.purge_expired(4) == 0 and len(spy.ranges) == 1  # known now: nothing read


def test_ensure_index_drops_the_floor_of_an_emptied_store(store_factory):
    source = store_factory()
    _fill(Holder(source), [("a", 5, 0), ("b", 1, 1)])
    store = store_factory()
    h = Holder(store)
    _fill(h, [("x", 1, 0)])
    assert h.view().purge_expired(100) == 1
    h.commit()
    assert floor(store) == 2**63 - 1  # an empty index: no cutoff passes it
    with store.new_transaction() as txn:
        for raw_key, raw_value in _rows(source).items():
            txn.put(NAME, raw_key, raw_value)  # a restore unaware of the index
        txn.commit()
    assert h.view().ensure_index() == 2
    assert floor(h.txn) is None  # below the new index entries: unknown
    assert h.view().purge_expired(6) == 2 and h.view().size() == 0


@pytest.mark.parametrize(
    "entry",
    [
        DedupEntry(0, 0, 0),
        DedupEntry(-5, None, None),
        DedupEntry(1_700_000_000_000, 123, source_tag("in")),
        DedupEntry(2**63 - 1, 2**70, 2**32 - 1),  # an offset beyond 64 bits: json reads it
        DedupEntry(7, None, 3),
    ],
)
def test_entries_read_back_as_written(entry):
    from lakestate.state.dedup import _decode_entry, _encode_entry

    raw = _encode_entry(*entry)
    assert _decode_entry(raw) == entry
    assert [type(f) for f in _decode_entry(raw)] == [type(f) for f in entry]
    assert _decode_entry(b"[1, 2, null]") == DedupEntry(1, 2, None)  # any JSON spelling


def test_restoring_many_rows_at_once_equals_one_by_one(store_factory):
    """A restore applies a changelog's rows in bulk (restore_entries): the same store as
    applying them one by one, index entries and count included; tombstones delete."""
    source = store_factory()
    with source.new_transaction() as txn:
        view = DedupStore(NAME, lambda: txn)
        for i in range(20):
            view.put(f"id-{i}", 1_000 + i * 7 % 11, i)
        txn.commit()
    rows = [
        (k, v) for k, v in source.iterate(NAME) if not view_class("dedup").is_index_only(k)
    ]
    rows += [(rows[0][0], None)]  # the first id deleted later
    one, many = store_factory(), store_factory()
    with one.new_transaction() as txn:
        for raw_key, raw_value in rows:
            restore_entry("dedup", txn, NAME, raw_key, raw_value)
        txn.commit()
    with many.new_transaction() as txn:
        view_class("dedup").restore_entries(txn, NAME, dict(rows).items())
        txn.commit()
    assert list(one.iterate(NAME)) == list(many.iterate(NAME))
    assert DedupStore(NAME, lambda: many).size() == 19
