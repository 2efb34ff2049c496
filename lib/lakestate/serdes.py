"""Serdes: how a topic's keys and values become bytes and back, as Kafka's
``org.apache.kafka.common.serialization`` classes do, and how each type is written in a
log table.

``Serdes.String()`` (UTF-8), ``Long()`` (8 bytes, big-endian two's complement),
``Integer()`` (4 bytes, big-endian), ``Double()`` (IEEE-754 binary64, big-endian),
``Bytes()`` (the bytes as they are) and ``Json()`` (lakestate's default: canonical UTF-8
JSON text, what every topic carried before serdes). Every serde maps None to None both ways
(Kafka's null), so a tombstone stays a tombstone.

Two forms of a value:

- its *bytes* (``serialize``/``deserialize``): what a Kafka topic carries. Deserializing
  bytes of the wrong size raises SerializationException with Kafka's message (``Size of
  data received by LongDeserializer is not 8``); String decodes malformed UTF-8 to U+FFFD,
  as Java's ``new String(bytes, UTF_8)`` does, so it never fails.
- its *JSON form* (``to_json``/``from_json``): what a log table's key and value columns
  hold (lakestate's own topics are JSON text). A Long key 5 is ``5``, a String key c1 is
  ``"c1"``, a Double ``1.5``, Bytes a base64 string (Kafka Connect's JsonConverter's
  convention). On a log table a serde checks and converts: reading, a value of the wrong
  type is a deserialization failure; writing, a SerializationException at the sink.

Nothing here knows where bytes come from: a Kafka topic's reader and producer use
``serialize``/``deserialize``, the rest of lakestate the JSON form.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lakestate.errors import SerializationException
from lakestate.records import Window, Windowed, duration_millis
from lakestate.state.serde import a_type, json_text, loads

__all__ = [
    "DEFAULT_SERDES",
    "Serde",
    "Serdes",
    "SessionWindowedSerde",
    "TimeWindowedSerde",
    "TopicSerdes",
    "WindowedSerdes",
    "base_key_serde",
    "changelog_text",
    "check_serde",
    "serde_named",
]

_LONG = (-(1 << 63), (1 << 63) - 1)
_INT = (-(1 << 31), (1 << 31) - 1)


class Serde:
    """A serializer and deserializer of one type (Kafka's ``Serde<T>``). ``name``: how
    errors and ``describe`` name it, e.g. ``Serdes.Long()``."""

    name = "Serdes.Json()"
    #: True when the JSON form is not the value itself (Bytes: base64 text): a store keeps
    #: the JSON form and gives the value back through ``from_json`` (state/serde_checked.py).
    json_form_differs = False

    def serialize(self, value: Any) -> bytes | None:
        """``value``'s bytes (None for None); SerializationException for a value the serde
        cannot hold."""
        raise NotImplementedError

    def deserialize(self, data: bytes | None) -> Any:
        """The value of ``data`` (None for None); SerializationException for bytes that
        are not one."""
        raise NotImplementedError

    def to_json(self, value: Any) -> Any:
        """``value`` as it is written in a log table (a JSON value), checked."""
        raise NotImplementedError

    def from_json(self, value: Any) -> Any:
        """The value a log table's JSON value ``value`` holds, checked."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def _refuse(self, value: Any, what: str) -> SerializationException:
        return SerializationException(
            f"{self.name} cannot serialize {a_type(value)} ({_short(value)}): it takes {what}"
        )

    def _checked_read(self, value: Any) -> Any:
        """``to_json``'s check, worded for a value read from a log table."""
        try:
            return self.to_json(value)
        except SerializationException as exc:
            read = str(exc).replace("cannot serialize", "cannot read", 1)
            raise SerializationException(f"{read} (the JSON value of a log table)") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:100] + "..."


class JsonSerde(Serde):
    """Canonical UTF-8 JSON text (sorted object keys, no spaces): any JSON value."""

    name = "Serdes.Json()"

    def serialize(self, value: Any) -> bytes | None:
        text = json_text(value)
        return None if text is None else text.encode("utf-8")

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return loads(bytes(data).decode("utf-8", errors="replace"))
        except ValueError as exc:
            raise SerializationException(f"{self.name}: the bytes are not JSON: {exc}") from None

    def to_json(self, value: Any) -> Any:
        return value

    def from_json(self, value: Any) -> Any:
        return value


