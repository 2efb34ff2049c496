"""The stores of a stream-stream join: each side's buffer, and the records still waiting for
a partner (Kafka's join window stores, which retain duplicates, and its shared "outer join"
store of non-joined records).

Both keep their entries in one namespace of the task's transactional store (keys from
``state/keys.py``, so byte order is value order):

=========================================================  ==============================
key                                                        value
=========================================================  ==============================
join buffer: ``b"w" + key + i64(ts) + i64(seq)``           the value's JSON
join buffer: ``b"t" + i64(ts) + key + i64(seq)``           ``b""`` (time index)
waiting:     ``b"o" + i64(ts) + side + key + i64(seq)``    the value's JSON
=========================================================  ==============================

``key`` is ``encode_key(key)`` (self-delimiting), ``seq`` a per-store sequence number that
keeps equal (key, timestamp) records apart, in arrival order (Kafka's window store keeps
duplicates the same way). ``side`` is 0 for the right side and 1 for the left, so waiting
records are read as Kafka's shared store orders them: by timestamp, the right side first,
then by key, then in arrival order.

Changelog rows: ``key, ts, seq, value`` (a buffer) and ``key, ts, side, seq, value``
(waiting records), so "which records still wait for a partner?" is a query of the shared
store's SQL view. The time index is derived (``is_index_only``) and rebuilt by a restore.

With StreamJoined serdes, a buffer's values and keys go through the seam of every store
(state/serde_checked.py): a value is held in its serde's JSON form (base64 text for
Bytes). The waiting store holds both sides' values, each by its side's serde
(``LeftOrRightValueSerde``, Kafka's); the side is in its key.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from lakestate.errors import InvalidStateStoreException, SerializationException
from lakestate.serdes import JSON, Serde, changelog_text
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.keys import decode_i64_be, decode_key, encode_i64_be, encode_key
from lakestate.state.overlay import Overlay
from lakestate.state.serde import decode_value, encode_value, json_text

__all__ = ["JoinBufferStore", "LeftOrRightValueSerde", "WaitingRecordsStore"]

_ENTRY = b"w"
_ENTRY_END = b"x"
_TIME = b"t"
_TIME_END = b"u"
_WAITING = b"o"
_WAITING_END = b"p"
_I64 = 8
_LEFT = b"\x01"
_U64 = struct.Struct(">Q")
_SIGN = 1 << 63
_RIGHT = b"\x00"


def _i64(n: int) -> bytes:
    """``encode_i64_be`` of a timestamp or sequence number the processor computed (known
    to be a 64-bit int), without its checks: it runs twice per record buffered."""
    return _U64.pack(n + _SIGN)


class LeftOrRightValueSerde(Serde):
    """The waiting store's value serde (Kafka's ``LeftOrRightValueSerde``): the left
    side's value serde and the right side's (StreamJoined's value and other value serde).
    A waiting record's value is held by its side's serde, ``side(is_left)``, its side
    being in the store's key; a value without its side has no form here."""

    def __init__(self, left: Serde, right: Serde) -> None:
        self.left, self.right = left, right
        self.name = f"LeftOrRightValueSerde({left.name}, {right.name})"
        self.json_form_differs = left.json_form_differs or right.json_form_differs

    def side(self, is_left: bool) -> Serde:
        return self.left if is_left else self.right

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LeftOrRightValueSerde):
            return False
        return (other.left, other.right) == (self.left, self.right)

    def __hash__(self) -> int:
        return hash((type(self), self.left, self.right))

    def _sideless(self, *_: Any) -> Any:
        raise SerializationException(
            f"{self.name} holds a value by its side's serde (side(is_left)), not by itself"
        )

    serialize = deserialize = to_json = from_json = _sideless


