"""Stateless stream operators: filter, map_values, select_key, map, flat_map(_values),
split's branch node, peek, foreach, sinks, sources (and merge, a pass-through).

Null keys pass through them unchanged, as in Kafka Streams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


class DecodingSource(Processor):
    """Source of an internal topic whose values ``decode`` turns back into their type."""

    chunked = True

    def __init__(self, decode: Callable[[Any], Any]) -> None:
        self.decode = decode

    def process_chunk(self, chunk: Chunk) -> Chunk:
        decode = self.decode
        return chunk.with_records([r.with_value(decode(r.value)) for r in chunk.records])


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


class FlatMap(Processor):
    """``mapper(key, value)`` gives an iterable of (key, value) tuples: each becomes a
    record with the input's timestamp and headers, in order; an empty one drops the record."""

    chunked = True

    def __init__(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> None:
        self.mapper = mapper

    def process_chunk(self, chunk: Chunk) -> Chunk:
        mapper = self.mapper
        out: list[Record] = []
        at: list[int] = []
        emit, place = out.append, at.append
        for record, position in zip(chunk.records, chunk.at, strict=True):
            pairs = mapper(record.key, record.value)
            if pairs is None:
                raise TypeError(
                    "flat_map's mapper returned None; it must return an iterable of "
                    "(key, value) tuples (an empty one to drop the record)"
                )
            timestamp, headers = record.timestamp, record.headers
            for pair in pairs:
                if type(pair) is not tuple or len(pair) != 2:
                    raise TypeError(
                        f"flat_map's mapper must give (key, value) tuples, got {pair!r}"
                    )
                emit(Record(pair[0], pair[1], timestamp, headers))
                place(position)
        return chunk.with_records(out, at)


class FlatMapValues(Processor):
    """``mapper(value)`` gives an iterable of values: each becomes a record with the input's
    key, timestamp and headers, in order; an empty one drops the record."""

    chunked = True

    def __init__(self, mapper: Callable[[Any], Iterable[Any]]) -> None:
        self.mapper = mapper

    def process_chunk(self, chunk: Chunk) -> Chunk:
        mapper = self.mapper
        out: list[Record] = []
        at: list[int] = []
        emit, place = out.append, at.append
        for record, position in zip(chunk.records, chunk.at, strict=True):
            values = mapper(record.value)
            if values is None:
                raise TypeError(
                    "flat_map_values' mapper returned None; it must return an iterable of "
                    "values (an empty one to drop the record)"
                )
            for value in values:
                emit(record.with_value(value))
                place(position)
        return chunk.with_records(out, at)


class Branch(Processor):
    """``split()``'s node: a record goes to the child of the first predicate that holds, else
    to the default branch's child (the last of ``children``) if there is one, else nowhere."""

    chunked = True
    routes_chunks = True

    def __init__(
        self, predicates: tuple[Callable[[Any, Any], bool], ...], children: tuple[str, ...]
    ) -> None:
        self.predicates = predicates
        self.children = children

    def _branch(self, record: Record) -> int:
        """The index in ``children`` the record goes to (len(children): none)."""
        key, value = record.key, record.value
        for i, predicate in enumerate(self.predicates):
            if predicate(key, value):
                return i
        return len(self.predicates)

    def process(self, record: Record) -> None:
        i = self._branch(record)
        if i < len(self.children):
            self.context.forward(record, self.children[i])

    def route_chunk(self, chunk: Chunk) -> dict[str, Chunk]:
        """Per child, the chunk of the records that go to it (in order)."""
        predicates = self.predicates
        picked: list[list[int]] = [[] for _ in range(len(predicates) + 1)]
        rest = picked[-1].append
        tests = [
            (predicate, indices.append)
            for predicate, indices in zip(predicates, picked[:-1], strict=True)
        ]
        for i, record in enumerate(chunk.records):
            key, value = record.key, record.value
            for predicate, take in tests:
                if predicate(key, value):
                    take(i)
                    break
            else:
                rest(i)
        return {child: chunk.select(picked[i]) for i, child in enumerate(self.children)}


class Peek(Processor):
    def __init__(self, action: Callable[[Any, Any], None]) -> None:
        self.action = action

    def process(self, record: Record) -> None:
        self.action(record.key, record.value)
        self.context.forward(record)


class Foreach(Processor):
    """A terminal ``peek``: calls ``action(key, value)``, forwards nothing. Record by record,
    as peek: an action has side effects, whose order a chunk would change."""

    def __init__(self, action: Callable[[Any, Any], None]) -> None:
        self.action = action

    def process(self, record: Record) -> None:
        self.action(record.key, record.value)


class Sink(Processor):
    """Writes to a topic through the task's record collector.

    ``drop_null_keys`` is set on repartition sinks: a record without a key cannot be
    routed to the right partition, and Kafka Streams (4.4, checked by the conformance
    suite) drops it there too, uncounted. ``encode_changes`` is set on repartition sinks
    carrying KTable changes.
    """

    chunked = True

    def __init__(
        self,
        topic: str,
        drop_null_keys: bool = False,
        encode_changes: bool = False,
        encode: Callable[[Any], Any] | None = None,
        check: Callable[[Any, Any], None] | None = None,
    ):
        self.topic = topic
        # A typed sink's check of each record's key and value (``DeltaSink.check``): a
        # record that does not fit fails here, in processing, before anything is committed.
        self.check = check
        self.drop_null_keys = drop_null_keys
        self.encode_changes = encode_changes
        # An internal topic's own value type (a foreign-key join's subscriptions) as JSON.
        self.encode = encode

    def process_chunk(self, chunk: Chunk) -> Chunk:
        plain = not (self.drop_null_keys or self.encode_changes or self.encode or self.check)
        if plain and chunk.columns is not None and chunk.columns.olds is None:
            self.context.send_columns(self.topic, chunk.columns)
        else:
            self.context.send_many(self.topic, self._outgoing(chunk.records))
        return chunk.select([])

    def outgoing_positions(self, chunk: Chunk) -> list[int]:
        """The indices of the records of ``chunk`` that ``process_chunk`` writes."""
        if not self.drop_null_keys:
            return list(range(len(chunk.records)))
        return [i for i, r in enumerate(chunk.records) if r.key is not None]

    def _outgoing(self, records: list[Record]) -> list[Record]:
        """What the sink writes of ``records``."""
        if self.drop_null_keys:
            records = [r for r in records if r.key is not None]
        if self.encode_changes:
            records = [
                r.with_value({"new": r.value.new_value, "old": r.value.old_value}) for r in records
            ]
        if self.encode is not None:
            encode = self.encode
            records = [r.with_value(encode(r.value)) for r in records]
        if self.check is not None:
            for r in records:
                self.check(r.key, r.value)
        return records
