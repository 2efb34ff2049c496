"""Stateless stream operators: filter, map_values, select_key, map, peek, sinks, sources.

Null keys pass through them unchanged, as in Kafka Streams.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.records import Change, Record


class PassThrough(Processor):
    """A source node: forwards what it reads."""

    chunked = True

    def process_chunk(self, chunk: Chunk) -> Chunk:
        return chunk


class ChangeDecodingSource(Processor):
    """Source of a repartition topic that carries KTable changes as {"new", "old"}."""

    chunked = True

    def process_chunk(self, chunk: Chunk) -> Chunk:
        decode = self._decode
        return chunk.with_records([r.with_value(decode(r.value)) for r in chunk.records])

    @staticmethod
    def _decode(value: dict) -> Change:
        return Change(value.get("new"), value.get("old"))


class Filter(Processor):
    chunked = True

    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool = False) -> None:
        self.predicate = predicate
        self.negate = negate

    def process_chunk(self, chunk: Chunk) -> Chunk:
        predicate, negate = self.predicate, self.negate
        return chunk.select(
            [i for i, r in enumerate(chunk.records) if bool(predicate(r.key, r.value)) != negate]
        )


class MapValues(Processor):
    chunked = True

    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        self.mapper = mapper

    def process_chunk(self, chunk: Chunk) -> Chunk:
        mapper = self.mapper
        return chunk.with_records([r.with_value(mapper(r.value)) for r in chunk.records])


class SelectKey(Processor):
    chunked = True

    def __init__(self, selector: Callable[[Any, Any], Any]) -> None:
        self.selector = selector

    def process_chunk(self, chunk: Chunk) -> Chunk:
        selector = self.selector
        return chunk.with_records([r.with_key(selector(r.key, r.value)) for r in chunk.records])


class Map(Processor):
    chunked = True

    def __init__(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.mapper = mapper

    def process_chunk(self, chunk: Chunk) -> Chunk:
        return chunk.with_records([self._map(r) for r in chunk.records])

    def _map(self, record: Record) -> Record:
        result = self.mapper(record.key, record.value)
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError(f"mapper must return a (key, value) tuple, got {result!r}")
        key, value = result
        return Record(key, value, record.timestamp, record.headers)


class Peek(Processor):
    def __init__(self, action: Callable[[Any, Any], None]) -> None:
        self.action = action

    def process(self, record: Record) -> None:
        self.action(record.key, record.value)
        self.context.forward(record)


class Sink(Processor):
    """Writes to a topic through the task's record collector.

    ``drop_null_keys`` is set on repartition sinks: a record without a key cannot be
    routed to the right partition, and Kafka Streams drops it there too.
    """

    chunked = True

    def __init__(self, topic: str, drop_null_keys: bool = False, encode_changes: bool = False):
        self.topic = topic
        self.drop_null_keys = drop_null_keys
        self.encode_changes = encode_changes

    def process_chunk(self, chunk: Chunk) -> Chunk:
        self.context.send_many(self.topic, self._outgoing(chunk.records))
        return chunk.select([])

    def _outgoing(self, records: list[Record]) -> list[Record]:
        """What the sink writes of ``records``."""
        if self.drop_null_keys:
            records = [r for r in records if r.key is not None]
        if self.encode_changes:
            records = [
                r.with_value({"new": r.value.new_value, "old": r.value.old_value}) for r in records
            ]
        return records
