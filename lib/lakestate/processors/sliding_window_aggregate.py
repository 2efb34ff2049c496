"""Sliding-window aggregations (KIP-450: count, aggregate, reduce), as Kafka Streams'
``KStreamSlidingWindowAggregate`` computes them.

A window is ``[start, start + time_difference]``, both ends inclusive. A record at ``ts``
updates every window of its key that contains it and is still open, creates its left
window ``[ts - d, ts]`` (from the aggregate of the records before it within ``d``), its
right window ``[ts + 1, ts + 1 + d]`` when later records fall in it, and the right window
of the record before it when that one now holds a record. A record with ``ts < d`` cannot
have a left window starting before 0: such records share the window ``[0, d]``. A window
is open while ``end >= observed stream time - grace``; a record whose own left window
would end before that is dropped whole, and each closed window it would update counts one
more dropped record, as in Kafka.

The store is a window store (``state/window.py``) with Kafka's default retention, 2d +
grace after the start of the latest window written (the store's own stream time, kept as
processor metadata beside the processor's observed stream time): older windows are
deleted, and a window written already past it is not kept, as Kafka's segmented store
neither returns nor keeps it. Records with a null key or value are dropped, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.dsl.windows import SlidingWindows
from lakestate.processors.api import Processor
from lakestate.processors.window_metrics import NO_TIME, Lateness, WindowMetrics
from lakestate.records import Change, Record, Window, Windowed
from lakestate.state.timestamped import ValueAndTimestamp


class _Step:
    """One record's pass over its key's windows: what it writes and forwards, in order."""

    def __init__(self, node: SlidingWindowedAggregate, record: Record, close: int) -> None:
        self.node = node
        self.record = record
        self.close = close
        self.store_time = node.store_time
        self.late_drops = 0
        self.writes: list[tuple[Windowed, Any, int]] = []
        self.forwards: list[Record] = []

    def put(self, window: Window, value: Any, timestamp: int) -> None:
        # Kafka's store advances its stream time with every put, and a window starting
        # at or before stream time - retention is not kept (nor would a read return it).
        if window.start > self.store_time:
            self.store_time = window.start
        if window.start > self.store_time - self.node.windows.retention_ms:
            self.writes.append((Windowed(self.record.key, window), value, timestamp))

    def forward(self, window: Window, new: Any, old: Any, timestamp: int) -> None:
        record = self.record
        self.forwards.append(
            Record(Windowed(record.key, window), Change(new, old), timestamp, record.headers)
        )

    def update(self, window: Window, old: Any, old_ts: int) -> None:
        """Fold the record into ``window`` (aggregate ``old`` of time ``old_ts``; None: a
        new window) if it is open, else count a dropped record (updateWindowAndForward)."""
        if window.end < self.close:
            self.late_drops += 1
            return
        node, record = self.node, self.record
        if old is None and node.initializer is None:
            new = record.value  # reduce: a window's first value
        else:
            new = node.aggregator(record.key, record.value, old)
        timestamp = record.timestamp if old is None else max(record.timestamp, old_ts)
        self.put(window, new, timestamp)
        self.forward(window, new, old, timestamp)

    def create_right(self, held: ValueAndTimestamp) -> None:
        """The record's right window, holding the later records ``held`` aggregates (it is
        always open: it ends after the record's own left window)."""
        ts, d = self.record.timestamp, self.node.windows.time_difference_ms
        window = Window(ts + 1, ts + 1 + d)
        self.put(window, held.value, held.timestamp)
        self.forward(window, held.value, None, held.timestamp)


