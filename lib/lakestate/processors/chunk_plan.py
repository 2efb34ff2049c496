"""A chunk's way through a sub-topology: every node one source topic's records reach.

``Task.process_chunk`` hands each of these nodes, in topological order, all the records it
would see one by one, at once. A node with several children hands each the same chunk
(split's branch node hands each child its own: ``Processor.route_chunk``); a node with
several parents in the plan (a merge) takes their chunks together.

Order. One record at a time, a record passes through all of one child's subtree before the
next child's, and a node's outputs for one record go on in turn: so a record's place among
the records reaching a node is its *key*, a tuple: its input position, then at each
fan-out the child's index, and at each node that gave several records for one its index
among them. A merge sorts its parents' records by key, which is the order one by one
gives them; so do the outputs when two sinks of the plan write one topic. Keys are kept
only on the paths to such a merge or sink: a plan without one costs what a chain costs.
To tell which input record an output came from, a keyed node's input holds each position
once: records sharing one (a flat map's, or a merge's of two paths) get positions of their
own first, with the same offset and stream time.

Two nodes of a plan may not use one store (one would read what the other has not written
yet: chunked processors write in ``finish_chunk``); such a topic goes record by record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakestate.errors import StreamsException
from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.records import Record, RecordMetadata
from lakestate.topology.graph import SINK, Topology

# A chunk's keys: a list, one per record, or PLAIN: each record's key is its position alone
# (positions distinct), as long as nothing gave two records for one.
PLAIN: Any = type("PlainKeys", (), {"__repr__": lambda self: "PLAIN"})()
Keys = Any  # list[tuple[int, ...]] | PLAIN


@dataclass(frozen=True)
class _Step:
    name: str
    processor: Processor
    children: tuple[str, ...]  # as the node lists them (a child twice: it gets the chunk twice)
    keyed: bool  # its output carries keys
    sorted_sink: bool  # a sink whose outputs are put back in order afterwards


class ChunkPlan:
    """The nodes the records of one source reach, and how to run a chunk through them."""

    def __init__(self, steps: list[_Step], sort_output: bool) -> None:
        self.steps = steps
        self.sort_output = sort_output
        self.processors = [s.processor for s in steps]
        self._keyed_source = steps[0].keyed
        # A chain: each node hands all it forwards to the next, the last forwards nothing.
        self.straight = all(
            not s.keyed
            and not s.sorted_sink
            and not s.processor.routes_chunks
            and s.children == ((steps[i + 1].name,) if i + 1 < len(steps) else ())
            for i, s in enumerate(steps)
        )

    @staticmethod
    def of(
        topology: Topology, order: Sequence[str], source: str, processors: Mapping[str, Processor]
    ) -> ChunkPlan | None:
        """The plan from ``source`` (``order``: the sub-topology's nodes, parents first), or
        None when a node it reaches is not chunk-capable or two use one store."""
        nodes = topology.nodes
        reached, todo = set(), [source]
        while todo:
            name = todo.pop()
            if name not in reached:
                reached.add(name)
                todo.extend(nodes[name].children)
        names = [n for n in order if n in reached]
        if not all(processors[n].chunked for n in names):
            return None
        stores = [s for n in names for s in nodes[n].stores if not topology.stores[s].is_global]
        if len(stores) != len(set(stores)):
            return None
        edges = Counter(c for n in names for c in nodes[n].children)
        sinks = [n for n in names if nodes[n].kind == SINK]
        topics = Counter(nodes[n].topics[0] for n in sinks)
        sort_output = any(count > 1 for count in topics.values())
        # Nodes whose input must carry keys: merges, and every sink when outputs are sorted.
        needs = {n for n in names if edges[n] > 1} | (set(sinks) if sort_output else set())
        keyed: set[str] = set()
        for name in reversed(names):
            if any(c in needs or c in keyed for c in nodes[name].children):
                keyed.add(name)
        steps = [
            _Step(
                n, processors[n], tuple(nodes[n].children), n in keyed, sort_output and n in sinks
            )
            for n in names
        ]
        return ChunkPlan(steps, sort_output)

    def run(
        self,
        chunk: Chunk,
        forwarded: Callable[[Processor, int], None],
        output: Callable[[], list],
        absorb: Callable[[Processor, Chunk], Chunk] | None = None,
    ) -> None:
        """Run ``chunk`` through every step (``forwarded(processor, n)``: it forwarded n
        records); ``output()`` is the task's output list, which sinks append to.
        ``absorb(processor, out)``: what a node forwards of its output ``out`` once the
        task's record cache took it."""
        keys: Keys | None = None
        if self._keyed_source:
            # Positions may be added (see the module docstring): on the run's own lists.
            chunk = Chunk(
                chunk.topic, list(chunk.offsets), list(chunk.stream_times), chunk.records, chunk.at
            )
            keys = PLAIN
        inbox: dict[str, list[tuple[Chunk, Keys | None]]] = {self.steps[0].name: [(chunk, keys)]}
        mark = len(output())
        sunk: list[tuple[list[int], Keys]] = []  # sorted sinks: (positions written, keys)
        for step in self.steps:
            parts = inbox.pop(step.name)
            chunk, keys = parts[0] if len(parts) == 1 else _merged(parts)
            if step.keyed and keys is not PLAIN and _repeats(chunk.at):
                chunk = _own_positions(chunk)
            processor = step.processor
            if step.sorted_sink:
                chunk = chunk.without_columns()  # its outputs are counted and sorted one by one
                before = len(output())
                processor.process_chunk(chunk)
                written = processor.outgoing_positions(chunk)
                if len(output()) - before != len(written) or keys is None:
                    raise StreamsException(f"sink {step.name}: its outputs cannot be ordered")
                sunk.append(([chunk.at[i] for i in written], _select(keys, written)))
                continue
            if processor.routes_chunks:
                routed = processor.route_chunk(chunk)
                outs = [routed[c] for c in step.children]
                count = sum(len(o) for o in outs)
            else:
                out = processor.process_chunk(chunk)
                if absorb is not None:
                    out = absorb(processor, out)
                outs = [out] * len(step.children)
                count = len(out)
            if count:
                forwarded(processor, count)
            self._hand_on(step, chunk, keys, outs, inbox)
        if self.sort_output:
            _sort_tail(output(), mark, sunk)

    def run_record(self, task: Any, topic: str, offset: int, record: Record) -> bool:
        """``task.process`` of one record of a straight plan, as a chunk of one: each node
        takes what the one before forwarded, until one forwards nothing (those below are not
        reached, as one record at a time); then the nodes reached write their stores. From
        the first node whose chunk of one is dear (``cheap_single_chunks``) on, the records
        go on one at a time (``task.process_at``), in the order one by one gives. False,
        with nothing done, for a record ``process`` rejects. A node that raises leaves the
        changes of those before it behind: the caller aborts the task."""
        ts = record.timestamp
        if type(ts) is not int or ts < 0:
            return False
        task.stream_time = stream_time = max(task.stream_time, ts)
        task.current_metadata = RecordMetadata(topic, task.partition, offset)
        chunk = Chunk(topic, [offset], [stream_time], [record], [0])
        forwarded = task._forwarded
        reached = []
        tail = None
        for step in self.steps:
            processor = step.processor
            if not processor.cheap_single_chunks:
                tail = step.name
                break
            reached.append(processor)
            chunk = processor.process_chunk(chunk)
            count = len(chunk.records)
            if not count:
                break
            forwarded(processor, count)
        for processor in reached:
            processor.finish_chunk()
        if tail is not None:
            for out in chunk.records:
                task.process_at(tail, out)
        return True

    @staticmethod
    def _hand_on(
        step: _Step,
        chunk: Chunk,
        keys: Keys | None,
        outs: list[Chunk],
        inbox: dict[str, list[tuple[Chunk, Keys | None]]],
    ) -> None:
        """Put each child's chunk (and its keys, when the step is keyed) in its inbox."""
        if not step.keyed:
            for child, out in zip(step.children, outs, strict=True):
                inbox.setdefault(child, []).append((out, None))
            return
        index = _Index(chunk, keys)
        if len(outs) > 1 and not step.processor.routes_chunks:  # a fan-out: the child's index
            shared = _tuples(outs[0], index.keys_of(outs[0]))
            for c, (child, out) in enumerate(zip(step.children, outs, strict=True)):
                inbox.setdefault(child, []).append((out, [k + (c,) for k in shared]))
            return
        for child, out in zip(step.children, outs, strict=True):
            inbox.setdefault(child, []).append((out, index.keys_of(out)))


class _Index:
    """A step's input records by position (distinct), to key what the step made of them."""

    def __init__(self, chunk: Chunk, keys: Keys | None) -> None:
        if keys is None:
            raise StreamsException("a keyed step got records without keys")
        self.chunk, self.keys = chunk, keys
        self._by_position: dict[int, int] | None = None

    def keys_of(self, out: Chunk) -> Keys:
        """Each output's input record's key, plus its index among that record's outputs
        when some record gave several."""
        keys = self.keys
        if not _repeats(out.at):
            if keys is PLAIN:
                return PLAIN
            return [keys[i] for i in self._positions(out.at)]
        seen: dict[int, int] = {}
        result = []
        for p, i in zip(out.at, self._positions(out.at), strict=True):
            j = seen.get(p, 0)
            seen[p] = j + 1
            result.append(((p,) if keys is PLAIN else keys[i]) + (j,))
        return result

    def _positions(self, at: list[int]) -> list[int]:
        """The input indices of positions ``at``."""
        if self._by_position is None:
            self._by_position = {p: i for i, p in enumerate(self.chunk.at)}
        by_position = self._by_position
        return [by_position[p] for p in at]


def _repeats(at: list[int]) -> bool:
    return len(set(at)) != len(at)


def _tuples(chunk: Chunk, keys: Keys) -> list[tuple[int, ...]]:
    return [(p,) for p in chunk.at] if keys is PLAIN else keys


def _select(keys: Keys, indices: list[int]) -> Keys:
    return PLAIN if keys is PLAIN else [keys[i] for i in indices]


def _own_positions(chunk: Chunk) -> Chunk:
    """``chunk`` with a position of its own for each record (same offset and stream time)."""
    offsets, times = chunk.offsets, chunk.stream_times
    base = len(offsets)
    for p in chunk.at:
        offsets.append(offsets[p])
        times.append(times[p])
    return Chunk(chunk.topic, offsets, times, chunk.records, list(range(base, len(offsets))))


def _merged(parts: list[tuple[Chunk, Keys | None]]) -> tuple[Chunk, Keys]:
    """The parts' records as one chunk, in key order (the order one by one gives). Parts
    keyed by their positions alone (split's branches) merge by position."""
    records: list[Any] = []
    at: list[int] = []
    for chunk, _ in parts:
        records.extend(chunk.records)
        at.extend(chunk.at)
    plain = all(keys is PLAIN for _, keys in parts)
    if plain and not _repeats(at):
        order = sorted(range(len(at)), key=at.__getitem__)
        keys: Keys = PLAIN
    else:
        if any(keys is None for _, keys in parts):
            raise StreamsException("a merge got records without keys")
        tuples = [k for chunk, part_keys in parts for k in _tuples(chunk, part_keys)]
        if len(set(tuples)) != len(tuples):
            raise StreamsException("a merge got two records with one key")
        order = sorted(range(len(tuples)), key=tuples.__getitem__)
        keys = [tuples[i] for i in order]
    first = parts[0][0]
    merged = Chunk(
        first.topic,
        first.offsets,
        first.stream_times,
        [records[i] for i in order],
        [at[i] for i in order],
    )
    return merged, keys


def _sort_tail(output: list, mark: int, sunk: list[tuple[list[int], Keys]]) -> None:
    """Put ``output[mark:]``, what the sorted sinks wrote, in key order (stable)."""
    if all(keys is PLAIN for _, keys in sunk):
        order_keys: list[Any] = [p for at, _ in sunk for p in at]
    else:
        order_keys = [
            k for at, keys in sunk for k in ([(p,) for p in at] if keys is PLAIN else keys)
        ]
    tail = output[mark:]
    if len(tail) != len(order_keys):
        raise StreamsException("the plan's outputs and their keys differ in number")
    order = sorted(range(len(order_keys)), key=order_keys.__getitem__)
    output[mark:] = [tail[i] for i in order]
