"""A chunk through a suppress node whose buffer has no bound (``BufferConfig.unbounded()``,
the usual final-results buffer): the steps of ``Suppress._step`` for each record in turn,
in one loop with the stats in local variables, the eviction callback made once, and the
buffer's oldest time (a lower bound of it) kept so that a record that closes nothing skips the eviction scan.

It gives what ``_step`` gives record by record (tests/unit/test_suppress_chunks.py and
test_windowed_fast_paths.py): the same puts, evictions (oldest buffer time first), output,
and per-record samples of the buffer's count and size.
"""

from __future__ import annotations

from typing import Any

from lakestate.errors import StreamsException
from lakestate.processors.chunk import Chunk
from lakestate.processors.columns import new_record
from lakestate.records import Change, Record, Windowed
from lakestate.state.suppression_buffer import BufferedRecord
from lakestate.state.suppression_stage import StagedBuffer

_NEVER = 2**63  # above every buffer time: nothing buffered
_SAMPLED = (
    "first_time",
    "stream_time",
    "samples",
    "count_sum",
    "size_sum",
    "count_max",
    "size_max",
)


def unbounded_chunk(
    node: Any, staged: StagedBuffer, stats: dict[str, int], chunk: Chunk
) -> tuple[list[Record], list[int], bool, bool]:
    """``chunk``'s records through ``node`` (a Suppress without bounds) against ``staged``;
    ``stats`` updated as ``_step`` updates them. Returns the records forwarded, their input
    positions, and whether the buffer's count and size moved during the chunk."""
    out: list[Record] = []
    at: list[int] = []
    final, duration = node.final_results, node.duration_ms
    emit = _emitter(out, final)
    put, evict = staged.put, staged.evict_through
    first_time, observed = stats["first_time"], stats["stream_time"]
    samples, count_sum, size_sum = stats["samples"], stats["count_sum"], stats["size_sum"]
    count_max, size_max = stats["count_max"], stats["size_max"]
    count0, size0 = staged.count, staged.size
    moved_count = moved_size = False
    oldest = staged.min_buffer_time()
    oldest = _NEVER if oldest is None else oldest
    positions = chunk.at
    for i, record in enumerate(chunk.records):
        change, ts = record.value, record.timestamp
        if type(change) is not Change:  # a plain value: an update from nothing
            change = Change(change, None)
        if first_time < 0:
            first_time = ts
        if ts > observed:
            observed = ts
        key = record.key
        buffer_time = _buffer_time(node, key) if final else ts
        put(buffer_time, key, change.new_value, change.old_value, ts, record.headers)
        if buffer_time < oldest:
            oldest = buffer_time  # a lower bound: a key already held keeps its own time
        expiry = observed - duration
        if oldest <= expiry:
            n = len(out)
            evict(expiry, emit)
            if len(out) != n:
                at.extend([positions[i]] * (len(out) - n))
            low = staged.min_buffer_time()
            oldest = _NEVER if low is None else low
        count, size = staged.count, staged.size
        samples += 1
        count_sum += count
        size_sum += size
        if count > count_max:
            count_max = count
        if size > size_max:
            size_max = size
        moved_count = moved_count or count != count0
        moved_size = moved_size or size != size0
    sampled = (first_time, observed, samples, count_sum, size_sum, count_max, size_max)
    stats.update(zip(_SAMPLED, sampled, strict=True))
    stats.update(count=staged.count, size=staged.size, emitted=stats["emitted"] + len(out))
    return out, at, moved_count, moved_size


def _buffer_time(node: Any, key: Any) -> int:
    """A final result's buffer time: its window's end."""
    if type(key) is not Windowed:
        raise StreamsException(
            f"suppress node {node.node_name}: until_window_closes needs Windowed keys, got {key!r}"
        )
    return key.window.end


def _emitter(out: list[Record], drop_tombstones: bool) -> Any:
    """What an eviction forwards (as ``Suppress._emitter``): ``Change(latest, prior)`` at
    the latest update's timestamp and headers; a final result's tombstone is dropped."""
    append = out.append

    def emit(buffered: BufferedRecord) -> None:
        value = buffered.value
        if value is None and drop_tombstones:
            return
        append(
            new_record(
                buffered.key,
                Change(value, buffered.prior_value),
                buffered.timestamp,
                buffered.headers,
            )
        )

    return emit
