"""Stream-stream joins (``KStream.join/left_join/outer_join(other_stream, joiner,
JoinWindows)``), as Kafka Streams 3.1+ computes them (KStreamJoinWindow and
KStreamKStreamJoin).

Each side's records pass a ``JoinBuffer`` node, which keeps them in the side's buffer store
(key, timestamp, arrival; duplicates kept), then a ``StreamStreamJoin`` node, which joins
each record with the other side's buffered records of its key within the window
``[ts - before, ts + after]`` (the right side looks ``after`` back and ``before`` ahead),
in timestamp order; a result carries the larger of the two timestamps.

Left and outer joins: a record that finds no partner waits in the join's shared store
(``WaitingRecordsStore``) until a partner joins it (it leaves the store) or its window
closes, when stream time passes its timestamp + after (right side: + before) + grace: it
is then emitted joined with None, never before (no spurious results). The shared stream
time is the largest timestamp either side has seen; waiting records are looked at when a
record arrives in order (its timestamp is the stream time), all of those whose window
closed in the store's order. Kafka throttles that look with a wall-clock interval
(internal config ``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__``,
1 s); lakestate looks at every in-order record, as Kafka does with the interval 0: wall
clocks have no place in a replayable micro-batch. An out-of-order record whose window has
already ended (ts + after below stream time) is emitted with None at once, as in Kafka.

A record with a null key or value is dropped (``dropped-records``), except that the
outer side of a left or outer join forwards a null-key record with a value joined with
None at once. A side's buffer holds the join's retention (before + after + grace) behind
its own observed stream time: older records are not kept, and a record older than one
store segment beyond it is counted in ``dropped-records``, as Kafka's segmented window
store counts it (segments of max(retention / 2, 60 s)). The shared stream time, the
earliest waiting timestamp and each store's observed stream time and sequence are
processor metadata: committed, restored and replayed with the stores (Kafka keeps the
first two in memory and forgets them on restart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.processors.metrics import DROPPED_RECORDS
from lakestate.records import Record
from lakestate.state.overlay import Overlay
from lakestate.state.stream_join import WaitingRecordsStore

Joiner = Callable[[Any, Any], Any]

NO_TIME = -1
_I64_MAX = 2**63 - 1
_MIN_SEGMENT_MS = 60_000


def _i64(n: int) -> int:
    """``n`` as Java's long arithmetic leaves it (Kafka's checks overflow at Long.MAX)."""
    return ((n + 2**63) % 2**64) - 2**63


def _segment(ts: int, interval: int) -> int:
    """Kafka's segment id: Java's long division, which truncates toward zero."""
    return ts // interval if ts >= 0 else -((-ts) // interval)


class JoinBuffer(Processor):
    """Forwards every record and keeps those with a key and a value in its side's buffer
    (Kafka's KStreamJoinWindow over a window store retaining duplicates). The store holds
    each record as its serdes (StreamJoined's) take it (``held_value``): one it cannot
    hold fails, as Kafka's store serializes each put, before the segment check."""

    chunked = True

    def __init__(self, store_name: str, retention_ms: int) -> None:
        self.store_name = store_name
        self.retention = retention_ms
        self.interval = max(retention_ms // 2, _MIN_SEGMENT_MS)

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self._time_key = f"{self.store_name}.observed_stream_time"
        self._seq_key = f"{self.store_name}.seq"
        self._pending: tuple[list[tuple[Any, int, int, Any]], int, int] | None = None

    def process_chunk(self, chunk: Chunk) -> Chunk:
        context, retention, interval = self.context, self.retention, self.interval
        observed = context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        seq = context.processor_metadata(self._seq_key) or 0
        puts: list[tuple[Any, int, int, Any]] = []
        dropped = 0
        held_value = self.store.held_value
        for record in chunk.records:
            if record.key is None or record.value is None:
                continue  # never joins: not kept (a null value is not even seen by the store)
            # Kafka's store serializes before it looks at time.
            held = held_value(record.key, record.value)
            ts = record.timestamp
            if ts > observed:
                observed = ts
            if _segment(ts, interval) < _segment(observed - retention, interval):
                dropped += 1  # Kafka's store refuses a record of an expired segment
            elif ts > observed - retention:
                puts.append((record.key, ts, seq, held))
                seq += 1
            # else: kept by Kafka's store but never fetched again (beyond retention)
        if dropped:
            context.metric(DROPPED_RECORDS, dropped)
        self._pending = (puts, observed, seq)
        return chunk

    def finish_chunk(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        puts, observed, seq = pending
        context = self.context
        self.store.put_all(puts)
        if puts:
            context.set_processor_metadata(self._seq_key, seq)
        previous = context.processor_metadata(self._time_key)
        if observed != NO_TIME and (previous is None or observed > previous):
            context.set_processor_metadata(self._time_key, observed)
            # Records at or below observed - retention are never fetched again; those below
            # the previous bound went at the previous advance.
            since = None if previous is None else previous - self.retention + 1
            self.store.delete_before(observed - self.retention + 1, since)


class StreamStreamJoin(Processor):
    """One side of a stream-stream join (Kafka's KStreamKStreamJoinLeftSide / RightSide):
    joins each record of its side with the other side's buffer. ``joiner`` takes (left
    value, right value) whichever side this is; ``waiting_store`` is the shared store of a
    left or outer join (None for an inner join), and ``outer`` says whether this side's
    unjoined records wait there (both sides of an outer join, the left of a left join)."""

    chunked = True

    def __init__(
        self,
        *,
        is_left: bool,
        other_store: str,
        waiting_store: str | None,
        joiner: Joiner,
        outer: bool,
        before_ms: int,
        after_ms: int,
        grace_ms: int,
        tracker: str,
    ) -> None:
        self.is_left = is_left
        self.other_store = other_store
        self.waiting_store = waiting_store
        self.joiner = joiner
        self.outer = outer
        self.windows_before, self.windows_after, self.grace = before_ms, after_ms, grace_ms
        # This side looks ``before`` back and ``after`` ahead; the right side the reverse.
        self.join_before, self.join_after = (
            (before_ms, after_ms) if is_left else (after_ms, before_ms)
        )
        self.retention = before_ms + after_ms + grace_ms
        self.tracker = tracker

    def init(self, context: Any) -> None:
        super().init(context)
        self.other = context.get_state_store(self.other_store)
        self.waiting: WaitingRecordsStore | None = (
            None if self.waiting_store is None else context.get_state_store(self.waiting_store)
        )
        self._other_time_key = f"{self.other_store}.observed_stream_time"
        self._time_key = f"{self.tracker}.stream_time"
        self._min_key = f"{self.tracker}.min_time"
        self._seq_key = f"{self.waiting_store}.seq"
        self._pending: tuple[Overlay | None, int, int, int] | None = None

    def _joined(self, this: Any, other: Any) -> Any:
        return self.joiner(this, other) if self.is_left else self.joiner(other, this)

    def process_chunk(self, chunk: Chunk) -> Chunk:
        context = self.context
        stream_time = context.processor_metadata(self._time_key)
        stream_time = NO_TIME if stream_time is None else stream_time
        min_time = context.processor_metadata(self._min_key)
        min_time = _I64_MAX if min_time is None else min_time
        seq = context.processor_metadata(self._seq_key) or 0
        other_observed = context.processor_metadata(self._other_time_key)
        retained_from = (NO_TIME if other_observed is None else other_observed) - self.retention + 1
        overlay = waiting = None
        if self.waiting is not None:
            # Records of this chunk read what the ones before them wrote: held until finish.
            waiting, overlay = self.waiting.staged()
        out: list[Record] = []
        at: list[int] = []
        dropped = 0
        fetch, joined = self.other.fetch, self._joined
        for record, position in zip(chunk.records, chunk.at, strict=True):
            ts, key, value = record.timestamp, record.key, record.value
            if ts > stream_time:
                stream_time = ts
            if key is None or value is None:
                if self.outer and key is None and value is not None:
                    out.append(record.with_value(joined(value, None)))
                    at.append(position)
                else:
                    dropped += 1
                continue
            if waiting is not None and ts == stream_time:
                min_time = self._emit_closed(waiting, record, stream_time, min_time, out)
                at.extend([position] * (len(out) - len(at)))
            time_from = max(0, ts - self.join_before)
            time_to = max(0, ts + self.join_after)
            partners = fetch(key, max(time_from, retained_from), time_to)
            for other_ts, other_value in partners:
                if waiting is not None:
                    waiting.remove_group(key, other_ts, not self.is_left)
                out.append(
                    Record(key, joined(value, other_value), max(ts, other_ts), record.headers)
                )
                at.append(position)
            if self.outer and not partners:
                if waiting is None or time_to < stream_time:
                    out.append(record.with_value(joined(value, None)))  # its window has ended
                    at.append(position)
                else:
                    min_time = min(min_time, ts)
                    waiting.add(key, ts, self.is_left, seq, value)
                    seq += 1
        if dropped:
            context.metric(DROPPED_RECORDS, dropped)
        self._pending = (overlay, stream_time, min_time, seq)
        return chunk.with_records(out, at)

    def _emit_closed(
        self,
        waiting: WaitingRecordsStore,
        record: Record,
        stream_time: int,
        min_time: int,
        out: list[Record],
    ) -> int:
        """Emit (joined with None, in store order) and remove the waiting records whose
        window has closed; returns the new earliest-waiting mark (Kafka's minTime)."""
        # Nothing can have closed yet (Kafka's own shortcut, in its long arithmetic).
        if _i64(min_time + self.join_after + self.grace) >= stream_time:
            return min_time
        min_time = _I64_MAX
        left_open = right_open = False
        done: list[bytes] = []
        for raw_key, ts, is_left, key, value in waiting.scan():
            min_time = ts
            if left_open and right_open:
                break
            look = self.windows_after if is_left else self.windows_before
            if ts + look + self.grace >= stream_time:
                if is_left:
                    left_open = True
                else:
                    right_open = True
                continue
            result = self.joiner(value, None) if is_left else self.joiner(None, value)
            out.append(Record(key, result, ts, record.headers))
            done.append(raw_key)
        waiting.remove(done)
        return min_time

    def finish_chunk(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        overlay, stream_time, min_time, seq = pending
        if overlay is None:
            return  # an inner join keeps no time: nothing waits
        overlay.flush()
        context = self.context
        for key, value in (
            (self._time_key, stream_time),
            (self._min_key, min_time),
            (self._seq_key, seq),
        ):
            if context.processor_metadata(key) != value:
                context.set_processor_metadata(key, value)
