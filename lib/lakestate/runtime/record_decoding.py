"""A task's input rows decoded into Records, as Kafka's source nodes deserialize
(``RecordDeserializer``): with the serdes of the source that reads each topic.

A row's key and value columns hold, per topic (``Codec``):

- JSON text (the default, Json serdes; every log table): parsed, then, for a source with
  other serdes, checked and converted by them (``Serde.from_json``: a Long key must be an
  int of 64 bits);
- base64 text of the raw bytes (a Kafka topic read with serdes other than Json: its
  reader's ``raw_bytes``): deserialized by the serdes (``Serde.deserialize``).

A row that does not decode is a deserialization failure of its task (the one line names
the source node, topic, partition, offset and the serde), or, for a global table's topic,
an error that fails the batch. A failed record's dead letter holds its key and value as
read: JSON text, or its raw bytes as base64 JSON strings (header
``__streams.errors.raw.encoding: base64``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace
from typing import Any

from lakestate.app import App
from lakestate.checkpoint.layout import kafka_topic_names
from lakestate.errors import SerializationException, StreamsException
from lakestate.processors.columns import new_record
from lakestate.processors.exception_handlers import RecordFailure
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.serdes import Serde, TopicSerdes
from lakestate.state.serde import loads as serde_loads
from lakestate.topology.graph import SOURCE, internal_topic_name

# Decoded keys are reused across the records of a batch (a few thousand keys usually carry
# most records); only immutable ones, and only this many.
_KEY_CACHE_LIMIT = 100_000
_IMMUTABLE = frozenset((str, int, bool, float, type(None)))
_MISSING = object()
_FAILURES = (TypeError, ValueError, SerializationException)


@dataclass(frozen=True)
class Codec:
    """How one topic's key and value columns become values: ``serdes`` over the raw bytes
    in base64 (``raw_bytes``) or over the JSON form."""

    serdes: TopicSerdes
    raw_bytes: bool

    def decode(self, serde: Serde, text: str | None) -> Any:
        if text is None:
            return None
        if self.raw_bytes:
            return serde.deserialize(base64.b64decode(text, validate=True))
        return serde.from_json(serde_loads(text))

    def failure(self, what: str, text: str) -> tuple[Exception, str | None] | None:
        """Why ``what``'s ``text`` does not decode, and the serde to blame (None: not
        JSON); None if it decodes."""
        serde = self.serdes.key if what == "key" else self.serdes.value
        if not self.raw_bytes:
            try:
                value = json.loads(text)
            except ValueError as exc:
                return exc, None
        try:
            if self.raw_bytes:
                serde.deserialize(base64.b64decode(text, validate=True))
            else:
                serde.from_json(value)
        except _FAILURES as exc:
            return exc, serde.name
        return None


def codecs_of(app: App) -> dict[str, Codec]:
    """The codec of each source topic of ``app`` (real names) read with serdes other than
    Json: external ones (``Consumed``) and repartition topics (``Grouped``, in the
    warehouse: their JSON form). Topics not named read as JSON text, the fast path."""
    kafka = kafka_topic_names(app)
    found = {}
    for node in app.topology.nodes.values():
        if node.kind == SOURCE and not node.serdes.is_json:
            for topic in node.topics:
                if node.internal_topic:
                    found[internal_topic_name(app.name, topic)] = Codec(node.serdes, False)
                else:
                    found[topic] = Codec(node.serdes, topic in kafka)
    return found


def texts(
    columns: dict[str, list], i: int, codec: Codec | None
) -> tuple[str | None, str | None, str | None]:
    """Row ``i``'s key, value and headers as read, as JSON text: raw bytes as base64
    JSON strings."""
    key, value = columns["key"][i], columns["value"][i]
    if codec is not None and codec.raw_bytes:
        key = None if key is None else json.dumps(key)
        value = None if value is None else json.dumps(value)
    return key, value, columns["headers"][i]


def processing_failure(
    task: Task, exc: Exception, columns: dict[str, list], i: int, record: Record, codec: Any
) -> RecordFailure:
    """The failure of row ``i``'s record in processing, with its texts as read."""
    topic, offset = columns["topic"][i], columns["offset"][i]
    failure = task.failure(exc, topic, offset, record, texts(columns, i, codec))
    return replace(failure, raw_bytes=True) if codec is not None and codec.raw_bytes else failure


