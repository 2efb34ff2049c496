"""The deduplication store (KIP-655): per deduplication id, the timestamp and offset of the
last record forwarded, plus a time index so that expired ids are purged by a range scan.

A store name is one namespace of the task's transaction, so the store keeps three kinds of
entries in that namespace, told apart by a one-byte prefix (keys from ``state/keys.py``,
which are order-preserving):

==============================================  ===========================================
key                                             value
==============================================  ===========================================
``b"i" + encode_key(id)``                       JSON ``[ts, offset, source]`` (the id entry)
``b"t" + encode_i64_be(ts) + encode_key(id)``   ``b""`` (time index: ids in timestamp order)
``b"n"``                                        JSON count of id entries, absent when 0
==============================================  ===========================================

``offset`` and ``source`` say where the forwarded record was read (both None for a record
without metadata): its offset, and a 32-bit checksum of its topic (``source_tag``).
Together they recognise a record processed again (KIP-655: "if its value in the store has
the same offset, then the record is forwarded"); the source is kept so that equal offsets of
two input topics of one task are not taken for a replay, without storing topic names.

Only id entries are state. They become rows of the store's Delta state table, with the
typed columns ``(dedup_id, ts, offset)`` — ``dedup_id`` as JSON text, like the keys of the
other stores — so SQL can answer "has id X been seen?". The index and the count are derived
from the id entries: ``is_index_only`` tells the engine not to write them to Delta, and
``restore_entry`` rebuilds them while a local store is restored (or caught up) from Delta
rows. An index entry is only a hint: purging checks it against its id entry, so an index
entry left behind by an overwritten or deleted id entry is simply dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple
from zlib import crc32

from lakestate.errors import InvalidStateStoreException
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.keys import decode_i64_be, decode_key, encode_i64_be, encode_key
from lakestate.state.serde import decode_value, encode_value, json_text

__all__ = ["DedupEntry", "DedupStore", "source_tag"]

ID_PREFIX = b"i"
TIME_PREFIX = b"t"
COUNT_KEY = b"n"
_ID_END = b"j"  # the smallest key above every id entry
_TIME_END = b"u"  # the smallest key above every index entry
_TS_BYTES = 8


class DedupEntry(NamedTuple):
    """What the store holds for an id: the forwarded record's timestamp and position."""

    ts: int
    offset: int | None = None
    source: int | None = None


def source_tag(topic: str) -> int:
    """The 32-bit checksum of a topic name kept in entries (see the module docstring)."""
    return crc32(topic.encode("utf-8"))


def _id_key(raw_id: bytes) -> bytes:
    return ID_PREFIX + raw_id


def _index_key(ts: int, raw_id: bytes) -> bytes:
    return TIME_PREFIX + encode_i64_be(ts) + raw_id


def _decode_entry(raw: bytes) -> DedupEntry:
    ts, offset, source = decode_value(raw)
    return DedupEntry(ts, offset, source)


