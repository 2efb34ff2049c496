"""Transactional state stores (KIP-892).

A ``StateStore`` is the local storage of one task: an ordered byte-key/byte-value map split
into namespaces (one per logical store, plus offsets and metadata), backed by a
``Backend`` (in memory, or RocksDB through rocksdict). All changes go through a
``Transaction``, which buffers them until ``commit(offsets)`` writes data and offsets in one
atomic write. Typed stores (key-value, versioned, window, dedup...) are views that encode
their keys and values into a namespace of a transaction.

Isolation (KIP-892): under READ_COMMITTED (``exactly_once_v2``) readers outside a
transaction — other transactions and interactive queries through ``StateStore.get`` — see
only committed data. Under READ_UNCOMMITTED (``at_least_once``) they also see the writes of
open transactions. A transaction always reads its own writes, and closing it without
commit always discards its writes, so a failed record or batch is never half-applied.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple, Protocol

from sortedcontainers import SortedDict

from lakestate.errors import InvalidStateStoreException, StreamsException
from lakestate.state.constants import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE_V2,
    PROCESSING_GUARANTEE,
    ENTRY_OVERHEAD_BYTES,
    META_NAMESPACE,
    OFFSETS_NAMESPACE,
    STREAM_TIME_KEY,
)


class TopicPartition(NamedTuple):
    """A partition of an input (or changelog) topic, the key of committed offsets."""

    topic: str
    partition: int

    def encode(self) -> bytes:
        return f"{self.partition}\x00{self.topic}".encode()

    @staticmethod
    def decode(raw: bytes) -> TopicPartition:
        partition, topic = raw.decode().split("\x00", 1)
        return TopicPartition(topic, int(partition))


class IsolationLevel(enum.Enum):
    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


def isolation_for(config: Mapping[str, object]) -> IsolationLevel:
    """KIP-892: READ_COMMITTED under exactly_once_v2 (the default), READ_UNCOMMITTED under
    at_least_once."""
    guarantee = config.get(PROCESSING_GUARANTEE, EXACTLY_ONCE_V2)
    if guarantee == EXACTLY_ONCE_V2:
        return IsolationLevel.READ_COMMITTED
    if guarantee == AT_LEAST_ONCE:
        return IsolationLevel.READ_UNCOMMITTED
    raise StreamsException(
        f"{PROCESSING_GUARANTEE} must be {EXACTLY_ONCE_V2!r} or {AT_LEAST_ONCE!r}, got {guarantee!r}"
    )


class TransactionState(enum.Enum):
    """A transaction is OPEN until it is COMMITTED or CLOSED (rolled back); both are final."""

    OPEN = "open"
    COMMITTED = "committed"
    CLOSED = "closed"


# A write in a buffer: the new value, or None for a delete (tombstone).
Write = tuple[str, bytes, bytes | None]


class Backend(Protocol):
    """Raw storage under a StateStore. Only ``write`` changes it, atomically."""

    def get(self, namespace: str, key: bytes) -> bytes | None: ...

    def iterate(
        self, namespace: str, start: bytes | None, end: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with start <= key < end (None: unbounded), in key order or reversed."""
        ...

    def write(self, writes: Iterable[Write], offsets: Mapping[TopicPartition, int]) -> None:
        """Apply every write and store every offset atomically: all or nothing."""
        ...

    def close(self) -> None: ...


def _in_range(key: bytes, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or key >= start) and (end is None or key < end)


