"""The built-in count over a chunk, computed on columns (numpy) instead of record by record.

What it gives is what ``StreamAggregate.process_chunk`` gives with the count's initializer
and aggregator, record for record (tests/unit/test_columnar_count.py): a record with a null
key or value is dropped; every other record forwards ``Change(new count, old count)``,
the old count None for a key the store did not hold, at the timestamp Kafka's
KStreamAggregate gives, max(record's, previous aggregate's), the record's own for a new
key; the store gets each key's last count and timestamp once, in first-seen order.

The output is columns (processors/columns.py): keys, new counts, old counts, timestamps,
each record's key numbered among the chunk's distinct keys; records are built from them
only if a node downstream asks for them (``to_stream`` and a JSON sink do not).

How: the records' keys are numbered in first-seen order (Arrow's dictionary encoding when
they are all str, else one dict pass: the only per-record Python work); each record's rank
among its key's records comes from one stable sort, its running count is the stored count
plus rank + 1, and its timestamp a running maximum per key (one ``maximum.accumulate`` over
the sorted timestamps, each key's run lifted above the previous one's). The store is read once per
distinct key, each key encoded once for its read and its write. A chunk the arrays cannot
hold exactly (a count or a timestamp span near 2**62, or a stored count that is not an
int) returns None: the caller goes record by record.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from lakestate.processors.columns import Columns
from lakestate.records import Record
from lakestate.state.keys import encode_key
from lakestate.state.timestamped import TimestampedKeyValueStore

# Below this many records a chunk goes the per-record way: the arrays' fixed cost (tens of
# microseconds) is more than a short loop's.
MIN_RECORDS = 32
_LIMIT = 2**62  # counts and lifted timestamps stay below it: int64 arithmetic is exact
_EMPTY = np.zeros(0, np.int64)
_NONE = Columns([], _EMPTY, [], _EMPTY, [], _EMPTY)


def count_chunk(
    store: Any, records: list[Record], at: list[int]
) -> tuple[Columns, list[int], list[tuple[bytes, bytes | None]], int] | None:
    """(records forwarded, as columns, their positions, the store's entries to write,
    records dropped) for counting ``records`` (at positions ``at``) into ``store``; None
    when the chunk is one the arrays cannot take (see the module docstring)."""
    kept = [i for i, r in enumerate(records) if r.key is not None and r.value is not None]
    dropped = len(records) - len(kept)
    if dropped:
        records = [records[i] for i in kept]
        at = [at[i] for i in kept]
    n = len(records)
    if n == 0:
        return _NONE, [], [], dropped
    keys = [r.key for r in records]
    ids, groups = _numbered(keys)
    order = np.argsort(ids, kind="stable")
    sizes = np.bincount(ids, minlength=groups)
    starts = np.zeros(groups, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    firsts = order[starts]  # each key's first record
    group_keys = [keys[i] for i in firsts.tolist()]
    encoded = [encode_key(k) for k in group_keys]  # once per key: read, then written
    base = _stored(store, group_keys, encoded)
    if base is None:
        return None
    held, counts, stamps = base
    try:
        timestamps = np.fromiter((r.timestamp for r in records), np.int64, n)
    except (OverflowError, TypeError, ValueError):
        return None
    running = _running_timestamps(timestamps, order, ids, starts, stamps, held)
    if running is None or int(counts.max(initial=0)) + n >= _LIMIT:
        return None
    sorted_ids = ids[order]
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n, dtype=np.int64) - starts[sorted_ids]
    new = counts[ids] + rank + 1
    new_list = new.tolist()
    old_list = (new - 1).tolist()
    for g in np.flatnonzero(~held).tolist():
        old_list[int(firsts[g])] = None  # a new key: no old aggregate
    out = Columns(keys, ids, group_keys, new, old_list, running)
    lasts = order[starts + sizes - 1].tolist()
    pending = _entries(store, keys, encoded, lasts, new_list, running.tolist())
    return out, at, pending, dropped


def _numbered(keys: list[Any]) -> tuple[np.ndarray, int]:
    """Each key's number among the distinct keys in first-seen order, and their count."""
    if all(type(k) is str for k in keys):
        try:  # Arrow's hash table numbers them in first-seen order, in C
            encoded = pa.array(keys, pa.string()).dictionary_encode()
        except (pa.ArrowException, UnicodeError):  # a lone surrogate: the dict pass below
            pass
        else:
            return encoded.indices.to_numpy().astype(np.int64), len(encoded.dictionary)
    slots: dict[Any, int] = {}
    ids = np.fromiter(
        (
            slots.setdefault(k if type(k) is str or type(k) is int else encode_key(k), len(slots))
            for k in keys
        ),
        np.int64,
        len(keys),
    )
    return ids, len(slots)


def _entries(
    store: Any,
    keys: list[Any],
    encoded: list[bytes],
    lasts: list[int],
    counts: list[int],
    timestamps: list[int],
) -> list[tuple[bytes, bytes | None]]:
    """The store's entry for each key (``encoded``: its encode_key) at its last record
    (``lasts``, in first-seen order), what ``store.encode_entry`` gives."""
    if type(store).encode_entry is TimestampedKeyValueStore.encode_entry:
        # A plain view: its entry is (encode_key(key), b"[<count>,<timestamp>]").
        return [
            (raw, b"[%d,%d]" % (counts[i], timestamps[i]))
            for raw, i in zip(encoded, lasts, strict=True)
        ]
    encode = store.encode_entry  # a view that checks its writes (store serdes)
    return [encode(keys[i], counts[i], timestamps[i]) for i in lasts]


def _stored(
    store: Any, keys: list[Any], encoded: list[bytes]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For each key (``encoded``: their encode_key): whether the store holds it, its count
    (0: none) and timestamp; None if a stored count is not an int the arrays can hold."""
    get_many = getattr(store, "get_many_with_timestamp", None)
    if get_many is not None:
        found = get_many(keys, encoded)
    else:
        found = [store.get_with_timestamp(k) for k in keys]
    held = np.fromiter((f is not None for f in found), bool, len(keys))
    counts = np.zeros(len(keys), np.int64)
    stamps = np.zeros(len(keys), np.int64)
    for g, f in enumerate(found):
        if f is not None:
            count, ts = f
            if type(count) is not int or not 0 <= count < _LIMIT or abs(ts) >= _LIMIT:
                return None
            counts[g], stamps[g] = count, ts
    return held, counts, stamps


def _running_timestamps(
    timestamps: np.ndarray,
    order: np.ndarray,
    ids: np.ndarray,
    starts: np.ndarray,
    stamps: np.ndarray,
    held: np.ndarray,
) -> np.ndarray | None:
    """Each record's aggregate timestamp: the maximum of its key's stored timestamp (if
    held) and its key's records' timestamps up to it; None if the span is too wide."""
    present = stamps[held]
    low = int(min(timestamps.min(), present.min(initial=int(timestamps.min()))))
    high = int(max(timestamps.max(), present.max(initial=int(timestamps.max()))))
    span = high - low + 1
    if span * (len(starts) + 1) >= _LIMIT:
        return None
    sorted_ids = ids[order]
    lift = sorted_ids * span - low
    # Each key's run lifted above all earlier runs: one running maximum does every key.
    running_sorted = np.maximum.accumulate(timestamps[order] + lift) - lift
    floor = np.where(held, stamps, low)
    running = np.empty_like(timestamps)
    running[order] = np.maximum(running_sorted, floor[sorted_ids])
    return running
