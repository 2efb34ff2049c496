"""A Kafka topic's metadata through the admin client: existence, partition count,
creation, offsets (read_committed: a transaction still open or aborted is not an end), and
the consumer group offsets lakestate mirrors its committed offsets to."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lakestate.errors import StreamsException
from lakestate.io.kafka.cluster import ADMIN_TIMEOUT, KafkaCluster, admin_client


def _coordinator_busy(error: Any) -> bool:
    """Whether a group request's error passes once the group's coordinator is up again
    (librdkafka does not mark NOT_COORDINATOR retriable)."""
    from confluent_kafka import KafkaError

    busy = (
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    )
    return error.retriable() or error.code() in busy


def _fail(cluster: KafkaCluster, what: str, exc: Exception) -> StreamsException:
    return StreamsException(
        f"Kafka cluster {cluster.bootstrap_servers}: {what} failed: {exc}; check that the "
        "cluster is up and the app's bootstrap.servers names it"
    )


def check_reachable(cluster: KafkaCluster, setting: str, timeout: float = 5.0) -> None:
    """``StreamsException`` naming ``setting`` (where the address came from) unless the
    cluster answers a metadata request within ``timeout`` seconds: a command given a wrong
    address fails at once instead of waiting for every request's own timeout."""
    from confluent_kafka import KafkaException

    try:
        admin_client(cluster).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise StreamsException(
            f"Kafka cluster {cluster.bootstrap_servers} ({setting}) did not answer in "
            f"{timeout:g} s: {exc.args[0].str() if exc.args else exc}; check that the cluster "
            f"is up and {setting} names it"
        ) from None


def partition_count(cluster: KafkaCluster, topic: str) -> int | None:
    """The topic's partition count, None when it does not exist."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        metadata = admin_client(cluster).list_topics(topic, timeout=ADMIN_TIMEOUT)
    except KafkaException as exc:
        raise _fail(cluster, f"reading topic {topic!r}'s metadata", exc) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        if found is not None and found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise _fail(cluster, f"reading topic {topic!r}'s metadata", found.error)
        return None
    return len(found.partitions)


def create_topic(cluster: KafkaCluster, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions (the broker's replication factor);
    one created meanwhile by another is fine when it has as many."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    future = admin_client(cluster).create_topics([NewTopic(topic, partitions)])[topic]
    try:
        future.result(ADMIN_TIMEOUT)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise _fail(cluster, f"creating topic {topic!r}", exc) from None
    # The broker answers before every broker's metadata has the topic.
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while partition_count(cluster, topic) is None:
        if time.monotonic() > deadline:
            raise StreamsException(
                f"Kafka cluster {cluster.bootstrap_servers}: topic {topic!r} was created but "
                f"is not in its metadata after {ADMIN_TIMEOUT:.0f} s"
            )
        time.sleep(0.1)


def offsets(cluster: KafkaCluster, topic: str, partitions: int, earliest: bool) -> dict[int, int]:
    """Per partition the earliest offset held, or the end (the read_committed end: the last
    stable offset, so every record before it is committed or aborted for good)."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()
    wanted = {TopicPartition(topic, p): spec for p in range(partitions)}
    futures = admin_client(cluster).list_offsets(
        wanted, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=ADMIN_TIMEOUT
    )
    try:
        return {tp.partition: future.result().offset for tp, future in futures.items()}
    except KafkaException as exc:
        raise _fail(cluster, f"listing topic {topic!r}'s offsets", exc) from None


def commit_group_offsets(
    cluster: KafkaCluster, group: str, offsets_by_topic: Mapping[str, Mapping[int, int]]
) -> None:
    """Set consumer group ``group``'s committed offsets (a group with no active member, as
    lakestate's: it never joins the group, it only mirrors its offsets there)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    partitions = [
        TopicPartition(topic, p, offset)
        for topic, per in sorted(offsets_by_topic.items())
        for p, offset in sorted(per.items())
    ]
    if not partitions:
        return
    request = [ConsumerGroupTopicPartitions(group, partitions)]
    future = admin_client(cluster).alter_consumer_group_offsets(
        request, request_timeout=ADMIN_TIMEOUT
    )[group]
    try:
        future.result(ADMIN_TIMEOUT)
    except KafkaException as exc:
        raise _fail(cluster, f"committing consumer group {group!r}'s offsets", exc) from None


def group_offsets(
    cluster: KafkaCluster, group: str, topic: str, consumer: Any = None
) -> dict[int, int]:
    """Consumer group ``group``'s committed offsets of ``topic`` by partition (stable: an
    offset commit still pending in a transaction is waited for); none for a partition never
    committed. ``consumer``: one of the group's (never joined) to ask with, else one is
    made. (A consumer's OffsetFetch, not the admin client's ListConsumerGroupOffsets, which
    crashed confluent-kafka 2.16.1 on a group not yet known to a fresh broker.)"""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    count = partition_count(cluster, topic)
    if not count:
        return {}
    own = consumer is None
    if own:
        consumer = Consumer(cluster.client_config(group_id=group, enable_auto_commit=False))
    wanted = [TopicPartition(topic, p) for p in range(count)]
    deadline = time.monotonic() + ADMIN_TIMEOUT
    try:
        while True:
            try:
                found = consumer.committed(wanted, timeout=ADMIN_TIMEOUT)
                break
            except KafkaException as exc:
                # A coordinator loading its partition or moved (a broker just restarted): ask
                # again, within the bound.
                if not _coordinator_busy(exc.args[0]) or time.monotonic() > deadline:
                    raise _fail(
                        cluster, f"reading consumer group {group!r}'s offsets", exc
                    ) from None
                time.sleep(0.2)
    finally:
        if own:
            consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
