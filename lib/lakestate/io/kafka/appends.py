"""A batch's records into a Kafka sink topic, exactly once for read_committed consumers
(step 3 of the commit protocol, ``checkpoint/commit.py``, for a Kafka topic).

Each task batch's records of a topic go in one Kafka transaction of the task's producer for
that topic (``transactional.id`` ``lakestate-<app>-<task>-<topic>``: every run of the task,
on any instance, uses the same id, so a new run's producer fences an old one). The
transaction also commits, with the records and atomically with them, a *marker*: the offset
of consumer group ``<app>.lakestate-sink.<task>`` on partition 0 of the topic, set to the
task's batch. The marker is to a Kafka sink what a Delta txn is to a log table: the topic
*holds* batch b of task t when its marker is b or more. A replay first initializes the
producer (which aborts the open transaction of a crashed or fenced run, or waits for one it
had already committed to complete), then reads the marker (stable: a pending commit is
waited for) and writes only the task batches the topic does not hold yet.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io.kafka import admin
from lakestate.io.kafka.cluster import ADMIN_TIMEOUT, KafkaCluster
from lakestate.io.topic_records import AppendResult, decode_json
from lakestate.serdes import DEFAULT_SERDES, JsonSerde, Serde, TopicSerdes
from lakestate.task_id import TaskId

if TYPE_CHECKING:
    from lakestate.io.topics import BatchRows


_PRODUCERS: dict[tuple[KafkaCluster, str], Any] = {}
_GROUPS: dict[tuple[KafkaCluster, str], Any] = {}
_GROUP_METADATA: dict[tuple[KafkaCluster, str], Any] = {}
_LOCK = threading.Lock()


def close_clients() -> None:
    """Close this process's transactional producers and marker consumers (a process that
    outlives its cluster, such as a test session, stops them before the cluster goes)."""
    with _LOCK:
        for producer in _PRODUCERS.values():
            producer.flush(5)
        for consumer in _GROUPS.values():
            consumer.close()
        _PRODUCERS.clear()
        _GROUPS.clear()
        _GROUP_METADATA.clear()


def transactional_id(app: str, task: TaskId, topic: str) -> str:
    """The transactional.id of ``task``'s producer for ``topic``."""
    return f"lakestate-{app}-{task}-{topic}"


def marker_group(app: str, task: TaskId) -> str:
    """The consumer group whose offset on a sink topic's partition 0 is ``task``'s last
    batch written to it."""
    return f"{app}.lakestate-sink.{task}"


def held_batch(cluster: KafkaCluster, app: str, task: TaskId, topic: str) -> int:
    """The last batch of ``task`` the Kafka topic holds (0: none)."""
    group = marker_group(app, task)
    return admin.group_offsets(cluster, group, topic, _group_consumer(cluster, group)).get(0, 0)


def append_batch(
    cluster: KafkaCluster,
    topic: str,
    partitions: int,
    app: str,
    batches: Mapping[TaskId, int],
    build: BatchRows,
    serdes: TopicSerdes = DEFAULT_SERDES,
) -> AppendResult:
    """Write each task batch of ``batches`` the topic does not hold yet, in its own
    transaction with its marker (``build({task: batch}, ends)``: its rows, in emission
    order per partition; the offsets it numbers are Kafka's to give, so ignored)."""
    ranges: dict[int, tuple[int, int]] = {}
    written = False
    for task, batch in sorted(batches.items()):
        producer = _producer(cluster, transactional_id(app, task, topic))
        if held_batch(cluster, app, task, topic) >= batch:
            continue
        rows = build({task: batch}, dict.fromkeys(range(partitions), 0))
        _bounded(
            cluster,
            transactional_id(app, task, topic),
            functools.partial(
                _transaction, cluster, producer, topic, (app, task, batch), rows, ranges, serdes
            ),
        )
        written = True
    return AppendResult(topic, dict(sorted(ranges.items())), skipped=not written)


def _producer(cluster: KafkaCluster, txn_id: str) -> Any:
    """The process's producer of ``txn_id``, its transactions initialized (which fences
    every older producer of the id and settles the transaction it left open)."""
    from confluent_kafka import KafkaException, Producer

    with _LOCK:
        producer = _PRODUCERS.get((cluster, txn_id))
        if producer is not None:
            return producer
        producer = Producer(
            cluster.client_config(
                transactional_id=txn_id,
                transaction_timeout_ms=cluster.transaction_timeout_ms,
                linger_ms=5,
            )
        )
        try:
            producer.init_transactions(ADMIN_TIMEOUT)
        except KafkaException as exc:
            raise StreamsException(
                f"Kafka cluster {cluster.bootstrap_servers}: the transactional producer "
                f"{txn_id!r} did not initialize: {exc}"
            ) from None
        _PRODUCERS[(cluster, txn_id)] = producer
        return producer