class SlidingWindowedAggregate(Processor):
    """``aggregator(key, value, agg)`` over sliding windows (see the module docstring);
    forwards ``Windowed(key, window) -> Change(new, old)`` per window written, with the
    max timestamp of the window's records. A window created for the record has the
    initializer's value as its old value, as Kafka forwards it; a right window created
    from later records none. For reduce, ``initializer`` is None and a window's first value
    is its aggregate."""

    forwards_store_changes = True

    def __init__(
        self,
        store_name: str,
        windows: SlidingWindows,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        state_key: str | None = None,
    ) -> None:
        self.store_name = store_name
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        # A cogroup's input (KIP-150) keeps its observed stream time and metrics under its
        # own key; the store's stream time stays the store's, shared with the other inputs.
        self.state_key = state_key

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        key = self.state_key or self.store_name
        self._time_key = f"{key}.observed_stream_time"
        self._store_time_key = f"{self.store_name}.store_stream_time"
        self._metrics = WindowMetrics(context, key)

    def _initial(self) -> Any:
        return None if self.initializer is None else self.initializer()

    def process(self, record: Record) -> None:
        context = self.context
        metrics = Lateness()
        observed = context.processor_metadata(self._time_key)
        observed = NO_TIME if observed is None else observed
        if record.key is None or record.value is None:
            metrics.null_keys += 1  # Kafka drops a null value here too
            self._metrics.publish(metrics, observed)
            self._metrics.keep(observed)
            return
        ts = record.timestamp
        metrics.record(observed - ts if observed > ts else 0)
        observed = max(observed, ts)
        store_time = context.processor_metadata(self._store_time_key)
        self.store_time = NO_TIME if store_time is None else store_time
        d = self.windows.time_difference_ms
        step = _Step(self, record, observed - self.windows.grace_ms)
        if ts + d < step.close:
            step.late_drops += 1  # even its left window has closed
        elif ts < d:
            self._early(step)
        else:
            self._reverse(step)
        metrics.late_drops += step.late_drops
        self._metrics.publish(metrics, observed)
        self._metrics.keep(observed)
        self._commit(step, observed)
        for r in step.forwards:
            context.forward(r)

    def _fetch(self, key: Any, time_from: int, time_to: int, backward: bool) -> list:
        # A window at or before the store's stream time - retention is gone, as in Kafka.
        retained = self.store_time - self.windows.retention_ms + 1
        start = max(time_from, retained)
        return list(self.store.windows_starting(key, start, time_to, backward))

    def _reverse(self, step: _Step) -> None:
        """A record with ``ts >= d``: its key's windows from the latest start down
        (Kafka's processReverse, what its RocksDB store gives)."""
        ts, d = step.record.timestamp, self.windows.time_difference_ms
        starts: set[int] = set()
        left_agg: ValueAndTimestamp | None = None
        right_agg: ValueAndTimestamp | None = None
        left_exists = right_exists = False
        previous: int | None = None  # the latest record before ts, when it matters
        for window, held in self._fetch(step.record.key, max(0, ts - 2 * d), ts + 1, True):
            starts.add(window.start)
            if window.start == ts + 1:
                right_exists = True
            elif window.end > ts:
                if right_agg is None:
                    right_agg = held
                step.update(window, held.value, held.timestamp)
            elif window.end == ts:
                left_exists = True
                step.update(window, held.value, held.timestamp)
                if held.timestamp >= ts:
                    return  # every window the record needs exists
                previous = held.timestamp
            else:
                left_agg, previous = held, held.timestamp
                break
        if previous is not None:
            start = previous + 1
            if start not in starts and start + d >= ts:
                step.update(Window(start, start + d), self._initial(), ts)
        if not left_exists:
            if previous is not None and ts - d <= previous:
                assert left_agg is not None  # previous came from it
                base = left_agg.value
            else:
                base = self._initial()
            step.update(Window(ts - d, ts), base, ts)
        if not right_exists and right_agg is not None and right_agg.timestamp > ts:
            step.create_right(right_agg)

    def _early(self, step: _Step) -> None:
        """A record with ``ts < d``: it and the others before ``d`` share ``[0, d]``, the
        windows after it are updated, and right windows are created as they fill (Kafka's
        processEarly)."""
        ts, d = step.record.timestamp, self.windows.time_difference_ms
        starts: set[int] = set()
        combined: tuple[Window, ValueAndTimestamp] | None = None
        right_agg: ValueAndTimestamp | None = None
        right_exists = False
        previous: int | None = None
        for window, held in self._fetch(step.record.key, 0, ts + 1, False):
            starts.add(window.start)
            if window.start == 0:
                combined = (window, held)
                if held.timestamp < ts:
                    previous = held.timestamp
            elif window.start <= ts:
                right_agg = held
                step.update(window, held.value, held.timestamp)
            else:
                right_exists = True  # starts at ts + 1
        if right_agg is None and combined is not None and combined[1].timestamp > ts:
            right_agg = combined[1]
        if not right_exists and right_agg is not None and right_agg.timestamp > ts:
            step.create_right(right_agg)
        if previous is not None and previous + 1 not in starts:
            step.update(Window(previous + 1, previous + 1 + d), self._initial(), ts)
        if combined is None:
            step.update(Window(0, d), self._initial(), ts)
        else:
            step.update(combined[0], combined[1].value, combined[1].timestamp)

    def _commit(self, step: _Step, observed: int) -> None:
        """Write the step, keep both stream times, and drop the windows past retention."""
        context = self.context
        if step.writes:
            self.store.put_all(step.writes)
        previous = context.processor_metadata(self._time_key)
        if previous is None or observed > previous:
            context.set_processor_metadata(self._time_key, observed)
        before = self.store_time
        if step.store_time > before:
            context.set_processor_metadata(self._store_time_key, step.store_time)
            # Windows starting at or before store time - retention are gone; those before
            # the previous bound went at the previous advance, and none is written below
            # it (put keeps no such window): scan from there.
            retention, d = self.windows.retention_ms, self.windows.time_difference_ms
            since = None if before == NO_TIME else before - retention + d + 1
            self.store.delete_ending_before(step.store_time - retention + d + 1, since)