class DedupStore:
    """Deduplication id -> ``DedupEntry`` in one namespace of a task's transactional store.

    Reads go through ``source()`` (the task's transaction, or the StateStore for read-only
    queries); writes need a writer (a transaction). The size is kept in the store itself,
    updated on every change, so it is read in O(1).
    """

    kind = "dedup"

    def __init__(self, name: str, source: Callable[[], Any]) -> None:
        if name in RESERVED_NAMESPACES:
            raise InvalidStateStoreException(f"store name {name!r} is reserved")
        self.name = name
        self._source = source
        # (reader, cutoff): everything older than cutoff is already purged in that reader
        # (a transaction). A new transaction (after commit or abort) invalidates it.
        self._purged: tuple[Any, int] | None = None

    def __repr__(self) -> str:
        return f"DedupStore({self.name!r})"

    def _writer(self) -> Any:
        txn = self._source()
        if not hasattr(txn, "put"):
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return txn

    # -- reads -----------------------------------------------------------------------------

    def get(self, dedup_id: Any) -> DedupEntry | None:
        """The entry of ``dedup_id``, or None if the store holds none."""
        raw = self._source().get(self.name, _id_key(encode_key(dedup_id)))
        return None if raw is None else _decode_entry(raw)

    def all(self) -> Iterator[tuple[Any, DedupEntry]]:
        """(id, entry) pairs in id order."""
        for raw_key, raw in self._source().iterate(self.name, ID_PREFIX, _ID_END, False):
            yield decode_key(raw_key[1:]), _decode_entry(raw)

    def by_time(self, before: int | None = None) -> Iterator[tuple[int, Any]]:
        """(ts, id) from the time index in timestamp order, those with ts < ``before`` only
        if given. May include index entries whose id entry has changed (see purge)."""
        end = _TIME_END if before is None else TIME_PREFIX + encode_i64_be(before)
        for raw_key, _ in self._source().iterate(self.name, TIME_PREFIX, end, False):
            yield decode_i64_be(raw_key[1 : 1 + _TS_BYTES]), decode_key(raw_key[1 + _TS_BYTES :])

    def size(self) -> int:
        """The number of ids held (kept up to date on every change, not counted)."""
        raw = self._source().get(self.name, COUNT_KEY)
        return 0 if raw is None else decode_value(raw)

    def approximate_num_entries(self) -> int:
        return self.size()

    # -- writes ----------------------------------------------------------------------------

    def put(
        self, dedup_id: Any, ts: int, offset: int | None = None, source: int | None = None
    ) -> int:
        """Set the entry of ``dedup_id``; returns the change in size (1 for a new id, else 0)."""
        return _put(
            self._writer(), self.name, _id_key(encode_key(dedup_id)), DedupEntry(ts, offset, source)
        )

    def delete(self, dedup_id: Any) -> int:
        """Remove ``dedup_id``; returns the change in size (-1 if it was held, else 0)."""
        return _delete(self._writer(), self.name, _id_key(encode_key(dedup_id)))

    def purge_expired(self, cutoff: int) -> int:
        """Remove every id whose entry is older than ``cutoff`` (ts < cutoff): a range scan
        of the time index up to ``cutoff``. Returns the number of ids removed."""
        txn = self._writer()
        if self._purged is not None and self._purged[0] is txn and cutoff <= self._purged[1]:
            return 0  # nothing can have expired since the last purge of this transaction
        end = TIME_PREFIX + encode_i64_be(cutoff)
        removed = 0
        for raw_key, _ in list(txn.iterate(self.name, TIME_PREFIX, end, False)):
            ts = decode_i64_be(raw_key[1 : 1 + _TS_BYTES])
            id_key = _id_key(raw_key[1 + _TS_BYTES :])
            raw = txn.get(self.name, id_key)
            if raw is not None and _decode_entry(raw).ts == ts:
                txn.put(self.name, id_key, None)
                removed += 1
            txn.put(self.name, raw_key, None)
        if removed:
            _add_to_count(txn, self.name, -removed)
        self._purged = (txn, cutoff)
        return removed

    def ensure_index(self) -> int:
        """Rebuild the time index and the count if the store holds id entries without them
        (a store restored from its Delta rows by a restore that does not call
        ``restore_entry``). Cheap otherwise: a look-up of the count, and if there is none
        (an empty store) one seek. Returns the number of ids re-indexed."""
        txn = self._writer()
        if txn.get(self.name, COUNT_KEY) is not None:
            return 0
        ids = list(txn.iterate(self.name, ID_PREFIX, _ID_END, False))
        for raw_key, raw in ids:
            txn.put(self.name, _index_key(_decode_entry(raw).ts, raw_key[1:]), b"")
        if ids:
            txn.put(self.name, COUNT_KEY, encode_value(len(ids)))
        return len(ids)

    # -- the Delta state table -------------------------------------------------------------

    # The typed columns of this store's Delta state table (besides task, raw_key, raw_value):
    # the id as JSON text, the forwarded record's timestamp (epoch ms) and offset.
    STATE_COLUMNS = (("dedup_id", "STRING"), ("ts", "BIGINT"), ("offset", "BIGINT"))

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        """True for entries derived from the id entries (time index, count): they are not
        state-table rows, and ``restore_entry`` rebuilds them."""
        return not raw_key.startswith(ID_PREFIX)

    @staticmethod
    def changelog_row(raw_key: bytes, raw_value: bytes) -> dict[str, Any] | None:
        """The typed columns of one stored entry, or None for an index-only entry."""
        if DedupStore.is_index_only(raw_key):
            return None
        entry = _decode_entry(raw_value)
        return {
            "dedup_id": json_text(decode_key(raw_key[1:])),
            "ts": entry.ts,
            "offset": entry.offset,
        }

    @staticmethod
    def restore_entry(txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        """Apply one state-table row (``raw_value`` None: a deleted row) to a local store
        being restored or caught up, keeping the time index and the count in step."""
        if DedupStore.is_index_only(raw_key):
            return  # never in Delta; derived here
        if raw_value is None:
            _delete(txn, name, raw_key)
        else:
            _put(txn, name, raw_key, _decode_entry(raw_value))


def _put(txn: Any, name: str, id_key: bytes, entry: DedupEntry) -> int:
    raw_id = id_key[1:]
    old = txn.get(name, id_key)
    if old is not None:
        old_ts = _decode_entry(old).ts
        if old_ts != entry.ts:
            txn.put(name, _index_key(old_ts, raw_id), None)
    txn.put(name, id_key, encode_value([entry.ts, entry.offset, entry.source]))
    txn.put(name, _index_key(entry.ts, raw_id), b"")
    if old is None:
        _add_to_count(txn, name, 1)
        return 1
    return 0


def _delete(txn: Any, name: str, id_key: bytes) -> int:
    old = txn.get(name, id_key)
    if old is None:
        return 0
    txn.put(name, _index_key(_decode_entry(old).ts, id_key[1:]), None)
    txn.put(name, id_key, None)
    _add_to_count(txn, name, -1)
    return -1


def _add_to_count(txn: Any, name: str, delta: int) -> None:
    raw = txn.get(name, COUNT_KEY)
    count = (0 if raw is None else decode_value(raw)) + delta
    # An empty store has no count entry, so an emptied store looks like a fresh one.
    txn.put(name, COUNT_KEY, encode_value(count) if count else None)
