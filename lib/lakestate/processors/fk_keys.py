"""The keys of a foreign-key join's subscription store: ``(foreign key, primary key)``.

The store holds each key as ``state.keys`` encodes the tuple: each element self-delimiting
(a bytes or str element escapes its NUL bytes and ends with a NUL), so the prefix scan of
one foreign key (``prefix_range((fk,))``) never reaches a foreign key whose bytes extend it
(``b""`` and ``b"\\x00"``, ``b"a"`` and ``b"ab"``), and a foreign key's subscribers come in
primary-key order (byte order for Bytes and String keys).

How the changelog and the SQL view show a key is the store's key serde's business. With
Json keys on both tables it stays the store's Json (the key as a JSON list). When a table's
keys are Bytes, a JSON list cannot hold them, and the store takes Kafka's key serde instead:
Kafka's subscription store is a ``Serdes.Bytes()`` store whose keys are
``CombinedKeySchema.toBytes(fk, pk)``: the foreign key's serialized length (4 bytes,
big-endian), its bytes, then the primary key's bytes, each by its table's key serde.
``CombinedKeySerde`` writes that: the changelog holds it as base64 text, the view shows it
as ``BINARY`` (the layout records the serde as ``Serdes.Bytes()``, which it is in Kafka).
"""

from __future__ import annotations

import struct
from typing import Any

from lakestate.errors import SerializationException
from lakestate.serdes import DEFAULT_SERDES, JSON, BytesSerde, Serde, TopicSerdes

_LENGTH = struct.Struct(">i")
_BYTES = BytesSerde()  # the combined key's JSON form is its bytes' base64, as a Bytes key's


class CombinedKeySerde(Serde):
    """Kafka's ``CombinedKeySchema`` as a serde of ``(foreign key, primary key)`` tuples,
    the foreign key by ``foreign``, the primary key by ``primary`` (their tables' key
    serdes). Its JSON form is the base64 text of its bytes, as a Bytes key's."""

    # Kafka's subscription store's key serde: the name the layout, ``describe`` and the
    # SQL view (BINARY) know it by.
    name = "Serdes.Bytes()"
    json_form_differs = True

    def __init__(self, foreign: Serde, primary: Serde) -> None:
        self.foreign = foreign
        self.primary = primary

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), self.foreign, self.primary))

    def __repr__(self) -> str:
        return f"CombinedKeySchema({self.foreign.name}, {self.primary.name})"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if type(value) is not tuple or len(value) != 2:
            raise self._refuse(value, "a (foreign key, primary key) tuple")
        fk, pk = self.foreign.serialize(value[0]), self.primary.serialize(value[1])
        if fk is None or pk is None:
            raise SerializationException(f"{self!r} cannot serialize a null key: {value!r}")
        return _LENGTH.pack(len(fk)) + fk + pk

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        data = bytes(data)
        if len(data) < 4 or _LENGTH.unpack_from(data)[0] > len(data) - 4:
            raise SerializationException(f"{self!r}: {len(data)} bytes hold no combined key")
        end = 4 + _LENGTH.unpack_from(data)[0]
        return self.foreign.deserialize(data[4:end]), self.primary.deserialize(data[end:])

    def to_json(self, value: Any) -> Any:
        return _BYTES.to_json(self.serialize(value))

    def from_json(self, value: Any) -> Any:
        return self.deserialize(_BYTES.from_json(value))


def subscription_store_serdes(foreign: Serde, primary: Serde) -> TopicSerdes:
    """The subscription store's serdes for tables keyed by ``foreign`` (the other table)
    and ``primary`` (this one): Kafka's combined key when either key's JSON form is not
    the key itself (Bytes), else Json (the value, a hash, is JSON text either way)."""
    if foreign.json_form_differs or primary.json_form_differs:
        return TopicSerdes(CombinedKeySerde(foreign, primary), JSON)
    return DEFAULT_SERDES