def undecodable(task: Task, columns: dict[str, list], i: int, codec: Codec | None) -> RecordFailure:
    """The failure of row ``i``, whose key, value or headers does not decode."""
    found = _why(columns, i, codec)
    if found is None:
        raise StreamsException(f"row {i} could not be decoded")  # not reached
    what, exc, serde = found
    return task.deserialization_failure(
        exc,
        columns["topic"][i],
        columns["offset"][i],
        columns["timestamp"][i],
        texts(columns, i, codec),
        what,
        serde,
        codec is not None and codec.raw_bytes,
    )


def _why(
    columns: dict[str, list], i: int, codec: Codec | None
) -> tuple[str, Exception, str | None] | None:
    for what in ("key", "value", "headers"):
        text = columns[what][i]
        if text is None:
            continue
        if codec is not None and what != "headers":
            found = codec.failure(what, text)
            if found is not None:
                return what, found[0], found[1]
            continue
        try:
            json.loads(text)
        except (TypeError, ValueError) as exc:
            return what, exc, None
    return None


def decoded_headers(text: str | None) -> Any:
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


class Decoder:
    """Row index -> Record (keys cached). With a task, rows that cannot be decoded are its
    deserialization failures (``good``); without, they fail the batch."""

    def __init__(
        self,
        columns: dict[str, list],
        codecs: dict[str, Codec],
        task: Task | None = None,
        failures: dict[int, RecordFailure] | None = None,
    ) -> None:
        self.columns = columns
        self.codecs = codecs
        self.task = task
        self.failures = {} if failures is None else failures
        self.keys, self.values = columns["key"], columns["value"]
        self.headers, self.timestamps = columns["headers"], columns["timestamp"]
        self.topics = columns["topic"]
        self.key_cache: dict[str, Any] = {}

    def codec(self, i: int) -> Codec | None:
        return self.codecs.get(self.topics[i]) if self.codecs else None

    def good(self, rows: list[int]) -> tuple[list[int], list[Record]]:
        """The rows of ``rows`` that are not known failures and decode, and their records.
        A row that does not decode is a failure: its handler raises (log-and-fail) or it is
        added to the failures (log-and-continue)."""
        failures = self.failures
        if failures:
            rows = [i for i in rows if i not in failures]
        try:
            return rows, self.many(rows)
        except _Undecodable:
            pass
        good, records = [], []
        for i in rows:
            try:
                records.append(self.many([i])[0])
            except _Undecodable:
                failure = undecodable(self.task, self.columns, i, self.codec(i))
                if not self.task.continues(failure):
                    advice = self.task.handlers.advice(failure.kind)
                    raise SerializationException(f"{failure.message}; {advice}") from None
                failures[i] = failure
                continue
            good.append(i)
        return good, records

    def many(self, rows: list[int]) -> list[Record]:
        """The records of rows ``rows``, in that order."""
        loads, cache, missing = serde_loads, self.key_cache, _MISSING
        keys, values, headers, timestamps = self.keys, self.values, self.headers, self.timestamps
        codecs, topics = self.codecs, self.topics
        records = []
        append = records.append
        i = -1
        try:
            for i in rows:
                codec = codecs.get(topics[i]) if codecs else None
                key_text = keys[i]
                value_text = values[i]
                header_text = headers[i]
                if codec is not None:
                    key = codec.decode(codec.serdes.key, key_text)
                    value = codec.decode(codec.serdes.value, value_text)
                else:
                    if key_text is None:
                        key = None
                    else:
                        key = cache.get(key_text, missing)
                        if key is missing:
                            key = loads(key_text)
                            if type(key) in _IMMUTABLE and len(cache) < _KEY_CACHE_LIMIT:
                                cache[key_text] = key
                    value = None if value_text is None else loads(value_text)
                append(
                    new_record(
                        key,
                        value,
                        timestamps[i],
                        None if header_text is None else loads(header_text),
                    )
                )
        except _FAILURES:
            if self.task is not None:
                raise _Undecodable(i) from None
            raise StreamsException(global_failure(self.columns, i, self.codec(i))) from None
        return records


class _Undecodable(Exception):
    """Row ``args[0]`` could not be decoded."""


def global_failure(columns: dict[str, list], i: int, codec: Codec | None) -> str:
    """The error of row ``i`` of a global table's topic, which does not decode."""
    found = _why(columns, i, codec)
    if found is None:
        return f"row {i} of a global table's topic could not be decoded"
    what, exc, serde = found
    problem = "is not valid JSON" if serde is None else f"could not be deserialized by {serde}"
    return (
        f"{what} {problem} in topic {columns['topic'][i]!r} partition "
        f"{columns['partition'][i]} offset {columns['offset'][i]} (a global table's "
        f"topic; the batch commits nothing): {type(exc).__name__}: {exc}"
    )
