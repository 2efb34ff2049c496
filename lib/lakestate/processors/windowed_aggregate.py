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
from lakestate.records import Change, Record, Window, Windowed

NO_TIME = -1


class _Lateness:
    """Late-record and lateness metrics of one chunk, added to the task's at its end."""

    def __init__(self) -> None:
        self.late_drops = 0
        self.null_keys = 0
        self.count = 0
        self.total = 0
        self.max = 0

    def record(self, lateness: int) -> None:
        self.count += 1
        self.total += lateness
        if lateness > self.max:
            self.max = lateness

    def publish(self, context: Any) -> None:
        dropped = self.late_drops + self.null_keys
        if dropped:
            context.metric("dropped-records", dropped)
        if self.late_drops:
            context.metric("late-record-drop-total", self.late_drops)
        if self.count:
            context.metric("record-lateness-count", self.count)
            context.metric("record-lateness-sum", self.total)
            total = context.get_metric("record-lateness-sum")
            context.set_metric(
                "record-lateness-avg", total / context.get_metric("record-lateness-count")
            )
            if self.max > context.get_metric("record-lateness-max"):
                context.set_metric("record-lateness-max", self.max)


class TimeWindowedAggregate(Processor):
    """``aggregator(key, value, agg)`` folds each record into every window containing it
    that is still open; the window's timestamp is the max of its records'. Forwards
    ``Windowed(key, window) -> Change(new, old)`` per window updated. For reduce,
    ``initializer`` is None and the first value of a window becomes its aggregate."""

    chunked = True

    def __init__(
        self,
        store_name: str,
        windows: TimeWindows,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        self.store_name = store_name
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self._time_key = f"{self.store_name}.observed_stream_time"
        self._pending: dict[Windowed, tuple[Any, int]] = {}
        self._observed = NO_TIME

    def process_chunk(self, chunk: Chunk) -> Chunk:
        store, windows = self.store, self.windows
        grace = windows.grace_ms
        observed = self.context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        # Windowed key -> (aggregate, timestamp); an aggregate of None is a deleted window.
        pending: dict[Windowed, tuple[Any, int] | None] = {}
        out: list[Record] = []
        at: list[int] = []
        metrics = _Lateness()
        for i, record in enumerate(chunk.records):
            key = record.key
            if key is None:
                metrics.null_keys += 1
                continue
            ts = record.timestamp
            metrics.record(observed - ts if observed > ts else 0)
            if ts > observed:
                observed = ts
            close = observed - grace
            for window in windows.windows_for(ts):
                if window.end <= close:
                    metrics.late_drops += 1
                    continue
                windowed = Windowed(key, window)
                if windowed in pending:
                    held = pending[windowed]
                else:
                    found = store.get_with_timestamp(key, window)
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
                out.append(Record(windowed, Change(new, old), new_ts, record.headers))
                at.append(chunk.at[i])
        metrics.publish(self.context)
        self._pending = pending
        self._observed = observed
        return chunk.with_records(out, at)

    def finish_chunk(self) -> None:
        pending, self._pending = self._pending, {}
        if pending:
            self.store.put_all(
                (w, None, 0) if held is None else (w, held[0], held[1])
                for w, held in pending.items()
            )
        observed = self._observed
        if observed != NO_TIME:
            previous = self.context.processor_metadata(self._time_key)
            if previous is None or observed > previous:
                self.context.set_processor_metadata(self._time_key, observed)
                # Windows with end <= observed - grace are closed: drop them.
                self.store.delete_ending_before(observed - self.windows.grace_ms + 1)


class SessionWindowedAggregate(Processor):
    """Session windows: a record opens the session ``[ts, ts]``, merged with every session
    of its key within ``gap`` of it (``merger(key, agg1, agg2)`` combines their aggregates,
    oldest first, from ``initializer()``); then ``aggregator(key, value, agg)`` folds the
    record in. Each session merged away is forwarded as a tombstone, then the new session
    with its aggregate; a session's records carry its end as their timestamp. For reduce,
    ``initializer`` is None, ``merger`` the reducer, and the first value starts a session."""

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
    ) -> None:
        self.store_name = store_name
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self._time_key = f"{self.store_name}.observed_stream_time"

    def process(self, record: Record) -> None:
        context = self.context
        metrics = _Lateness()
        key = record.key
        if key is None:
            metrics.null_keys += 1
            metrics.publish(context)
            return
        ts = record.timestamp
        observed = context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        metrics.record(observed - ts if observed > ts else 0)
        observed = max(observed, ts)
        gap = self.windows.gap_ms
        close = observed - self.windows.grace_ms - gap
        merged = self.store.find_sessions(key, ts - gap, ts + gap)
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
            writes.append((Windowed(key, session), new, end))
            self.store.put_all(writes)
            forwards.append(Record(Windowed(key, session), Change(new, None), end))
        metrics.publish(context)
        previous = context.processor_metadata(self._time_key)
        if previous is None or observed > previous:
            context.set_processor_metadata(self._time_key, observed)
            # Sessions ending at or before the close time are out of the store's retention
            # (gap + grace, as Kafka's): a later record must not find them.
            self.store.delete_ending_before(observed - gap - self.windows.grace_ms + 1)
        for r in forwards:
            context.forward(r)
