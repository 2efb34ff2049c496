"""The versioned key-value store (KIP-889, with KIP-914's ``put`` return codes): several
versions per key, each valid from its timestamp until the next version's, so a lookup can
ask for a key's value *as of* a time (temporal joins, versioned tables).

Entries in one namespace of the task's transactional store, told apart by a one-byte
prefix (keys from ``state/keys.py``, order-preserving; ``encode_key`` is self-delimiting,
so the versions of one key are one contiguous range ordered by ``valid_from``):

==========================================================  ===============================
key                                                         value
==========================================================  ===============================
``b"v" + encode_key(key) + encode_i64_be(valid_from)``      JSON ``[value, valid_to]``
                                                            (the version entry)
``b"x" + encode_i64_be(expiry) + encode_key(key) +``        ``b""`` (expiry index)
``encode_i64_be(valid_from)``
``b"t"``                                                    ``encode_i64_be``: the store's
                                                            observed stream time
==========================================================  ===============================

A version's ``value`` is null for a tombstone: ``put(key, None, ts)`` stores a version
too, since it ends the version before it and a later put of an older timestamp must see
it. (A stored value is never None otherwise, None being the tombstone.) ``valid_to`` is
the next version's timestamp, null for the latest version. It is kept in each entry, not
derived, so that an entry alone is a row of an SCD type 2 table: a put that inserts a
version rewrites the version before it (whose ``valid_to`` changes), so the changelog's
latest row per entry is always that version's current state.

``get(key, as_of)`` is one reverse seek from ``(key, as_of)`` (and a read of the stream
time when the version found is not the key's latest); ``get(key)`` one reverse seek from
the end of the key's range.

Observed stream time and expiry (Kafka's rules). The store's observed stream time is the
largest timestamp of an accepted put or delete (whatever the key); history retention
``R`` doubles as the grace period:

* a put or delete with ``timestamp < stream_time - R`` is refused
  (``PUT_RETURN_CODE_NOT_PUT``; ``delete`` returns None);
* ``get(key, as_of)`` with ``as_of < stream_time - R`` is beyond retention: it returns the
  latest version if that is valid at ``as_of`` (the latest never expires), else None;
* a version *expires* once its expiry time ``<= stream_time - R``: its ``valid_to``, or for
  a tombstone that is its key's latest version its own timestamp (a tombstone holds no
  value: once no accepted put can go before it and no valid query can reach it, the key
  is as absent). A latest value has no expiry. Expired versions can never be reached by a
  valid get nor change a put's outcome, so they are deleted as stream time advances: one
  range scan of the expiry index from the previous cutoff to the new one (every entry
  below the previous cutoff is already gone). A version that is expired when written (a
  put at exactly the cutoff ends the version before it there) is deleted at once. The
  changelog therefore gets a tombstone row for each expired version: the SQL history
  holds exactly what the store holds.

The observed stream time is the ``b"t"`` entry, committed and rolled back with the data.
It is not a changelog row: a restore recomputes it from the restored versions as the
largest ``valid_from`` (``restore_entries`` keeps the larger of that and what the local
store held, so a catch-up works too). That is exact because the version put at the stream
time is always kept: nothing of its key is later, so it is its key's latest version, and
a latest tombstone expires only when its timestamp ``<= stream_time - R``, impossible at
the stream time itself since ``R > 0``. (So Kafka's zero history retention is refused.)

Only version entries are state (rows ``key, value, valid_from, valid_to`` of the store's
Delta changelog, ``value`` null for a tombstone version); the expiry index and the stream
time are derived (``is_index_only``) and rebuilt by ``restore_entries``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from lakestate.errors import InvalidStateStoreException, StreamsException
from lakestate.serdes import JSON, Serde, changelog_text
from lakestate.state.constants import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    RESERVED_NAMESPACES,
)
from lakestate.state.keys import decode_i64_be, decode_key, encode_i64_be, encode_key
from lakestate.state.multi_get import last_below_many
from lakestate.state.serde import decode_value, encode_value, json_text

__all__ = ["VersionedKeyValueStore", "VersionedRecord"]

VERSION_PREFIX = b"v"
EXPIRY_PREFIX = b"x"
STREAM_TIME_KEY = b"t"
_VERSION_END = b"w"  # the smallest key above every version entry
_TS_BYTES = 8
# Above every 8-byte valid_from suffix: the end of one key's version range.
_AFTER_TIMESTAMPS = b"\xff" * (_TS_BYTES + 1)
_I64_MIN = -(2**63)


class VersionedRecord(NamedTuple):
    """One version of a key: its value, its timestamp (valid from), and the timestamp it is
    valid to (exclusive): the next version's, or None for the latest version."""

    value: Any
    timestamp: int
    valid_to: int | None = None


