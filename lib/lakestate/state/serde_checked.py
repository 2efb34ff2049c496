"""Key-value, window and session stores, suppression buffers and stream-stream join stores
with serdes (``Materialized.with_``, ``Grouped.with_``, ``StreamJoined.with_``): the one
seam between what a processor gives and gets and what the store holds, as Kafka's store serializes each put and deserializes each get with its serdes (a
window store's key serde is its windowed keys' inner key's).

A store holds each value in its serde's JSON form (``Serde.to_json``, checked), which is
the value itself for every serde but Bytes: a Bytes value is held as base64 text, since
every store keeps JSON (its local entries, its changelog rows, its SQL view). Reads give
the value back (``Serde.from_json``): the processor, the value getters and interactive
queries see the bytes they put. Keys are not converted: ``state.keys`` encodes bytes keys
as they are (in byte order, as Kafka's Bytes store), and the changelog shows them by the
key serde (``serdes.changelog_text``). Restores copy the stored entries as they are, so
they need nothing here.

A value the serde cannot represent (a string given to a Long store) fails at its put, with
an error naming the store, the serde and the value's type, before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lakestate.errors import SerializationException
from lakestate.serdes import Serde, TopicSerdes
from lakestate.state.serde import decode_value
from lakestate.state.stream_join import JoinBufferStore, LeftOrRightValueSerde, WaitingRecordsStore
from lakestate.state.suppression_buffer import BufferedRecord, SuppressionBuffer
from lakestate.state.timestamped import TimestampedKeyValueStore, ValueAndTimestamp
from lakestate.state.versioned import VersionedKeyValueStore, VersionedRecord
from lakestate.state.window import WindowStore

__all__ = ["checked_class"]


def _held(store: str, what: str, serde: Serde, item: Any) -> Any:
    """``item``'s JSON form by ``serde`` (what the store holds), checked."""
    if item is None:  # a delete (or a null key, which no store takes anyway)
        return None
    try:
        return serde.to_json(item)
    except SerializationException as exc:
        raise SerializationException(
            f"store {store!r} has {what} serde {serde.name} and cannot hold this {what}: {exc}"
        ) from None


class _Seam:
    """What every mixin below shares: a write's key checked and value held in its JSON
    form, a read's held form given back (by the store's ``store_serdes``)."""

    name: str
    store_serdes: TopicSerdes

    def _check_key(self, key: Any) -> None:
        _held(self.name, "key", self.store_serdes.key, key)

    def _held_value(self, value: Any) -> Any:
        return _held(self.name, "value", self.store_serdes.value, value)

    def _given(self, held: Any) -> Any:
        """The value a held JSON form stands for (only views whose value serde converts
        read through this)."""
        return None if held is None else self.store_serdes.value.from_json(held)

    def _given_vt(self, found: ValueAndTimestamp | None) -> ValueAndTimestamp | None:
        if found is None:
            return None
        return ValueAndTimestamp(self._given(found.value), found.timestamp)


class _KeyValueWrites(_Seam):
    """Overrides of the writing methods of a key-value, timestamped or versioned view
    class (mixed in before it). A timestamped view's ``put`` goes through
    ``encode_entry``, a key-value view's ``put_if_absent`` and ``put_all`` through
    ``put``."""

    def put(self, key: Any, value: Any, *rest: Any) -> Any:
        if isinstance(self, TimestampedKeyValueStore):
            return super().put(key, value, *rest)  # type: ignore[misc]
        self._check_key(key)
        return super().put(key, self._held_value(value), *rest)  # type: ignore[misc]

    def put_all(self, entries: Iterable[tuple[Any, Any]]) -> None:
        entries = list(entries)
        for key, value in entries:  # all checked before any is written
            self._check_key(key)
            self._held_value(value)
        super().put_all(entries)  # type: ignore[misc]

    def encode_entry(self, key: Any, value: Any, timestamp: int) -> Any:
        self._check_key(key)
        return super().encode_entry(key, self._held_value(value), timestamp)  # type: ignore[misc]

    def encode_json_entry(self, key: Any, value_json: bytes | None, timestamp: int) -> Any:
        # Only stores with serdes pay for decoding the value again.
        value = None if value_json is None else decode_value(value_json)
        if self.store_serdes.value.json_form_differs:
            return self.encode_entry(key, value, timestamp)
        self._check_key(key)
        self._held_value(value)  # the JSON form is the value: value_json stays
        return super().encode_json_entry(key, value_json, timestamp)  # type: ignore[misc]


