"""The in-memory backend: a dict per namespace, with a sorted index of its keys for scans.
Nothing survives the process.

Point reads and writes are dict operations. The sorted index of a namespace is built when
the namespace is first scanned and kept up to date by later writes while scans keep
coming; a namespace written many times (more than it holds keys, and at least
``_STALE_MIN``) without a scan drops its index, and the next scan sorts the keys again. So a
store that is mostly written and rarely scanned (a dedup store whose purge has nothing to
do) pays for no index, and one scanned all the time keeps its index.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice

from sortedcontainers import SortedList

from lakestate.state.base import (
    Backend,
    IsolationLevel,
    StateStore,
    TopicPartition,
    Write,
    partition_key,
)
from lakestate.state.constants import OFFSETS_NAMESPACE

# Writes of new or removed keys after which an index not used by a scan is dropped
# (at least this many, and at least as many as the namespace holds keys).
_STALE_MIN = 1024
# A scan reads the index in chunks, resuming after the last key read, so that commits
# during a scan cannot make it skip or repeat keys; the chunks grow up to the last size.
_CHUNKS = (8, 64, 512, 4096)


class _Index:
    """The sorted keys of one namespace, and the key writes since its last scan."""

    __slots__ = ("keys", "stale")

    def __init__(self, keys: Iterable[bytes]) -> None:
        self.keys = SortedList(keys)
        self.stale = 0


class MemoryBackend(Backend):
    def __init__(self) -> None:
        self._namespaces: dict[str, dict[bytes, bytes]] = {}
        self._indexes: dict[str, _Index] = {}

    def _ns(self, namespace: str) -> dict[bytes, bytes]:
        ns = self._namespaces.get(namespace)
        if ns is None:
            ns = self._namespaces[namespace] = {}
        return ns

    def get(self, namespace: str, key: bytes) -> bytes | None:
        ns = self._namespaces.get(namespace)
        return None if ns is None else ns.get(key)

    def iterate(
        self, namespace: str, start: bytes | None, end: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        ns = self._namespaces.get(namespace)
        if not ns:
            return iter(())
        return self._scan(namespace, ns, start, end, reverse)

    def _index(self, namespace: str, ns: dict[bytes, bytes]) -> SortedList:
        index = self._indexes.get(namespace)
        if index is None:
            index = self._indexes[namespace] = _Index(ns)
        index.stale = 0
        return index.keys

    def _scan(
        self,
        namespace: str,
        ns: dict[bytes, bytes],
        start: bytes | None,
        end: bytes | None,
        reverse: bool,
    ) -> Iterator[tuple[bytes, bytes]]:
        last: bytes | None = None
        for size in _chunk_sizes():
            keys = self._index(namespace, ns)
            if reverse:
                hi, inclusive = (end, (True, False)) if last is None else (last, (True, False))
                chunk = list(islice(keys.irange(start, hi, inclusive, reverse=True), size))
            else:
                lo, inclusive = (start, (True, False)) if last is None else (last, (False, False))
                chunk = list(islice(keys.irange(lo, end, inclusive), size))
            for key in chunk:
                value = ns.get(key)
                if value is not None:  # not removed since the chunk was read
                    yield key, value
            if len(chunk) < size:
                return
            last = chunk[-1]

    def write(self, writes: Iterable[Write], offsets: Mapping[TopicPartition, int]) -> None:
        # Validate everything first so that a bad write cannot leave half a commit behind.
        if type(writes) is not list:
            writes = list(writes)
        for _namespace, key, value in writes:
            if type(key) is not bytes or (value is not None and type(value) is not bytes):
                _check_write(key, value)
        namespaces = self._namespaces
        indexes = self._indexes
        name = ns = index = None
        for namespace, key, value in writes:
            if namespace != name:
                name = namespace
                ns = namespaces.get(namespace)
                if ns is None:
                    ns = namespaces[namespace] = {}
                index = indexes.get(namespace)
            if index is None:
                if value is None:
                    ns.pop(key, None)
                else:
                    ns[key] = value
                continue
            if value is None:
                if ns.pop(key, _MISSING) is _MISSING:
                    continue
                index.keys.remove(key)
            else:
                new = key not in ns
                ns[key] = value
                if not new:
                    continue
                index.keys.add(key)
            index.stale += 1
            if index.stale > _STALE_MIN and index.stale > len(ns):
                del indexes[namespace]  # written much, not scanned: sorted again if needed
                index = None
        if offsets:
            offsets_ns = self._ns(OFFSETS_NAMESPACE)
            for partition, offset in offsets.items():
                offsets_ns[partition_key(partition)] = offset.to_bytes(8, "big", signed=True)

    def write_buffers(
        self,
        buffers: Mapping[str, Mapping[bytes, bytes | None]],
        offsets: Mapping[TopicPartition, int],
    ) -> None:
        """``write`` of the writes held as {namespace: {key: value or None}}."""
        for buffer in buffers.values():
            if (
                len(buffer) > 16
                and _KEY_TYPES.issuperset(map(type, buffer))
                and _VALUE_TYPES.issuperset(map(type, buffer.values()))
            ):
                continue  # checked in C
            for key, value in buffer.items():
                if type(key) is not bytes or (value is not None and type(value) is not bytes):
                    _check_write(key, value)
        namespaces = self._namespaces
        indexes = self._indexes
        for namespace, buffer in buffers.items():
            ns = namespaces.get(namespace)
            if ns is None:
                ns = namespaces[namespace] = {}
            if (indexes and namespace in indexes) or None in buffer.values():
                self.write([(namespace, k, v) for k, v in buffer.items()], _NO_OFFSETS)
            else:
                ns.update(buffer)  # only puts, and no index to keep up to date
        if offsets:
            offsets_ns = namespaces.get(OFFSETS_NAMESPACE)
            if offsets_ns is None:
                offsets_ns = self._ns(OFFSETS_NAMESPACE)
            for partition, offset in offsets.items():
                offsets_ns[partition_key(partition)] = offset.to_bytes(8, "big", signed=True)

    def close(self) -> None:
        pass


_MISSING = object()
_NO_OFFSETS: dict[TopicPartition, int] = {}
_KEY_TYPES = frozenset({bytes})
_VALUE_TYPES = frozenset({bytes, type(None)})


def _check_write(key: object, value: object) -> None:
    if not isinstance(key, bytes) or not (value is None or isinstance(value, bytes)):
        raise TypeError(f"store writes must be bytes, got {key!r} -> {value!r}")


def _chunk_sizes() -> Iterator[int]:
    yield from _CHUNKS
    while True:
        yield _CHUNKS[-1]


def in_memory_store(
    name: str, isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
) -> StateStore:
    """A StateStore held in memory (tests, the driver's default)."""
    return StateStore(name, MemoryBackend(), isolation_level)