def _entry(value_json: bytes | None, valid_to: int | None) -> bytes:
    """The JSON ``[value, valid_to]`` of a version entry (value null: a tombstone)."""
    return b"[%b,%b]" % (
        b"null" if value_json is None else value_json,
        b"null" if valid_to is None else b"%d" % valid_to,
    )


def _decode_entry(raw: bytes) -> tuple[Any, int | None]:
    value, valid_to = decode_value(raw)
    return value, valid_to


def _valid_from(raw_key: bytes) -> int:
    return decode_i64_be(raw_key[-_TS_BYTES:])


def _expiry(valid_from: int, value: Any, valid_to: int | None) -> int | None:
    """When a version expires (see the module docstring); None: never (a latest value)."""
    if valid_to is not None:
        return valid_to
    return valid_from if value is None else None


def _index_key(raw_key: bytes, expiry: int) -> bytes:
    return EXPIRY_PREFIX + encode_i64_be(expiry) + raw_key[1:]


def _cutoff(stream_time: int, retention_ms: int) -> int:
    """``stream_time - R``, kept in the 64-bit range so it can be encoded."""
    return max(stream_time - retention_ms, _I64_MIN)


def _read_stream_time(reader: Any, name: str) -> int | None:
    raw = reader.get(name, STREAM_TIME_KEY)
    return None if raw is None else decode_i64_be(raw)


