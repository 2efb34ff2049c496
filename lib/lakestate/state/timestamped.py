"""The timestamped key-value store: what tables and aggregations keep (KIP-258 style).

Each key holds its latest value and that value's timestamp. Readers outside processors
(the test driver, SQL) usually want just the value: ``get`` gives the value,
``get_with_timestamp`` gives both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from lakestate.errors import InvalidStateStoreException
from lakestate.serdes import JSON, Serde, changelog_text
from lakestate.state.keys import decode_key, encode_key, prefix_range
from lakestate.state.multi_get import get_many
from lakestate.state.serde import decode_value, encode_value, json_text


class ValueAndTimestamp(NamedTuple):
    value: Any
    timestamp: int


class TimestampedKeyValueStore:
    """Key -> (value, timestamp) in one namespace of a task's transactional store."""

    kind = "timestamped_key_value"

    def __init__(self, name: str, source: Callable[[], Any]) -> None:
        self.name = name
        self._source = source

    def _writer(self) -> Any:
        txn = self._source()
        if not hasattr(txn, "put"):
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return txn

    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        raw = self._source().get(self.name, encode_key(key))
        if raw is None:
            return None
        value, timestamp = decode_value(raw)
        return ValueAndTimestamp(value, timestamp)

    def get_many_with_timestamp(
        self, keys: list[Any], encoded: list[bytes] | None = None
    ) -> list[ValueAndTimestamp | None]:
        """``[get_with_timestamp(k) for k in keys]``, read at once where the source can
        (``encoded``: the keys' ``encode_key``, when the caller has them)."""
        if encoded is None:
            encoded = [encode_key(k) for k in keys]
        raws = get_many(self._source(), self.name, encoded)
        return [None if raw is None else ValueAndTimestamp(*decode_value(raw)) for raw in raws]

    def get(self, key: Any) -> Any:
        found = self.get_with_timestamp(key)
        return None if found is None else found.value

    def put(self, key: Any, value: Any, timestamp: int) -> None:
        """Store ``value`` at ``timestamp``; a None value deletes the key."""
        self._writer().put(self.name, *self.encode_entry(key, value, timestamp))

    @staticmethod
    def encode_entry(key: Any, value: Any, timestamp: int) -> tuple[bytes, bytes | None]:
        """The stored key and value of ``put(key, value, timestamp)``; raises for a key or
        value that cannot be stored, before anything is written."""
        value_json = None if value is None else encode_value(value)
        return TimestampedKeyValueStore.encode_json_entry(key, value_json, timestamp)

    @staticmethod
    def encode_json_entry(
        key: Any, value_json: bytes | None, timestamp: int
    ) -> tuple[bytes, bytes | None]:
        """``encode_entry`` of a value already encoded (``encode_value``; None deletes)."""
        # The JSON of [value, timestamp], without walking a new list for each put.
        raw = None if value_json is None else b"[%b,%d]" % (value_json, timestamp)
        return encode_key(key), raw

    def put_encoded(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        """Write entries made by ``encode_entry``, in order."""
        self._writer().put_all(self.name, entries)

    def delete(self, key: Any) -> None:
        self._writer().put(self.name, encode_key(key), None)

    def all(self) -> Iterator[tuple[Any, Any]]:
        """(key, value) pairs in key order."""
        for raw_key, raw in self._source().iterate(self.name, None, None, False):
            yield decode_key(raw_key), decode_value(raw)[0]

    def prefix_scan(self, prefix: tuple) -> Iterator[tuple[Any, ValueAndTimestamp]]:
        """(key, ValueAndTimestamp) of every tuple key starting with the elements of
        ``prefix``, in key order (a foreign-key join's subscribers of one foreign key)."""
        start, end = prefix_range(prefix)
        for raw_key, raw in self._source().iterate(self.name, start, end, False):
            yield decode_key(raw_key), ValueAndTimestamp(*decode_value(raw))

    def approximate_num_entries(self) -> int:
        return sum(1 for _ in self._source().iterate(self.name, None, None, False))

    # The typed columns of this store's Delta state table (besides task, raw_key, raw_value):
    # key and value as JSON text, as in log tables; ts in epoch ms.
    STATE_COLUMNS = (("key", "STRING"), ("value", "STRING"), ("ts", "BIGINT"))

    @staticmethod
    def changelog_row(raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON) -> dict[str, Any]:
        """The typed columns of one stored entry, for its Delta state-table row (the key's
        text by the store's key serde: ``changelog_text``)."""
        value, timestamp = decode_value(raw_value)
        key = changelog_text(decode_key(raw_key), key_serde)
        return {"key": key, "value": json_text(value), "ts": timestamp}

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        """Every entry of this store is state: a changelog row."""
        return False

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """``restore_entry`` of many changelog rows at once."""
        txn.put_all(name, entries)

    @staticmethod
    def restore_columns(raw_keys: Any, raw_values: Any) -> tuple[Any, Any]:
        """The entries a wiped store restored from these live rows holds: the rows."""
        return raw_keys, raw_values

    @staticmethod
    def restore_entry(txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        """Apply one changelog row (``raw_value`` None: a tombstone) to a local store."""
        txn.put(name, raw_key, raw_value)
