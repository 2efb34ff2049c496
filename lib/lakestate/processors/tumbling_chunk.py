"""A chunk through a tumbling-window aggregation (``TimeWindows`` whose advance is its
size; a node that does not share its store): what ``TimeWindowedAggregate.process_chunk``
does record by record, in one loop specialised for one window per record.

Each record's window is ``[ts - ts % size, ... + size)`` (none for a negative timestamp,
as ``windows_for`` gives none); a window is found among the chunk's by (key, start), a
tuple whose hash is cheaper than a ``Windowed``'s, and its ``Windowed`` object is made
once per chunk, and read from the store only if it may be there: no window the store
holds starts after the node's stream time when the chunk begins (a window is written for a
record it holds, and the time is committed with the store; before any record, NO_TIME, the
store is empty). The built-in count adds one instead of calling its aggregator. Lateness,
late drops (a window whose end + grace the node's stream time has reached, the record's
own timestamp included), null keys, the forwarded ``Change(new, old)`` at max(record's,
window's) timestamp and the pending writes are those of the general loop
(tests/unit/test_windowed_fast_paths.py checks both against each other).
"""

from __future__ import annotations

from typing import Any

from lakestate.processors.aggregate import count_aggregator, count_initializer
from lakestate.processors.chunk import Chunk
from lakestate.processors.columns import new_record
from lakestate.processors.window_metrics import Lateness
from lakestate.records import Change, Record, Window, Windowed


def applies(node: Any) -> bool:
    """Whether ``node`` (a TimeWindowedAggregate) may take the tumbling loop."""
    windows = node.windows
    return windows.advance_ms == windows.size_ms and node.state_key is None


def tumbling_chunk(
    node: Any, chunk: Chunk, observed: int
) -> tuple[list[Record], list[int], Lateness, int, dict[Windowed, tuple[Any, int] | None]]:
    """``chunk`` through ``node`` from observed stream time ``observed``: the records
    forwarded, their input positions, the chunk's lateness metrics, the observed stream
    time after it, and each window's pending (aggregate, timestamp), None: deleted."""
    store, size, grace = node.store, node.windows.size_ms, node.windows.grace_ms
    initializer, aggregator = node.initializer, node.aggregator
    is_count = initializer is count_initializer and aggregator is count_aggregator
    # (key, start) -> [Windowed, aggregate or None, timestamp]
    held: dict[tuple[Any, int], list[Any]] = {}
    out: list[Record] = []
    at: list[int] = []
    metrics = Lateness()
    lateness_count = lateness_total = lateness_max = late = null_keys = 0
    positions, written = chunk.at, observed  # no stored window starts after written
    for i, record in enumerate(chunk.records):
        key = record.key
        if key is None:
            null_keys += 1
            continue
        ts = record.timestamp
        lateness_count += 1
        if observed > ts:
            lateness = observed - ts
            lateness_total += lateness
            if lateness > lateness_max:
                lateness_max = lateness
        else:
            observed = ts
        if metrics.first_observed is None:
            metrics.first_observed = observed
        if ts < 0:
            continue  # no window holds it
        start = ts - ts % size
        if start + size <= observed - grace:
            late += 1
            continue
        slot = held.get((key, start))
        if slot is None:
            slot = held[(key, start)] = _stored(store, key, start, size, start > written)
        old = slot[1]
        if old is None:
            new_ts = ts
            if is_count:
                new = 1
            elif initializer is None:
                new = record.value  # reduce: the window's first value
            else:
                new = aggregator(key, record.value, initializer())
        else:
            new_ts = ts if ts > slot[2] else slot[2]
            new = old + 1 if is_count else aggregator(key, record.value, old)
        slot[1], slot[2] = new, new_ts
        out.append(new_record(slot[0], Change(new, old), new_ts, record.headers))
        at.append(positions[i])
    metrics.count, metrics.total, metrics.max = lateness_count, lateness_total, lateness_max
    metrics.late_drops, metrics.null_keys = late, null_keys
    pending = {s[0]: None if s[1] is None else (s[1], s[2]) for s in held.values()}
    return out, at, metrics, observed, pending


def _stored(store: Any, key: Any, start: int, size: int, new: bool) -> list[Any]:
    """[the window's Windowed key, its stored aggregate or None, its timestamp]; ``new``:
    the store cannot hold it."""
    windowed = Windowed(key, Window(start, start + size))
    found = None if new else store.get_windowed(windowed)
    return [windowed, None, 0] if found is None else [windowed, found.value, found.timestamp]