class StringSerde(Serde):
    name = "Serdes.String()"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._refuse(value, "a str")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerializationException(f"{self.name}: not Unicode text: {exc}") from None

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else bytes(data).decode("utf-8", errors="replace")

    def to_json(self, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise self._refuse(value, "a str")
        return value

    def from_json(self, value: Any) -> Any:
        return self._checked_read(value)


class _FixedInt(Serde):
    """A signed big-endian integer of ``size`` bytes."""

    size = 8
    format = ">q"
    bounds = _LONG
    java = "Long"

    def serialize(self, value: Any) -> bytes | None:
        value = self.to_json(value)
        return None if value is None else struct.pack(self.format, value)

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) != self.size:
            raise SerializationException(
                f"Size of data received by {self.java}Deserializer is not {self.size}"
            )
        return struct.unpack(self.format, bytes(data))[0]

    def to_json(self, value: Any) -> Any:
        if value is None:
            return None
        low, high = self.bounds
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._refuse(value, f"an int of {self.size * 8} bits")
        if not low <= value <= high:
            raise SerializationException(
                f"{self.name} cannot serialize {value}: out of the {self.size * 8}-bit range "
                f"{low}..{high}"
            )
        return int(value)

    def from_json(self, value: Any) -> Any:
        return self._checked_read(value)


class LongSerde(_FixedInt):
    name = "Serdes.Long()"


class IntegerSerde(_FixedInt):
    name = "Serdes.Integer()"
    size = 4
    format = ">i"
    bounds = _INT
    java = "Integer"


