"""Window specifications (KIP-328 grace periods): tumbling and hopping time windows,
sliding windows (KIP-450) and session windows. Durations are ``timedelta``; windows and
timestamps are epoch ms."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from lakestate.dsl.arguments import duration_ms
from lakestate.errors import TopologyException
from lakestate.records import Window


@dataclass(frozen=True)
class TimeWindows:
    """Fixed-size windows ``[start, start + size)``, one every ``advance`` ms (tumbling
    when ``advance == size``, hopping otherwise), aligned to the epoch. A record updates
    every window containing it; a window accepts records until stream time reaches its
    end + ``grace``, after which it is closed and late records are dropped."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    @staticmethod
    def of_size_with_no_grace(size: timedelta) -> TimeWindows:
        size_ms = duration_ms(size, "window size", "TimeWindows.of_size_with_no_grace", True)
        return TimeWindows(size_ms, size_ms, 0)

    @staticmethod
    def of_size_and_grace(size: timedelta, grace: timedelta) -> TimeWindows:
        operator = "TimeWindows.of_size_and_grace"
        size_ms = duration_ms(size, "window size", operator, positive=True)
        return TimeWindows(size_ms, size_ms, duration_ms(grace, "grace period", operator))

    def advance_by(self, advance: timedelta) -> TimeWindows:
        """Hopping windows: a new window every ``advance`` (0 < advance <= size)."""
        advance_ms = duration_ms(advance, "window advance", "TimeWindows.advance_by", True)
        if advance_ms > self.size_ms:
            raise TopologyException(
                f"window advance ({advance_ms} ms) must not exceed the window size "
                f"({self.size_ms} ms)"
            )
        return TimeWindows(self.size_ms, advance_ms, self.grace_ms)

    def windows_for(self, timestamp: int) -> list[Window]:
        """Every window containing ``timestamp``, by start."""
        size, advance = self.size_ms, self.advance_ms
        start = (max(0, timestamp - size + advance) // advance) * advance
        out = []
        while start <= timestamp:
            out.append(Window(start, start + size))
            start += advance
        return out

    @property
    def close_after_ms(self) -> int:
        """How long after a window's end it stays open: the grace period."""
        return self.grace_ms


@dataclass(frozen=True)
class SessionWindows:
    """Sessions: a key's records at most ``gap`` ms apart share a session ``[first,
    last]`` (both inclusive); a record between two sessions merges them. A session accepts
    records until stream time reaches its end + gap + ``grace``."""

    gap_ms: int
    grace_ms: int

    @staticmethod
    def of_inactivity_gap_with_no_grace(gap: timedelta) -> SessionWindows:
        operator = "SessionWindows.of_inactivity_gap_with_no_grace"
        return SessionWindows(duration_ms(gap, "inactivity gap", operator, positive=True), 0)

    @staticmethod
    def of_inactivity_gap_and_grace(gap: timedelta, grace: timedelta) -> SessionWindows:
        operator = "SessionWindows.of_inactivity_gap_and_grace"
        return SessionWindows(
            duration_ms(gap, "inactivity gap", operator, positive=True),
            duration_ms(grace, "grace period", operator),
        )

    @property
    def close_after_ms(self) -> int:
        """How long after a session's end it stays open: the gap plus the grace period."""
        return self.gap_ms + self.grace_ms


@dataclass(frozen=True)
class SlidingWindows:
    """Sliding windows (KIP-450): windows ``[start, start + time_difference]``, both ends
    inclusive, defined by the records: every record of a key has a window ending at it
    (``[ts - time_difference, ts]``) and one starting just after it (``[ts + 1, ts + 1 +
    time_difference]``, created only when it holds records), so each distinct set of records
    at most ``time_difference`` apart has one window. A window accepts records until stream
    time passes its end + ``grace`` (closed once ``end < stream time - grace``)."""

    time_difference_ms: int
    grace_ms: int

    @staticmethod
    def of_time_difference_with_no_grace(time_difference: timedelta) -> SlidingWindows:
        """No grace: a record after its window's end (in stream time) is dropped."""
        return SlidingWindows(_time_difference(time_difference), 0)

    # The brief's spelling of the same (Kafka's is ``ofTimeDifferenceWithNoGrace``).
    of_time_difference_without_grace = of_time_difference_with_no_grace

    @staticmethod
    def of_time_difference_and_grace(
        time_difference: timedelta, grace: timedelta
    ) -> SlidingWindows:
        return SlidingWindows(
            _time_difference(time_difference),
            duration_ms(grace, "grace period", "SlidingWindows.of_time_difference_and_grace"),
        )

    @property
    def close_after_ms(self) -> int:
        """How long after a window's end it stays open: the grace period."""
        return self.grace_ms

    @property
    def retention_ms(self) -> int:
        """How long the store keeps a window after the latest one it wrote starts: Kafka's
        default, 2 * time difference + grace (the oldest window a new record can need)."""
        return 2 * self.time_difference_ms + self.grace_ms


def _time_difference(value: timedelta) -> int:
    # Kafka accepts 0 but then fails on the first record (a window [ts, ts] is not a valid
    # TimeWindow): refuse it where the app is built instead.
    if isinstance(value, timedelta) and value == timedelta(0):
        raise TopologyException(
            "sliding windows' time difference must be positive (at least 1 ms), got 0: "
            "Kafka Streams fails on the first record with a time difference of 0"
        )
    return duration_ms(value, "time difference", "SlidingWindows", positive=True)