class _TimestampedReads(_Seam):
    """Overrides of a timestamped view's primitive reads (``get`` goes through
    ``get_with_timestamp``) when its value serde converts (Bytes)."""

    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        return self._given_vt(super().get_with_timestamp(key))  # type: ignore[misc]

    def get_many_with_timestamp(self, keys: list[Any], encoded: Any = None) -> list[Any]:
        found = super().get_many_with_timestamp(keys, encoded)  # type: ignore[misc]
        return [self._given_vt(f) for f in found]

    def all(self) -> Iterator[tuple[Any, Any]]:
        for key, value in super().all():  # type: ignore[misc]
            yield key, self._given(value)

    def prefix_scan(self, prefix: tuple) -> Iterator[tuple[Any, ValueAndTimestamp | None]]:
        for key, found in super().prefix_scan(prefix):  # type: ignore[misc]
            yield key, self._given_vt(found)


class _VersionedReads(_Seam):
    """Overrides of a versioned view's reads when its value serde converts (Bytes)."""

    def _given_record(self, found: VersionedRecord | None) -> VersionedRecord | None:
        return None if found is None else found._replace(value=self._given(found.value))

    def get(self, key: Any, as_of: int | None = None) -> VersionedRecord | None:
        return self._given_record(super().get(key, as_of))  # type: ignore[misc]

    def get_many_as_of(self, lookups: list[tuple[Any, int]]) -> list[VersionedRecord | None]:
        return [self._given_record(f) for f in super().get_many_as_of(lookups)]  # type: ignore[misc]

    def all(self) -> Iterator[tuple[Any, VersionedRecord | None]]:
        for key, found in super().all():  # type: ignore[misc]
            yield key, self._given_record(found)


