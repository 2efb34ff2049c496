"""What a task emits and hands to its commit: each sink's record with its canonical JSON
texts (``Output``), or a run of them as columns (``OutputBlock``), the prepared commit
(``PreparedCommit``), and the texts they are made of.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from lakestate.errors import SerializationException
from lakestate.processors.columns import Columns
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


def outputs_of(topic: str, records: Sequence[Record], serdes: TopicSerdes | None) -> list[Output]:
    """What a sink of ``topic`` emits for ``records``, its texts encoded now, once: a value
    that cannot be written fails at the sink, by name, and the engine writes these texts as
    they are. ``serdes``: the sink's, when not JSON."""
    outputs = []
    append = outputs.append
    for record in records:
        headers = record.headers
        key, value = record.key, record.value
        if serdes is not None:  # the JSON form of the serdes' types (lakestate/serdes.py)
            key, value = sink_key_json(serdes, key), serdes.value.to_json(value)
        if type(key) is Windowed:
            key_text = checked_json_text(key.as_fields(), "key")
            partition_text = checked_json_text(key.key, "key")
        else:
            key_text = partition_text = checked_json_text(key, "key")
        append(
            Output(
                topic,
                record,
                key_text,
                checked_json_text(value, "value"),
                None if headers is None else checked_json_text(headers, "headers"),
                partition_text,
            )
        )
    return outputs


class OutputBlock(NamedTuple):
    """What a JSON sink of ``topic`` emits for the plain records of ``columns``, as columns:
    record ``i``'s key text (its partition text too) is ``key_texts[ids[i]]``, its value
    text ``value_texts[i]`` or, when that is None, the decimal of ``columns.values[i]`` (an
    int64 array); no headers. The same as ``outputs_of`` gives (``outputs``)."""

    topic: str
    columns: Columns
    ids: np.ndarray
    key_texts: list[str | None]
    value_texts: list[str | None] | None

    @staticmethod
    def of(topic: str, columns: Columns) -> OutputBlock | None:
        """The block for ``columns`` (plain records), or None for keys a block does not
        take (windowed). A key or value JSON cannot encode raises, as ``outputs_of``."""
        keys = columns.group_keys
        if all(type(k) is str or type(k) is int for k in keys):
            # Equal str or int keys share a group and have one text: once per key.
            ids = columns.ids
        elif any(type(k) is Windowed for k in keys):
            return None
        else:  # other types (a float, a tuple): each record's own key's text
            ids, keys = np.arange(len(columns), dtype=np.int64), columns.keys
        key_texts = [checked_json_text(k, "key") for k in keys]
        values = columns.values
        if isinstance(values, np.ndarray):
            value_texts = None
        else:
            value_texts = [checked_json_text(v, "value") for v in values]
        return OutputBlock(topic, columns, ids, key_texts, value_texts)

    def outputs(self) -> list[Output]:
        """One ``Output`` per record."""
        texts = self.key_texts
        keys = [texts[i] for i in self.ids.tolist()]
        values = self.value_texts
        if values is None:
            values = [int.__repr__(v) for v in self.columns.values.tolist()]  # type: ignore[union-attr]
        topic = self.topic
        return [
            Output(topic, r, k, v, None, k)
            for r, k, v in zip(self.columns.records(), keys, values, strict=True)
        ]


def expanded(entries: Sequence[Output | OutputBlock]) -> list[Output]:
    """``entries`` with each block as its ``Output`` records."""
    if not any(type(e) is OutputBlock for e in entries):
        return list(entries)  # type: ignore[arg-type]
    out: list[Output] = []
    for entry in entries:
        if type(entry) is OutputBlock:
            out.extend(entry.outputs())
        else:
            out.append(entry)  # type: ignore[arg-type]
    return out
