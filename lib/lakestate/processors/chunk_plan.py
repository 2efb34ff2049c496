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
from lakestate.topology.graph import SINK, Topology

Keys = list[tuple[int, ...]]


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
        self, chunk: Chunk, forwarded: Callable[[Processor, int], None], output: Callable[[], list]
    ) -> None:
        """Run ``chunk`` through every step (``forwarded(processor, n)``: it forwarded n
        records); ``output()`` is the task's output list, which sinks append to."""
        keys: Keys | None = None
        if self._keyed_source:
            # Positions may be added (see the module docstring): on the run's own lists.
            chunk = Chunk(
                chunk.topic, list(chunk.offsets), list(chunk.stream_times), chunk.records, chunk.at
            )
            keys = [(p,) for p in chunk.at]
        inbox: dict[str, list[tuple[Chunk, Keys | None]]] = {self.steps[0].name: [(chunk, keys)]}
        mark = len(output())
        sink_keys: Keys = []
        for step in self.steps:
            parts = inbox.pop(step.name)
            chunk, keys = parts[0] if len(parts) == 1 else _merged(parts)
            if step.keyed and _repeats(chunk.at):
                chunk = _own_positions(chunk)
            processor = step.processor
            if step.sorted_sink:
                before = len(output())
                processor.process_chunk(chunk)
                written = processor.outgoing_positions(chunk)
                if len(output()) - before != len(written) or keys is None:
                    raise StreamsException(f"sink {step.name}: its outputs cannot be ordered")
                sink_keys.extend(keys[i] for i in written)
                continue
            if processor.routes_chunks:
                routed = processor.route_chunk(chunk)
                outs = [routed[c] for c in step.children]
                count = sum(len(o.records) for o in outs)
            else:
                out = processor.process_chunk(chunk)
                outs = [out] * len(step.children)
                count = len(out.records)
            if count:
                forwarded(processor, count)
            fan_out = len(outs) > 1 and not processor.routes_chunks
            shared = _keys_of(outs[0], chunk, keys) if step.keyed and fan_out else None
            for index, (child, out) in enumerate(zip(step.children, outs, strict=True)):
                out_keys = None
                if shared is not None:
                    out_keys = [k + (index,) for k in shared]
                elif step.keyed:
                    out_keys = _keys_of(out, chunk, keys)
                inbox.setdefault(child, []).append((out, out_keys))
        if self.sort_output:
            _sort_tail(output(), mark, sink_keys)


def _repeats(at: list[int]) -> bool:
    return len(set(at)) != len(at)


def _own_positions(chunk: Chunk) -> Chunk:
    """``chunk`` with a position of its own for each record (same offset and stream time)."""
    offsets, times = chunk.offsets, chunk.stream_times
    base = len(offsets)
    for p in chunk.at:
        offsets.append(offsets[p])
        times.append(times[p])
    return Chunk(chunk.topic, offsets, times, chunk.records, list(range(base, len(offsets))))


def _keys_of(out: Chunk, source: Chunk, keys: Keys | None) -> Keys:
    """The keys of ``out``, what a step made of ``source`` (whose positions are distinct):
    each output's input record's key, plus its index among that record's outputs when
    some record gave several."""
    if keys is None:
        raise StreamsException("a keyed step got records without keys")
    index = {p: i for i, p in enumerate(source.at)}
    if not _repeats(out.at):
        return [keys[index[p]] for p in out.at]
    seen: dict[int, int] = {}
    result = []
    for p in out.at:
        j = seen.get(p, 0)
        seen[p] = j + 1
        result.append(keys[index[p]] + (j,))
    return result


def _merged(parts: list[tuple[Chunk, Keys | None]]) -> tuple[Chunk, Keys]:
    """The parts' records as one chunk, in key order (the order one by one gives)."""
    records: list[Any] = []
    at: list[int] = []
    keys: Keys = []
    for chunk, part_keys in parts:
        if part_keys is None:
            raise StreamsException("a merge got records without keys")
        records.extend(chunk.records)
        at.extend(chunk.at)
        keys.extend(part_keys)
    order = sorted(range(len(keys)), key=keys.__getitem__)
    first = parts[0][0]
    return (
        Chunk(
            first.topic,
            first.offsets,
            first.stream_times,
            [records[i] for i in order],
            [at[i] for i in order],
        ),
        [keys[i] for i in order],
    )


def _sort_tail(output: list, mark: int, keys: Keys) -> None:
    """Put ``output[mark:]`` (one entry per key) in key order; stable."""
    tail = output[mark:]
    if len(tail) != len(keys):
        raise StreamsException("the plan's outputs and their keys differ in number")
    order = sorted(range(len(keys)), key=keys.__getitem__)
    output[mark:] = [tail[i] for i in order]