class _KeyValueReads(_Seam):
    """Overrides of a plain key-value view's reads (ranges go through ``_iterate``) when
    its value serde converts (Bytes)."""

    def get(self, key: Any) -> Any:
        return self._given(super().get(key))  # type: ignore[misc]

    def _iterate(self, *args: Any, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
        for key, found in super()._iterate(*args, **kwargs):  # type: ignore[misc]
            yield key, self._given(found)


class _WindowWrites(_Seam):
    """The override of a window or session view class's writes (``put`` goes through
    ``put_all``): the entries' inner keys checked and values held, all before any is
    written."""

    def put_all(self, entries: Iterable[tuple[Any, Any, int]]) -> None:
        held = []
        for windowed, value, timestamp in entries:
            self._check_key(windowed.key)
            held.append((windowed, self._held_value(value), timestamp))
        super().put_all(held)  # type: ignore[misc]


class _WindowReads(_Seam):
    """Overrides of a window or session view class's primitive reads (every other read
    goes through them) when its value serde converts (Bytes)."""

    def get_with_timestamp(self, key: Any, window: Any) -> ValueAndTimestamp | None:
        return self._given_vt(super().get_with_timestamp(key, window))  # type: ignore[misc]

    def get_windowed(self, windowed: Any) -> ValueAndTimestamp | None:
        return self._given_vt(super().get_windowed(windowed))  # type: ignore[misc]

    def windows_of(self, key: Any) -> Iterator[tuple[Any, ValueAndTimestamp]]:
        for window, found in super().windows_of(key):  # type: ignore[misc]
            yield window, self._given_vt(found)

    def windows_starting(self, *args: Any, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
        for window, found in super().windows_starting(*args, **kwargs):  # type: ignore[misc]
            yield window, self._given_vt(found)

    def all_with_timestamps(self) -> Iterator[tuple[Any, ValueAndTimestamp]]:
        for windowed, found in super().all_with_timestamps():  # type: ignore[misc]
            yield windowed, self._given_vt(found)


class _BufferWrites(_Seam):
    """The suppression buffer's write hook (a put's, staged in a chunk or not): the key
    checked (a windowed key by its windowed serde), the value and old value held."""

    def _held_update(self, key: Any, value: Any, old_value: Any) -> tuple[Any, Any]:
        self._check_key(key)
        return self._held_value(value), self._held_value(old_value)


class _BufferReads(_Seam):
    """The suppression buffer's read hooks when its value serde converts (Bytes): every
    record it gives (evicted or read), and ``prior_value``, hold the values again."""

    def _record_of(self, key: Any, entry: Any) -> BufferedRecord:
        record = super()._record_of(key, entry)  # type: ignore[misc]
        given = self._given
        return record._replace(value=given(record.value), prior_value=given(record.prior_value))

    def prior_value(self, key: Any) -> tuple[bool, Any]:
        found, prior = super().prior_value(key)  # type: ignore[misc]
        return found, self._given(prior)


class _JoinBufferWrites(_Seam):
    """A stream-stream join buffer's write hook: the processor holds every record it would
    put through ``held_value`` (key checked, value held), before the segment check."""

    def held_value(self, key: Any, value: Any) -> Any:
        self._check_key(key)
        return self._held_value(value)


class _JoinBufferReads(_Seam):
    """A join buffer's reads when its value serde converts (Bytes)."""

    def fetch(self, key: Any, time_from: int, time_to: int) -> list[tuple[int, Any]]:
        given = self._given
        return [(ts, given(v)) for ts, v in super().fetch(key, time_from, time_to)]  # type: ignore[misc]

    def all(self) -> Iterator[tuple[Any, int, int, Any]]:
        for key, ts, seq, value in super().all():  # type: ignore[misc]
            yield key, ts, seq, self._given(value)


class _WaitingSeam(_Seam):
    """What the waiting store's hooks share: a side's value serde (Kafka's
    LeftOrRightValueSerde holds each side's value by that side's serde)."""

    def _side(self, is_left: bool) -> Serde:
        serde = self.store_serdes.value
        return serde.side(is_left) if isinstance(serde, LeftOrRightValueSerde) else serde


class _WaitingWrites(_WaitingSeam):
    """The waiting store's write hook: ``add``'s key checked, its value held by its side's
    serde."""

    def add(self, key: Any, ts: int, is_left: bool, seq: int, value: Any) -> None:
        self._check_key(key)
        what = "left value" if is_left else "right value"
        held = _held(self.name, what, self._side(is_left), value)
        super().add(key, ts, is_left, seq, held)  # type: ignore[misc]


class _WaitingReads(_WaitingSeam):
    """The waiting store's read hook when a side's value serde converts (Bytes): ``scan``
    gives each value back by its side's serde."""

    def scan(self) -> Iterator[tuple[bytes, int, bool, Any, Any]]:
        for raw_key, ts, is_left, key, held in super().scan():  # type: ignore[misc]
            value = None if held is None else self._side(is_left).from_json(held)
            yield raw_key, ts, is_left, key, value


def _reads_of(view: type) -> type:
    """The mixin converting ``view``'s reads back (most specific kind first)."""
    for kind, reads in (
        (WindowStore, _WindowReads),
        (TimestampedKeyValueStore, _TimestampedReads),
        (VersionedKeyValueStore, _VersionedReads),
        (SuppressionBuffer, _BufferReads),
        (JoinBufferStore, _JoinBufferReads),
        (WaitingRecordsStore, _WaitingReads),
    ):
        if issubclass(view, kind):
            return reads
    return _KeyValueReads


_CLASSES: dict[tuple[type, TopicSerdes], type] = {}


def checked_class(view: type, serdes: TopicSerdes) -> type:
    """``view`` (a key-value, window, session view, suppression buffer or stream-stream
    join store class) whose instances check and convert every write by ``serdes`` and,
    when the value serde converts (Bytes), give back every value read; the class is a
    subclass of ``view``, so ``isinstance`` still holds."""
    found = _CLASSES.get((view, serdes))
    if found is None:
        if issubclass(view, WindowStore):
            mixins: tuple[type, ...] = (_WindowWrites,)
        elif issubclass(view, SuppressionBuffer):
            mixins = (_BufferWrites,)
        elif issubclass(view, JoinBufferStore):
            mixins = (_JoinBufferWrites,)
        elif issubclass(view, WaitingRecordsStore):
            mixins = (_WaitingWrites,)
        else:
            mixins = (_KeyValueWrites,)
        if serdes.value.json_form_differs:
            mixins = (_reads_of(view), *mixins)
        found = type(f"SerdeChecked{view.__name__}", (*mixins, view), {"store_serdes": serdes})
        _CLASSES[(view, serdes)] = found
    return found
