"""``KTable.suppress`` (KIP-328): final window results and rate limiting.

Per record reaching the node (a table update ``Change(new, old)`` of a key):

1. The node's observed stream time becomes the max of itself and the record's timestamp.
   It is the node's processor metadata, so it is committed with the buffer and survives
   batches, restarts and restores (Kafka keeps it in memory only).
2. The update is buffered (``SuppressionBuffer.put``) at its buffer time: the window end for
   ``until_window_closes`` (whose suppression duration is the window's grace), the record's
   timestamp for ``until_time_limit``. A key already buffered keeps its buffer time and its
   prior value; only its latest value, timestamp and headers are kept.
3. Entries leave, oldest buffer time first (ties by key), while the oldest buffer time is
   ``<=`` observed stream time minus the suppression duration: a window ``[s, e)`` with
   grace ``g`` is emitted once stream time reaches ``e + g``.
4. If the buffer is then over its bound (more than ``max_records`` entries or more than
   ``max_bytes`` bytes): ``emit_early_when_full`` evicts oldest first until it is not;
   ``shut_down_when_full`` raises (the task rolls the record back: nothing of its batch is
   committed); ``spill_to_disk_when_full`` keeps every entry in the task's store and has no
   bound in memory, so it never emits early and never fails.

An evicted entry is forwarded as ``Change(latest value, prior value)`` with the latest
update's timestamp and headers. The old value is the one the key had before its first
buffered update, i.e. the last value this node forwarded for it, so downstream table
operators subtract what they were given (Kafka forwards the last update's old value).
For final results an evicted tombstone is dropped (no result for the window was ever
emitted, as in Kafka); a time limit forwards it.

Everything above depends only on the records in order and the committed buffer, so the
output does not depend on where batches end. Wall-clock time plays no part.

With an in-memory buffer the node is chunk-capable: a chunk's records go through steps
1-4 one after another against staged buffer changes (state/suppression_stage.py), which
``finish_chunk`` writes; a buffer on disk goes record by record.

Metrics (KIP-328 names; values, ``lakestate.processors.metrics``: the emit figures the
node's, the buffer figures its store's, as Kafka scopes them; derived from totals kept as
the node's processor metadata, restored when a task opens, so they are totals over the
app's life, not per batch):

- ``suppression-buffer-count-current/avg/max``: entries held now / on average / at most,
  sampled once per record after its evictions
- ``suppression-buffer-size-current/avg/max``: the same in bytes (``buffer_size``)
- ``suppression-emit-total``: records forwarded
- ``suppression-emit-rate``: records forwarded per second of stream time the node has seen
  (at least one second): stream time drives suppression, so this rate is deterministic
"""

from __future__ import annotations

from typing import Any

from lakestate.errors import StreamsException
from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.processors.suppress_chunk import unbounded_chunk
from lakestate.records import Change, Record, Windowed
from lakestate.state.suppression_buffer import BufferedRecord, SuppressionBuffer
from lakestate.state.suppression_stage import StagedBuffer

EMIT_EARLY = "emit_early"
SHUT_DOWN = "shut_down"
SPILL_TO_DISK = "spill_to_disk"

COUNT_CURRENT = "suppression-buffer-count-current"
COUNT_AVG = "suppression-buffer-count-avg"
COUNT_MAX = "suppression-buffer-count-max"
SIZE_CURRENT = "suppression-buffer-size-current"
SIZE_AVG = "suppression-buffer-size-avg"
SIZE_MAX = "suppression-buffer-size-max"
EMIT_TOTAL = "suppression-emit-total"
EMIT_RATE = "suppression-emit-rate"
METRICS = (
    COUNT_CURRENT,
    COUNT_AVG,
    COUNT_MAX,
    SIZE_CURRENT,
    SIZE_AVG,
    SIZE_MAX,
    EMIT_TOTAL,
    EMIT_RATE,
)


# The node's processor metadata (each under "<store>.<field>"), -1/0 before any record.
_STATS = {
    "stream_time": -1,  # the max timestamp of records that reached the node
    "first_time": -1,  # the first record's timestamp (the start of emit-rate's span)
    "emitted": 0,
    "samples": 0,
    "count_sum": 0,
    "size_sum": 0,
    "count_max": 0,
    "size_max": 0,
}


