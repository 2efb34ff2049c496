"""Key-value, window and session stores with serdes (``Materialized.with_``,
``Grouped.with_``): every write checked to fit them, as Kafka's store serializes each put
with its serdes (a window store's key serde is its windowed keys' inner key's).

Values are still kept as JSON (every store's form); the serdes only say what a store may
hold, so that its SQL view can show typed columns (a Long value as BIGINT). A value the
serde cannot represent (a string given to a Long store) fails at its put, with an error
naming the store, the serde and the value's type, instead of a view that cannot cast it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lakestate.errors import SerializationException
from lakestate.serdes import Serde, TopicSerdes
from lakestate.state.serde import decode_value
from lakestate.state.window import WindowStore

__all__ = ["checked_class"]


def _check(store: str, what: str, serde: Serde, item: Any) -> None:
    if item is None:  # a delete (or a null key, which no store takes anyway)
        return
    try:
        serde.to_json(item)
    except SerializationException as exc:
        raise SerializationException(
            f"store {store!r} has {what} serde {serde.name} and cannot hold this {what}: {exc}"
        ) from None


class _SerdeChecked:
    """Overrides of the writing methods of a key-value view class (mixed in before it)."""

    name: str
    store_serdes: TopicSerdes

    def _check_entry(self, key: Any, value: Any) -> None:
        _check(self.name, "key", self.store_serdes.key, key)
        _check(self.name, "value", self.store_serdes.value, value)

    def put(self, key: Any, value: Any, *rest: Any) -> Any:
        self._check_entry(key, value)
        return super().put(key, value, *rest)  # type: ignore[misc]

    def put_if_absent(self, key: Any, value: Any, *rest: Any) -> Any:
        self._check_entry(key, value)
        return super().put_if_absent(key, value, *rest)  # type: ignore[misc]

    def put_all(self, entries: Iterable[tuple[Any, Any]]) -> None:
        entries = list(entries)
        for key, value in entries:
            self._check_entry(key, value)
        super().put_all(entries)  # type: ignore[misc]

    def encode_entry(self, key: Any, value: Any, timestamp: int) -> Any:
        self._check_entry(key, value)
        return super().encode_entry(key, value, timestamp)  # type: ignore[misc]

    def encode_json_entry(self, key: Any, value_json: bytes | None, timestamp: int) -> Any:
        # Only stores with serdes pay for decoding the value again.
        self._check_entry(key, None if value_json is None else decode_value(value_json))
        return super().encode_json_entry(key, value_json, timestamp)  # type: ignore[misc]


class _WindowSerdeChecked:
    """The override of a window or session view class's writes (``put`` goes through
    ``put_all``): the entries' inner keys and values, all checked before any is written."""

    name: str
    store_serdes: TopicSerdes

    def put_all(self, entries: Iterable[tuple[Any, Any, int]]) -> None:
        entries = list(entries)
        for windowed, value, _ in entries:
            _check(self.name, "key", self.store_serdes.key, windowed.key)
            _check(self.name, "value", self.store_serdes.value, value)
        super().put_all(entries)  # type: ignore[misc]


_CLASSES: dict[tuple[type, TopicSerdes], type] = {}


def checked_class(view: type, serdes: TopicSerdes) -> type:
    """``view`` (a key-value, window or session view class) whose instances check every
    write against ``serdes``; the class is a subclass of ``view``, so ``isinstance`` still
    holds."""
    found = _CLASSES.get((view, serdes))
    if found is None:
        mixin = _WindowSerdeChecked if issubclass(view, WindowStore) else _SerdeChecked
        found = type(f"SerdeChecked{view.__name__}", (mixin, view), {"store_serdes": serdes})
        _CLASSES[(view, serdes)] = found
    return found
