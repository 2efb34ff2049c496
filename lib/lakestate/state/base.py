"""Transactional state stores (KIP-892).

A ``StateStore`` is the local storage of one task: an ordered byte-key/byte-value map split
into namespaces (one per logical store, plus offsets and metadata), backed by a
``Backend`` (in memory, or RocksDB through rocksdict). All changes go through a
``Transaction``, which buffers them until ``commit(offsets)`` writes data and offsets in one
atomic write. Typed stores (key-value, versioned, window, dedup...) are views that encode
their keys and values into a namespace of a transaction, and keep there whatever else they
need (indexes, counts...): a transaction holds bytes only and knows nothing of the views.

Isolation (KIP-892): under READ_COMMITTED (``exactly_once_v2``) readers outside a
transaction — other transactions and interactive queries through ``StateStore.get`` — see
only committed data. Under READ_UNCOMMITTED (``at_least_once``) they also see the writes of
open transactions. A transaction always reads its own writes, and closing it without
commit always discards its writes, so a failed record or batch is never half-applied.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice, repeat
from types import MappingProxyType
from typing import NamedTuple, Protocol

from sortedcontainers import SortedList

from lakestate.errors import InvalidStateStoreException, StreamsException
from lakestate.state.constants import (
    AT_LEAST_ONCE,
    ENTRY_OVERHEAD_BYTES,
    EXACTLY_ONCE_V2,
    META_NAMESPACE,
    OFFSETS_NAMESPACE,
    PROCESSING_GUARANTEE,
    STREAM_TIME_KEY,
)
from lakestate.state.ordered_items import (
    CHUNK_SIZES,
    chunked_items,
    lazy_items,
    live_items,
    merge_own_writes,
    merge_sources,
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
        """Apply every write and store every offset atomically: all or nothing.

        A backend may also offer ``write_buffers(buffers, offsets)``, the same with the
        writes as {namespace: {key: value or None}}: commits then use it; and
        ``load(namespace, chunks)``, puts into one namespace without offsets, for
        ``StateStore.bulk_load``."""
        ...

    def close(self) -> None: ...


class Transaction:
    """A read/write view of a StateStore that buffers writes until commit (KIP-892).

    Not thread-safe: one transaction per thread. Use as a context manager; leaving the
    block without commit rolls back.

    The buffer of a namespace is a plain dict (point reads and writes are dict operations).
    A buffer that grows past ``_INDEX_MIN`` keys gets a sorted index of its keys the first
    time it is iterated, kept up to date from then on; smaller buffers are sorted when
    iterated.
    """

    __slots__ = ("_store", "_buffers", "_indexes", "_entries", "_bytes", "state")

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._buffers: dict[str, dict[bytes, bytes | None]] = {}
        self._indexes: dict[str, SortedList] = {}
        self._entries = 0
        self._bytes = 0
        self.state = _OPEN

    @property
    def isolation_level(self) -> IsolationLevel:
        return self._store.isolation_level

    def _check_open(self) -> None:
        if self.state is not _OPEN:
            raise InvalidStateStoreException(
                f"transaction on store {self._store.name!r} is {self.state.value}, not open"
            )

    def get(self, namespace: str, key: bytes) -> bytes | None:
        if self.state is not _OPEN:
            self._check_open()
        buffer = self._buffers.get(namespace)
        if buffer is not None:
            value = buffer.get(key, _MISSING)
            if value is not _MISSING:
                return value
        store = self._store
        if store._dirty_reads:
            return store._read(namespace, key, self)
        return store._backend.get(namespace, key)

    def put(self, namespace: str, key: bytes, value: bytes | None) -> None:
        """Write ``value`` under ``key``; ``None`` deletes it."""
        if self.state is not _OPEN:
            self._check_open()
        buffer = self._buffers.get(namespace)
        if buffer is None:
            buffer = self._buffers[namespace] = {}
        previous = buffer.get(key, _MISSING)
        if previous is _MISSING:
            self._entries += 1
            self._bytes += len(key) + ENTRY_OVERHEAD_BYTES
            if self._indexes:
                index = self._indexes.get(namespace)
                if index is not None:
                    index.add(key)
        elif previous is not None:
            self._bytes -= len(previous)
        if value is not None:
            self._bytes += len(value)
        buffer[key] = value

    def put_all(self, namespace: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """``put`` each (key, value) of ``items`` in order, in one call."""
        if self.state is not _OPEN:
            self._check_open()
        buffer = self._buffers.get(namespace)
        if buffer is None:
            buffer = self._buffers[namespace] = {}
        index = self._indexes.get(namespace) if self._indexes else None
        new_keys = []  # into the index at once: SortedList.update sorts them in C
        size = 0
        for key, value in items:
            previous = buffer.get(key, _MISSING)
            if previous is _MISSING:
                new_keys.append(key)
                size += len(key) + ENTRY_OVERHEAD_BYTES
            elif previous is not None:
                size -= len(previous)
            if value is not None:
                size += len(value)
            buffer[key] = value
        if index is not None and new_keys:
            index.update(new_keys)
        self._entries += len(new_keys)
        self._bytes += size

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
        if self.state is not _OPEN:
            self._check_open()
        committed = self._store._iterate(namespace, start, end, reverse, exclude=self)
        buffer = self._buffers.get(namespace)
        own = self._buffer_items(namespace, buffer, start, end, reverse) if buffer else None
        if own is None:
            return live_items(committed)
        return merge_own_writes(committed, own, reverse)

    def _buffer_items(
        self,
        namespace: str,
        buffer: dict[bytes, bytes | None],
        start: bytes | None,
        end: bytes | None,
        reverse: bool,
    ) -> Iterator[tuple[bytes, bytes | None]] | None:
        """The items of ``buffer`` with start <= key < end in key order (or reversed), or
        None if there are none. Values are read as the items are reached. An indexed
        buffer is read in chunks of keys, each resuming after the last key read, so a scan
        costs what it reads, and writes during it cannot make it skip or repeat keys."""
        index = self._indexes.get(namespace)
        if index is None:
            if len(buffer) <= _INDEX_MIN:
                keys = [
                    k for k in buffer if (start is None or k >= start) and (end is None or k < end)
                ]
                if not keys:
                    return None
                keys.sort(reverse=reverse)
                return lazy_items(buffer, keys)
            index = self._indexes[namespace] = SortedList(buffer)
        chunk = list(islice(index.irange(start, end, (True, False), reverse), CHUNK_SIZES[0]))
        if not chunk:
            return None
        return chunked_items(index, buffer, chunk, start, end, reverse)

    def changes(self) -> Iterator[Write]:
        """The buffered writes, by namespace then key: what commit will apply."""
        for namespace, keys, values in self.changes_by_namespace():
            yield from zip(repeat(namespace), keys, values)

    def changes_by_namespace(self) -> list[tuple[str, list[bytes], list[bytes | None]]]:
        """``changes()`` as one (namespace, keys, values) per namespace, without a tuple a write."""
        keys = {n: list(self._indexes.get(n) or sorted(b)) for n, b in self._buffers.items()}
        return [
            (n, keys[n], list(map(self._buffers[n].__getitem__, keys[n]))) for n in sorted(keys)
        ]

    def approximate_num_uncommitted_entries(self) -> int:
        return self._entries

    def approximate_num_uncommitted_bytes(self) -> int:
        return self._bytes

    def set_stream_time(self, stream_time: int) -> None:
        self.put(META_NAMESPACE, STREAM_TIME_KEY, stream_time.to_bytes(8, "big", signed=True))

    def stream_time(self) -> int | None:
        raw = self.get(META_NAMESPACE, STREAM_TIME_KEY)
        return None if raw is None else int.from_bytes(raw, "big", signed=True)

    # -- end -----------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Write the buffered changes and ``offsets`` atomically, then end the transaction."""
        if self.state is not _OPEN:
            self._check_open()
        self._store._commit(self, _NO_OFFSETS if offsets is None else offsets)
        self._end(TransactionState.COMMITTED)

    def close(self) -> None:
        """Discard the buffered changes (roll back). Idempotent."""
        if self.state is _OPEN:
            self._end(TransactionState.CLOSED)

    def _end(self, state: TransactionState) -> None:
        self.state = state
        # New containers: iterators handed out keep reading the old ones.
        self._buffers = {}
        if self._indexes:
            self._indexes = {}
        self._entries = self._bytes = 0
        self._store._forget(self)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_OPEN = TransactionState.OPEN
