"""The typed key-value store: Kafka's ``KeyValueStore`` over one namespace of a task's store.

A ``KeyValueStore`` holds no data of its own. Each call asks its ``source`` for the reader
to use — the task's current ``Transaction`` while processing (reads see its own writes,
writes are buffered until commit), or the ``StateStore`` itself for interactive queries
(read-only, committed data under READ_COMMITTED). Keys are encoded with
``lakestate.state.keys`` (order-preserving, so ranges follow the keys' natural order),
values with ``lakestate.state.serde`` (JSON).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from lakestate.errors import InvalidStateStoreException
from lakestate.serdes import JSON, Serde, changelog_text
from lakestate.state.base import Transaction
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.keys import decode_key, encode_key, prefix_range
from lakestate.state.serde import decode_value, encode_value, json_text

__all__ = ["KeyValueStore", "Reader"]


class Reader(Protocol):
    """What a store reads through: a ``Transaction`` or a ``StateStore``."""

    def get(self, namespace: str, key: bytes) -> bytes | None: ...

    def iterate(
        self, namespace: str, start: bytes | None, end: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]: ...


class KeyValueStore:
    """Typed key-value view of the namespace ``name`` (one named logical store).

    ``put(key, None)`` deletes, as in Kafka. Range bounds are inclusive; ``None`` leaves a
    side unbounded; a range whose ``from_key`` is above its ``to_key`` is empty. Iterators
    yield decoded ``(key, value)`` pairs in key order (or reversed).
    """

    kind = "key_value"

    def __init__(self, name: str, source: Callable[[], Reader]) -> None:
        if name in RESERVED_NAMESPACES:
            raise InvalidStateStoreException(f"store name {name!r} is reserved")
        self.name = name
        self._source = source

    def __repr__(self) -> str:
        return f"KeyValueStore({self.name!r})"

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        raw = self._source().get(self.name, encode_key(key))
        return None if raw is None else decode_value(raw)

    def range(self, from_key: Any = None, to_key: Any = None) -> Iterator[tuple[Any, Any]]:
        """Entries with ``from_key <= key <= to_key``, in key order."""
        return self._scan(from_key, to_key, reverse=False)

    def reverse_range(self, from_key: Any = None, to_key: Any = None) -> Iterator[tuple[Any, Any]]:
        """Entries with ``from_key <= key <= to_key``, in reverse key order."""
        return self._scan(from_key, to_key, reverse=True)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._iterate(None, None, reverse=False)

    def reverse_all(self) -> Iterator[tuple[Any, Any]]:
        return self._iterate(None, None, reverse=True)

    def prefix_scan(self, prefix: tuple, reverse: bool = False) -> Iterator[tuple[Any, Any]]:
        """Entries whose (tuple) key starts with the elements of ``prefix``, in key order."""
        start, end = prefix_range(prefix)
        return self._iterate(start, end, reverse)

    def approximate_num_entries(self) -> int:
        """The number of entries (exact here, but counted by a scan: O(n))."""
        return sum(1 for _ in self._source().iterate(self.name, None, None, False))

    # -- writes ----------------------------------------------------------------------------

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``; ``None`` deletes ``key``."""
        raw_key = encode_key(key)
        raw_value = None if value is None else encode_value(value)
        self._writer().put(self.name, raw_key, raw_value)

    def put_if_absent(self, key: Any, value: Any) -> Any:
        """Put ``value`` unless ``key`` has one; return the value it had (None if absent)."""
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    def put_all(self, entries: Iterable[tuple[Any, Any]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: Any) -> Any:
        """Delete ``key``; return the value it had (None if absent)."""
        old = self.get(key)
        if old is not None:
            self._writer().put(self.name, encode_key(key), None)
        return old

    # -- helpers ---------------------------------------------------------------------------

    def _writer(self) -> Transaction:
        reader = self._source()
        if not isinstance(reader, Transaction):
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return reader

    def _scan(self, from_key: Any, to_key: Any, reverse: bool) -> Iterator[tuple[Any, Any]]:
        start = None if from_key is None else encode_key(from_key)
        # The smallest byte string above encode(to_key) is encode(to_key) + b"\0".
        end = None if to_key is None else encode_key(to_key) + b"\x00"
        if start is not None and end is not None and start >= end:
            return iter(())
        return self._iterate(start, end, reverse)

    def _iterate(
        self, start: bytes | None, end: bytes | None, reverse: bool
    ) -> Iterator[tuple[Any, Any]]:
        items = self._source().iterate(self.name, start, end, reverse)
        return ((decode_key(k), decode_value(v)) for k, v in items)

    # -- the Delta changelog (StoreKind: state/registry.py) -----------------------------------

    # key and value as JSON text, as in log tables.
    STATE_COLUMNS = (("key", "STRING"), ("value", "STRING"))

    @staticmethod
    def changelog_row(raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON) -> dict[str, Any]:
        return {
            "key": changelog_text(decode_key(raw_key), key_serde),
            "value": json_text(decode_value(raw_value)),
        }

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        """Every entry is state: a changelog row."""
        return False

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        txn.put_all(name, entries)

    @staticmethod
    def restore_columns(raw_keys: Any, raw_values: Any) -> tuple[Any, Any]:
        """The entries a wiped store restored from these live rows holds: the rows."""
        return raw_keys, raw_values

    @staticmethod
    def restore_entry(txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        txn.put(name, raw_key, raw_value)
