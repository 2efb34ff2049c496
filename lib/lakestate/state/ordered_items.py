"""Ordered (key, value) sources of a state store and their merge: a transaction's write
buffer scanned in key order (``lazy_items``; ``chunked_items`` for a buffer with a sorted
index), and the merge that overlays newer sources on older ones (``merge_own_writes`` for
the usual two, ``merge_sources`` for any number); a value None is a tombstone.
Used by ``state/base.py`` (transactions and the store) and ``state/overlay.py``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from itertools import islice

from sortedcontainers import SortedList

# Sizes of the chunks in which indexed buffers are scanned (the last one repeats).
CHUNK_SIZES = (8, 64, 512, 4096)


def lazy_items(
    buffer: dict[bytes, bytes | None], keys: list[bytes]
) -> Iterator[tuple[bytes, bytes | None]]:
    """(key, value) for ``keys``, each value read from ``buffer`` when it is reached."""
    for key in keys:
        yield key, buffer[key]


def chunked_items(
    index: SortedList,
    buffer: dict[bytes, bytes | None],
    chunk: list[bytes],
    start: bytes | None,
    end: bytes | None,
    reverse: bool,
) -> Iterator[tuple[bytes, bytes | None]]:
    """The items of an indexed buffer in range, from its first chunk of keys on (read
    with the first of ``CHUNK_SIZES``; the next chunks grow to the last size)."""
    sizes = iter(CHUNK_SIZES)
    size = next(sizes)
    while True:
        for key in chunk:
            yield key, buffer[key]
        if len(chunk) < size:
            return
        last = chunk[-1]
        size = next(sizes, size)
        if reverse:
            keys = index.irange(start, last, (True, False), True)
        else:
            keys = index.irange(last, end, (False, False))
        chunk = list(islice(keys, size))


def merge_own_writes(
    committed: Iterator[tuple[bytes, bytes | None]],
    own: Iterator[tuple[bytes, bytes | None]],
    reverse: bool,
) -> Iterator[tuple[bytes, bytes]]:
    """``merge_sources([committed, own], reverse)`` for the usual two sources, without heapq: own
    writes win on equal keys, tombstones are dropped."""
    a = next(committed, None)
    b = next(own, None)
    while b is not None:
        if a is not None and (a[0] > b[0] if reverse else a[0] < b[0]):
            if a[1] is not None:
                yield a
            a = next(committed, None)
            continue
        if a is not None and a[0] == b[0]:
            a = next(committed, None)  # shadowed by the own write
        if b[1] is not None:
            yield b
        b = next(own, None)
    while a is not None:
        if a[1] is not None:
            yield a
        a = next(committed, None)


def live_items(items: Iterator[tuple[bytes, bytes | None]]) -> Iterator[tuple[bytes, bytes]]:
    """One ordered source without duplicate keys, tombstones dropped."""
    for item in items:
        if item[1] is not None:
            yield item


def _tag(
    items: Iterator[tuple[bytes, bytes | None]], tag: int
) -> Iterator[tuple[bytes, int, bytes | None]]:
    for key, value in items:
        yield key, tag, value


def merge_sources(
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


__all__ = [
    "CHUNK_SIZES",
    "chunked_items",
    "lazy_items",
    "live_items",
    "merge_own_writes",
    "merge_sources",
]
