"""TopologyTestDriver: run a topology in-process, one record at a time (like Kafka's).

Every sub-topology runs as one task for partition 0. Each piped record is processed and its
output emitted at once; records written to a repartition topic (or to any topic another
sub-topology reads) are processed right away, in order, before ``pipe_input`` returns.

Each record is committed alone, so a failing one is undone alone. A topology of one task
whose output no task reads, and whose processing runs no code with side effects
(``Task.replays_safely``), commits every ``COMMIT_EVERY`` records instead (and before the
test reads a store or closes the driver): nobody can tell, as a failing record makes the
records since the last commit be rolled back, processed again (their output not emitted
twice) and committed first.
"""

from __future__ import annotations

import tempfile
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from lakestate.errors import ProcessingException, SerializationException, StreamsException
from lakestate.processors.gc_pause import cyclic_gc_paused
from lakestate.processors.task import Task
from lakestate.records import Record, duration_millis, to_millis
from lakestate.state.base import StateStore, TopicPartition, isolation_for
from lakestate.state.memory import in_memory_store
from lakestate.state.record_cache import CACHE_MAX_BYTES, CACHE_MAX_BYTES_OLD
from lakestate.state.registry import open_view
from lakestate.state.rocksdb import rocksdb_store
from lakestate.testing.topics import TestInputTopic, TestOutputTopic, TestRecord
from lakestate.topology.graph import Topology

DEFAULT_APPLICATION_ID = "test-app"
STATE_BACKEND = "lakestate.state.backend"  # "memory" (default) or "rocksdb"
STATE_DIR = "state.dir"
# Records between commits when commits can wait: a commit costs about half what a windowed
# count's record does; a failure processes at most this many again.
COMMIT_EVERY = 500

__all__ = ["TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver"]


