"""Appending to a log table through delta-rs: producers' records, and a batch's records
with its tasks' txns (step 3 of the commit protocol for sink and repartition topics).

An append reads the partitions' end offsets at a snapshot of the table, numbers its records
on from there and commits them on that snapshot in one Delta commit, which records the end
offsets it leaves (``ends.ENDS_METADATA_KEY``). Every append carries the topic's append txn
(``txn_ids.topic_append``): two appends numbered from one snapshot both carry it, so Delta's
conflict check fails the second (ConcurrentTransaction, through the store's conditional put
of the commit file on a bucket), which renumbers from the winner's end offsets and retries.
That alone keeps offsets dense and unique across processes and machines. Within a process
appends to a topic are serialized (a lock per table), and on a local warehouse across
processes too (``fcntl`` lock on ``topics/.<topic>.lock``), so that they do not race at all.

A commit's txns also make it idempotent: a table holds version ``v`` of txn app id ``a``
once a commit carried it, and a replay of an append already held writes nothing.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakestate.errors import StreamsException
from lakestate.io import delta_commits, txn_ids
from lakestate.io.logtable.ends import ENDS_METADATA_KEY, ends_at, ends_value, remember_ends
from lakestate.io.table_files import DataFile
from lakestate.io.topic_records import AppendResult, normalize_records
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

if TYPE_CHECKING:
    from lakestate.io.topics import BatchRows

_process_locks: dict[str, threading.RLock] = {}
_process_locks_guard = threading.Lock()
_held = threading.local()  # per thread: {path: depth} of append_lock holds
#: Races to other appends of the topic an append may lose in a row before it gives up.
ATTEMPTS = 100


@contextlib.contextmanager
def append_lock(warehouse: Warehouse, topic: str, path: str) -> Iterator[None]:
    """Hold the append lock of ``topic`` (its log table at ``path``): appends are
    serialized while held (their offsets are read, then written). Reentrant within a
    thread; across processes on a local warehouse through ``fcntl.flock`` on
    ``topics/.<topic>.lock``."""
    with _process_locks_guard:
        lock = _process_locks.setdefault(path, threading.RLock())
    with lock:
        depth: dict[str, int] = getattr(_held, "depth", None) or {}
        _held.depth = depth
        if depth.get(path, 0) > 0 or not warehouse.is_local:
            depth[path] = depth.get(path, 0) + 1
            try:
                yield
            finally:
                depth[path] -= 1
            return
        import fcntl

        lock_file = Path(path.removeprefix("file://")).parent / f".{topic}.lock"
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        depth[path] = 1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            depth[path] = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def append_records(
    warehouse: Warehouse,
    topic: str,
    path: str,
    num_partitions: int,
    records: Sequence[Any],
    txn: tuple[str, int] | None,
    labels: Sequence[str] | None,
) -> AppendResult:
    """Append producers' ``records`` (``topic_records.normalize_records``) in one commit,
    each partition's numbered on from its end offset in the order given; ``txn``: (app id,
    version) of a Delta txn that makes the append idempotent. The caller checked ``txn``."""
    rows = normalize_records(records, num_partitions, labels)
    with append_lock(warehouse, topic, path):
        for attempt in range(ATTEMPTS):
            table = delta_commits.open_table(path)
            if txn is not None and (table.transaction_version(txn[0]) or -1) >= txn[1]:
                return AppendResult(topic, {}, skipped=True, version=table.version())
            if not rows:
                return AppendResult(topic, {}, skipped=False, version=table.version())
            ends = ends_at(warehouse, path, table, num_partitions)
            next_offset = dict(ends)
            offsets = []
            for p, *_ in rows:
                offsets.append(next_offset[p])
                next_offset[p] += 1
            data = pa.table(
                {
                    "partition": pa.array([r[0] for r in rows], pa.int32()),
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": pa.array([r[1] for r in rows], pa.int64()),
                    "key": pa.array([r[2] for r in rows], pa.string()),
                    "value": pa.array([r[3] for r in rows], pa.string()),
                    "headers": pa.array([r[4] for r in rows], pa.string()),
                }
            )
            txns = _topic_txn(topic, table) | (dict([txn]) if txn is not None else {})
            metadata = {ENDS_METADATA_KEY: ends_value(next_offset)}
            try:
                version = delta_commits.append(table, data, "", {}, metadata, extra_txns=txns)
            except delta_commits.ConcurrentCommit:
                back_off(attempt)
                continue
            remember_ends(warehouse, path, version, next_offset)
            return _result(topic, ends, next_offset, version)
    raise _gave_up(topic)


def append_batch(
    warehouse: Warehouse,
    topic: str,
    path: str,
    num_partitions: int,
    app: str,
    batches: Mapping[TaskId, int],
    build: BatchRows,
    metadata: Mapping[str, Any],
) -> AppendResult:
    """Append a batch's records of ``topic`` in one commit carrying the txn of each task
    batch of ``batches`` the table does not hold yet (none: nothing is written, a replay).
    ``build(todo, ends)`` gives those tasks' rows numbered on from ``ends``; the commit's
    metadata is ``metadata`` and the end offsets it leaves. TaskMigratedException when
    another writer committed one of those task batches meanwhile."""
    with append_lock(warehouse, topic, path):
        todo: dict[TaskId, int] | None = None
        for attempt in range(ATTEMPTS):
            table = delta_commits.open_table(path)
            held = delta_commits.txn_versions(table, app, list(batches))
            if todo is None:
                todo = {t: b for t, b in batches.items() if held[t] < b}
                if not todo:
                    version = table.version()
                    delta_commits.release(table)
                    return AppendResult(topic, {}, skipped=True, version=version)
            elif any(held[t] >= b for t, b in todo.items()):
                raise delta_commits.ConcurrentCommit(
                    f"{path}: another writer committed a batch of "
                    f"{', '.join(str(t) for t in sorted(todo) if held[t] >= todo[t])} "
                    "at the same time"
                )
            ends = ends_at(warehouse, path, table, num_partitions)
            data = build(todo, dict(ends))
            next_offset = dict(ends)
            counts = pc.value_counts(data.column("partition")).to_pylist() if data.num_rows else []
            for count in counts:
                next_offset[count["values"]] += count["counts"]
            metadata_ = {**metadata, ENDS_METADATA_KEY: ends_value(next_offset)}
            try:
                version = delta_commits.append(
                    table, data, app, todo, metadata_, extra_txns=_topic_txn(topic, table)
                )
            except delta_commits.ConcurrentCommit:
                back_off(attempt)
                continue  # renumber, unless the winner holds one of these batches
            remember_ends(warehouse, path, version, next_offset)
            delta_commits.release(table)
            return _result(topic, ends, next_offset, version)
    raise _gave_up(topic)


@dataclass(frozen=True)
class HeldAppend:
    """A batch's append of a topic planned under the topic's append lock (``held_append``):
    the table's snapshot, the task batches it does not hold yet (none: a replay, nothing to
    write) and the end offsets their records number on from."""

    table: Any
    todo: dict[TaskId, int]
    ends: dict[int, int]


@contextlib.contextmanager
def held_append(
    warehouse: Warehouse,
    topic: str,
    path: str,
    num_partitions: int,
    app: str,
    batches: Mapping[TaskId, int],
) -> Iterator[HeldAppend]:
    """``append_batch`` in two halves, for records written as files elsewhere (Spark's
    executors): while the block runs, the topic's append lock is held and its ends stay
    put; the block numbers the records on from ``HeldAppend.ends``, writes them as files
    and commits them with ``commit_files``."""
    with append_lock(warehouse, topic, path):
        table = delta_commits.open_table(path)
        held = delta_commits.txn_versions(table, app, list(batches))
        todo = {t: b for t, b in batches.items() if held[t] < b}
        ends = ends_at(warehouse, path, table, num_partitions) if todo else {}
        yield HeldAppend(table, todo, dict(ends))


def held_again(
    warehouse: Warehouse, path: str, num_partitions: int, app: str, held: HeldAppend
) -> HeldAppend:
    """``held`` after its commit lost a race to a writer outside the append lock (another
    machine's, on a bucket): the newest snapshot and its ends, the same task batches.
    ConcurrentCommit if the winner holds one of them (another run committed the batch)."""
    table = delta_commits.open_table(path)
    versions = delta_commits.txn_versions(table, app, list(held.todo))
    taken = sorted(t for t, b in held.todo.items() if versions[t] >= b)
    if taken:
        raise delta_commits.ConcurrentCommit(
            f"{path}: another writer committed a batch of "
            f"{', '.join(str(t) for t in taken)} at the same time"
        )
    return HeldAppend(table, held.todo, dict(ends_at(warehouse, path, table, num_partitions)))


def commit_files(
    warehouse: Warehouse,
    topic: str,
    path: str,
    held: HeldAppend,
    files: Sequence[DataFile],
    app: str,
    metadata: Mapping[str, Any],
) -> AppendResult:
    """Commit ``files`` (the records of ``held.todo``, numbered from ``held.ends``) as
    ``append_batch`` commits its rows: one commit with the tasks' txns, the topic's append
    txn and the end offsets it leaves. ConcurrentCommit if a writer outside the append
    lock committed meanwhile (``held_again`` then renumbers)."""
    if not held.todo:
        return AppendResult(topic, {}, skipped=True, version=held.table.version())
    next_offset = dict(held.ends)
    for file in files:
        next_offset[file.partition_value] += file.rows
    version = delta_commits.append_files(
        held.table,
        [f.add_action() for f in files],
        app,
        held.todo,
        {**metadata, ENDS_METADATA_KEY: ends_value(next_offset)},
        extra_txns=_topic_txn(topic, held.table),
    )
    remember_ends(warehouse, path, version, next_offset)
    return _result(topic, held.ends, next_offset, version)


def _topic_txn(topic: str, table: Any) -> dict[str, int]:
    """The topic's append txn for a commit numbered at ``table``'s snapshot (version: the
    version it commits when nothing races it)."""
    return {txn_ids.topic_append(topic): table.version() + 1}


def back_off(attempt: int) -> None:
    """A short random pause after a lost race, growing with the attempts (up to ~0.5 s), so
    that the writers racing do not collide again in step."""
    time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))


def _result(
    topic: str, ends: Mapping[int, int], next_offset: Mapping[int, int], version: int
) -> AppendResult:
    return AppendResult(
        topic,
        {p: (ends[p], next_offset[p]) for p in sorted(ends) if next_offset[p] > ends[p]},
        skipped=False,
        version=version,
    )


def _gave_up(topic: str) -> StreamsException:
    return StreamsException(
        f"topic {topic!r}: an append lost {ATTEMPTS} races in a row to other writers' "
        "appends of the topic; nothing of it was written. Retry it, or append from fewer "
        "writers at once"
    )
