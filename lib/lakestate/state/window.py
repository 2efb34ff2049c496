"""Window and session stores: a windowed aggregation's state, per (key, window).

Both kinds keep the same entries in one namespace of the task's transactional store (keys
from ``state/keys.py``, which order ``Windowed`` keys by key, then window start, then end):

==================================================  =======================================
key                                                 value
==================================================  =======================================
``b"w" + encode_key(Windowed(key, window))``        JSON ``[value, ts]`` (the window entry)
``b"e" + encode_i64_be(end) + encode_key(...)``     ``b""`` (end index: windows by end time)
==================================================  =======================================

Only window entries are state: rows ``(key, window_start, window_end, value, ts)`` of the
store's Delta changelog. The end index is derived (``is_index_only``); it lets the
aggregation drop every window that has closed with one range scan, so the store holds the
open windows only: Kafka's default retention (window size + grace for time windows, gap +
grace for sessions) measured from the window's end.

A processor's window store (``Stores.persistent_window_store``) also has a retention and a
window size: it applies the retention itself, as Kafka's does (below, ``WindowStore``).

``WindowStore`` reads like Kafka's ``WindowStore`` (windows of a key by start time);
``SessionStore`` like its ``SessionStore`` (sessions of a key, merged by the aggregation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from lakestate.errors import InvalidStateStoreException
from lakestate.records import Window, Windowed
from lakestate.serdes import JSON, Serde, changelog_text
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.keys import decode_key, encode_i64_be, encode_key
from lakestate.state.serde import decode_value, encode_value, json_text
from lakestate.state.timestamped import ValueAndTimestamp

__all__ = ["SessionStore", "WindowStore"]

WINDOW_PREFIX = b"w"
END_PREFIX = b"e"
_WINDOW_END = b"x"  # the smallest key above every window entry
_END_END = b"f"  # the smallest key above every end-index entry
_TS_BYTES = 8


def _window_key(windowed: Windowed) -> bytes:
    return WINDOW_PREFIX + encode_key(windowed)


def _end_key(raw_windowed: bytes, end: int) -> bytes:
    return END_PREFIX + encode_i64_be(end) + raw_windowed


def _key_range(key: Any) -> tuple[bytes, bytes]:
    """The byte range of every window entry of ``key``: a Windowed encoding is its tag,
    the key's own (self-delimiting) encoding, then 16 bytes of bounds. Another key's
    encoding may extend this one's (``b""`` and ``b"\\x00"``, ``""`` and ``"\\x00"``:
    state.keys escapes a 0x00 as 0x00 0xff), so its entries fall in the range too, each
    longer: readers keep the entries of exactly ``len(start) + 16`` bytes."""
    prefix = _window_key(Windowed(key, Window(0, 0)))[:-16]
    return prefix, prefix + b"\xff" * 17


class WindowStore:
    """(key, window) -> (aggregate, timestamp) in one namespace of a task's store.

    Reads go through ``source()`` (the task's transaction, or the StateStore for read-only
    queries); writes need a transaction. A None value deletes the window.

    With ``retention_ms`` and ``window_size_ms`` (a processor's store), every window is
    ``window_size_ms`` long and the store keeps Kafka's retention: its observed stream time
    is the latest window start put, and a window starting at or before observed stream time
    - retention is expired: deleted when a put moves stream time past it, and a put of it
    is dropped. Kafka drops whole segments and hides expired windows from reads; deleting
    them at once gives the same reads. Without them (the DSL's aggregations), the
    processor deletes closed windows itself (``delete_ending_before``).
    """

    kind = "window"

    def __init__(
        self,
        name: str,
        source: Callable[[], Any],
        retention_ms: int | None = None,
        window_size_ms: int | None = None,
    ) -> None:
        if name in RESERVED_NAMESPACES:
            raise InvalidStateStoreException(f"store name {name!r} is reserved")
        if (retention_ms is None) != (window_size_ms is None):
            raise InvalidStateStoreException(
                f"window store {name!r}: give both a retention and a window size, or neither"
            )
        self.name = name
        self._source = source
        self._retention_ms = retention_ms
        self._window_size_ms = window_size_ms

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _writer(self) -> Any:
        txn = self._source()
        if not hasattr(txn, "put"):
            raise InvalidStateStoreException(f"store {self.name!r} is read-only here")
        return txn

    # -- reads -----------------------------------------------------------------------------

    def get_with_timestamp(self, key: Any, window: Window) -> ValueAndTimestamp | None:
        """The aggregate of ``key`` in ``window`` and its timestamp, or None."""
        raw = self._source().get(self.name, _window_key(Windowed(key, window)))
        return None if raw is None else ValueAndTimestamp(*decode_value(raw))

    def get_windowed(self, windowed: Windowed) -> ValueAndTimestamp | None:
        """``get_with_timestamp(windowed.key, windowed.window)``: the caller's object is
        encoded, so its later put of the same object reuses the encoding (state/keys.py)."""
        raw = self._source().get(self.name, WINDOW_PREFIX + encode_key(windowed))
        return None if raw is None else ValueAndTimestamp(*decode_value(raw))

    def get(self, key: Any, window: Window) -> Any:
        found = self.get_with_timestamp(key, window)
        return None if found is None else found.value

    def windows_of(self, key: Any) -> Iterator[tuple[Window, ValueAndTimestamp]]:
        """Every window ``key`` has, by start then end."""
        start, end = _key_range(key)
        size = len(start) + 16  # a longer key's encoding may extend this one's (_key_range)
        for raw_key, raw in self._source().iterate(self.name, start, end, False):
            if len(raw_key) == size:
                yield decode_key(raw_key[1:]).window, ValueAndTimestamp(*decode_value(raw))

    def windows_starting(
        self, key: Any, time_from: int, time_to: int, backward: bool = False
    ) -> Iterator[tuple[Window, ValueAndTimestamp]]:
        """``key``'s windows starting in [time_from, time_to], by start then end (``backward``:
        the reverse), with one range scan (Kafka's ``fetch``/``backwardFetch`` by key)."""
        if time_to < time_from:
            return
        low = _window_key(Windowed(key, Window(time_from, time_from)))
        # Every window starting at time_to sorts below the first key starting after it.
        high = _window_key(Windowed(key, Window(time_to + 1, time_to + 1)))
        for raw_key, raw in self._source().iterate(self.name, low, high, backward):
            yield decode_key(raw_key[1:]).window, ValueAndTimestamp(*decode_value(raw))

    def fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """(window start, aggregate) of ``key``'s windows starting in [time_from, time_to],
        by start (Kafka's ``WindowStore.fetch(key, timeFrom, timeTo)``)."""
        for window, found in self.windows_of(key):
            if time_from <= window.start <= time_to:
                yield window.start, found.value

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed, Any]]:
        """(Windowed key, aggregate) of every window starting in [time_from, time_to]."""
        for windowed, found in self.all_with_timestamps():
            if time_from <= windowed.window.start <= time_to:
                yield windowed, found.value

    def all(self) -> Iterator[tuple[Windowed, Any]]:
        """(Windowed key, aggregate) of every window, by key then window."""
        for windowed, found in self.all_with_timestamps():
            yield windowed, found.value

    def all_with_timestamps(self) -> Iterator[tuple[Windowed, ValueAndTimestamp]]:
        items = self._source().iterate(self.name, WINDOW_PREFIX, _WINDOW_END, False)
        for raw_key, raw in items:
            yield decode_key(raw_key[1:]), ValueAndTimestamp(*decode_value(raw))

    def approximate_num_entries(self) -> int:
        return sum(1 for _ in self._source().iterate(self.name, WINDOW_PREFIX, _WINDOW_END, False))

    # -- writes ----------------------------------------------------------------------------

    def put(self, key: Any, window: Window, value: Any, timestamp: int) -> None:
        """Set the aggregate of ``key`` in ``window``; None deletes the window."""
        self.put_all([(Windowed(key, window), value, timestamp)])

    def put_all(self, entries: Iterable[tuple[Windowed, Any, int]]) -> None:
        """``put`` of each (Windowed key, value, timestamp), in one write. Every key and
        value is encoded before anything is written, so a bad one writes nothing. With a
        retention, expired windows are dropped and the ones a put expires deleted."""
        if self._retention_ms is not None:
            self._put_retained(list(entries))
            return
        self._write(entries)

    def _put_retained(self, entries: list[tuple[Windowed, Any, int]]) -> None:
        size = self._window_size_ms
        for windowed, _, _ in entries:
            window = windowed.window
            if window.end - window.start != size:
                raise InvalidStateStoreException(
                    f"window store {self.name!r} holds windows of {size} ms (its window size), "
                    f"got {window}: put windows [start, start + {size})"
                )
        observed = self.observed_stream_time()
        live: list[tuple[Windowed, Any, int]] = []
        for entry in entries:
            start = entry[0].window.start
            observed = start if observed is None else max(observed, start)
            if start > observed - self._retention_ms:
                live.append(entry)
        self._write(live)
        if observed is not None:
            # Windows of one size: those starting at or before the limit end before it + size.
            self.delete_ending_before(observed - self._retention_ms + 1 + size)

    def observed_stream_time(self) -> int | None:
        """The latest window start put (None before any): the start of the window ending
        last, since every window has the store's size. Read from the store (not kept
        here), so it is the transaction's own, also after a rollback."""
        for raw_key, _ in self._source().iterate(self.name, END_PREFIX, _END_END, True):
            return decode_key(raw_key[1 + _TS_BYTES :]).window.start
        return None

    def _write(self, entries: Iterable[tuple[Windowed, Any, int]]) -> None:
        txn = self._writer()
        name = self.name
        writes: list[tuple[bytes, bytes | None]] = []
        for windowed, value, timestamp in entries:
            raw_windowed = encode_key(windowed)
            end_key = _end_key(raw_windowed, windowed.window.end)
            if value is None:
                writes.append((WINDOW_PREFIX + raw_windowed, None))
                writes.append((end_key, None))
            else:
                raw = b"[%b,%d]" % (encode_value(value), timestamp)
                writes.append((WINDOW_PREFIX + raw_windowed, raw))
                writes.append((end_key, b""))
        txn.put_all(name, writes)

    def delete_ending_before(self, end: int, since: int | None = None) -> int:
        """Delete every window whose end is below ``end`` (closed windows); returns how
        many. One range scan of the end index, from ``since`` when given (the caller knows
        that no window ends below it: the scan then skips the tombstones of the windows
        it deleted before in the same transaction)."""
        txn = self._writer()
        name = self.name
        stop = END_PREFIX + encode_i64_be(end)
        first = END_PREFIX if since is None else END_PREFIX + encode_i64_be(min(since, end))
        doomed = [raw_key for raw_key, _ in txn.iterate(name, first, stop, False)]
        writes: list[tuple[bytes, bytes | None]] = []
        for raw_key in doomed:
            writes.append((raw_key, None))
            writes.append((WINDOW_PREFIX + raw_key[1 + _TS_BYTES :], None))
        if writes:
            txn.put_all(name, writes)
        return len(doomed)

    # -- the Delta changelog (StoreKind) ---------------------------------------------------

    # key and value as JSON text, like the other stores; window bounds and ts in epoch ms.
    STATE_COLUMNS = (
        ("key", "STRING"),
        ("window_start", "BIGINT"),
        ("window_end", "BIGINT"),
        ("value", "STRING"),
        ("ts", "BIGINT"),
    )

    @staticmethod
    def is_index_only(raw_key: bytes) -> bool:
        """End-index entries are derived from the window entries."""
        return not raw_key.startswith(WINDOW_PREFIX)

    @staticmethod
    def changelog_row(
        raw_key: bytes, raw_value: bytes, key_serde: Serde = JSON
    ) -> dict[str, Any] | None:
        if not raw_key.startswith(WINDOW_PREFIX):
            return None
        windowed = decode_key(raw_key[1:])
        value, timestamp = decode_value(raw_value)
        return {
            "key": changelog_text(windowed.key, key_serde),
            "window_start": windowed.window.start,
            "window_end": windowed.window.end,
            "value": json_text(value),
            "ts": timestamp,
        }

    @staticmethod
    def restore_entries(txn: Any, name: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply changelog rows (one per key), rebuilding the end index beside them."""
        writes: list[tuple[bytes, bytes | None]] = []
        for raw_key, raw_value in entries:
            if not raw_key.startswith(WINDOW_PREFIX):
                continue
            raw_windowed = raw_key[1:]
            end_key = _end_key(raw_windowed, decode_key(raw_windowed).window.end)
            writes.append((raw_key, raw_value))
            writes.append((end_key, None if raw_value is None else b""))
        if writes:
            txn.put_all(name, writes)

    @classmethod
    def restore_entry(cls, txn: Any, name: str, raw_key: bytes, raw_value: bytes | None) -> None:
        cls.restore_entries(txn, name, ((raw_key, raw_value),))


class SessionStore(WindowStore):
    """Session windows of a key -> aggregate, with Kafka's ``SessionStore`` reads. A
    session's window end is its last record's timestamp (inclusive)."""

    kind = "session"

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        """The aggregate of ``key``'s session [start, end], or None."""
        return self.get(key, Window(start, end))

    def find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[Window, Any]]:
        """``key``'s sessions that end at or after ``earliest_session_end`` and start at or
        before ``latest_session_start``, by end time (Kafka's order)."""
        found = [
            (window, held.value)
            for window, held in self.windows_of(key)
            if window.end >= earliest_session_end and window.start <= latest_session_start
        ]
        found.sort(key=lambda item: (item[0].end, item[0].start))
        return found

    def fetch(self, key: Any) -> Iterator[tuple[Windowed, Any]]:  # type: ignore[override]
        """(Windowed key, aggregate) of every session of ``key``, by end time."""
        sessions = sorted(self.windows_of(key), key=lambda item: (item[0].end, item[0].start))
        for window, held in sessions:
            yield Windowed(key, window), held.value
