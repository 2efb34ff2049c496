"""Writes held in front of a transaction while a chunk is processed.

A chunked processor may not write its stores before ``finish_chunk`` (a chunk that fails
anywhere must leave nothing behind), yet a processor whose records read what the records
before them wrote (a stream-stream join's waiting records) needs those writes while it
processes the chunk. An ``Overlay`` gives it both: a typed store view opened over it reads
the transaction with the overlay's writes on top, and ``flush`` hands the writes to the
transaction once the chunk is through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sortedcontainers import SortedList

from lakestate.state.ordered_items import merge_own_writes

__all__ = ["Overlay"]


class Overlay:
    """``get``/``iterate``/``put``/``put_all`` like a Transaction, writes kept here."""

    def __init__(self, source: Callable[[], Any]) -> None:
        self._source = source
        self._buffers: dict[str, dict[bytes, bytes | None]] = {}
        self._indexes: dict[str, SortedList] = {}

    def get(self, namespace: str, key: bytes) -> bytes | None:
        buffer = self._buffers.get(namespace)
        if buffer is not None and key in buffer:
            return buffer[key]
        return self._source().get(namespace, key)

    def put(self, namespace: str, key: bytes, value: bytes | None) -> None:
        buffer = self._buffers.get(namespace)
        if buffer is None:
            buffer = self._buffers[namespace] = {}
            self._indexes[namespace] = SortedList()
        if key not in buffer:
            self._indexes[namespace].add(key)
        buffer[key] = value

    def put_all(self, namespace: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in items:
            self.put(namespace, key, value)

    def iterate(
        self,
        namespace: str,
        start: bytes | None = None,
        end: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with start <= key < end in key order (or reversed), the overlay's writes
        winning. Keys are read from the overlay as of the call: write after iterating."""
        below = self._source().iterate(namespace, start, end, reverse)
        buffer = self._buffers.get(namespace)
        if not buffer:
            return below
        keys = list(self._indexes[namespace].irange(start, end, (True, False), reverse))
        return merge_own_writes(below, ((k, buffer[k]) for k in keys), reverse)

    def flush(self) -> None:
        """Hand every write to the transaction below (in key order), and forget them."""
        txn = self._source()
        for namespace, buffer in self._buffers.items():
            txn.put_all(namespace, ((k, buffer[k]) for k in self._indexes[namespace]))
        self._buffers = {}
        self._indexes = {}
