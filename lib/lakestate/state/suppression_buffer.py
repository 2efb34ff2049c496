"""The suppression buffer (KIP-328): the store kind behind ``KTable.suppress``.

One buffer contract, modelled on Kafka's ``TimeOrderedKeyValueBuffer``: ``put`` a table
update under a buffer time, ``evict_while`` a condition holds (oldest buffer time first),
the prior value of a buffered key, ``num_records``, ``buffer_size``, ``min_buffer_time``.
(The suppress node's observed stream time and metric totals are its processor metadata,
committed with the buffer: see processors/suppress.py.)

Per key only the latest update is kept. An update to a buffered key replaces its value,
timestamp and headers but keeps its buffer time (the timer is not restarted) and its prior
value (the old value of the first update buffered: what the key's value was downstream).

A store name is one namespace of the task's transaction; its entries, told apart by a
one-byte prefix (keys from ``state/keys.py``, order-preserving):

==================================================  ======================================
key                                                 value
==================================================  ======================================
``b"k" + encode_key(key)``                          JSON ``[buffer_time, ts, value,
                                                    prior_value, headers]`` (an entry)
``b"t" + encode_i64_be(buffer_time) + encode_key``  ``b""`` (time index: buffer-time order,
                                                    ties by key)
``b"s"``                                            JSON ``{"count", "size"}`` of the
                                                    entries
==================================================  ======================================

Only entries are state: they become rows of the store's Delta table, whose typed columns
are ``key, value, prior_value, ts, buffer_time`` (a windowed key as ``{"key",
"window_start", "window_end"}``). The time index and the stats entry are derived from the
entries (index-only); restoring rebuilds them. An entry's size is the length of its stored
key plus its stored value; the buffer's size is the sum over its entries.

Two ways of holding the same entries, chosen by ``spill_to_disk``:

- in memory (the default): a Python mirror of every entry (a dict and a sorted list by
  buffer time) serves all reads; every change is also written to the transaction, so the
  buffer commits, restores and replays like every store. The mirror belongs to the
  transaction it was built or updated in: it is handed on to the next transaction only if
  that one committed; otherwise (a rolled-back record or batch) it is rebuilt from the
  store. (Only the view writes the namespace, in the task's transactions.)
- on disk (``spill_to_disk_when_full``): nothing but count and size is held; entries are read
  from the task's store (RocksDB in the engine), the oldest by a seek of the time index.
  Uncommitted changes stay bounded by ``statestore.uncommitted.max.bytes`` (KIP-892).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from sortedcontainers import SortedList

from lakestate.errors import InvalidStateStoreException
from lakestate.records import Windowed
from lakestate.serdes import JSON, JsonSerde, Serde, changelog_text
from lakestate.state.base import Transaction, TransactionState
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.keys import decode_i64_be, decode_key, encode_i64_be, encode_key
from lakestate.state.serde import decode_value, encode_value, json_text

__all__ = ["BufferedRecord", "SuppressionBuffer"]

ENTRY_PREFIX = b"k"
TIME_PREFIX = b"t"
STATS_KEY = b"s"
_TIME_END = b"u"  # the smallest key above every index entry
_TS_BYTES = 8

# The stats entry of an empty buffer.
_NO_STATS = {"count": 0, "size": 0}


class BufferedRecord(NamedTuple):
    """A buffered update: the latest value and timestamp (and headers) of the key, the value
    it had before the first buffered update, and when it was first buffered."""

    key: Any
    value: Any
    prior_value: Any
    timestamp: int
    buffer_time: int
    headers: dict[str, Any] | None = None


class _Entry(NamedTuple):
    buffer_time: int
    ts: int
    value: Any
    prior: Any
    headers: Any
    size: int


def _index_key(buffer_time: int, raw_key: bytes) -> bytes:
    return TIME_PREFIX + encode_i64_be(buffer_time) + raw_key


def _decode_entry(raw_key: bytes, raw: bytes) -> _Entry:
    buffer_time, ts, value, prior, headers = decode_value(raw)
    return _Entry(buffer_time, ts, value, prior, headers, len(raw_key) + len(raw))


class _State:
    """What the view holds for one transaction: the stats, and in memory mode the mirror
    (entries by raw key, and (buffer time, raw key) in order). In disk mode ``first`` caches
    the oldest index position (None: empty; ``_UNKNOWN``: to be read), and ``floor`` is an
    index key no entry lies below, where the search for the oldest starts (so it does not
    walk again the index entries its evictions deleted in this transaction)."""

    __slots__ = ("txn", "stats", "entries", "order", "first", "floor")

    def __init__(self, txn: Any, stats: dict[str, int], memory: bool) -> None:
        self.txn = txn
        self.stats = stats
        self.entries: dict[bytes, _Entry] | None = {} if memory else None
        self.order: SortedList | None = SortedList() if memory else None
        self.first: Any = _UNKNOWN
        self.floor = TIME_PREFIX


_UNKNOWN = object()


class SuppressionBuffer:
    """The buffer of one suppress node over a namespace of the task's transactional store
    (see the module docstring). Reads go through ``source()``; writes need a Transaction."""

    kind = "suppression_buffer"

    def __init__(self, name: str, source: Callable[[], Any], spill_to_disk: bool = False) -> None:
        if name in RESERVED_NAMESPACES:
            raise InvalidStateStoreException(f"store name {name!r} is reserved")
        self.name = name
        self.spill_to_disk = spill_to_disk
        self._source = source
        self._state: _State | None = None

    def __repr__(self) -> str:
        mode = "on disk" if self.spill_to_disk else "in memory"
        return f"SuppressionBuffer({self.name!r}, {mode})"

    # The seam of a buffer with serdes (state/serde_checked.py overrides these two): what a
    # put holds of its value and old value (their JSON forms), and the record an eviction
    # or a read gives back (the values again). Json: as they are.

    def _held_update(self, key: Any, value: Any, old_value: Any) -> tuple[Any, Any]:
        return value, old_value

    def _record_of(self, key: Any, entry: _Entry) -> BufferedRecord:
        return _record(key, entry)

    # -- the state of the current transaction ----------------------------------------------

    def _current(self) -> _State:
        txn = self._source()
        state = self._state
        if state is not None and type(txn) is Transaction:
            if state.txn is txn:
                return state
            # Handed on from a committed transaction only: one that rolled back leaves a
            # mirror of writes that never happened. Only this view writes the namespace
            # (the task's transactions; restores run before a task opens its views).
            if state.txn.state is TransactionState.COMMITTED:
                state.txn = txn
                return state
        state = self._load(txn)
        if type(txn) is Transaction:
            self._state = state
        return state

    def _load(self, txn: Any) -> _State:
        raw = txn.get(self.name, STATS_KEY)
        stats = dict(_NO_STATS) if raw is None else {**_NO_STATS, **decode_value(raw)}
        state = _State(txn, stats, memory=not self.spill_to_disk)
        if state.entries is not None:
            end = bytes([ENTRY_PREFIX[0] + 1])
            for raw_key, raw_value in txn.iterate(self.name, ENTRY_PREFIX, end, False):
                entry = _decode_entry(raw_key, raw_value)
                state.entries[raw_key] = entry
                state.order.add((entry.buffer_time, raw_key))
        return state

    def _writer(self, state: _State) -> Transaction:
        txn = state.txn
        if type(txn) is not Transaction:
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return txn

    def _write(self, state: _State, items: list[tuple[bytes, bytes | None]]) -> None:
        self._writer(state).put_all(self.name, items)

    def _get(self, state: _State, raw_key: bytes) -> _Entry | None:
        if state.entries is not None:
            return state.entries.get(raw_key)
        raw = state.txn.get(self.name, raw_key)
        return None if raw is None else _decode_entry(raw_key, raw)

    def _first(self, state: _State) -> tuple[int, bytes] | None:
        """(buffer time, raw entry key) of the oldest entry, or None when empty."""
        if state.order is not None:
            return state.order[0] if state.order else None
        if state.first is _UNKNOWN:
            state.first = None
            for raw_key, _ in state.txn.iterate(self.name, state.floor, _TIME_END, False):
                buffer_time = decode_i64_be(raw_key[1 : 1 + _TS_BYTES])
                state.first = (buffer_time, ENTRY_PREFIX + raw_key[1 + _TS_BYTES :])
                break
        return state.first

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: Any) -> BufferedRecord | None:
        """The buffered update of ``key``, or None."""
        entry = self._get(self._current(), ENTRY_PREFIX + encode_key(key))
        return None if entry is None else self._record_of(key, entry)

    def prior_value(self, key: Any) -> tuple[bool, Any]:
        """(True, the value ``key`` had before its first buffered update) if it is buffered,
        else (False, None) (Kafka's ``priorValueForBuffered``)."""
        entry = self._get(self._current(), ENTRY_PREFIX + encode_key(key))
        return (False, None) if entry is None else (True, entry.prior)

    def all(self) -> list[BufferedRecord]:
        """Every buffered update, oldest buffer time first (ties by key)."""
        state = self._current()
        out = []
        for raw_index, _ in state.txn.iterate(self.name, TIME_PREFIX, _TIME_END, False):
            raw_key = ENTRY_PREFIX + raw_index[1 + _TS_BYTES :]
            entry = self._get(state, raw_key)
            if entry is not None:
                out.append(self._record_of(decode_key(raw_key[1:]), entry))
        return out

    def num_records(self) -> int:
        return self._current().stats["count"]

    def buffer_size(self) -> int:
        """The bytes the entries take in the store (key and value of each)."""
        return self._current().stats["size"]

    def min_buffer_time(self) -> int | None:
        """The least buffer time held, or None when the buffer is empty."""
        first = self._first(self._current())
        return None if first is None else first[0]

    def approximate_num_entries(self) -> int:
        return self.num_records()

    # -- writes ------------------------------------------------------------------------------

    def put(
        self,
        buffer_time: int,
        key: Any,
        value: Any,
        old_value: Any,
        timestamp: int,
        headers: dict[str, Any] | None = None,
    ) -> None:
        """Buffer the update ``old_value -> value`` of ``key``: a new entry at
        ``buffer_time``, or, for a buffered key, the new value, timestamp and headers in
        its entry (buffer time and prior value kept)."""
        value, old_value = self._held_update(key, value, old_value)
        state = self._current()
        raw_key = ENTRY_PREFIX + encode_key(key)
        old = self._get(state, raw_key)
        if old is not None:
            buffer_time, prior = old.buffer_time, old.prior
        else:
            prior = old_value
        raw = encode_value([buffer_time, timestamp, value, prior, headers])
        entry = _Entry(buffer_time, timestamp, value, prior, headers, len(raw_key) + len(raw))
        writes: list[tuple[bytes, bytes | None]] = [(raw_key, raw)]
        stats = state.stats
        if old is None:
            writes.append((_index_key(buffer_time, raw_key[1:]), b""))
            stats["count"] += 1
            if state.order is not None:
                state.order.add((buffer_time, raw_key))
            else:
                index_key = _index_key(buffer_time, raw_key[1:])
                if index_key < state.floor:
                    state.floor = index_key
                if state.first is not _UNKNOWN and (
                    state.first is None or (buffer_time, raw_key) < state.first
                ):
                    state.first = (buffer_time, raw_key)
            stats["size"] += entry.size
        else:
            stats["size"] += entry.size - old.size
        if state.entries is not None:
            state.entries[raw_key] = entry
        self._write(state, writes)

    def evict_while(
        self, predicate: Callable[[], bool], callback: Callable[[BufferedRecord], None]
    ) -> int:
        """While ``predicate()`` holds and the buffer is not empty, remove the oldest entry
        (least buffer time, ties by key) and pass it to ``callback``. Returns how many."""
        state = self._current()
        evicted = 0
        while predicate():
            first = self._first(state)
            if first is None:
                break
            buffer_time, raw_key = first
            entry = self._get(state, raw_key)
            if entry is None:  # cannot happen: every index entry has its entry
                raise InvalidStateStoreException(
                    f"suppression buffer {self.name!r}: index entry without entry {raw_key!r}"
                )
            self._write(state, [(raw_key, None), (_index_key(buffer_time, raw_key[1:]), None)])
            if state.entries is not None:
                del state.entries[raw_key]
                state.order.remove(first)
            else:
                state.first = _UNKNOWN
                state.floor = _index_key(buffer_time, raw_key[1:])
            state.stats["count"] -= 1
            state.stats["size"] -= entry.size
            evicted += 1
            callback(self._record_of(decode_key(raw_key[1:]), entry))
        return evicted

    def evict_through(self, expiry: int, callback: Callable[[BufferedRecord], None]) -> int:
        """``evict_while`` the oldest buffer time is ``<= expiry``."""

        def expired() -> bool:
            oldest = self.min_buffer_time()
            return oldest is not None and oldest <= expiry

        return self.evict_while(expired, callback)

    def flush(self) -> None:
        """Write the stats entry (count and size): once per record, after its changes."""
        state = self._current()
        self._write(state, [(STATS_KEY, encode_value(state.stats))])

    # -- the Delta state table -------------------------------------------------------------

    # Key and values as JSON text (a windowed key as {"key", "window_start", "window_end"}),
    # the latest update's timestamp and the buffer time (epoch ms).
    STATE_COLUMNS = (
        ("key", "STRING"),
        ("value", "STRING"),
        ("prior_value", "STRING"),
        ("ts", "BIGINT"),
        ("buffer_time", "BIGINT"),
    )

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        """True for the time index and the stats entry: not state-table rows; restoring
        rebuilds them."""
        return not raw_key.startswith(ENTRY_PREFIX)

    @staticmethod
    def changelog_row(
        raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON
    ) -> dict[str, Any] | None:
        """The typed columns of one stored entry, or None for an index-only entry."""
        if not raw_key.startswith(ENTRY_PREFIX):
            return None
        key = decode_key(raw_key[1:])
        buffer_time, ts, value, prior, _ = decode_value(raw_value)
        if type(key_serde) is JsonSerde:
            key_text = json_text(key.as_fields() if type(key) is Windowed else key)
        else:  # its JSON form: a Bytes key as base64 text (a windowed one's inner key)
            key_text = changelog_text(key, key_serde)
        return {
            "key": key_text,
            "value": json_text(value),
            "prior_value": json_text(prior),
            "ts": ts,
            "buffer_time": buffer_time,
        }

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply changelog rows (``raw_value`` None: a tombstone) to a local store being
        restored or caught up, keeping the time index and the stats entry in step."""
        raw_stats = txn.get(name, STATS_KEY)
        stats = dict(_NO_STATS) if raw_stats is None else decode_value(raw_stats)
        for raw_key, raw_value in entries:
            if not raw_key.startswith(ENTRY_PREFIX):
                continue  # never in Delta; derived here
            old = txn.get(name, raw_key)
            if old is not None:
                txn.put(name, _index_key(decode_value(old)[0], raw_key[1:]), None)
                stats["count"] -= 1
                stats["size"] -= len(raw_key) + len(old)
            if raw_value is not None:
                txn.put(name, _index_key(decode_value(raw_value)[0], raw_key[1:]), b"")
                stats["count"] += 1
                stats["size"] += len(raw_key) + len(raw_value)
            txn.put(name, raw_key, raw_value)
        txn.put(name, STATS_KEY, encode_value(stats) if stats["count"] else None)

    @staticmethod
    def restore_entry(txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        """``restore_entries`` of one row."""
        SuppressionBuffer.restore_entries(txn, name, ((raw_key, raw_value),))


def _record(key: Any, entry: _Entry) -> BufferedRecord:
    return BufferedRecord(key, entry.value, entry.prior, entry.ts, entry.buffer_time, entry.headers)