class DoubleSerde(Serde):
    name = "Serdes.Double()"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._refuse(value, "a float")
        return struct.pack(">d", float(value))

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) != 8:
            raise SerializationException("Size of data received by DoubleDeserializer is not 8")
        return struct.unpack(">d", bytes(data))[0]

    def to_json(self, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._refuse(value, "a float")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise SerializationException(
                f"{self.name}: {value!r} has no JSON form, so no log table can hold it "
                "(a Kafka topic can)"
            )
        return value

    def from_json(self, value: Any) -> Any:
        return self._checked_read(value)


class BytesSerde(Serde):
    """Bytes as they are; in a log table, a store's entries and its changelog, a base64
    JSON string."""

    name = "Serdes.Bytes()"
    json_form_differs = True

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, bytes | bytearray | memoryview):
            raise self._refuse(value, "bytes")
        return bytes(value)

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else bytes(data)

    def to_json(self, value: Any) -> Any:
        data = self.serialize(value)
        return None if data is None else base64.b64encode(data).decode("ascii")

    def from_json(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise SerializationException(
                f"{self.name} reads a log table's value as a base64 string, got "
                f"{a_type(value)} ({_short(value)})"
            )
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise SerializationException(f"{self.name}: not base64: {exc}") from None


class Serdes:
    """Kafka's ``Serdes`` factory: ``Serdes.Long()`` and the others."""

    @staticmethod
    def String() -> Serde:  # noqa: N802 (Kafka's names)
        return StringSerde()

    @staticmethod
    def Long() -> Serde:  # noqa: N802
        return LongSerde()

    @staticmethod
    def Integer() -> Serde:  # noqa: N802
        return IntegerSerde()

    @staticmethod
    def Double() -> Serde:  # noqa: N802
        return DoubleSerde()

    @staticmethod
    def Bytes() -> Serde:  # noqa: N802
        return BytesSerde()

    @staticmethod
    def ByteArray() -> Serde:  # noqa: N802
        """The same as ``Bytes()`` (Python has one bytes type)."""
        return BytesSerde()

    @staticmethod
    def Json() -> Serde:  # noqa: N802
        return JsonSerde()


class _WindowedSerde(Serde):
    """Kafka's windowed serdes (``WindowedSerdes``): a ``Windowed`` key as its inner key's
    bytes by ``inner``, then its window's; in a log table, its JSON fields (``key``,
    ``window_start``, ``window_end``), the inner key in ``inner``'s JSON form."""

    def __init__(self, inner: Serde) -> None:
        self.inner = inner

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), *vars(self).values()))

    def _window_bytes(self, window: Window) -> bytes:
        raise NotImplementedError

    def _window_of(self, data: bytes) -> tuple[int, Window]:
        """The inner key's length in ``data`` and the window after it."""
        raise NotImplementedError

    def _windowed(self, value: Any) -> Windowed:
        if type(value) is not Windowed:
            raise self._refuse(value, "a Windowed key")
        return value

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        windowed = self._windowed(value)
        data = self.inner.serialize(windowed.key)
        if data is None:
            raise SerializationException(f"{self.name} cannot serialize a null inner key")
        return data + self._window_bytes(windowed.window)

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        length, window = self._window_of(bytes(data))
        return Windowed(self.inner.deserialize(bytes(data)[:length]), window)

    def to_json(self, value: Any) -> Any:
        if value is None:
            return None
        windowed = self._windowed(value)
        return Windowed(self.inner.to_json(windowed.key), windowed.window).as_fields()

    def from_json(self, value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not dict or set(value) != {"key", "window_start", "window_end"}:
            raise SerializationException(
                f"{self.name} reads a log table's key as its fields (key, window_start, "
                f"window_end), got {a_type(value)} ({_short(value)})"
            )
        window = Window(value["window_start"], value["window_end"])
        return Windowed(self.inner.from_json(value["key"]), window)


class TimeWindowedSerde(_WindowedSerde):
    """A time window's key: the inner key's bytes, then the window start (8 bytes,
    big-endian), as Kafka's ``TimeWindowedSerializer``; read back with windows
    ``window_size_ms`` long (Kafka's ``TimeWindowedDeserializer`` given the size)."""

    def __init__(self, inner: Serde, window_size_ms: int) -> None:
        super().__init__(inner)
        self.window_size_ms = window_size_ms
        self.name = f"WindowedSerdes.timeWindowedSerdeFrom({inner.name}, {window_size_ms})"

    def _window_bytes(self, window: Window) -> bytes:
        return struct.pack(">q", window.start)

    def _window_of(self, data: bytes) -> tuple[int, Window]:
        if len(data) < 8:
            raise SerializationException(f"{self.name}: {len(data)} bytes hold no window start")
        (start,) = struct.unpack(">q", data[-8:])
        return len(data) - 8, Window(start, start + self.window_size_ms)


class SessionWindowedSerde(_WindowedSerde):
    """A session's key: the inner key's bytes, then the session's end and start (8 bytes
    each, big-endian), as Kafka's ``SessionWindowedSerializer``."""

    def __init__(self, inner: Serde) -> None:
        super().__init__(inner)
        self.name = f"WindowedSerdes.sessionWindowedSerdeFrom({inner.name})"

    def _window_bytes(self, window: Window) -> bytes:
        return struct.pack(">qq", window.end, window.start)

    def _window_of(self, data: bytes) -> tuple[int, Window]:
        if len(data) < 16:
            raise SerializationException(f"{self.name}: {len(data)} bytes hold no session")
        end, start = struct.unpack(">qq", data[-16:])
        return len(data) - 16, Window(start, end)


class WindowedSerdes:
    """Kafka's ``WindowedSerdes`` factory, given the inner key's serde."""

    @staticmethod
    def time_windowed_serde_from(inner: Serde, window_size: timedelta) -> Serde:
        """Keys of time windows ``window_size`` long (Kafka's ``timeWindowedSerdeFrom``)."""
        size = duration_millis(window_size, "WindowedSerdes window_size", positive=True)
        return TimeWindowedSerde(check_serde(inner, "WindowedSerdes inner serde"), size)

    @staticmethod
    def session_windowed_serde_from(inner: Serde) -> Serde:
        """Keys of session windows (Kafka's ``sessionWindowedSerdeFrom``)."""
        return SessionWindowedSerde(check_serde(inner, "WindowedSerdes inner serde"))


def base_key_serde(serde: Serde) -> Serde:
    """The serde of a key's base: a windowed serde's inner one (what a windowed key's
    partition is computed from, Kafka's ``WindowedStreamPartitioner``), else ``serde``."""
    return serde.inner if isinstance(serde, _WindowedSerde) else serde


JSON = JsonSerde()


@dataclass(frozen=True)
class TopicSerdes:
    """The key and value serdes of one topic."""

    key: Serde = JSON
    value: Serde = JSON

    @property
    def is_json(self) -> bool:
        """True for the default (both Json): the topic's bytes are JSON text."""
        return type(self.key) is JsonSerde and type(self.value) is JsonSerde

    def __str__(self) -> str:
        return f"key {self.key.name}, value {self.value.name}"


DEFAULT_SERDES = TopicSerdes()


def check_serde(serde: Any, what: str) -> Serde:
    """``serde`` (None: the default, Json) checked to be a Serde; SerializationException
    naming ``what`` otherwise."""
    if serde is None:
        return JSON
    if not isinstance(serde, Serde):
        raise SerializationException(
            f"{what} must be a serde such as ls.Serdes.Long(), got {_short(serde)}"
        )
    return serde


def changelog_text(value: Any, serde: Serde = JSON) -> str | None:
    """The JSON text a store's changelog column (and so its SQL view) holds for ``value``, a
    key or value of a store whose serde is ``serde``: the text of its JSON form (a Bytes
    key as base64 text, which the view turns back into BINARY). SerializationException for
    bytes under any serde but Bytes (JSON has no bytes), or any other value without a JSON
    form; the caller names the store."""
    if type(serde) is not JsonSerde:
        return json_text(serde.to_json(value))
    try:  # the common case first: a changelog row per changed key
        return json_text(value)
    except (TypeError, ValueError) as exc:
        if isinstance(value, bytes | bytearray | memoryview):
            raise SerializationException(
                f"a Json store cannot hold {a_type(value)} ({_short(value)}): JSON has no bytes"
            ) from None
        raise SerializationException(f"a Json store cannot hold {_short(value)}: {exc}") from None


_BY_NAME = {
    serde.name: type(serde)
    for serde in (JSON, StringSerde(), LongSerde(), IntegerSerde(), DoubleSerde(), BytesSerde())
}


def serde_named(name: str) -> Serde:
    """The serde whose ``name`` is ``name`` (e.g. ``Serdes.Long()``, as an app's layout
    records a store's serdes); ValueError for a name no serde has."""
    found = _BY_NAME.get(name)
    if found is None:
        raise ValueError(f"no serde is named {name!r} (known: {', '.join(sorted(_BY_NAME))})")
    return found()
