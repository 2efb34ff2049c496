"""The deduplication store (KIP-655): per deduplication id, the timestamp and offset of the
last record forwarded, plus a time index so that expired ids are purged by a range scan.

A store name is one namespace of the task's transaction, so the store keeps four kinds of
entries in that namespace, told apart by a one-byte prefix (keys from ``state/keys.py``,
which are order-preserving):

==============================================  ===========================================
key                                             value
==============================================  ===========================================
``b"i" + encode_key(id)``                       JSON ``[ts, offset, source]`` (the id entry)
``b"t" + encode_i64_be(ts) + encode_key(id)``   ``b""`` (time index: ids in timestamp order)
``b"n"``                                        JSON count of id entries, absent when 0
``b"f"``                                        ``encode_i64_be(floor)``: the purge floor
                                                (see ``DedupStore``), absent when unknown
==============================================  ===========================================

``offset`` and ``source`` say where the forwarded record was read (both None for a record
without metadata): its offset, and a 32-bit checksum of its topic (``source_tag``).
Together they recognise a record processed again (KIP-655: "if its value in the store has
the same offset, then the record is forwarded"); the source is kept so that equal offsets of
two input topics of one task are not taken for a replay, without storing topic names.

Only id entries are state. They become rows of the store's Delta state table, with the
typed columns ``(dedup_id, ts, offset)`` — ``dedup_id`` as JSON text, like the keys of the
other stores — so SQL can answer "has id X been seen?". The index, the count and the floor
are derived from the id entries: ``is_index_only`` tells the engine not to write them to
Delta. ``restore_entry`` rebuilds the index and the count while a local store is restored
(or caught up) from Delta rows; a restored store has no floor until its first purge sets
it (a store that held no id gets one from its first ``put``). An index entry is only a pointer: purging checks it against its id entry, so an index
entry left behind by an overwritten or deleted id entry is simply dropped.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple
from zlib import crc32

import orjson

from lakestate.errors import InvalidStateStoreException
from lakestate.serdes import JSON, Serde
from lakestate.state import keys
from lakestate.state.base import Transaction
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.dedup_columns import ID_PREFIX, changelog_columns
from lakestate.state.keys import decode_i64_be, decode_key, encode_i64_be, encode_key
from lakestate.state.multi_get import get_many
from lakestate.state.serde import decode_value, encode_value, json_text

__all__ = ["DedupEntry", "DedupStore", "source_tag"]

TIME_PREFIX = b"t"
COUNT_KEY = b"n"
FLOOR_KEY = b"f"
_ID_END = b"j"  # the smallest key above every id entry
_TIME_END = b"u"  # the smallest key above every index entry
_TS_BYTES = 8

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_SIGN = 1 << 63
_U64 = struct.Struct(">Q")
# The floor of an index that holds nothing (as stored): no valid cutoff passes it.
_NO_ENTRIES = _U64.pack(_I64_MAX + _SIGN)
_NOTHING_HELD: dict[bytes, Any] = {}
_UNKNOWN = object()  # an id key _put must read
_I32_MAX = 2**31 - 1
# An entry exactly as _encode_entry formats plain ints (no leading zeros, no "-0"), with a
# timestamp of at most 18 digits, hence a signed 64-bit int: decoding and encoding it again
# gives the same bytes.
_INT = r"(?:0|-?[1-9][0-9]*)"
_PLAIN_ENTRY = rf"^\[(?P<ts>0|-?[1-9][0-9]{{0,17}}),(?:{_INT}|null),(?:{_INT}|null)\]$"


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


def _ts_key(ts: int) -> bytes:
    """``encode_i64_be(ts)``, without its checks for the usual plain int in range."""
    if type(ts) is int and _I64_MIN <= ts <= _I64_MAX:
        return _U64.pack(ts + _SIGN)
    return encode_i64_be(ts)


def _index_key(ts: int, raw_id: bytes) -> bytes:
    return TIME_PREFIX + _ts_key(ts) + raw_id


def _encode_entry(ts: int, offset: int | None, source: int | None) -> bytes:
    """``encode_value([ts, offset, source])``: the same JSON, formatted directly when every
    field is a plain int or None."""
    if (
        type(ts) is int
        and (offset is None or type(offset) is int)
        and (source is None or type(source) is int)
    ):
        return b"[%d,%b,%b]" % (
            ts,
            b"null" if offset is None else b"%d" % offset,
            b"null" if source is None else b"%d" % source,
        )
    return encode_value([ts, offset, source])


def _decode_entry(raw: bytes) -> DedupEntry:
    """The entry ``_encode_entry`` wrote: orjson reads the usual ``[int, int|null,
    int|null]`` (it reads ints of 64 bits exactly; anything else is left to decode_value)."""
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError:
        fields = None
    if type(fields) is list and len(fields) == 3:
        ts, offset, source = fields
        if (
            type(ts) is int
            and (offset is None or type(offset) is int)
            and (source is None or type(source) is int)
        ):
            return DedupEntry(ts, offset, source)
    ts, offset, source = decode_value(raw)
    return DedupEntry(ts, offset, source)


def _decode_count(raw: bytes) -> int:
    return int(raw) if raw.isdigit() else decode_value(raw)


class DedupStore:
    """Deduplication id -> ``DedupEntry`` in one namespace of a task's transactional store.

    Reads go through ``source()`` (the task's transaction, or the StateStore for read-only
    queries); writes need a writer (a transaction). The size is kept in the store itself,
    updated on every change, so it is read in O(1).

    Purging keeps a *floor* in the store (``FLOOR_KEY``): a timestamp below which the time
    index holds no entry. A purge sets it to the least timestamp it leaves in the index;
    every write of index entries lowers it (``_put``; a put into a store that held no id
    sets it) or drops it (``ensure_index``); deletes leave it. A purge whose cutoff does not pass the floor has nothing to do and
    reads nothing but the floor; without a floor (unknown: a restored store) it
    scans from the start of the index. Being an entry of the namespace, the floor commits and rolls back
    with the writes it describes. Like the count, it is read, changed and written back, so
    it assumes what a task guarantees: one open transaction writes the namespace at a time.
    """

    kind = "dedup"

    def __init__(self, name: str, source: Callable[[], Any]) -> None:
        if name in RESERVED_NAMESPACES:
            raise InvalidStateStoreException(f"store name {name!r} is reserved")
        self.name = name
        self._source = source

    def __repr__(self) -> str:
        return f"DedupStore({self.name!r})"

    def _writer(self) -> Any:
        return self._check_writer(self._source())

    def _check_writer(self, txn: Any) -> Any:
        if type(txn) is not Transaction and not hasattr(txn, "put"):
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return txn

    # -- reads -----------------------------------------------------------------------------

    def get(self, dedup_id: Any) -> DedupEntry | None:
        """The entry of ``dedup_id``, or None if the store holds none."""
        raw = self._source().get(self.name, ID_PREFIX + encode_key(dedup_id))
        return None if raw is None else _decode_entry(raw)

    def get_keyed(self, dedup_id: Any) -> tuple[bytes, DedupEntry | None]:
        """The stored key of ``dedup_id`` and its entry (None if absent): what ``get`` does,
        plus the key for a following ``put_keyed``."""
        id_key = ID_PREFIX + encode_key(dedup_id)
        return id_key, self.get_by_key(id_key)

    @staticmethod
    def id_key(dedup_id: Any) -> bytes:
        """The stored key of ``dedup_id`` (for ``get_by_key`` and ``put_keyed``)."""
        return ID_PREFIX + encode_key(dedup_id)

    @staticmethod
    def id_keys(dedup_ids: list[Any]) -> list[bytes]:
        """``[id_key(i) for i in dedup_ids]``, a str id without ``encode_key``'s memo (ids
        are mostly seen once)."""
        return [
            ID_PREFIX + (keys.encode_str_key(i) if type(i) is str else encode_key(i))
            for i in dedup_ids
        ]

    def get_by_key(self, id_key: bytes) -> DedupEntry | None:
        """The entry stored under ``id_key``, or None."""
        raw = self._source().get(self.name, id_key)
        return None if raw is None else _decode_entry(raw)

    def get_many_by_key(self, id_keys: list[bytes]) -> list[DedupEntry | None]:
        """``[get_by_key(k) for k in id_keys]``, read at once where the source can."""
        raws = get_many(self._source(), self.name, id_keys)
        return [None if raw is None else _decode_entry(raw) for raw in raws]

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
        return 0 if raw is None else _decode_count(raw)

    def approximate_num_entries(self) -> int:
        return self.size()

    # -- writes ----------------------------------------------------------------------------

    def put(
        self, dedup_id: Any, ts: int, offset: int | None = None, source: int | None = None
    ) -> int:
        """Set the entry of ``dedup_id``; returns the change in size (1 for a new id, else 0)."""
        return self.put_keyed(ID_PREFIX + encode_key(dedup_id), ts, offset, source)

    def put_keyed(
        self, id_key: bytes, ts: int, offset: int | None = None, source: int | None = None
    ) -> int:
        """``put`` by the stored key that ``get_keyed`` returned."""
        return self.put_many(((id_key, ts, offset, source),))

    def put_many(
        self,
        entries: Iterable[tuple[bytes, int, int | None, int | None]],
        held: Mapping[bytes, DedupEntry | None] | None = None,
    ) -> int:
        """``put_keyed`` of each (id key, ts, offset, source), the id keys all different, in
        one write; returns the number of new ids. ``held``: what ``get_by_key`` returned for
        some of these id keys, with no write to the store since; they are not read again."""
        return _put(self._writer(), self.name, entries, held, sets_floor=True)

    def delete(self, dedup_id: Any) -> int:
        """Remove ``dedup_id``; returns the change in size (-1 if it was held, else 0)."""
        return _delete(self._writer(), self.name, ID_PREFIX + encode_key(dedup_id))

    def purge_expired(self, cutoff: int) -> int:
        """Remove every id whose entry is older than ``cutoff`` (ts < cutoff): a range scan
        of the time index from the floor up to ``cutoff``, and one entry beyond (the new
        floor). Nothing but the floor is read when ``cutoff`` does not pass it. Returns the
        number of ids removed."""
        txn = self._writer()
        name = self.name
        # The floor and the cutoff as index timestamps: compared as bytes, as in the index.
        floor = txn.get(name, FLOOR_KEY)
        end = encode_i64_be(cutoff)
        if floor is not None and end <= floor:
            return 0  # no index entry is older than the cutoff
        start = TIME_PREFIX if floor is None else TIME_PREFIX + floor
        removed = 0
        new_floor = _NO_ENTRIES
        # Writes land behind the scan (index entries already read, id entries out of its
        # range), so the scan runs lazily over the transaction's view.
        for raw_key, _ in txn.iterate(name, start, _TIME_END, False):
            ts_raw = raw_key[1 : 1 + _TS_BYTES]
            if ts_raw >= end:
                new_floor = ts_raw
                break
            id_key = ID_PREFIX + raw_key[1 + _TS_BYTES :]
            raw = txn.get(name, id_key)
            if raw is not None and _decode_entry(raw).ts == decode_i64_be(ts_raw):
                txn.put(name, id_key, None)
                removed += 1
            txn.put(name, raw_key, None)
        if removed:
            _add_to_count(txn, name, -removed)
        txn.put(name, FLOOR_KEY, new_floor)
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
            # A floor kept while the store was empty is above these entries: unknown now.
            txn.put(self.name, FLOOR_KEY, None)
        return len(ids)

    # -- the Delta state table -------------------------------------------------------------

    # The typed columns of this store's Delta state table (besides task, raw_key, raw_value):
    # the id as JSON text, the forwarded record's timestamp (epoch ms) and offset.
    STATE_COLUMNS = (("dedup_id", "STRING"), ("ts", "BIGINT"), ("offset", "BIGINT"))

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        """True for entries derived from the id entries (time index, count, floor): they are
        not state-table rows; ``restore_entry`` rebuilds the index and the count, and the
        next purge the floor."""
        return not raw_key.startswith(ID_PREFIX)

    # ``changelog_row`` of many entries at once, as Arrow columns, or None.
    changelog_columns = staticmethod(changelog_columns)

    @staticmethod
    def changelog_row(
        raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON
    ) -> dict[str, Any] | None:
        """The typed columns of one stored entry, or None for an index-only entry (a dedup
        store has no key serde: ``key_serde`` is the contract's, unused)."""
        if DedupStore.is_index_only(raw_key):
            return None
        entry = _decode_entry(raw_value)
        return {
            "dedup_id": json_text(decode_key(raw_key[1:])),
            "ts": entry.ts,
            "offset": entry.offset,
        }

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """``restore_entry`` of many changelog rows (one per key) at once: the ids' entries,
        index entries and count in one write, deletes one by one."""
        puts = []
        for raw_key, raw_value in entries:
            if DedupStore.is_index_only(raw_key):
                continue
            if raw_value is None:
                _delete(txn, name, raw_key)
            else:
                entry = _decode_entry(raw_value)
                puts.append((raw_key, entry.ts, entry.offset, entry.source))
        if puts:
            _put(txn, name, puts)

    @staticmethod
    def restore_columns(raw_keys: Any, raw_values: Any) -> tuple[Any, Any]:
        """The entries that ``restore_entries`` of these changelog rows (Arrow binary arrays,
        one row per key, none a tombstone) leaves in an empty namespace, as (keys, values)
        Arrow arrays in no particular order: the id entries, their index entries and the
        count (no floor: the next purge sets it).

        Values in the form ``_encode_entry`` writes (with a timestamp of at most 18 digits)
        are kept as they are and indexed with Arrow compute; any other row goes through
        ``_put``'s decoding and encoding, one by one."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        binary = pa.large_binary()  # 64-bit offsets: a large store's entries may pass 2 GB
        ids = pc.starts_with(raw_keys, ID_PREFIX)
        keys = raw_keys.filter(ids).cast(binary)
        values = raw_values.filter(ids).cast(binary)
        fields = pc.extract_regex(values, _PLAIN_ENTRY)
        plain = fields.is_valid()
        keys_plain = keys.filter(plain)
        ts = pc.struct_field(fields.filter(plain), [0]).cast(pa.string()).cast(pa.int64())
        # _ts_key of each ts: big-endian with the sign bit flipped, as fixed 8-byte strings.
        ts_keys = (ts.to_numpy().view(np.uint64) ^ np.uint64(_SIGN)).astype(">u8")
        ts_bytes = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(8), len(ts_keys), [None, pa.py_buffer(ts_keys.tobytes())]
        ).cast(binary)
        raw_ids = pc.binary_slice(keys_plain, 1, _I32_MAX)  # no stop: pyarrow 26 fails
        index_keys = pc.binary_join_element_wise(
            pa.scalar(TIME_PREFIX, binary), ts_bytes, raw_ids, pa.scalar(b"", binary)
        )
        out_keys = [keys_plain, index_keys]
        out_values = [values.filter(plain), pa.repeat(pa.scalar(b"", binary), len(index_keys))]
        others: list[bytes] = []
        other_values: list[bytes] = []
        others_of = pc.invert(plain)
        for id_key, raw in zip(
            keys.filter(others_of).to_pylist(), values.filter(others_of).to_pylist(), strict=True
        ):
            entry = _decode_entry(raw)
            others += (id_key, _index_key(entry.ts, id_key[1:]))
            other_values += (_encode_entry(*entry), b"")
        if len(keys):
            others.append(COUNT_KEY)
            other_values.append(b"%d" % len(keys))  # encode_value(count): the same JSON
        out_keys.append(pa.array(others, binary))
        out_values.append(pa.array(other_values, binary))
        return pa.concat_arrays(out_keys), pa.concat_arrays(out_values)

    @staticmethod
    def restore_entry(txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        """Apply one state-table row (``raw_value`` None: a deleted row) to a local store
        being restored or caught up, keeping the time index and the count in step."""
        if DedupStore.is_index_only(raw_key):
            return  # never in Delta; derived here
        if raw_value is None:
            _delete(txn, name, raw_key)
        else:
            entry = _decode_entry(raw_value)
            _put(txn, name, ((raw_key, entry.ts, entry.offset, entry.source),))


def _put(
    txn: Any,
    name: str,
    entries: Iterable[tuple[bytes, int, int | None, int | None]],
    held: Mapping[bytes, DedupEntry | None] | None = None,
    sets_floor: bool = False,
) -> int:
    """Set id entries (id key, ts, offset, source; the id keys all different), their index
    entries, the count and the floor they lower, in one write; returns the number of new
    ids. ``held``: the current entries of some of the id keys (None: none), known to the
    caller (see put_many). ``sets_floor``: a store that held no id gets its floor."""
    get = txn.get
    known = _NOTHING_HELD if held is None else held
    writes: list[tuple[bytes, bytes | None]] = []
    added = 0
    lowest = _I64_MAX
    for id_key, ts, offset, source in entries:
        raw_id = id_key[1:]
        index_key = _index_key(ts, raw_id)  # checks ts before anything is written
        old = known.get(id_key, _UNKNOWN)
        if old is _UNKNOWN:
            raw = get(name, id_key)
            old = None if raw is None else _decode_entry(raw)
        if old is None:
            added += 1
        else:
            old_ts = old.ts
            if old_ts != ts:
                writes.append((_index_key(old_ts, raw_id), None))
        writes.append((id_key, _encode_entry(ts, offset, source)))
        writes.append((index_key, b""))
        if ts < lowest:
            lowest = ts
    held_none = False
    if added:
        raw = get(name, COUNT_KEY)
        held_none = sets_floor and raw is None
        count = (0 if raw is None else _decode_count(raw)) + added
        writes.append((COUNT_KEY, b"%d" % count))  # encode_value(count): the same JSON
    if writes:
        # No index entry may lie below a floor: lower it with these (read once per call).
        # A store that held no id has no index entry: its floor is exact (no scan needed).
        floor = get(name, FLOOR_KEY)
        low = _ts_key(lowest)
        if (floor is None and held_none) or (floor is not None and low < floor):
            writes.append((FLOOR_KEY, low))
    _write(txn, name, tuple(writes))
    return added


def _write(txn: Any, name: str, items: tuple[tuple[bytes, bytes | None], ...]) -> None:
    """``txn.put`` of each item, in one call when the writer can."""
    put_all = getattr(txn, "put_all", None)
    if put_all is not None:
        put_all(name, items)
    else:
        for key, value in items:
            txn.put(name, key, value)


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
    count = (0 if raw is None else _decode_count(raw)) + delta
    # An empty store has no count entry, so an emptied store looks like a fresh one.
    # (b"%d" % count is encode_value(count): the same JSON.)
    txn.put(name, COUNT_KEY, b"%d" % count if count else None)
