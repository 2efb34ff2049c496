"""A task: one sub-topology run for one partition against its transactional store.

The task owns the open transaction. Records are processed one at a time in offset order;
stream time is the largest timestamp seen (the current record included) and is committed
with the state. Outputs are held until commit, so an aborted record or batch leaves
neither state changes nor output behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lakestate.errors import ProcessingException, SerializationException, StreamsException
from lakestate.processors import exception_handlers as handlers
from lakestate.processors.api import Processor
from lakestate.processors.cached_forwarding import CachedForwarding
from lakestate.processors.chunk import Chunk
from lakestate.processors.chunk_plan import ChunkPlan
from lakestate.processors.columns import Columns
from lakestate.processors.metrics import NODES, TaskMetrics
from lakestate.processors.node_context import FORWARD_TOTAL, NodeContext
from lakestate.processors.output import (
    Output,
    OutputBlock,
    PreparedCommit,
    dead_letter_text,
    expanded,
    outputs_of,
    text_value,
)
from lakestate.processors.punctuation import Cancellable, PunctuationQueue, first_time
from lakestate.processors.suppress import Suppress
from lakestate.records import Record, RecordMetadata
from lakestate.serdes import DEFAULT_SERDES, TopicSerdes
from lakestate.state import processor_metadata as metadata_store
from lakestate.state.base import StateStore, TopicPartition, Transaction
from lakestate.state.constants import (
    DEFAULT_UNCOMMITTED_MAX_BYTES,
    DEFAULT_UNCOMMITTED_MAX_RECORDS,
    UNCOMMITTED_MAX_BYTES,
    UNCOMMITTED_MAX_RECORDS,
)
from lakestate.state.registry import open_view
from lakestate.state.serde import checked_json_text
from lakestate.task_id import TaskId
from lakestate.topology.graph import SINK, SOURCE, Topology, internal_topic_name

NO_STREAM_TIME = -1


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


class Task:
    """Runs sub-topology ``subtopology_id`` for partition ``partition``."""

    def __init__(
        self,
        topology: Topology,
        subtopology_id: int,
        partition: int,
        store: StateStore,
        config: Mapping[str, Any],
        application_id: str,
        global_views: Mapping[str, Any] | None = None,
    ) -> None:
        self.topology = topology
        self.subtopology = topology.subtopologies[subtopology_id]
        self.partition = partition
        self.task_id = TaskId(subtopology_id, partition)
        self.application_id = application_id
        self.store = store
        self.max_uncommitted_records = int(
            config.get(UNCOMMITTED_MAX_RECORDS, DEFAULT_UNCOMMITTED_MAX_RECORDS)
        )
        self.max_uncommitted_bytes = int(
            config.get(UNCOMMITTED_MAX_BYTES, DEFAULT_UNCOMMITTED_MAX_BYTES)
        )
        self._global_views = dict(global_views or {})
        self.handlers = handlers.ExceptionHandlers.from_config(config, application_id)
        self.transaction: Transaction = store.new_transaction()
        committed_time = store.stream_time()
        self.stream_time = NO_STREAM_TIME if committed_time is None else committed_time
        self.processor_metadata: dict[str, int] = metadata_store.read(store)
        self._committed_metadata = dict(self.processor_metadata)
        self.current_metadata: RecordMetadata | None = None
        self.metrics = TaskMetrics()
        self._committed_metrics = TaskMetrics()
        self._output: list[Output | OutputBlock] = []
        self._views: dict[str, Any] = {}
        self._sources: dict[str, str] = {}
        # Sink topics (real names) written with serdes other than the default.
        self._sink_serdes: dict[str, TopicSerdes] = {}
        self._processors: dict[str, Processor] = {}
        self._contexts: dict[str, NodeContext] = {}
        self.punctuation = PunctuationQueue()
        self._opening = True
        self._create_processors()
        for name in self.subtopology.nodes:
            self._processors[name].init(self._contexts[name])
        self._opening = False
        self.cached = CachedForwarding.of(config, topology, self.subtopology.nodes, self)
        self._plans = {} if self.punctuation else self._chunk_plans()
        self._committed_punctuation = self.punctuation.snapshot()
        # Processors may set metrics at init (e.g. a store's size): they count as committed.
        self._committed_metrics = self.metrics.copy()

    def _create_processors(self) -> None:
        """Each node's processor and context (not initialized yet), the source topics'
        nodes by real topic name, and the serdes of sinks that are not JSON."""
        topology, application_id = self.topology, self.application_id
        for name in self.subtopology.nodes:
            node = topology.nodes[name]
            processor = node.factory()
            if node.kind == SINK and node.internal_topic:
                processor.topic = internal_topic_name(application_id, node.topics[0])
            if node.kind == SINK and not node.serdes.is_json:
                self._sink_serdes[processor.topic] = node.serdes
            if node.kind == SOURCE:
                for topic in node.topics:
                    real = (
                        internal_topic_name(application_id, topic) if node.internal_topic else topic
                    )
                    self._sources[real] = name
            self._processors[name] = processor
            self._contexts[name] = NodeContext(self, name, node.children)

    # -- processing -----------------------------------------------------------------------

    def source_topics(self) -> list[str]:
        return list(self._sources)

    def process(self, topic: str, offset: int | None, record: Record) -> None:
        """Process one record read from ``topic`` at ``offset``."""
        source = self._sources.get(topic)
        if source is None:
            raise StreamsException(f"task {self.task_id} does not read topic {topic!r}")
        meta = None if offset is None else RecordMetadata(topic, self.partition, offset)
        self.current_metadata = meta
        if not isinstance(record.timestamp, int) or record.timestamp < 0:
            error = ProcessingException(
                f"node {source} rejected {self._describe(record)}: invalid timestamp "
                f"{record.timestamp!r} (must be epoch ms >= 0); nothing was applied"
            )
            error.node = source
            raise error
        self.stream_time = max(self.stream_time, record.timestamp)
        self.process_at(source, record)
        if self.punctuation:
            self._punctuate()

    # -- punctuation (processors/punctuation.py) ----------------------------------------------

    def schedule(self, node: str, interval_ms: int, callback: Any) -> Cancellable:
        """A stream-time schedule of ``node``; a task with one takes records one at a
        time (punctuation is checked after each)."""
        self._plans = {}
        start = first_time(interval_ms, self.stream_time, resuming=self._opening)
        return self.punctuation.schedule(node, interval_ms, callback, start)

    def _punctuate(self) -> None:
        """Fire the schedules due at stream time, as the record just processed left it;
        a punctuator sees no record metadata (Kafka: none while punctuating)."""
        metadata, self.current_metadata = self.current_metadata, None
        try:
            self.punctuation.maybe_punctuate(self.stream_time, self._run_punctuator)
        finally:
            self.current_metadata = metadata

    def _run_punctuator(self, node: str, call: Any) -> None:
        try:
            call()
        except (ProcessingException, SerializationException):
            raise  # a child that failed on a forwarded record names itself
        except Exception as exc:
            error = ProcessingException(
                f"node {node}'s punctuator failed at stream time {self.stream_time} "
                f"(task {self.task_id}): {handlers.exception_text(exc)}"
            )
            error.node = node
            raise error from exc

    def _chunk_plans(self) -> dict[str, ChunkPlan]:
        """For each source topic whose records reach only chunk-capable processors: their
        way through the sub-topology (processors/chunk_plan.py). Other inputs' nodes may
        stand beside it (the table a stream joins with): a chunk holds one topic's records."""
        plans: dict[str, ChunkPlan] = {}
        for topic, source in self._sources.items():
            plan = ChunkPlan.of(self.topology, self.subtopology.nodes, source, self._processors)
            if plan is not None:
                plans[topic] = plan
        return plans

    def can_process_chunks(self, topic: str) -> bool:
        """True when ``process_chunk`` applies to records of ``topic``."""
        return topic in self._plans

    def process_chunk(self, topic: str, offsets: list[int], records: list[Record]) -> bool:
        """Process ``records`` (read from ``topic`` at ``offsets``, in offset order) node by
        node, each node taking them all at once: the same state, output, metrics and stream
        time as ``process`` on each in turn (each topic's output in the same order). Returns
        False, with nothing applied, when the records of ``topic`` reach a processor that is
        not chunk-capable or when a record fails; the caller then processes the records one
        by one, which raises for the one that fails."""
        if not self.can_process_chunks(topic):
            return False
        stream_time = self.stream_time
        stream_times = []
        for record in records:
            timestamp = record.timestamp
            if not isinstance(timestamp, int) or timestamp < 0:
                return False
            if timestamp > stream_time:
                stream_time = timestamp
            stream_times.append(stream_time)
        if not records:
            return True
        output_mark = len(self._output)
        metrics, undo = self.metrics.copy(), self.cached.snapshot()
        chunk = Chunk(topic, offsets, stream_times, records, list(range(len(records))))
        plan = self._plans[topic]
        try:
            plan.run(chunk, self._forwarded, lambda: self._output, self.cached.absorber)
        except Exception:
            # Nothing was written to the stores yet (finish_chunk does that): undo the rest.
            del self._output[output_mark:]
            self.metrics = metrics
            self.cached.restore(undo)
            return False
        self.cached.release(undo)
        for processor in plan.processors:
            processor.finish_chunk()
        self.stream_time = stream_time
        self.current_metadata = RecordMetadata(topic, self.partition, offsets[-1])
        return True

    def process_chained(self, topic: str, offset: int, record: Record) -> bool:
        """``process`` by ``ChunkPlan.run_record``; False (nothing done) for other topics."""
        plan = self._plans.get(topic) if self.cached.cache is None else None
        return plan is not None and plan.straight and plan.run_record(self, topic, offset, record)

    def _forwarded(self, processor: Processor, count: int) -> None:
        """What a node forwarded of a chunk, as its forward() calls count it one by one."""
        self.metrics.add(NODES, processor.context.node, FORWARD_TOTAL, count)

    def process_at(self, node: str, record: Record) -> None:
        try:
            self._processors[node].process(record)
        except ProcessingException:
            raise
        except Exception as exc:
            if isinstance(exc, SerializationException) and exc.node is not None:
                raise  # already names the node that failed; ancestors must not re-wrap it
            # The one line a person reads: node, topic, partition, offset, key, exception.
            message = (
                f"node {node} failed on {self._describe(record)}: {handlers.exception_text(exc)}"
            )
            serialization = isinstance(exc, SerializationException)
            wrapped = (SerializationException if serialization else ProcessingException)(message)
            wrapped.node = node
            raise wrapped from exc

    def _describe(self, record: Record) -> str:
        meta = self.current_metadata
        where = (
            f"topic {meta.topic!r} partition {meta.partition} offset {meta.offset}"
            if meta
            else f"task {self.task_id}"
        )
        return (
            f"record ({where}, key={_short(record.key)}, value={_short(record.value)}, "
            f"timestamp={record.timestamp!r})"
        )

    # -- failed records (processors/exception_handlers.py) -----------------------------------

    def failure(
        self,
        error: ProcessingException | SerializationException,
        topic: str,
        offset: int | None,
        record: Record,
        texts: tuple[str | None, str | None, str | None] | None = None,
    ) -> handlers.RecordFailure:
        """The failure ``error``, raised by ``process(topic, offset, record)``; ``texts``:
        the record's key, value and headers as read (the engine's), else encoded here."""
        if texts is None:
            texts = (
                dead_letter_text(record.key),
                dead_letter_text(record.value),
                dead_letter_text(record.headers),
            )
        return handlers.RecordFailure(
            handlers.PROCESSING,
            error.node or self._sources.get(topic, "?"),
            topic,
            self.partition,
            offset,
            record.timestamp if isinstance(record.timestamp, int) else 0,
            *texts,
            handlers.one_line(str(error)),
            error.__cause__ or error,
        )

    def deserialization_failure(
        self,
        error: Exception,
        topic: str,
        offset: int,
        timestamp: int,
        texts: tuple[str | None, str | None, str | None],
        what: str,
        serde: str | None = None,
        raw_bytes: bool = False,
    ) -> handlers.RecordFailure:
        """The failure of a record of ``topic`` whose ``what`` (key, value or headers) is
        not JSON, or (``serde`` given: its name) could not be deserialized by that serde;
        the one line names the source node, the record and the serde. ``raw_bytes``: the
        texts are the record's raw bytes (base64 JSON strings)."""
        node = self._sources.get(topic, "?")
        key = texts[0] if texts[0] is None or len(texts[0]) <= 200 else texts[0][:200] + "..."
        problem = (
            f"{what} is not valid JSON"
            if serde is None
            else f"{what} could not be deserialized by {serde}"
        )
        message = (
            f"node {node} could not deserialize record (topic {topic!r} partition "
            f"{self.partition} offset {offset}, key {'bytes (base64)' if raw_bytes else 'text'} "
            f"{key!r}): {problem}: {handlers.exception_text(error)}"
        )
        return handlers.RecordFailure(
            handlers.DESERIALIZATION,
            node,
            topic,
            self.partition,
            offset,
            timestamp,
            *texts,
            message,
            error,
            raw_bytes,
        )

    def source_serdes(self, topic: str) -> TopicSerdes:
        """The serdes of the source node reading ``topic`` (its real name)."""
        source = self._sources.get(topic)
        return DEFAULT_SERDES if source is None else self.topology.nodes[source].serdes

    def continues(self, failure: handlers.RecordFailure) -> bool:
        """Whether the handler for ``failure`` skips the record (log-and-continue); the
        caller then undoes the record and calls ``dead_letter``. Log-and-fail: False."""
        return self.handlers.handler(failure.kind) == handlers.CONTINUE

    def dead_letter(self, failure: handlers.RecordFailure, original_headers: Any = None) -> None:
        """Count the skipped record and emit its dead letter (output of this task, so it
        commits exactly once with the task's batch). Call it after the record was undone."""
        topic = self.handlers.dead_letter_topic
        handlers.log_continued(failure, topic)
        headers = handlers.dead_letter_headers(
            failure, self.application_id, str(self.task_id), original_headers
        )
        headers_text = checked_json_text(headers, "headers")
        record = Record(
            text_value(failure.key_text), text_value(failure.value_text), failure.timestamp, headers
        )
        self._output.append(
            Output(
                topic, record, failure.key_text, failure.value_text, headers_text, failure.key_text
            )
        )
        # Counted by the node that failed (Kafka counts a skipped record in dropped-records).
        context = self._contexts.get(failure.node) or self._contexts[self._sources[failure.topic]]
        context.metric(handlers.DROPPED_RECORDS)
        context.metric(handlers.DEAD_LETTER_RECORDS)

    def send_many(self, topic: str, records: Sequence[Record]) -> None:
        self._output.extend(outputs_of(topic, records, self._sink_serdes.get(topic)))

    def send_columns(self, topic: str, columns: Columns) -> None:
        """``send_many`` of the plain records of ``columns``, kept as columns when the sink
        writes JSON (``OutputBlock``)."""
        if not len(columns):
            return
        block = None if topic in self._sink_serdes else OutputBlock.of(topic, columns)
        if block is None:
            self.send_many(topic, columns.records())
        else:
            self._output.append(block)

    def store_view(self, name: str) -> Any:
        view = self._views.get(name)
        if view is None:
            if name in self._global_views:
                return self._global_views[name]
            if name not in self.subtopology.stores:
                raise StreamsException(f"store {name!r} is not connected to task {self.task_id}")
            spec = self.topology.stores[name]
            view = open_view(name, spec.kind, spec.options, lambda: self.transaction, spec.serdes)
            self._views[name] = view
        return view

    # -- committing -----------------------------------------------------------------------

    def commit_needed(self) -> bool:
        """True when the uncommitted changes exceed statestore.uncommitted.max.* (KIP-892)."""
        txn = self.transaction
        return (
            txn.approximate_num_uncommitted_entries() > self.max_uncommitted_records
            or txn.approximate_num_uncommitted_bytes() > self.max_uncommitted_bytes
        )

    def pending_output(self) -> list[tuple[str, Record]]:
        return [(o.topic, o.record) for o in expanded(self._output)]

    def take_output(self) -> list[tuple[str, Record]]:
        """The output since the last commit or take, handed over now: the test driver emits
        each record's output at once and commits later. A later abort cannot take it back,
        so the caller replays what it rolls back without emitting again."""
        output, self._output = self._output, []
        return [(o.topic, o.record) for o in expanded(output)]

    def replays_safely(self) -> bool:
        """True when processing records again, after an abort, calls no code that may have
        side effects: nothing is scheduled and every processor is chunk-capable (whose
        functions are assumed pure: a chunk already calls them in another order) or a
        suppression (no user code at all)."""
        return not self.punctuation and all(
            p.chunked or isinstance(p, Suppress) for p in self._processors.values()
        )

    def pending_output_text(self) -> list[Output]:
        """The uncommitted output with its canonical JSON texts, in emission order."""
        return expanded(self._output)

    def prepare_commit(self, offsets: Mapping[TopicPartition, int]) -> PreparedCommit:
        """Phase 1 of every commit, in the test driver and in the engine: hand over the
        open transaction (with the stream time written into it), ``offsets`` and the output.
        The runtime then commits (the driver: ``complete_commit`` at once; the engine's
        worker stages the writes, and ``checkpoint/commit.py`` commits Delta, then the local
        store) and calls ``post_commit``. The record cache is flushed first."""
        self.cached.flush(self)
        self.transaction.set_stream_time(self.stream_time)
        committed = self._committed_metadata
        metadata_store.write(
            self.transaction,
            {k: v for k, v in self.processor_metadata.items() if committed.get(k) != v},
        )
        return PreparedCommit(self.transaction, dict(offsets), list(self._output))

    def complete_commit(self, prepared: PreparedCommit) -> None:
        """The local commit of a prepared commit: data, stream time and offsets in one
        atomic write of the task's store."""
        prepared.transaction.commit(prepared.offsets)

    def post_commit(self) -> None:
        """Phase 2: the committed output and metrics are behind; a new transaction starts."""
        self._output = []
        self._committed_metrics = self.metrics.copy()
        self._committed_metadata = dict(self.processor_metadata)
        self._committed_punctuation = self.punctuation.snapshot()
        self.transaction = self.store.new_transaction()

    def commit(self, offsets: Mapping[TopicPartition, int]) -> list[tuple[str, Record]]:
        """Both phases with the local commit between (the test driver's commit); returns
        the output to emit."""
        prepared = self.prepare_commit(offsets)
        self.complete_commit(prepared)
        self.post_commit()
        return [(o.topic, o.record) for o in expanded(prepared.output)]

    def abort(self) -> None:
        """Drop everything since the last commit: state changes, output, stream time."""
        self.transaction.close()
        self._output = []
        self.cached.clear()
        self.metrics = self._committed_metrics.copy()
        committed_time = self.store.stream_time()
        self.stream_time = NO_STREAM_TIME if committed_time is None else committed_time
        self.processor_metadata = metadata_store.read(self.store)
        self._committed_metadata = dict(self.processor_metadata)
        self.punctuation.restore(self._committed_punctuation)
        self.transaction = self.store.new_transaction()

    def close(self) -> None:
        for processor in self._processors.values():
            processor.close()
        self.transaction.close()
        # Dropped now: the task and its nodes refer to each other, so its output would
        # otherwise wait for the cyclic collector (paused while an engine batch runs).
        self._output = []
