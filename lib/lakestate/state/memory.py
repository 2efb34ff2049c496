"""The in-memory backend: sorted dicts per namespace. Nothing survives the process."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from sortedcontainers import SortedDict

from lakestate.state.base import (
    Backend,
    IsolationLevel,
    StateStore,
    TopicPartition,
    Write,
    partition_key,
)
from lakestate.state.constants import OFFSETS_NAMESPACE


class MemoryBackend(Backend):
    def __init__(self) -> None:
        self._namespaces: dict[str, SortedDict] = {}

    def _ns(self, namespace: str) -> SortedDict:
        ns = self._namespaces.get(namespace)
        if ns is None:
            ns = self._namespaces[namespace] = SortedDict()
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
        keys = list(ns.irange(start, end, inclusive=(True, False), reverse=reverse))
        return ((key, ns[key]) for key in keys if key in ns)

    def write(self, writes: Iterable[Write], offsets: Mapping[TopicPartition, int]) -> None:
        # Validate everything first so that a bad write cannot leave half a commit behind.
        if not isinstance(writes, list):
            writes = list(writes)
        for _namespace, key, value in writes:
            if not isinstance(key, bytes) or not (value is None or isinstance(value, bytes)):
                raise TypeError(f"store writes must be bytes, got {key!r} -> {value!r}")
        namespaces = self._namespaces
        name = ns = None
        for namespace, key, value in writes:
            if namespace != name:
                name = namespace
                ns = namespaces.get(namespace)
                if ns is None:
                    ns = namespaces[namespace] = SortedDict()
            if value is None:
                ns.pop(key, None)
            else:
                ns[key] = value
        if offsets:
            offsets_ns = self._ns(OFFSETS_NAMESPACE)
            for partition, offset in offsets.items():
                offsets_ns[partition_key(partition)] = offset.to_bytes(8, "big", signed=True)

    def close(self) -> None:
        pass


def in_memory_store(
    name: str, isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
) -> StateStore:
    """A StateStore held in memory (tests, the driver's default)."""
    return StateStore(name, MemoryBackend(), isolation_level)
