"""Punctuation: callbacks a processor schedules on stream time (Kafka's ``PunctuationQueue``).

A stream-time schedule of interval ``i`` is aligned to 0, as Kafka's: once stream time is
known, the first check fires it, and each firing moves it to the next multiple of ``i``
above the stream time it fired at. The task checks after every record (as Kafka's
TopologyTestDriver does), so a schedule fires at most once per record, however far stream
time jumped, and its callback gets the stream time, not the aligned time.

Schedules live in memory. The engine opens a task per batch, so a schedule made in
``init`` when the task's committed stream time ``S`` is known starts at the first multiple
of ``i`` above ``S``: exactly where a schedule that had run since the first record stands
after the check at ``S``. Output is then independent of where batches end, and a restart
fires nothing twice (Kafka fires a restarted task's schedules once at its first check).

``WALL_CLOCK_TIME`` is refused: a micro-batch's wall clock is not its records' time, and a
batch replayed after a failure would see another one, so its output could not be the same.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field


class PunctuationType(enum.Enum):
    """When a punctuator fires (Kafka's ``PunctuationType``). Only ``STREAM_TIME`` runs here:
    ``ProcessorContext.schedule`` refuses ``WALL_CLOCK_TIME`` with an error saying why."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


@dataclass(eq=False)
class _Schedule:
    node: str
    interval: int
    callback: Callable[[int], None]
    next_time: int
    cancelled: bool = False


class Cancellable:
    """What ``schedule`` returns: ``cancel()`` stops the schedule (also from its callback)."""

    def __init__(self, schedule: _Schedule) -> None:
        self._schedule = schedule

    def cancel(self) -> None:
        self._schedule.cancelled = True


@dataclass
class PunctuationQueue:
    """A task's stream-time schedules, earliest first (ties: the first scheduled)."""

    _heap: list[tuple[int, int, _Schedule]] = field(default_factory=list)
    _seq: int = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def schedule(
        self, node: str, interval: int, callback: Callable[[int], None], start: int
    ) -> Cancellable:
        sched = _Schedule(node, interval, callback, start)
        self._push(sched)
        return Cancellable(sched)

    def _push(self, sched: _Schedule) -> None:
        heapq.heappush(self._heap, (sched.next_time, self._seq, sched))
        self._seq += 1

    def maybe_punctuate(self, stream_time: int, run: Callable[[str, Callable[[], None]], None]):
        """Fire every schedule due at ``stream_time``, each once: ``run(node, call)`` calls
        it (the task sets the node's context and names the node if it fails)."""
        heap = self._heap
        while heap and heap[0][0] <= stream_time:
            _, _, sched = heapq.heappop(heap)
            if sched.cancelled:
                continue
            run(sched.node, lambda s=sched: s.callback(stream_time))
            if not sched.cancelled:
                missed = (stream_time - sched.next_time) // sched.interval
                sched.next_time += (missed + 1) * sched.interval
                self._push(sched)

    def snapshot(self) -> list[tuple[_Schedule, int, bool]]:
        """Where every schedule stands: ``restore`` goes back there (a task's abort)."""
        return [(s, s.next_time, s.cancelled) for _, _, s in self._heap]

    def restore(self, snapshot: list[tuple[_Schedule, int, bool]]) -> None:
        self._heap = []
        for sched, next_time, cancelled in snapshot:
            sched.next_time, sched.cancelled = next_time, cancelled
            if not cancelled:
                self._push(sched)


def first_time(interval: int, stream_time: int, resuming: bool) -> int:
    """Where a new schedule starts: 0 (fires at the next check), or, for one a task makes
    as it opens with committed stream time ``stream_time``, the first multiple of
    ``interval`` above it (see the module docstring)."""
    if resuming and stream_time >= 0:
        return (stream_time // interval + 1) * interval
    return 0
