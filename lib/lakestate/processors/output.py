"""What a task emits and hands to its commit: each sink's record with its canonical JSON
texts (``Output``), the prepared commit (``PreparedCommit``), and the texts they are made of.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from lakestate.errors import SerializationException
from lakestate.records import Record, Windowed
from lakestate.serdes import TopicSerdes, base_key_serde
from lakestate.state.base import TopicPartition, Transaction
from lakestate.state.serde import checked_json_text


def dead_letter_text(value: Any) -> str | None:
    """A value's JSON text for a dead letter; one JSON cannot encode becomes its repr, as a
    JSON string (the driver takes any Python value)."""
    if value is None:
        return None
    try:
        return checked_json_text(value, "value")
    except SerializationException:
        return checked_json_text(repr(value), "value")


def text_value(text: str | None) -> Any:
    """The value of a JSON text, or the text itself when it is not JSON."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def sink_key_json(serdes: TopicSerdes, key: Any) -> Any:
    """A sink's key in its key serde's JSON form (a windowed key's inner key, by a windowed
    serde's inner serde)."""
    if type(key) is Windowed:
        return Windowed(base_key_serde(serdes.key).to_json(key.key), key.window)
    return serdes.key.to_json(key)


class PreparedCommit(NamedTuple):
    """What a task hands over to be committed (Kafka's ``Task.prepareCommit``): its open
    transaction (state changes, stream time included), the offsets they reflect, and the
    output it emitted since its last commit, in emission order."""

    transaction: Transaction
    offsets: Mapping[TopicPartition, int]
    output: list[Output]

    def writes(self) -> list:
        """The transaction's writes, by namespace then key (what committing applies)."""
        return list(self.transaction.changes())


class Output(NamedTuple):
    """A record a sink emitted, with its key, value and headers as canonical JSON text.
    ``partition_text`` is the text its partition is computed from: the key's, except for a
    windowed key, whose windows all go where its inner key goes (Kafka's
    ``WindowedStreamPartitioner``)."""

    topic: str
    record: Record
    key_text: str | None
    value_text: str | None
    headers_text: str | None
    partition_text: str | None