_MISSING = object()
_NO_OFFSETS: Mapping[TopicPartition, int] = MappingProxyType({})
# A write buffer with more keys than this gets a sorted index when it is first iterated.
_INDEX_MIN = 32


class StateStore:
    """The transactional local store of one task (KIP-892).

    ``get``/``iterate`` here are the interactive-query path: committed data only under
    READ_COMMITTED. ``commit`` of a transaction writes its data and offsets atomically.
    """

    def __init__(self, name: str, backend: Backend, isolation_level: IsolationLevel) -> None:
        self.name = name
        self.isolation_level = isolation_level
        self._dirty_reads = isolation_level is IsolationLevel.READ_UNCOMMITTED
        self._backend = backend
        self._write_buffers = getattr(backend, "write_buffers", None)
        self._open: list[Transaction] = []
        self._closed = False

    def new_transaction(self) -> Transaction:
        if self._closed:
            self._check_usable()
        txn = Transaction(self)
        self._open.append(txn)
        return txn

    def bulk_load(
        self, namespace: str, chunks: Iterable[tuple[Sequence[bytes], Sequence[bytes]]]
    ) -> None:
        """Put ``values[i]`` under ``keys[i]`` of each (keys, values) chunk straight into the
        committed store, without offsets, while no transaction is open: filling a store
        being restored. The keys must be distinct and ascending across all chunks. Not
        atomic as a whole: the caller marks completion by a later commit."""
        self._check_usable()
        if self._open:
            raise InvalidStateStoreException(
                f"state store {self.name!r}: a bulk load while a transaction is open"
            )
        load = getattr(self._backend, "load", None)
        if load is not None:
            load(namespace, chunks)
            return
        for keys, values in chunks:
            writes = ((namespace, k, v) for k, v in zip(keys, values, strict=True))
            self._backend.write(writes, _NO_OFFSETS)

    def estimate_num_keys(self, namespace: str) -> int | None:
        """The backend's estimate of the committed keys of ``namespace`` (index entries
        included), read without a scan; None when the backend keeps no such estimate or
        the namespace does not exist."""
        self._check_usable()
        estimate = getattr(self._backend, "estimate_num_keys", None)
        return None if estimate is None else estimate(namespace)

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
        return merge_sources([self._iterate(namespace, start, end, reverse, exclude=None)], reverse)

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
        if not self._dirty_reads:
            return []
        return [t for t in self._open if t is not exclude]

    def _read(self, namespace: str, key: bytes, exclude: Transaction | None) -> bytes | None:
        if self._dirty_reads:
            for txn in reversed(self._open):
                if txn is exclude:
                    continue
                buffer = txn._buffers.get(namespace)
                if buffer is not None:
                    value = buffer.get(key, _MISSING)
                    if value is not _MISSING:
                        return value
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
                items = txn._buffer_items(namespace, buffer, start, end, reverse)
                if items is not None:
                    sources.append(items)
        if len(sources) == 1:
            return sources[0]
        # Keep tombstones: the caller's merge drops them after overlaying its own writes.
        return merge_sources(sources, reverse, keep_tombstones=True)

    def _commit(self, txn: Transaction, offsets: Mapping[TopicPartition, int]) -> None:
        if self._closed:
            self._check_usable()
        buffers = txn._buffers
        if self._write_buffers is not None:
            self._write_buffers(buffers, offsets)
        else:
            self._backend.write(
                [(ns, k, v) for ns, buffer in buffers.items() for k, v in buffer.items()], offsets
            )

    def _forget(self, txn: Transaction) -> None:
        try:
            self._open.remove(txn)
        except ValueError:
            pass


_PARTITION_KEYS: dict[TopicPartition, bytes] = {}


def partition_key(partition: TopicPartition) -> bytes:
    """``partition.encode()``, remembered: offsets are written with every commit."""
    key = _PARTITION_KEYS.get(partition)
    if key is None:
        key = partition.encode()
        if type(partition.partition) is int and len(_PARTITION_KEYS) < 10_000:
            _PARTITION_KEYS[partition] = key
    return key


def encode_offset(offset: int) -> bytes:
    return offset.to_bytes(8, "big", signed=True)