def buffer_metrics(stats: dict[str, int]) -> dict[str, float]:
    """The KIP-328 metrics of one buffer from the node's stats (its metadata, plus the
    buffer's ``count`` and ``size``)."""
    samples = stats["samples"]
    span_ms = max(stats["stream_time"] - stats["first_time"], 1000)
    return {
        COUNT_CURRENT: stats["count"],
        COUNT_AVG: stats["count_sum"] / samples if samples else 0.0,
        COUNT_MAX: stats["count_max"],
        SIZE_CURRENT: stats["size"],
        SIZE_AVG: stats["size_sum"] / samples if samples else 0.0,
        SIZE_MAX: stats["size_max"],
        EMIT_TOTAL: stats["emitted"],
        EMIT_RATE: stats["emitted"] * 1000 / span_ms,
    }


class Suppress(Processor):
    """The suppress node (see the module docstring). ``final_results``: until_window_closes
    (buffer time is the window end, tombstones dropped); ``duration_ms``: the grace for
    final results, the time limit otherwise; ``max_records``/``max_bytes``: None is
    unbounded; ``when_full``: EMIT_EARLY, SHUT_DOWN or SPILL_TO_DISK."""

    cheap_single_chunks = False  # a chunk stages the buffer's changes: dearer than process

    def __init__(
        self,
        node_name: str,
        store_name: str,
        final_results: bool,
        duration_ms: int,
        max_records: int | None,
        max_bytes: int | None,
        when_full: str,
    ) -> None:
        self.node_name = node_name
        self.store_name = store_name
        self.final_results = final_results
        self.duration_ms = duration_ms
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.when_full = when_full

    def init(self, context) -> None:
        super().init(context)
        self.buffer: SuppressionBuffer = context.get_state_store(self.store_name)
        self._keys = {field: f"{self.store_name}.{field}" for field in _STATS}
        # The stats the last record left (record by record), reused while the metadata's
        # sample count says no rollback or chunk came between.
        self._last: dict[str, int] | None = None
        # Every metric is a value derived from the stats (processor metadata): the emit
        # figures of the node, the buffer's of its store, as Kafka scopes them. The current
        # gauges are set as they move (they read the buffer); the others are worked out
        # when the metrics are read, shown once they are above zero, as a figure that never
        # moved from zero is never set.
        stats = self._stats()
        self._show_gauges(stats, stats["count"] != 0, stats["size"] != 0)
        context.derive_metrics(self._derived)
        # In memory, a chunk's records are taken against staged buffer changes
        # (state/suppression_stage.py); a buffer on disk goes record by record.
        self.chunked = self.when_full != SPILL_TO_DISK
        self._staged: tuple[StagedBuffer, dict[str, int]] | None = None

    def _show_gauges(self, stats: dict[str, int], count: bool, size: bool) -> None:
        """Set the buffer's current count and size (those that moved)."""
        if count:
            self.context.set_metric(COUNT_CURRENT, stats["count"], store=self.store_name)
        if size:
            self.context.set_metric(SIZE_CURRENT, stats["size"], store=self.store_name)

    def _derived(self, _set: Any) -> list[tuple[str, float, str | None]]:
        """The metrics other than the current gauges, from the kept stats."""
        held = self.context.processor_metadata
        stats = {f: held(key) for f, key in self._keys.items()}
        stats = {f: _STATS[f] if v is None else v for f, v in stats.items()}
        stats["count"] = stats["size"] = 0  # not derived: set as they move
        return [
            (name, value, self.store_name if name.startswith("suppression-buffer") else None)
            for name, value in buffer_metrics(stats).items()
            if value and name not in (COUNT_CURRENT, SIZE_CURRENT)
        ]

    def _stats(self) -> dict[str, int]:
        held = self.context.processor_metadata
        last = self._last
        if last is not None and held(self._keys["samples"]) == last["samples"]:
            stats = dict(last)  # a copy: a record that fails leaves the last one's
            stats["count"] = self.buffer.num_records()
            stats["size"] = self.buffer.buffer_size()
            return stats
        stats = {f: held(key) for f, key in self._keys.items()}
        stats = {f: _STATS[f] if v is None else v for f, v in stats.items()}
        stats["count"] = self.buffer.num_records()
        stats["size"] = self.buffer.buffer_size()
        return stats

    def _keep(self, stats: dict[str, int]) -> None:
        keep = self.context.set_processor_metadata
        for field, key in self._keys.items():
            keep(key, stats[field])

    def process(self, record: Record) -> None:
        self._staged = None  # a chunk that failed further on: never applied
        stats = self._stats()
        count, size = stats["count"], stats["size"]
        out: list[Record] = []
        self._step(self.buffer, stats, record, out)
        self.buffer.flush()
        self._keep(stats)
        self._show_gauges(stats, stats["count"] != count, stats["size"] != size)
        self._last = stats
        for r in out:
            self.context.forward(r)

    def process_chunk(self, chunk: Chunk) -> Chunk:
        """The records one after another against the buffer's staged changes (written by
        ``finish_chunk``): the same output, buffer and stats as ``process`` on each. The
        current gauges are set once; one that moved during the chunk is set even if it
        ends where it began, as record by record sets it."""
        if not chunk.records:  # no record reached the node: nothing to sample or write
            self._staged = None
            return chunk
        staged = StagedBuffer(self.buffer)
        self._last = None
        stats = self._stats()
        if self.max_records is None and self.max_bytes is None:
            # No bound to check after each record: the leaner loop (suppress_chunk.py).
            out, at, moved_count, moved_size = unbounded_chunk(self, staged, stats, chunk)
            self._show_gauges(stats, moved_count, moved_size)
            self._staged = (staged, stats)
            return chunk.with_records(out, at)
        count, size = stats["count"], stats["size"]
        moved_count = moved_size = False
        out: list[Record] = []
        at: list[int] = []
        positions = chunk.at
        for i, record in enumerate(chunk.records):
            n = len(out)
            self._step(staged, stats, record, out)
            if len(out) != n:
                at.extend([positions[i]] * (len(out) - n))
            moved_count = moved_count or stats["count"] != count
            moved_size = moved_size or stats["size"] != size
        self._show_gauges(stats, moved_count, moved_size)
        self._staged = (staged, stats)
        return chunk.with_records(out, at)

    def finish_chunk(self) -> None:
        staged, self._staged = self._staged, None
        if staged is not None:
            staged[0].apply()
            self._keep(staged[1])

    def _step(self, buffer: Any, stats: dict[str, int], record: Record, out: list[Record]) -> None:
        """One record against ``buffer`` (the buffer, or a chunk's staged changes): the
        node's stream time, the put, the evictions (appended to ``out``), the capacity
        bound, then the record's sample in ``stats``."""
        change = record.value
        if not isinstance(change, Change):  # a plain value: an update from nothing
            change = Change(change, None)
        if stats["first_time"] < 0:
            stats["first_time"] = record.timestamp
        observed = stats["stream_time"] = max(stats["stream_time"], record.timestamp)
        buffer.put(
            self._buffer_time(record),
            record.key,
            change.new_value,
            change.old_value,
            record.timestamp,
            record.headers,
        )
        emitted = len(out)
        emit = self._emitter(out)
        buffer.evict_through(observed - self.duration_ms, emit)
        if self.when_full != SPILL_TO_DISK and self._over_capacity(buffer):
            if self.when_full == EMIT_EARLY:
                buffer.evict_while(lambda: self._over_capacity(buffer), emit)
            else:
                raise StreamsException(self._full_message())
        # Sampled once per record, after its evictions.
        count, size = buffer.num_records(), buffer.buffer_size()
        stats.update(count=count, size=size, emitted=stats["emitted"] + len(out) - emitted)
        stats["samples"] += 1
        stats["count_sum"] += count
        stats["size_sum"] += size
        if count > stats["count_max"]:
            stats["count_max"] = count
        if size > stats["size_max"]:
            stats["size_max"] = size

    def _buffer_time(self, record: Record) -> int:
        if not self.final_results:
            return record.timestamp
        key = record.key
        if type(key) is not Windowed:
            raise StreamsException(
                f"suppress node {self.node_name}: until_window_closes needs Windowed keys, "
                f"got {key!r}"
            )
        return key.window.end

    def _emitter(self, out: list[Record]) -> Any:
        drop_tombstones = self.final_results

        def emit(buffered: BufferedRecord) -> None:
            if buffered.value is None and drop_tombstones:
                return
            out.append(
                Record(
                    buffered.key,
                    Change(buffered.value, buffered.prior_value),
                    buffered.timestamp,
                    buffered.headers,
                )
            )

        return emit

    def _over_capacity(self, buffer: Any) -> bool:
        return (self.max_records is not None and buffer.num_records() > self.max_records) or (
            self.max_bytes is not None and buffer.buffer_size() > self.max_bytes
        )

    def _full_message(self) -> str:
        buffer = self.buffer

        def bound(limit: int | None) -> str:
            return "unbounded" if limit is None else str(limit)

        return (
            f"suppression buffer {self.store_name!r} (node {self.node_name}) is full: it holds "
            f"{buffer.num_records()} records (max_records {bound(self.max_records)}) and "
            f"{buffer.buffer_size()} bytes (max_bytes {bound(self.max_bytes)}), and its "
            "BufferConfig is shut_down_when_full(); nothing of this batch is committed. Raise "
            "the bound, or use spill_to_disk_when_full() (strict, on disk) or "
            "emit_early_when_full() (not strict)"
        )