class TopologyTestDriver:
    """Runs ``topology`` in-process. Config: Kafka's keys (``processing.guarantee``,
    ``statestore.uncommitted.max.*``, ``application.id``), plus ``lakestate.state.backend``
    ("memory" or "rocksdb") and ``state.dir`` for the RocksDB backend."""

    def __init__(self, topology: Topology, config: dict[str, Any] | None = None) -> None:
        self.topology = topology
        self.config = dict(config or {})
        self.application_id = self.config.get("application.id", DEFAULT_APPLICATION_ID)
        isolation = isolation_for(self.config)
        backend = self.config.get(STATE_BACKEND, "memory")
        self._tmpdir = None
        if backend == "rocksdb" and STATE_DIR not in self.config:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="lakestate-driver-")
        state_dir = self.config.get(STATE_DIR) or (self._tmpdir.name if self._tmpdir else None)

        def make_store(name: str) -> StateStore:
            if backend == "memory":
                return in_memory_store(name, isolation)
            if backend == "rocksdb":
                return rocksdb_store(name, f"{state_dir}/{self.application_id}/{name}", isolation)
            raise StreamsException(
                f"{STATE_BACKEND} must be 'memory' or 'rocksdb', got {backend!r}"
            )

        self._global_store = make_store("global")
        self._global_views = {
            g.store: open_view(
                g.store,
                topology.stores[g.store].kind,
                topology.stores[g.store].options,
                lambda: self._global_store,
                topology.stores[g.store].serdes,
            )
            for g in topology.global_tables
        }
        self._global_topics = {g.topic: g.store for g in topology.global_tables}
        self._tasks: list[Task] = []
        # As Kafka's TopologyTestDriver, which behaves as if every input record were
        # committed (and the caches flushed) at once: the record cache has no effect here.
        task_config = {
            k: v for k, v in self.config.items() if k not in (CACHE_MAX_BYTES, CACHE_MAX_BYTES_OLD)
        }
        for sub in topology.subtopologies:
            store = make_store(f"{sub.id}_0")
            self._tasks.append(
                Task(
                    topology, sub.id, 0, store, task_config, self.application_id, self._global_views
                )
            )
        self._task_by_topic = {t: task for task in self._tasks for t in task.source_topics()}
        # A record's processing touches the one task only and can run again unseen: commits
        # can wait (see _pipe_deferred).
        self._deferred = (
            len(self._tasks) == 1
            and self._tasks[0].replays_safely()
            and not set(self._tasks[0].subtopology.sink_topics) & set(self._task_by_topic)
        )
        self._uncommitted: list[tuple[str, int, Record]] = []  # processed since the commit
        self._offsets: dict[str, int] = {}
        self._partitions: dict[str, TopicPartition] = {}
        self._clock: dict[str, int] = {}
        self._outputs: dict[str, deque[TestRecord]] = {}
        self._closed = False
        self.wall_clock_ms = 0  # advance_wall_clock_time's clock: drives nothing

    # -- topics ----------------------------------------------------------------------------

    def create_input_topic(self, topic: str) -> TestInputTopic:
        if topic not in self._task_by_topic and topic not in self._global_topics:
            raise StreamsException(
                f"topic {topic!r} is not an input of this topology; inputs: "
                f"{sorted(set(self._task_by_topic) | set(self._global_topics))}"
            )
        return TestInputTopic(self, topic)

    def create_output_topic(self, topic: str) -> TestOutputTopic:
        return TestOutputTopic(self, topic)

    def producer_offset(self, topic: str) -> int:
        return self._offsets.get(topic, 0)

    # -- stores ----------------------------------------------------------------------------

    def _store_task(self, name: str) -> Task:
        for task in self._tasks:
            if name in task.subtopology.stores:
                return task
        raise StreamsException(f"no store named {name!r}; stores: {sorted(self.topology.stores)}")

    def get_state_store(self, name: str) -> Any:
        """The typed store ``name``: reads see committed data; writes commit at once."""
        if name in self._global_views:
            return self._global_views[name]
        task = self._store_task(name)
        spec = self.topology.stores[name]
        source = lambda: _AutoCommit(task, self._flush)  # noqa: E731
        return open_view(name, spec.kind, spec.options, source, spec.serdes)

    def get_key_value_store(self, name: str) -> Any:
        return self.get_state_store(name)

    def get_window_store(self, name: str) -> Any:
        """The window store ``name`` (``fetch(key, time_from, time_to)``, ``fetch_all``)."""
        return self._typed_store(name, "window")

    def get_session_store(self, name: str) -> Any:
        """The session store ``name`` (``fetch(key)``, ``find_sessions``, ``fetch_session``)."""
        return self._typed_store(name, "session")

    def get_versioned_key_value_store(self, name: str) -> Any:
        """The versioned store ``name`` (``get(key)``, ``get(key, as_of)``, ``put``,
        ``delete``): reads see committed data; each put or delete commits at once."""
        return self._typed_store(name, "versioned")

    def _typed_store(self, name: str, kind: str) -> Any:
        spec = self.topology.stores.get(name)
        if spec is None or spec.kind != kind:
            found = "no such store" if spec is None else f"a {spec.kind} store"
            raise StreamsException(f"store {name!r} is not a {kind} store ({found})")
        return self.get_state_store(name)

    def get_all_state_stores(self) -> dict[str, Any]:
        return {name: self.get_state_store(name) for name in self.topology.stores}

    def advance_wall_clock_time(self, duration: timedelta) -> None:
        """Advance the driver's wall clock by ``duration`` (a timedelta). Accepted
        for Kafka's API; nothing in lakestate runs on wall-clock time (suppression is driven
        by stream time, as KIP-328 specifies), so it changes no output."""
        try:
            self.wall_clock_ms += duration_millis(duration, "duration")
        except (TypeError, ValueError) as exc:
            raise StreamsException(f"advance_wall_clock_time: {exc}") from None

    def metrics(self) -> dict[str, float]:
        """Task metrics summed over tasks, nodes and stores, by name."""
        total: dict[str, float] = {}
        for task in self._tasks:
            for name, value in task.metrics.flat().items():
                total[name] = total.get(name, 0) + value
        return total

    def scoped_metrics(self) -> dict[str, dict[str, dict[str, float]]]:
        """Task metrics summed over tasks, by level (``nodes``, ``stores``), node or store
        name, and metric name: the document ``lakestate status`` shows per task."""
        total: dict[str, dict[str, dict[str, float]]] = {}
        for task in self._tasks:
            for level, scopes in task.metrics.document().items():
                for scope, named in scopes.items():
                    held = total.setdefault(level, {}).setdefault(scope, {})
                    for name, value in named.items():
                        held[name] = held.get(name, 0) + value
        return total

    # -- processing ------------------------------------------------------------------------

    def _pipe(
        self,
        topic: str,
        key: Any,
        value: Any,
        timestamp: int | datetime | None,
        headers: dict[str, Any] | None,
    ) -> None:
        if self._closed:
            raise StreamsException("the driver is closed")
        record = Record(key, value, self._stamp(topic, key, timestamp), headers)
        if topic in self._global_topics:
            self._update_global(topic, record)
            return
        if self._deferred and topic in self._task_by_topic:
            self._pipe_deferred(self._task_by_topic[topic], topic, record)
            return
        tasks = self._task_by_topic
        offsets = self._offsets
        pending: deque[tuple[str, Record]] | None = None
        current_topic, current = topic, record
        while True:
            task = tasks.get(current_topic)
            if task is None:
                self._emit(current_topic, current)
            else:
                offset = offsets.get(current_topic, 0)
                # The record is in the topic whatever its processing does, as in Kafka.
                offsets[current_topic] = offset + 1
                try:
                    task.process(current_topic, offset, current)
                except (ProcessingException, SerializationException) as exc:
                    # Nothing of the record stays (a commit per record: the abort undoes it
                    # alone); log-and-continue then commits its dead letter in its place.
                    task.abort()
                    failure = task.failure(exc, current_topic, offset, current)
                    if not task.continues(failure):
                        raise
                    task.dead_letter(failure, current.headers)
                except Exception:
                    task.abort()
                    raise
                for out_topic, out in task.commit({self._partition(current_topic): offset + 1}):
                    if out_topic in tasks:
                        if pending is None:
                            pending = deque()
                        pending.append((out_topic, out))
                    else:
                        self._emit(out_topic, out)
            if not pending:
                return
            current_topic, current = pending.popleft()

    def _pipe_deferred(self, task: Task, topic: str, record: Record) -> None:
        """Process ``record`` and emit its output without a commit. A record that fails
        first has the records since the last commit replayed and committed, so that, as
        with a commit per record, it is undone alone."""
        offset = self._offsets.get(topic, 0)
        self._offsets[topic] = offset + 1  # in the topic whatever its processing does
        try:
            done = task.process_chained(topic, offset, record)
        except Exception:
            # Undone with the records since the commit (replayed); processed again below
            # the usual way, whose exception names the node and the record.
            self._replay(task)
            done = False
        try:
            if not done:
                task.process(topic, offset, record)
        except (ProcessingException, SerializationException) as exc:
            self._replay(task)
            failure = task.failure(exc, topic, offset, record)
            if not task.continues(failure):
                raise
            task.dead_letter(failure, record.headers)
            self._uncommitted.append((topic, offset, record))
            self._flush()
            return
        except Exception:
            self._replay(task)
            raise
        self._uncommitted.append((topic, offset, record))
        for out_topic, out in task.take_output():
            self._emit(out_topic, out)
        if len(self._uncommitted) >= COMMIT_EVERY or task.commit_needed():
            self._flush()

    def _replay(self, task: Task) -> None:
        """Roll back the open transaction, then process again and commit the records since
        the last commit (they succeeded, and processing them is deterministic): all but the
        failing record stays, as if each had been committed. Their output went out already."""
        task.abort()
        for topic, offset, record in self._uncommitted:
            task.process(topic, offset, record)
        task.take_output()
        self._flush()

    def _flush(self) -> None:
        """Commit the records processed since the last commit (deferred mode only)."""
        records = self._uncommitted
        if not records:
            return
        self._uncommitted = []
        offsets = {self._partition(topic): offset + 1 for topic, offset, _ in records}
        for out_topic, out in self._tasks[0].commit(offsets):
            self._emit(out_topic, out)

    def _stamp(self, topic: str, key: Any, timestamp: int | datetime | None) -> int:
        """A piped record's timestamp in epoch ms (None: the topic's latest), the topic's
        clock moved up to it."""
        clock = self._clock
        if timestamp is None:
            ts = clock.get(topic, 0)
        elif type(timestamp) is int and timestamp >= 0:
            ts = timestamp  # what to_millis gives for epoch ms
        else:
            try:
                ts = to_millis(timestamp)
            except (TypeError, ValueError) as exc:
                raise StreamsException(
                    f"record for topic {topic!r} (key={key!r}) rejected: {exc}"
                ) from None
        if ts > clock.get(topic, 0) or topic not in clock:
            clock[topic] = ts
        return ts

    def _pipe_many(self, topic: str, items: list[tuple[Any, Any, Any, Any]]) -> None:
        """``_pipe`` of each (key, value, timestamp, headers). A topology of one straight
        chain of chunk-capable processors takes them as one chunk and one commit, which
        nobody can tell from one commit per record: no other task runs in between and a
        failing record makes them go one by one. The cyclic garbage collector is paused
        meanwhile (see processors/gc_pause.py)."""
        with cyclic_gc_paused():
            self._pipe_items(topic, items)

    def _pipe_items(self, topic: str, items: list[tuple[Any, Any, Any, Any]]) -> None:
        if not items:
            return
        self._flush()  # a chunk commits, or replays one by one, from a committed state
        task = self._task_by_topic.get(topic)
        if (
            self._closed
            or task is None
            or len(self._tasks) != 1
            or not task.can_process_chunks(topic)
            or set(task.subtopology.sink_topics) & set(self._task_by_topic)
        ):
            for item in items:
                self._pipe(topic, *item)
            return
        known = topic in self._clock
        clock = self._clock.get(topic, 0)
        records = []
        for key, value, timestamp, headers in items:
            if timestamp is None:
                ts = clock
            elif type(timestamp) is int and timestamp >= 0:
                ts = timestamp
            else:  # datetimes and bad timestamps: _pipe converts or rejects them
                records = None
                break
            if ts > clock or not known:
                clock, known = ts, True
            records.append(Record(key, value, ts, headers))
        base = self._offsets.get(topic, 0)
        end = base + len(items)
        if records is None or not task.process_chunk(topic, list(range(base, end)), records):
            for item in items:
                self._pipe(topic, *item)
            return
        self._offsets[topic] = end
        if known:
            self._clock[topic] = clock
        for out_topic, out in task.commit({self._partition(topic): end}):
            self._emit(out_topic, out)

    def _partition(self, topic: str) -> TopicPartition:
        partition = self._partitions.get(topic)
        if partition is None:
            partition = self._partitions[topic] = TopicPartition(topic, 0)
        return partition

    def _emit(self, topic: str, record: Record) -> None:
        queue = self._outputs.get(topic)
        if queue is None:
            queue = self._outputs[topic] = deque()
        queue.append(TestRecord(record.key, record.value, record.timestamp, record.headers))

    def _update_global(self, topic: str, record: Record) -> None:
        store = self._global_topics[topic]
        offset = self._offsets.get(topic, 0)
        with self._global_store.new_transaction() as txn:
            view = open_view(
                store,
                self.topology.stores[store].kind,
                self.topology.stores[store].options,
                lambda: txn,
                self.topology.stores[store].serdes,
            )
            if record.key is not None:
                view.put(record.key, record.value, record.timestamp)
            txn.commit({TopicPartition(topic, 0): offset + 1})
        self._offsets[topic] = offset + 1

    def close(self) -> None:
        if self._closed:
            return
        self._flush()
        self._closed = True
        for task in self._tasks:
            task.close()
            task.store.close()
        self._global_store.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AutoCommit:
    """A reader/writer for stores the test reaches directly: reads committed data, and each
    write commits at once (outside the task's processing transaction). ``flush`` commits
    the driver's processed records first, so the test sees every record it piped."""

    def __init__(self, task: Task, flush: Callable[[], None]) -> None:
        self._task = task
        self._flush = flush

    def get(self, namespace: str, key: bytes) -> bytes | None:
        self._flush()
        return self._task.store.get(namespace, key)

    def iterate(self, namespace: str, start=None, end=None, reverse=False):
        self._flush()
        return self._task.store.iterate(namespace, start, end, reverse)

    def put(self, namespace: str, key: bytes, value: bytes | None) -> None:
        self._flush()
        with self._task.store.new_transaction() as txn:
            txn.put(namespace, key, value)
            txn.commit()

    def put_all(self, namespace: str, items) -> None:
        """Several writes, committed together."""
        self._flush()
        with self._task.store.new_transaction() as txn:
            txn.put_all(namespace, items)
            txn.commit()