class _Store:
    """What both kinds share: a name, a reader/writer source, and the StoreKind contract's
    restore of plain entries."""

    kind = ""

    def __init__(self, name: str, source: Callable[[], Any]) -> None:
        if name in RESERVED_NAMESPACES:
            raise InvalidStateStoreException(f"store name {name!r} is reserved")
        self.name = name
        self._source = source

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _writer(self) -> Any:
        txn = self._source()
        if not hasattr(txn, "put"):
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return txn

    def staged(self) -> tuple[Any, Overlay]:
        """A view of this store whose writes wait in an ``Overlay`` until its ``flush``:
        what a chunked processor reads and writes while it processes a chunk."""
        overlay = Overlay(self._source)
        return type(self)(self.name, lambda: overlay), overlay

    @classmethod
    def restore_entry(cls, txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        cls.restore_entries(txn, name, ((raw_key, raw_value),))

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        txn.put_all(name, list(entries))


class JoinBufferStore(_Store):
    """One side of a stream-stream join: every record kept by (key, timestamp, sequence),
    duplicates included, until it is older than the join's retention. ``fetch`` reads a
    key's records in a time range by timestamp, then arrival."""

    kind = "stream_join_buffer"

    def fetch(self, key: Any, time_from: int, time_to: int) -> list[tuple[int, Any]]:
        """(timestamp, value) of ``key``'s records with time_from <= timestamp <= time_to."""
        if time_to < time_from:
            return []
        prefix = _ENTRY + encode_key(key)
        start, end = prefix + encode_i64_be(time_from), prefix + encode_i64_be(time_to + 1)
        at = len(prefix)
        return [
            (decode_i64_be(raw_key[at : at + _I64]), decode_value(raw))
            for raw_key, raw in self._source().iterate(self.name, start, end, False)
        ]

    def all(self) -> Iterator[tuple[Any, int, int, Any]]:
        """(key, timestamp, sequence, value) of every record, by key, timestamp, arrival."""
        for raw_key, raw in self._source().iterate(self.name, _ENTRY, _ENTRY_END, False):
            key, ts, seq = _split_entry(raw_key)
            yield key, ts, seq, decode_value(raw)

    def held_value(self, key: Any, value: Any) -> Any:
        """What this store holds for ``value`` (its serde's JSON form, the key and value
        checked: a SerializationException naming the store for one they cannot hold); the
        processor calls it for every record it would put, as Kafka's store serializes each
        put before its segments look at time. Without serdes: the value itself (Json,
        checked as it is encoded; bytes are refused here, saying what to do)."""
        if isinstance(value, bytes | bytearray | memoryview):
            raise SerializationException(
                f"store {self.name!r} has value serde Serdes.Json() and cannot hold "
                f"{type(value).__name__} (JSON has no bytes): give the join the sides' value "
                "serdes, e.g. StreamJoined.with_(key_serde, Serdes.Bytes(), Serdes.Bytes())"
            )
        return value

    def put_all(self, records: Iterable[tuple[Any, int, int, Any]]) -> None:
        """Keep each (key, timestamp, sequence, held value: ``held_value``'s); every one
        is encoded before anything is written, so a bad one writes nothing."""
        writes: list[tuple[bytes, bytes | None]] = []
        append = writes.append
        for key, ts, seq, value in records:
            raw_key = encode_key(key)
            raw_ts, raw_seq = _i64(ts), _i64(seq)
            append((_ENTRY + raw_key + raw_ts + raw_seq, encode_value(value)))
            append((_TIME + raw_ts + raw_key + raw_seq, b""))
        if writes:
            self._writer().put_all(self.name, writes)

    def delete_before(self, ts: int, since: int | None = None) -> int:
        """Delete every record older than ``ts``; returns how many. One range scan of the
        time index, from ``since`` when given (nothing older is left)."""
        txn = self._writer()
        first = _TIME if since is None else _TIME + encode_i64_be(min(since, ts))
        doomed = [k for k, _ in txn.iterate(self.name, first, _TIME + encode_i64_be(ts), False)]
        writes: list[tuple[bytes, bytes | None]] = []
        for raw_key in doomed:
            writes.append((raw_key, None))
            body = raw_key[1 + _I64 :]  # key + seq
            writes.append((_ENTRY + body[:-_I64] + raw_key[1 : 1 + _I64] + body[-_I64:], None))
        if writes:
            txn.put_all(self.name, writes)
        return len(doomed)

    # -- the Delta changelog (StoreKind) ---------------------------------------------------

    STATE_COLUMNS = (("key", "STRING"), ("ts", "BIGINT"), ("seq", "BIGINT"), ("value", "STRING"))

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        return not raw_key.startswith(_ENTRY)

    @staticmethod
    def changelog_row(
        raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON
    ) -> dict[str, Any] | None:
        if not raw_key.startswith(_ENTRY):
            return None
        key, ts, seq = _split_entry(raw_key)
        return {
            "key": changelog_text(key, key_serde),
            "ts": ts,
            "seq": seq,
            "value": json_text(decode_value(raw_value)),
        }

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply changelog rows (one per key), rebuilding the time index beside them."""
        writes: list[tuple[bytes, bytes | None]] = []
        for raw_key, raw_value in entries:
            if not raw_key.startswith(_ENTRY):
                continue
            body = raw_key[1:]
            ts = body[-2 * _I64 : -_I64]
            index = _TIME + ts + body[: -2 * _I64] + body[-_I64:]
            writes.append((raw_key, raw_value))
            writes.append((index, None if raw_value is None else b""))
        if writes:
            txn.put_all(name, writes)


def _split_entry(raw_key: bytes) -> tuple[Any, int, int]:
    body = raw_key[1:]
    key = decode_key(body[: -2 * _I64])
    return key, decode_i64_be(body[-2 * _I64 : -_I64]), decode_i64_be(body[-_I64:])


class WaitingRecordsStore(_Store):
    """The records of a left or outer join that found no partner yet, both sides in one
    store, read in Kafka's order (timestamp, right side first, key, arrival). A record
    leaves when a partner joins it or when its window closes (it is then emitted, joined
    with None)."""

    kind = "stream_join_waiting"

    @staticmethod
    def _group(key: Any, ts: int, is_left: bool) -> bytes:
        return _WAITING + encode_i64_be(ts) + (_LEFT if is_left else _RIGHT) + encode_key(key)

    def add(self, key: Any, ts: int, is_left: bool, seq: int, value: Any) -> None:
        raw = self._group(key, ts, is_left) + encode_i64_be(seq)
        self._writer().put(self.name, raw, encode_value(value))

    def remove_group(self, key: Any, ts: int, is_left: bool) -> None:
        """Remove every waiting record of ``key`` at ``ts`` on the given side."""
        group = self._group(key, ts, is_left)
        txn = self._writer()
        # Another key's encoding may extend this key's (b"" and b"\x00": state.keys escapes
        # 0x00 as 0x00 0xff): its records fall in the range too, each longer.
        size = len(group) + _I64
        scan = txn.iterate(self.name, group, group + b"\xff" * (_I64 + 1))
        doomed = [k for k, _ in scan if len(k) == size]
        if doomed:
            txn.put_all(self.name, [(k, None) for k in doomed])

    def remove(self, raw_keys: list[bytes]) -> None:
        if raw_keys:
            self._writer().put_all(self.name, [(k, None) for k in raw_keys])

    def scan(self) -> Iterator[tuple[bytes, int, bool, Any, Any]]:
        """(raw key, timestamp, is left, key, value) of every waiting record, in order."""
        for raw_key, raw in self._source().iterate(self.name, _WAITING, _WAITING_END, False):
            ts, is_left, key, _ = _split_waiting(raw_key)
            yield raw_key, ts, is_left, key, decode_value(raw)

    # -- the Delta changelog (StoreKind) ---------------------------------------------------

    STATE_COLUMNS = (
        ("key", "STRING"),
        ("ts", "BIGINT"),
        ("side", "STRING"),
        ("seq", "BIGINT"),
        ("value", "STRING"),
    )

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        return not raw_key.startswith(_WAITING)

    @staticmethod
    def changelog_row(
        raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON
    ) -> dict[str, Any] | None:
        if not raw_key.startswith(_WAITING):
            return None
        ts, is_left, key, seq = _split_waiting(raw_key)
        return {
            "key": changelog_text(key, key_serde),
            "ts": ts,
            "side": "left" if is_left else "right",
            "seq": seq,
            "value": json_text(decode_value(raw_value)),
        }


def _split_waiting(raw_key: bytes) -> tuple[int, bool, Any, int]:
    ts = decode_i64_be(raw_key[1 : 1 + _I64])
    is_left = raw_key[1 + _I64 : 2 + _I64] == _LEFT
    key = decode_key(raw_key[2 + _I64 : -_I64])
    return ts, is_left, key, decode_i64_be(raw_key[-_I64:])