class Transaction:
    """A read/write view of a StateStore that buffers writes until commit (KIP-892).

    Not thread-safe: one transaction per thread. Use as a context manager; leaving the
    block without commit rolls back.
    """

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._buffers: dict[str, SortedDict] = {}
        self._entries = 0
        self._bytes = 0
        self.state = TransactionState.OPEN

    @property
    def isolation_level(self) -> IsolationLevel:
        return self._store.isolation_level

    def _check_open(self) -> None:
        if self.state is not TransactionState.OPEN:
            raise InvalidStateStoreException(
                f"transaction on store {self._store.name!r} is {self.state.value}, not open"
            )

    def get(self, namespace: str, key: bytes) -> bytes | None:
        self._check_open()
        buffer = self._buffers.get(namespace)
        if buffer is not None and key in buffer:
            return buffer[key]
        return self._store._read(namespace, key, exclude=self)

    def put(self, namespace: str, key: bytes, value: bytes | None) -> None:
        """Write ``value`` under ``key``; ``None`` deletes it."""
        self._check_open()
        buffer = self._buffers.get(namespace)
        if buffer is None:
            buffer = self._buffers[namespace] = SortedDict()
        previous = buffer.get(key, _MISSING)
        if previous is _MISSING:
            self._entries += 1
            self._bytes += len(key) + ENTRY_OVERHEAD_BYTES
        else:
            self._bytes -= len(previous) if previous is not None else 0
        self._bytes += len(value) if value is not None else 0
        buffer[key] = value

    def delete(self, namespace: str, key: bytes) -> None:
        self.put(namespace, key, None)

    def iterate(
        self,
        namespace: str,
        start: bytes | None = None,
        end: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with start <= key < end in key order (or reversed), own writes included."""
        self._check_open()
        sources = [self._store._iterate(namespace, start, end, reverse, exclude=self)]
        buffer = self._buffers.get(namespace)
        if buffer:
            sources.append(_buffer_items(buffer, start, end, reverse))
        return _merge(sources, reverse)

    def changes(self) -> Iterator[Write]:
        """The buffered writes, by namespace then key: what commit will apply."""
        for namespace in sorted(self._buffers):
            for key, value in self._buffers[namespace].items():
                yield namespace, key, value

    def approximate_num_uncommitted_entries(self) -> int:
        return self._entries

    def approximate_num_uncommitted_bytes(self) -> int:
        return self._bytes

    def set_stream_time(self, stream_time: int) -> None:
        self.put(META_NAMESPACE, STREAM_TIME_KEY, stream_time.to_bytes(8, "big", signed=True))

    def stream_time(self) -> int | None:
        raw = self.get(META_NAMESPACE, STREAM_TIME_KEY)
        return None if raw is None else int.from_bytes(raw, "big", signed=True)

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Write the buffered changes and ``offsets`` atomically, then end the transaction."""
        self._check_open()
        self._store._commit(self, list(self.changes()), dict(offsets or {}))
        self._end(TransactionState.COMMITTED)

    def close(self) -> None:
        """Discard the buffered changes (roll back). Idempotent."""
        if self.state is TransactionState.OPEN:
            self._end(TransactionState.CLOSED)

    def _end(self, state: TransactionState) -> None:
        self.state = state
        self._buffers = {}
        self._entries = self._bytes = 0
        self._store._forget(self)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_MISSING = object()


def _buffer_items(
    buffer: SortedDict, start: bytes | None, end: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes | None]]:
    keys = buffer.irange(start, end, inclusive=(True, False), reverse=reverse)
    return ((key, buffer[key]) for key in list(keys))


def _tag(
    items: Iterator[tuple[bytes, bytes | None]], tag: int
) -> Iterator[tuple[bytes, int, bytes | None]]:
    for key, value in items:
        yield key, tag, value


def _merge(
    sources: list[Iterator[tuple[bytes, bytes | None]]],
    reverse: bool,
    keep_tombstones: bool = False,
) -> Iterator[tuple[bytes, bytes | None]]:
    """Merge ordered sources; on equal keys the later source (newer writes) wins."""
    if len(sources) == 1 and keep_tombstones:
        return sources[0]
    # Tag each item so that, for equal keys, the newest source sorts first in either direction.
    sign = 1 if reverse else -1
    tagged = [_tag(items, sign * i) for i, items in enumerate(sources)]
    merged = heapq.merge(*tagged, key=lambda item: (item[0], item[1]), reverse=reverse)

    def newest_first() -> Iterator[tuple[bytes, bytes | None]]:
        last: bytes | None = None
        for key, _, value in merged:
            if key == last:
                continue
            last = key
            if value is not None or keep_tombstones:
                yield key, value

    return newest_first()