class VersionedKeyValueStore:
    """Key -> versions (value, valid_from, valid_to) in one namespace of a task's store.

    Reads go through ``source()`` (the task's transaction, or the StateStore for read-only
    queries); writes need a transaction. Keeps what a task guarantees: one open
    transaction writes the namespace at a time (the stream time is read, then written).
    """

    kind = "versioned"

    def __init__(self, name: str, source: Callable[[], Any], history_retention_ms: int) -> None:
        if name in RESERVED_NAMESPACES:
            raise InvalidStateStoreException(f"store name {name!r} is reserved")
        if (
            isinstance(history_retention_ms, bool)
            or not isinstance(history_retention_ms, int)
            or history_retention_ms <= 0
        ):
            raise StreamsException(
                f"versioned store {name!r}: history retention must be a positive number of "
                f"ms, got {history_retention_ms!r}"
            )
        self.name = name
        self.history_retention_ms = history_retention_ms
        self._source = source

    def __repr__(self) -> str:
        return f"VersionedKeyValueStore({self.name!r}, {self.history_retention_ms} ms)"

    def _writer(self) -> Any:
        txn = self._source()
        if not hasattr(txn, "put"):
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return txn

    # -- reads -----------------------------------------------------------------------------

    def observed_stream_time(self) -> int | None:
        """The largest timestamp put or deleted so far, None before the first."""
        return _read_stream_time(self._source(), self.name)

    def get(self, key: Any, as_of: int | None = None) -> VersionedRecord | None:
        """The latest version of ``key`` by timestamp; with ``as_of``, the version valid
        at ``as_of`` (inclusive). None if there is none, if it is a tombstone, or if
        ``as_of`` is beyond history retention and the latest version is not valid there."""
        reader = self._source()
        prefix = VERSION_PREFIX + _encode_key(key)
        if as_of is None:
            scan = reader.iterate(self.name, prefix, prefix + _AFTER_TIMESTAMPS, True)
            latest = next(_own(scan, prefix), None)
            return None if latest is None else _record(*latest)
        at = encode_i64_be(as_of)  # checks as_of
        found = next(reader.iterate(self.name, prefix, prefix + at + b"\x00", True), None)
        return self._valid_at(found, as_of, lambda: _read_stream_time(reader, self.name))

    def get_many_as_of(self, lookups: list[tuple[Any, int]]) -> list[VersionedRecord | None]:
        """``[get(key, as_of) for key, as_of in lookups]``, read in one call (RocksDB: one
        iterator's seeks), with nothing written to the store between them."""
        reader = self._source()
        bounds = []
        for key, as_of in lookups:
            prefix = VERSION_PREFIX + _encode_key(key)
            bounds.append((prefix, prefix + encode_i64_be(as_of) + b"\x00"))
        stream_time: list[int | None] = []

        def read_stream_time() -> int | None:
            if not stream_time:  # read once, and only if a lookup finds an older version
                stream_time.append(_read_stream_time(reader, self.name))
            return stream_time[0]

        found = last_below_many(reader, self.name, bounds)
        return [
            self._valid_at(entry, as_of, read_stream_time)
            for entry, (_, as_of) in zip(found, lookups, strict=True)
        ]

    def _valid_at(
        self,
        found: tuple[bytes, bytes] | None,
        as_of: int,
        stream_time: Callable[[], int | None],
    ) -> VersionedRecord | None:
        """The answer to ``get(key, as_of)`` given the key's last entry at or before as_of."""
        if found is None:
            return None  # every version of the key starts after as_of, the latest too
        raw_key, raw = found
        value, valid_to = _decode_entry(raw)
        if valid_to is not None:
            # Not the latest version (the only one without a valid_to): it answers within
            # history retention only; beyond it only the latest may, which starts after
            # as_of. A lookup that finds the latest needs no stream time.
            now = stream_time()
            if now is not None and as_of < _cutoff(now, self.history_retention_ms):
                return None
        return None if value is None else VersionedRecord(value, _valid_from(raw_key), valid_to)

    def all(self) -> Iterator[tuple[Any, VersionedRecord]]:
        """(key, latest version) of every key whose latest version is not a tombstone, in
        key order. Reads every version entry."""
        items = self._source().iterate(self.name, VERSION_PREFIX, _VERSION_END, False)
        for raw_key, raw in items:
            value, valid_to = _decode_entry(raw)
            if valid_to is None and value is not None:
                yield (
                    decode_key(raw_key[1:-_TS_BYTES]),
                    VersionedRecord(value, _valid_from(raw_key)),
                )

    def approximate_num_entries(self) -> int:
        """The number of keys with a current (non-tombstone) version."""
        return sum(1 for _ in self.all())

    # -- writes ----------------------------------------------------------------------------

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Add the version ``(value, timestamp)`` of ``key`` (None: a tombstone), replacing
        one at the same timestamp. Returns the new version's valid-to timestamp,
        ``PUT_RETURN_CODE_VALID_TO_UNDEFINED`` (-1) when it is the latest version, or
        ``PUT_RETURN_CODE_NOT_PUT`` when ``timestamp`` is beyond history retention (the
        store is then unchanged)."""
        # Encode before anything is written: a bad key, value or timestamp writes nothing.
        prefix = VERSION_PREFIX + _encode_key(key)
        raw_key = prefix + encode_i64_be(timestamp)
        value_json = None if value is None else encode_value(value)
        txn = self._writer()
        name = self.name
        stream_time = _read_stream_time(txn, name)
        if stream_time is not None and timestamp < stream_time - self.history_retention_ms:
            return PUT_RETURN_CODE_NOT_PUT
        if stream_time is None or timestamp > stream_time:
            self._advance(txn, stream_time, timestamp)
            stream_time = timestamp
        cutoff = _cutoff(stream_time, self.history_retention_ms)

        writes: dict[bytes, bytes | None] = {}
        before = next(txn.iterate(name, prefix, raw_key + b"\x00", True), None)
        if before is not None:
            before_key, before_raw = before
            before_value, valid_to = _decode_entry(before_raw)
            before_from = _valid_from(before_key)
            old_expiry = _expiry(before_from, before_value, valid_to)
            if before_from == timestamp:  # replaced: its entry is overwritten below
                if old_expiry is not None:
                    writes[_index_key(before_key, old_expiry)] = None
            else:  # it now ends where the new version starts
                before_json = None if before_value is None else encode_value(before_value)
                _set(writes, before_key, before_from, before_json, old_expiry, timestamp, cutoff)
        else:
            # Nothing at or before the timestamp: the new version ends where the first starts.
            scan = txn.iterate(name, raw_key, prefix + _AFTER_TIMESTAMPS, False)
            after = next(_own(scan, prefix), None)
            valid_to = None if after is None else _valid_from(after[0])
        _set(writes, raw_key, timestamp, value_json, None, valid_to, cutoff)
        txn.put_all(name, list(writes.items()))
        return PUT_RETURN_CODE_VALID_TO_UNDEFINED if valid_to is None else valid_to

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        """Put a tombstone for ``key`` at ``timestamp``; return the version that was valid
        at ``timestamp`` (None if none). Beyond history retention nothing is done and None
        is returned, whatever the store holds (as in Kafka)."""
        stream_time = self.observed_stream_time()
        if stream_time is not None and timestamp < stream_time - self.history_retention_ms:
            return None
        old = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return old

    def _advance(self, txn: Any, old: int | None, new: int) -> None:
        """Set the observed stream time to ``new`` and delete the versions that expire:
        index entries from the old cutoff (none is below it) up to the new one, inclusive."""
        retention = self.history_retention_ms
        start = (
            EXPIRY_PREFIX if old is None else EXPIRY_PREFIX + encode_i64_be(_cutoff(old, retention))
        )
        # Above every index entry at the cutoff (a cutoff is below the 64-bit maximum: R > 0).
        end = EXPIRY_PREFIX + encode_i64_be(_cutoff(new, retention) + 1)
        writes: list[tuple[bytes, bytes | None]] = []
        # Collected before writing: the deletes would land inside the range being scanned.
        for index_key, _ in list(txn.iterate(self.name, start, end, False)):
            writes.append((index_key, None))
            writes.append((VERSION_PREFIX + index_key[1 + _TS_BYTES :], None))
        writes.append((STREAM_TIME_KEY, encode_i64_be(new)))
        txn.put_all(self.name, writes)

    # -- the Delta changelog (StoreKind) ---------------------------------------------------

    # An SCD type 2 table: key and value as JSON text like the other stores (value null for
    # a tombstone version), valid_from and valid_to (null: the current version) in epoch ms.
    STATE_COLUMNS = (
        ("key", "STRING"),
        ("value", "STRING"),
        ("valid_from", "BIGINT"),
        ("valid_to", "BIGINT"),
    )

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        """The expiry index and the stream time are derived from the version entries."""
        return not raw_key.startswith(VERSION_PREFIX)

    @staticmethod
    def changelog_row(
        raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON
    ) -> dict[str, Any] | None:
        if not raw_key.startswith(VERSION_PREFIX):
            return None
        value, valid_to = _decode_entry(raw_value)
        return {
            "key": changelog_text(decode_key(raw_key[1:-_TS_BYTES]), key_serde),
            "value": json_text(value),
            "valid_from": _valid_from(raw_key),
            "valid_to": valid_to,
        }

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply changelog rows (one per key; ``raw_value`` None: a deleted version),
        keeping the expiry index in step and the observed stream time at the largest
        ``valid_from`` held (see the module docstring)."""
        writes: dict[bytes, bytes | None] = {}
        latest: int | None = None
        for raw_key, raw_value in entries:
            if not raw_key.startswith(VERSION_PREFIX):
                continue
            valid_from = _valid_from(raw_key)
            old = txn.get(name, raw_key)
            if old is not None:
                old_expiry = _expiry(valid_from, *_decode_entry(old))
                if old_expiry is not None:
                    writes[_index_key(raw_key, old_expiry)] = None
            writes[raw_key] = raw_value
            if raw_value is not None:
                expiry = _expiry(valid_from, *_decode_entry(raw_value))
                if expiry is not None:
                    writes[_index_key(raw_key, expiry)] = b""
                latest = valid_from if latest is None else max(latest, valid_from)
        if latest is not None:
            held = _read_stream_time(txn, name)
            if held is None or latest > held:
                writes[STREAM_TIME_KEY] = encode_i64_be(latest)
        if writes:
            txn.put_all(name, list(writes.items()))

    @classmethod
    def restore_entry(cls, txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        cls.restore_entries(txn, name, ((raw_key, raw_value),))


def _own(entries: Iterator[tuple[bytes, bytes]], prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The version entries of ``entries`` whose key is exactly the one encoded ``prefix``
    (after VERSION_PREFIX): another key's encoding may extend it (``b""`` and ``b"\\x00"``,
    ``""`` and ``"\\x00"``: state.keys escapes a 0x00 as 0x00 0xff), and its entries then
    sort among this key's range, one byte or more longer."""
    size = len(prefix) + _TS_BYTES
    return (entry for entry in entries if len(entry[0]) == size)


def _encode_key(key: Any) -> bytes:
    if key is None:
        raise StreamsException("a versioned store's key cannot be None")
    return encode_key(key)


def _record(raw_key: bytes, raw: bytes) -> VersionedRecord | None:
    """The version an entry holds, None for a tombstone."""
    value, valid_to = _decode_entry(raw)
    return None if value is None else VersionedRecord(value, _valid_from(raw_key), valid_to)


def _set(
    writes: dict[bytes, bytes | None],
    raw_key: bytes,
    valid_from: int,
    value_json: bytes | None,
    old_expiry: int | None,
    valid_to: int | None,
    cutoff: int,
) -> None:
    """Add to ``writes`` the version entry ``raw_key`` with its new ``valid_to``, moving its
    expiry index entry (from ``old_expiry``: None when it had none or is new); a version
    already expired (expiry <= cutoff) is deleted instead."""
    if old_expiry is not None:
        writes[_index_key(raw_key, old_expiry)] = None
    expiry = _expiry(valid_from, None if value_json is None else True, valid_to)
    if expiry is not None and expiry <= cutoff:
        writes[raw_key] = None
        return
    writes[raw_key] = _entry(value_json, valid_to)
    if expiry is not None:
        writes[_index_key(raw_key, expiry)] = b""
