"""Which nodes of a task forward through its record cache (state/record_cache.py), and the
forwarding of what the cache lets go: at an eviction, at once (one by one) or in place of
a node's output (a chunk); at a commit, everything it holds.

A node is cached when it forwards the changes of its store (``forwards_store_changes``)
and that store is neither versioned nor global (Kafka caches no versioned store) nor
materialized with caching disabled (``Materialized.with_caching_disabled``). Its
updates are cached under the store's name, so a cogroup's nodes, which share one store,
share its entries; a store's flush is forwarded by its first node (they have one child).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.processors.chunk_plan import ChunkPlan
from lakestate.records import Record
from lakestate.state.record_cache import CacheMark, RecordCache, cache_max_bytes


class CachedForwarding:
    """The record cache of one task and the nodes whose updates it holds; without a cache
    (``cache`` None) every method lets everything through at once."""

    def __init__(
        self, cache: RecordCache | None, cached: dict[str, str], contexts: Mapping[str, Any]
    ) -> None:
        self.cache = cache
        self._cached = cached  # node -> store
        self._flushers: dict[str, str] = {}  # store -> the node forwarding its flushes
        for node, store in cached.items():
            self._flushers.setdefault(store, node)
            contexts[node].cached = True
        self._contexts = contexts
        # Per node, how its flushes go on as chunks (None: one by one).
        self._plans: dict[str, ChunkPlan | None] = {}

    @staticmethod
    def of(
        config: Mapping[str, Any], topology: Any, nodes: list[str], task: Any
    ) -> CachedForwarding:
        """The cached forwarding of a task's ``nodes`` (in topological order), without a
        cache when the budget (``config``'s) is 0 (every update forwarded at once) or no
        node is cached. ``task``: its processors and contexts by node."""
        max_bytes = cache_max_bytes(config)
        if max_bytes <= 0:
            return CachedForwarding(None, {}, {})
        stores = topology.stores
        cached: dict[str, str] = {}
        for name in nodes:
            processor = task._processors[name]
            store = getattr(processor, "store_name", None)
            if not processor.forwards_store_changes or store not in stores:
                continue
            spec = stores[store]
            if spec.kind != "versioned" and not spec.is_global and spec.caching:
                cached[name] = store
        if not cached:
            return CachedForwarding(None, {}, {})
        return CachedForwarding(RecordCache(max_bytes), cached, task._contexts)

    @property
    def absorber(self) -> Callable[[Processor, Chunk], Chunk] | None:
        """``absorb`` for a chunk plan, or None without a cache."""
        return None if self.cache is None else self.absorb

    def snapshot(self) -> CacheMark | None:
        """A mark of the cache as it stands, for ``restore`` (a chunk that fails is undone)
        or ``release`` (it succeeded): the cache logs its changes in between."""
        return None if self.cache is None else self.cache.snapshot()

    def restore(self, snapshot: CacheMark | None) -> None:
        if self.cache is not None and snapshot is not None:
            self.cache.restore(snapshot)

    def release(self, snapshot: CacheMark | None) -> None:
        if self.cache is not None and snapshot is not None:
            self.cache.release(snapshot)

    def clear(self) -> None:
        """Forget what is held (an abort rolls it back with the rest)."""
        if self.cache is not None:
            self.cache.clear()

    def put(self, node: str, record: Record) -> list[Record]:
        """Hold ``record``, forwarded by ``node``; returns what an eviction flushed."""
        return self.cache.put(self._cached[node], record)

    def absorb(self, processor: Processor, out: Chunk) -> Chunk:
        """What a node of a chunk plan forwards once the cache took its output ``out``
        (unchanged for a node not cached): what evictions flushed, each record at the
        input position that caused it."""
        store = self._cached.get(processor.context.node)
        if store is None:
            return out
        flushes = self.cache.put_many(store, out.records)
        records: list[Record] = []
        at: list[int] = []
        for i, flushed in flushes:
            records.extend(flushed)
            at.extend([out.at[i]] * len(flushed))
        return out.with_records(records, at)

    def flush(self, task: Any) -> None:
        """Forward everything held (a commit's first step, as Kafka flushes its caches on
        commit): store by store in topological order, each in order of last update. A
        flushed record may update a cache further down, flushed after it. A flushed record
        is no input record: downstream sees no record metadata."""
        cache = self.cache
        if cache is None:
            return
        metadata, task.current_metadata = task.current_metadata, None
        try:
            while cache.dirty():
                for store, node in self._flushers.items():
                    records = cache.flush(store)
                    if records and not self._forward_chunk(task, node, records):
                        for record in records:
                            self._contexts[node].forward_now(record)
        finally:
            task.current_metadata = metadata

    def _forward_chunk(self, task: Any, node: str, records: list[Record]) -> bool:
        """Forward ``records`` from ``node`` to its one child as a chunk, when that child's
        descendants are all chunk-capable (the same outcome as one by one, as for input
        records); False, with nothing applied, when they are not or a record fails (the
        caller then forwards one by one, which raises for the one that fails)."""
        if node not in self._plans:
            children = task.topology.nodes[node].children
            self._plans[node] = (
                ChunkPlan.of(task.topology, task.subtopology.nodes, children[0], task._processors)
                if len(children) == 1
                else None
            )
        plan = self._plans[node]
        if plan is None:
            return False
        n = len(records)
        chunk = Chunk(None, [None] * n, [task.stream_time] * n, records, list(range(n)))
        mark, metrics, undo = len(task._output), task.metrics.copy(), self.snapshot()
        try:
            plan.run(chunk, task._forwarded, lambda: task._output, self.absorber)
        except Exception:
            del task._output[mark:]
            task.metrics = metrics
            self.restore(undo)
            return False
        self.release(undo)
        task._forwarded(task._processors[node], n)
        for processor in plan.processors:
            processor.finish_chunk()
        return True
