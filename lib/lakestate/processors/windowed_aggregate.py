"""Windowed aggregations (count, aggregate, reduce) over time windows and session windows,
with KIP-328 grace periods, as Kafka Streams computes them.

Each processor keeps its *observed stream time* (the largest timestamp of the records that
reached it) as processor metadata, so it is committed and restored with the store. A
window closes when observed stream time reaches its end + grace (sessions: end + gap +
grace); a record for a closed window is dropped, counted in ``dropped-records`` and
``late-record-drop-total``. Records with a null key are dropped (``dropped-records``);
null values are aggregated, as in Kafka. ``record-lateness-avg/-max`` measure how far
behind observed stream time records arrive. Closed windows are deleted from the store once
per chunk (they can never change again), so the store holds the open windows only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.dsl.windows import SessionWindows, TimeWindows
from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.processors.tumbling_chunk import applies as tumbling_chunk_applies
from lakestate.processors.tumbling_chunk import tumbling_chunk
from lakestate.processors.window_metrics import NO_TIME, Lateness, WindowMetrics
from lakestate.records import Change, Record, Window, Windowed


class TimeWindowedAggregate(Processor):
    """``aggregator(key, value, agg)`` folds each record into every window containing it
    that is still open; the window's timestamp is the max of its records'. Forwards
    ``Windowed(key, window) -> Change(new, old)`` per window updated. For reduce,
    ``initializer`` is None and the first value of a window becomes its aggregate.

    ``state_key`` (a cogroup's input, KIP-150): the node shares its store with other nodes
    and keeps its observed stream time and metrics under that key. As Kafka's store does,
    a window then counts as gone once the latest window start written by any node is
    ``size + grace`` past its start, and only such windows are deleted."""

    chunked = True
    forwards_store_changes = True

    def __init__(
        self,
        store_name: str,
        windows: TimeWindows,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        retention_ms: int | None = None,
        state_key: str | None = None,
    ) -> None:
        self.store_name = store_name
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        # How long after its end a window stays in the store: until it closes (grace), or
        # what the store's retention (from the window's start) leaves after its size.
        self.kept_after_end_ms = (
            windows.grace_ms if retention_ms is None else retention_ms - windows.size_ms
        )
        self.state_key = state_key

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        key = self.state_key or self.store_name
        self._time_key = f"{key}.observed_stream_time"
        self._store_time_key = f"{self.store_name}.store_stream_time"
        self._store_time = NO_TIME
        self._pending: dict[Windowed, tuple[Any, int]] = {}
        self._observed = NO_TIME
        self._metrics = WindowMetrics(context, key)
        self._tumbling = tumbling_chunk_applies(self)

    def process_chunk(self, chunk: Chunk) -> Chunk:
        if not chunk.records:
            return self._nothing(chunk)
        if self._tumbling:  # one window per record: the leaner loop (tumbling_chunk.py)
            return self._tumbling_chunk(chunk)
        store, windows, grace = self.store, self.windows, self.windows.grace_ms
        observed = self.context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        # Windowed key -> (aggregate, timestamp); an aggregate of None is a deleted window.
        pending: dict[Windowed, tuple[Any, int] | None] = {}
        same: dict[Windowed, Windowed] = {}
        out, at, metrics = [], [], Lateness()
        shared = self.state_key is not None
        store_time = self.context.processor_metadata(self._store_time_key) if shared else None
        store_time = NO_TIME if store_time is None else store_time
        for i, record in enumerate(chunk.records):
            key = record.key
            if key is None:
                metrics.null_keys += 1
                continue
            ts = record.timestamp
            metrics.record(observed - ts if observed > ts else 0)
            if ts > observed:
                observed = ts
            if metrics.first_observed is None:
                metrics.first_observed = observed
            close = observed - grace
            for window in windows.windows_for(ts):
                if window.end <= close:
                    metrics.late_drops += 1
                    continue
                # One object per window: its key encoding is computed once (state/keys.py).
                windowed = same.setdefault(windowed := Windowed(key, window), windowed)
                if shared and window.end <= store_time - grace:
                    held = None  # past the shared store's retention: gone, as in Kafka
                elif windowed in pending:
                    held = pending[windowed]
                else:
                    found = store.get_windowed(windowed)
                    held = None if found is None else (found.value, found.timestamp)
                old = None if held is None else held[0]
                if old is None:
                    base = None if self.initializer is None else self.initializer()
                    new_ts = ts
                else:
                    base = old
                    new_ts = max(ts, held[1])
                if self.initializer is None and base is None:
                    new = record.value  # reduce: the window's first value
                else:
                    new = self.aggregator(key, record.value, base)
                pending[windowed] = None if new is None else (new, new_ts)
                store_time = max(store_time, window.start)
                out.append(Record(windowed, Change(new, old), new_ts, record.headers))
                at.append(chunk.at[i])
        self._metrics.publish(metrics, observed)
        self._pending = pending
        self._observed = observed
        self._store_time = store_time
        return chunk.with_records(out, at)

    def _tumbling_chunk(self, chunk: Chunk) -> Chunk:
        observed = self.context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        out, at, metrics, observed, self._pending = tumbling_chunk(self, chunk, observed)
        self._metrics.publish(metrics, observed)
        self._observed, self._store_time = observed, NO_TIME
        return chunk.with_records(out, at)

    def _nothing(self, chunk: Chunk) -> Chunk:
        """No record reached the node (one by one it is not called): no metric moves and
        ``finish_chunk`` writes nothing."""
        self._pending, self._observed, self._store_time = {}, NO_TIME, NO_TIME
        self._metrics.pending = None
        return chunk

    def finish_chunk(self) -> None:
        pending, self._pending = self._pending, {}
        if pending:
            self.store.put_all(
                (w, None, 0) if held is None else (w, held[0], held[1])
                for w, held in pending.items()
            )
        observed = self._observed
        self._metrics.keep(observed)
        if self.state_key is not None:
            self._forget_shared()
        elif observed != NO_TIME:
            previous = self.context.processor_metadata(self._time_key)
            if previous is None or observed > previous:
                self.context.set_processor_metadata(self._time_key, observed)
                # Windows with end <= observed - kept are past retention (by default they
                # closed): drop them. Those with end <= previous - kept went at the previous
                # advance, and no window that closed has been written since (its records
                # are late): scan from there.
                kept = self.kept_after_end_ms
                since = None if previous is None else previous - kept + 1
                if since is None or self._may_end_within(since, observed - kept + 1):
                    self.store.delete_ending_before(observed - kept + 1, since)

    def _may_end_within(self, low: int, high: int) -> bool:
        """Whether a window of this node can end in ``[low, high)``: windows end at
        ``k * advance + size``, so between two such ends there is nothing to scan for
        (most records move stream time by less than the advance)."""
        size, advance = self.windows.size_ms, self.windows.advance_ms
        return low + (size - low) % advance < high

    def _forget_shared(self) -> None:
        """A cogroup's node: keep its observed stream time, and delete the windows past
        the shared store's retention (their end <= latest start written - kept)."""
        context, observed = self.context, self._observed
        if observed != NO_TIME:
            previous = context.processor_metadata(self._time_key)
            if previous is None or observed > previous:
                context.set_processor_metadata(self._time_key, observed)
        store_time = self._store_time
        previous = context.processor_metadata(self._store_time_key)
        if store_time != NO_TIME and (previous is None or store_time > previous):
            context.set_processor_metadata(self._store_time_key, store_time)
            self.store.delete_ending_before(store_time - self.kept_after_end_ms + 1)


class SessionWindowedAggregate(Processor):
    """Session windows: a record opens the session ``[ts, ts]``, merged with every session
    of its key within ``gap`` of it (``merger(key, agg1, agg2)`` combines their aggregates,
    oldest first, from ``initializer()``); then ``aggregator(key, value, agg)`` folds the
    record in. Each session merged away is forwarded as a tombstone, then the new session
    with its aggregate; a session's records carry its end as their timestamp. For reduce,
    ``initializer`` is None, ``merger`` the reducer, and the first value starts a session.

    ``state_key`` (a cogroup's input, KIP-150): the node shares its store and keeps its
    observed stream time and metrics under that key; the store's retention (gap + grace)
    then runs from the latest session end written by any node, as Kafka's store's does."""

    forwards_store_changes = True

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        retention_ms: int | None = None,
        state_key: str | None = None,
    ) -> None:
        self.store_name = store_name
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger
        # How long after its end a session stays in the store (Kafka's default: gap + grace,
        # the time it closes); a session still in it is found by a later record and merged.
        self.retention_ms = windows.close_after_ms if retention_ms is None else retention_ms
        self.state_key = state_key

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        key = self.state_key or self.store_name
        self._time_key = f"{key}.observed_stream_time"
        # Without state_key, the store's stream time is the node's observed stream time.
        self._store_time_key = f"{self.store_name}.store_stream_time" if self.state_key else None
        self._metrics = WindowMetrics(context, key)
        # A chunk's sessions are held per key until finish_chunk (a cogroup's node, whose
        # store others write, goes record by record).
        self.chunked = self.state_key is None
        self._pending: dict[Any, dict[Window, Any]] = {}
        self._observed: int | None = None

    def process_chunk(self, chunk: Chunk) -> Chunk:
        """``process`` of each record, against the sessions the chunk wrote (held, not
        written: ``finish_chunk`` writes them and purges as the last record would)."""
        if not chunk.records:  # none reached the node: no metric moves, nothing to write
            self._pending, self._observed, self._metrics.pending = {}, None, None
            return chunk
        metrics, observed = Lateness(), self.context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        gap, grace = self.windows.gap_ms, self.windows.grace_ms
        pending: dict[Any, dict[Window, Any]] = {}  # key -> session -> aggregate (None: gone)
        out, at = [], []
        for i, record in enumerate(chunk.records):
            key, ts = record.key, record.timestamp
            if key is None:
                metrics.null_keys += 1
                continue
            metrics.record(observed - ts if observed > ts else 0)
            retained = observed - self.retention_ms + 1  # as process: before this record
            observed = max(observed, ts)
            if metrics.first_observed is None:
                metrics.first_observed = observed
            mine = pending.get(key)
            merged = self._sessions(key, max(ts - gap, retained), ts + gap, mine)
            start, end = ts, ts
            agg = None if self.initializer is None else self.initializer()
            for window, value in merged:
                agg = (
                    value
                    if self.initializer is None and agg is None
                    else self.merger(key, agg, value)
                )
                start, end = min(start, window.start), max(end, window.end)
            session = Window(start, end)
            if end < observed - grace - gap:
                metrics.late_drops += 1
                continue
            mine = pending.setdefault(key, {}) if mine is None else mine
            if session != Window(ts, ts):
                for window, value in merged:
                    mine[window] = None
                    out.append(Record(Windowed(key, window), Change(None, value), window.end))
                    at.append(chunk.at[i])
            if self.initializer is None and agg is None and not merged:
                new = record.value
            else:
                new = self.aggregator(key, record.value, agg)
            mine[session] = new
            old = self._overwritten(merged, session)
            out.append(Record(Windowed(key, session), Change(new, old), end))
            at.append(chunk.at[i])
        self._metrics.publish(metrics, observed)
        self._pending = pending
        self._observed = None if metrics.first_observed is None else observed
        return chunk.with_records(out, at)

    def _sessions(self, key: Any, low: int, high: int, mine: dict[Window, Any] | None) -> list:
        """``find_sessions(key, low, high)`` over the store and the chunk's sessions."""
        found = self.store.find_sessions(key, low, high)
        if not mine:
            return found
        found = [(w, v) for w, v in found if w not in mine]
        found += [
            (w, v) for w, v in mine.items() if v is not None and w.end >= low and w.start <= high
        ]
        found.sort(key=lambda item: (item[0].end, item[0].start))
        return found

    def _overwritten(self, merged: list, session: Window) -> Any:
        """The old value a session put forwards: None, as Kafka's session aggregate sends
        none with its puts, except into the record cache (``context.cached``) the value of
        the session [t, t] a record at t overwrites in place (merged, not deleted): Kafka's
        caching store reads that one from the store under it at a flush; lakestate's cache
        has none, and tells from old values whether downstream holds a key."""
        if merged and session.start == session.end and self.context.cached:
            return merged[0][1]  # the one session merged: [t, t] itself
        return None

    def finish_chunk(self) -> None:
        pending, self._pending = self._pending, {}
        writes = [
            (Windowed(key, w), v, w.end) for key, mine in pending.items() for w, v in mine.items()
        ]
        if writes:
            self.store.put_all(writes)
        observed, self._observed = self._observed, None
        self._metrics.keep(NO_TIME if observed is None else observed)
        if observed is not None:
            self._advance(observed, observed)

    def process(self, record: Record) -> None:
        context = self.context
        metrics = Lateness()
        key = record.key
        observed = context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        if key is None:
            metrics.null_keys += 1
            self._metrics.publish(metrics, observed)
            self._metrics.keep(observed)
            return
        ts = record.timestamp
        metrics.record(observed - ts if observed > ts else 0)
        gap, grace = self.windows.gap_ms, self.windows.grace_ms
        store_time = observed
        if self._store_time_key is not None:
            held = context.processor_metadata(self._store_time_key)
            store_time = NO_TIME if held is None else held
        # Sessions ending at or before the store's stream time before this record minus
        # its retention are past it: never merged again, whether or not a purge has
        # removed them yet.
        retained = store_time - self.retention_ms + 1
        observed = max(observed, ts)
        close = observed - grace - gap
        merged = self.store.find_sessions(key, max(ts - gap, retained), ts + gap)
        start, end = ts, ts
        agg = None if self.initializer is None else self.initializer()
        for window, value in merged:
            if self.initializer is None and agg is None:
                agg = value
            else:
                agg = self.merger(key, agg, value)
            start, end = min(start, window.start), max(end, window.end)
        session = Window(start, end)
        forwards: list[Record] = []
        if end < close:
            metrics.late_drops += 1
        else:
            writes: list[tuple[Windowed, Any, int]] = []
            if session != Window(ts, ts):
                for window, value in merged:
                    writes.append((Windowed(key, window), None, 0))
                    forwards.append(Record(Windowed(key, window), Change(None, value), window.end))
            if self.initializer is None and agg is None and not merged:
                new = record.value
            else:
                new = self.aggregator(key, record.value, agg)
            if end > observed - self.retention_ms:  # else past retention: not kept (as a chunk)
                writes.append((Windowed(key, session), new, end))
            self.store.put_all(writes)
            old = self._overwritten(merged, session)
            forwards.append(Record(Windowed(key, session), Change(new, old), end))
        self._metrics.publish(metrics, observed)
        self._metrics.keep(observed)
        self._advance(observed, max(store_time, end) if forwards else store_time)
        for r in forwards:
            context.forward(r)

    def _advance(self, observed: int, store_time: int) -> None:
        """Keep the observed stream time (and a cogroup's store time); delete the sessions
        past the store's retention."""
        context = self.context
        previous = context.processor_metadata(self._time_key)
        if previous is None or observed > previous:
            context.set_processor_metadata(self._time_key, observed)
        retention = self.retention_ms
        if self._store_time_key is None:
            if previous is None or observed > previous:
                # Sessions ending at or before stream time minus retention are out of the
                # store: a later record must not find them. Those ending before the previous
                # cutoff went at the previous advance, and no session written since ends
                # below it (one that would is dropped as late): scan from there.
                since = None if previous is None else previous - retention
                self.store.delete_ending_before(observed - retention + 1, since)
            return
        held = context.processor_metadata(self._store_time_key)
        if store_time != NO_TIME and (held is None or store_time > held):
            context.set_processor_metadata(self._store_time_key, store_time)
            self.store.delete_ending_before(store_time - retention + 1)