class StateStore:
    """The transactional local store of one task (KIP-892).

    ``get``/``iterate`` here are the interactive-query path: committed data only under
    READ_COMMITTED. ``commit`` of a transaction writes its data and offsets atomically.
    """

    def __init__(self, name: str, backend: Backend, isolation_level: IsolationLevel) -> None:
        self.name = name
        self.isolation_level = isolation_level
        self._backend = backend
        self._open: list[Transaction] = []
        self._closed = False

    def new_transaction(self) -> Transaction:
        self._check_usable()
        txn = Transaction(self)
        self._open.append(txn)
        return txn

    def get(self, namespace: str, key: bytes) -> bytes | None:
        self._check_usable()
        return self._read(namespace, key, exclude=None)

    def iterate(
        self,
        namespace: str,
        start: bytes | None = None,
        end: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_usable()
        return _merge([self._iterate(namespace, start, end, reverse, exclude=None)], reverse)

    def committed_offset(self, partition: TopicPartition) -> int | None:
        """The offset committed for ``partition`` with the data, or None if there is none."""
        self._check_usable()
        raw = self._backend.get(OFFSETS_NAMESPACE, partition.encode())
        return None if raw is None else int.from_bytes(raw, "big", signed=True)

    def committed_offsets(self) -> dict[TopicPartition, int]:
        self._check_usable()
        return {
            TopicPartition.decode(k): int.from_bytes(v, "big", signed=True)
            for k, v in self._backend.iterate(OFFSETS_NAMESPACE, None, None, False)
        }

    def stream_time(self) -> int | None:
        """The committed stream time of the task, or None before its first commit."""
        self._check_usable()
        # Committed only, like committed_offset, whatever the isolation level.
        raw = self._backend.get(META_NAMESPACE, STREAM_TIME_KEY)
        return None if raw is None else int.from_bytes(raw, "big", signed=True)

    def approximate_num_uncommitted_entries(self) -> int:
        return sum(t.approximate_num_uncommitted_entries() for t in self._open)

    def approximate_num_uncommitted_bytes(self) -> int:
        return sum(t.approximate_num_uncommitted_bytes() for t in self._open)

    def close(self) -> None:
        """Roll back every open transaction and close the backend. Idempotent."""
        if self._closed:
            return
        for txn in list(self._open):
            txn.close()
        self._backend.close()
        self._closed = True

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- used by Transaction ------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise InvalidStateStoreException(f"state store {self.name!r} is closed")

    def _visible_others(self, exclude: Transaction | None) -> list[Transaction]:
        if self.isolation_level is IsolationLevel.READ_COMMITTED:
            return []
        return [t for t in self._open if t is not exclude]

    def _read(self, namespace: str, key: bytes, exclude: Transaction | None) -> bytes | None:
        for txn in reversed(self._visible_others(exclude)):
            buffer = txn._buffers.get(namespace)
            if buffer is not None and key in buffer:
                return buffer[key]
        return self._backend.get(namespace, key)

    def _iterate(
        self,
        namespace: str,
        start: bytes | None,
        end: bytes | None,
        reverse: bool,
        exclude: Transaction | None,
    ) -> Iterator[tuple[bytes, bytes | None]]:
        sources: list[Iterator[tuple[bytes, bytes | None]]] = [
            self._backend.iterate(namespace, start, end, reverse)
        ]
        for txn in self._visible_others(exclude):
            buffer = txn._buffers.get(namespace)
            if buffer:
                sources.append(_buffer_items(buffer, start, end, reverse))
        if len(sources) == 1:
            return sources[0]
        # Keep tombstones: the caller's merge drops them after overlaying its own writes.
        return _merge(sources, reverse, keep_tombstones=True)

    def _commit(
        self,
        txn: Transaction,
        writes: list[Write],
        offsets: dict[TopicPartition, int],
    ) -> None:
        self._check_usable()
        self._backend.write(writes, offsets)

    def _forget(self, txn: Transaction) -> None:
        if txn in self._open:
            self._open.remove(txn)


def encode_offset(offset: int) -> bytes:
    return offset.to_bytes(8, "big", signed=True)