def _group_consumer(cluster: KafkaCluster, group: str) -> Any:
    """The process's consumer of a marker group: it never joins (the group has no member);
    it reads the marker and gives the metadata a transaction's offset commit names the
    group with."""
    from confluent_kafka import Consumer

    with _LOCK:
        consumer = _GROUPS.get((cluster, group))
        if consumer is None:
            consumer = Consumer(
                cluster.client_config(
                    group_id=group, enable_auto_commit=False, isolation_level="read_committed"
                )
            )
            _GROUPS[(cluster, group)] = consumer
            # Asked once, while the consumer is new: librdkafka answers it through the
            # consumer's group thread, waiting without a bound and holding the GIL, which
            # stalled a whole run when asked mid-commit after a broker restart. The consumer
            # never joins the group, so what it answers never changes.
            _GROUP_METADATA[(cluster, group)] = consumer.consumer_group_metadata()
        return consumer


def _group_metadata(cluster: KafkaCluster, group: str) -> Any:
    """The marker group's metadata, as a transaction's offset commit names the group."""
    _group_consumer(cluster, group)
    return _GROUP_METADATA[(cluster, group)]


def _bounded(cluster: KafkaCluster, txn_id: str, write: Callable[[], None]) -> None:
    """Run ``write`` (a task batch's transaction) within the cluster's transaction timeout
    (``producer.transaction.timeout.ms``: the broker aborts a transaction open longer, so
    none can complete later). Some librdkafka calls outlive their own timeouts after a
    broker restart (a run stalled 617 s in one); the batch then fails, its producer is
    dropped, and the call is left in a daemon thread. Exactly once still: a transaction that never commits is aborted by the
    next producer of its transactional.id, and one that commits late holds its marker, so
    the rerun's replay writes it once either way."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            write()
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"kafka-txn-{txn_id}", daemon=True).start()
    deadline = cluster.transaction_timeout_ms / 1000
    if not done.wait(deadline):
        with _LOCK:
            _PRODUCERS.pop((cluster, txn_id), None)
        raise StreamsException(
            f"Kafka cluster {cluster.bootstrap_servers}: the transaction of {txn_id!r} did "
            f"not complete within {deadline:.0f} s (the cluster restarting or "
            "unreachable); the batch is not complete: rerun, and its recorded batch is "
            "replayed, written once"
        )
    if failed:
        raise failed[0]


def _transaction(
    cluster: KafkaCluster,
    producer: Any,
    topic: str,
    task_batch: tuple[str, TaskId, int],
    rows: pa.Table,
    ranges: dict[int, tuple[int, int]],
    serdes: TopicSerdes,
) -> None:
    from confluent_kafka import KafkaException, TopicPartition

    app, task, batch = task_batch
    txn_id = transactional_id(app, task, topic)
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
            return
        p, offset = message.partition(), message.offset()
        start, end = ranges.get(p, (offset, offset + 1))
        ranges[p] = (min(start, offset), max(end, offset + 1))

    ordered = rows.sort_by([("partition", "ascending"), ("offset", "ascending")])
    try:
        producer.begin_transaction()
        for row in ordered.to_pylist():
            producer.produce(
                topic,
                key=wire_bytes(serdes.key, row["key"]),
                value=wire_bytes(serdes.value, row["value"]),
                partition=row["partition"],
                timestamp=row["timestamp"],
                headers=_headers(row["headers"]),
                on_delivery=delivered,
            )
            producer.poll(0)
        marker = [TopicPartition(topic, 0, batch)]
        group = _group_metadata(cluster, marker_group(app, task))
        producer.send_offsets_to_transaction(marker, group, ADMIN_TIMEOUT)
        producer.commit_transaction(ADMIN_TIMEOUT)
    except KafkaException as exc:
        _failed(cluster, producer, txn_id, task, batch, exc)
    if failures:
        raise StreamsException(f"{txn_id}: a record of batch {batch} failed: {failures[0]}")


def _failed(
    cluster: KafkaCluster, producer: Any, txn_id: str, task: TaskId, batch: int, exc: Any
) -> None:
    from confluent_kafka import KafkaError, KafkaException

    error = exc.args[0]
    # Whatever failed, the next attempt starts from a new producer: its initialization
    # settles the transaction this one may have left open (a producer in an unknown state,
    # as after a broker restart, would fail the rerun as if fenced).
    with _LOCK:
        _PRODUCERS.pop((cluster, txn_id), None)
    fenced = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    if error.fatal() or error.code() in fenced:
        raise TaskMigratedException(
            f"task {task}: Kafka producer {txn_id!r} was fenced by a newer one (another run "
            f"took the task over) while writing batch {batch}; this run stops, and the task's "
            "owner writes the batch"
        ) from None
    if error.txn_requires_abort():
        with contextlib.suppress(KafkaException):  # the new producer's init aborts it too
            producer.abort_transaction(ADMIN_TIMEOUT)
    raise StreamsException(
        f"{txn_id}: batch {batch}'s transaction failed ({error}); nothing of it is visible "
        "to read_committed consumers, and the next run writes it again"
    ) from None


def wire_bytes(serde: Serde, text: str | None) -> bytes | None:
    """The bytes ``serde`` writes for a key or value given in its JSON form (``text``,
    JSON text; None: null). The task's sink checked the value's type already."""
    if text is None:
        return None
    if type(serde) is JsonSerde:
        return text.encode()  # the canonical text as it is
    return serde.serialize(serde.from_json(decode_json(text)))


def _headers(text: str | None) -> list[tuple[str, bytes]] | None:
    if text is None:
        return None
    import json

    return [(k, json.dumps(v).encode()) for k, v in json.loads(text).items()]
