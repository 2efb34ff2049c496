"""Records as they flow between processors, and the value pair that KTables forward."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class Record:
    """A key-value pair with its event timestamp (epoch ms) and headers."""

    key: Any
    value: Any
    timestamp: int
    headers: dict[str, Any] | None = None

    # Direct construction: dataclasses.replace costs several times more, once per record.
    def with_key(self, key: Any) -> Record:
        return Record(key, self.value, self.timestamp, self.headers)

    def with_value(self, value: Any) -> Record:
        return Record(self.key, value, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> Record:
        return Record(self.key, self.value, timestamp, self.headers)

    def with_headers(self, headers: dict[str, Any] | None) -> Record:
        return Record(self.key, self.value, self.timestamp, headers)


@dataclass(frozen=True, slots=True)
class Change:
    """What a KTable forwards: the new value and the value it replaces (None when absent).

    ``is_latest`` (KIP-914) is False when the update is older, by timestamp, than the
    latest version of its key in a *versioned* table (``KTable.is_versioned``): it was put
    into the version history but does not replace the current value. It is set where a
    versioned store is written (a versioned table source, ``to_table``, a ``filter`` or
    ``map_values`` materialized ``as_versioned``: False iff the store's ``put`` did not
    return -1) and carried unchanged through unmaterialized ``filter``/``map_values``;
    every other producer of changes (unversioned stores, aggregations) leaves it True.
    Processors with versioned semantics skip ``is_latest=False`` changes: the table
    aggregation (at ``group_by``) and table-table joins; ``to_stream`` forwards them.
    """

    new_value: Any
    old_value: Any
    is_latest: bool = True


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """A time window: ``start`` inclusive, ``end`` exclusive, epoch ms (Kafka's ``Window``;
    a session window's end is its last record's timestamp, inclusive, and a sliding
    window's end is inclusive too, as in Kafka)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Windowed:
    """The key of a windowed aggregation's result: the record key and its window."""

    key: Any
    window: Window

    def as_fields(self) -> dict[str, Any]:
        """How a sink writes this key: ``{"key", "window_start", "window_end"}``, so SQL
        reads the window as fields (``key:window_start``), not as an opaque string."""
        return {"key": self.key, "window_start": self.window.start, "window_end": self.window.end}


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the record being processed came from; None for records not read from a topic."""

    topic: str
    partition: int
    offset: int


def to_millis(value: int | datetime, what: str = "timestamp") -> int:
    """Epoch milliseconds from an int or a datetime; rejects negatives with a clear error."""
    if isinstance(value, datetime):
        value = int(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be epoch milliseconds (int) or a datetime, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value}")
    return value


def duration_millis(value: timedelta, what: str, positive: bool = False) -> int:
    """Milliseconds of a duration: a ``timedelta`` of zero or more (more than zero when
    ``positive``). A number is refused, not taken as milliseconds: TypeError (ValueError
    when out of range), naming ``what`` and what to pass."""
    if not isinstance(value, timedelta):
        hint = ""
        if isinstance(value, int | float) and not isinstance(value, bool):
            hint = f" (for {value} ms: timedelta(milliseconds={value}))"
        raise TypeError(
            f"{what} must be a timedelta (from datetime import timedelta), "
            f"e.g. timedelta(seconds=30){hint}; got {value!r}"
        )
    ms = int(value / timedelta(milliseconds=1))
    if ms < 0 or (positive and ms == 0):
        bound = "positive (at least 1 ms)" if positive else "zero or more (not negative)"
        raise ValueError(f"{what} must be {bound}, got {value}")
    return ms
