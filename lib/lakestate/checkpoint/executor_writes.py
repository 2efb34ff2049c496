"""Step 3 with the rows where they were made: when Spark's executors own the state, a
batch's records of its log-table topics (sinks and repartition topics) and its changelog
rows never come to the driver (docs/architecture.md, "State on Spark's executors").

The driver plans each table's share before the progress commit (``planned``): it takes the
append lock of each log-table topic the batch writes (in name order) and holds it until the
batch's tables are committed, reads which task batches each table does not hold yet and the
topic's end offsets, and numbers each task's records on from there, in task order, as
``commit._append_topic`` numbers them (``TableWrite.bases``). The executors then write
each task's rows of each table as Parquet files into the table's location
(``task_files``, run where the rows are by ``RowsElsewhere.write_files``) and hand back
only the files' metadata; step 3 commits them, each table in one Delta commit with the
same txns and metadata as the driver's append. So the tables are the same, record for
record and offset for offset, whoever holds the rows. A typed Delta sink's rows are typed
where they are too (``rows.typed``, against the table's columns at the plan); the driver
decides the batch's columns from the files' schemas (``DeltaSinkTopic.batch_schema``) and,
should the tasks have typed a new column differently (one's ints, another's doubles), has
the sink's files written again with the batch's types. Kafka sinks still take their rows
on the driver.

A file belongs to one attempt of one Spark task (a unique name): a retried task writes new
files, and only the files its successful attempt reports are committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lakestate.checkpoint import changelog
from lakestate.checkpoint.layout import AppLayout
from lakestate.delta_sink import DeltaSink
from lakestate.errors import StreamsException
from lakestate.io import delta_commits
from lakestate.io.deltasink import DeltaSinkTopic
from lakestate.io.deltasink import rows as deltasink_rows
from lakestate.io.logtable import LogTableTopic
from lakestate.io.logtable.appends import ATTEMPTS, HeldAppend, back_off
from lakestate.io.table_files import DataFile, partition_text, write_file, write_partitioned
from lakestate.io.topic_records import RECORD_SCHEMA
from lakestate.task_id import TaskId


@dataclass(frozen=True)
class TableWrite:
    """One table's share of a batch, for the executors to write: the ``out`` rows of
    log-table ``topic`` (numbered from ``bases``: (sub, task, partition) -> first offset)
    or the ``state`` rows of ``store`` (a store of kind ``store_kind``), of the tasks in
    ``batches`` (task -> batch: those the table does not hold yet)."""

    point: str  # the fault point after its commit: after_sink:<topic> / after_changelog:<s>
    root: str  # the table's location
    topic: str | None
    store: str | None
    store_kind: str | None
    batches: dict[TaskId, int]
    bases: dict[tuple[int, int, int], int]
    sink: DeltaSink | None = None  # a typed Delta sink's: its rows typed by it
    columns: pa.Schema | None = None  # ... as these columns (the table's; None: no table)


class RowsElsewhere(Protocol):
    """A batch's processing output left where it was made (Spark's executors)."""

    def write_files(self, writes: Sequence[TableWrite]) -> dict[str, list[DataFile]]:
        """Run ``task_files`` on each task's rows; the files written, by ``point``."""


@dataclass
class Planned:
    """The batch's writes, and per write (by ``point``) the table's snapshot they commit on
    with the task batches it does not hold (and, for a topic, its ends): ``HeldAppend``."""

    writes: list[TableWrite]
    held: dict[str, HeldAppend]


@contextlib.contextmanager
def planned(
    layout: AppLayout,
    counts_by_topic: Mapping[str, dict[TaskId, dict[int, int]]],
    stores: Mapping[str, dict[TaskId, int]],
    batches: Mapping[TaskId, int],
) -> Iterator[Planned]:
    """The writes of the log-table topics of ``counts_by_topic`` (topic -> task ->
    partition -> records) and of the changelogs of ``stores`` (store -> task -> batch),
    the topics' append locks held while the block runs."""
    app = layout.app.name
    plan = Planned([], {})
    with contextlib.ExitStack() as locks:
        for topic, counts in sorted(counts_by_topic.items()):
            found = layout.topic(topic)
            assert isinstance(found, LogTableTopic | DeltaSinkTopic)
            held = locks.enter_context(found.held_append(app, {t: batches[t] for t in counts}))
            bases = offset_bases({t: counts[t] for t in held.todo}, held.ends)
            point = f"after_sink:{topic}"
            if isinstance(found, DeltaSinkTopic):
                write = TableWrite(point, found.location, topic, None, None, held.todo, bases)
                write = dataclasses.replace(write, sink=found.sink, columns=found.columns(held))
            else:
                write = TableWrite(point, found.path, topic, None, None, held.todo, bases)
            plan.writes.append(write)
            plan.held[write.point] = held
        for store, tasks in sorted(stores.items()):
            path = layout.changelog_path(store)
            table = delta_commits.open_table(path)
            versions = delta_commits.txn_versions(table, app, list(tasks))
            todo = {t: b for t, b in tasks.items() if versions[t] < b}
            kind = layout.app.topology.stores[store].kind
            write = TableWrite(f"after_changelog:{store}", path, None, store, kind, todo, {})
            plan.writes.append(write)
            plan.held[write.point] = HeldAppend(table, todo, {})
        yield plan


def commits(
    layout: AppLayout,
    plan: Planned,
    files: Mapping[str, list[DataFile]],
    elsewhere: RowsElsewhere,
    identity: dict,
) -> dict[str, Callable[[], None]]:
    """Step 3's commit of each planned table's ``files``, by its fault point."""
    made: dict[str, Callable[[], None]] = {}
    for write in plan.writes:
        held, written = plan.held[write.point], files.get(write.point, [])
        if write.topic is not None:
            made[write.point] = functools.partial(
                _commit_topic, layout, write, held, written, elsewhere, identity
            )
        else:
            made[write.point] = functools.partial(
                _commit_changelog, held, written, layout.app.name, identity
            )
    return made


def _commit_topic(
    layout: AppLayout,
    write: TableWrite,
    held: HeldAppend,
    files: list[DataFile],
    elsewhere: RowsElsewhere,
    identity: dict,
) -> None:
    """A topic's files in one commit. A race lost to a writer outside the append lock
    (another machine's, on a bucket) renumbers: every base of a partition moves by as much
    as its end did, and the executors write the files again (the lost ones are never
    committed), as the driver's append renumbers its rows."""
    found = layout.topic(write.topic or "")
    assert isinstance(found, LogTableTopic | DeltaSinkTopic)
    app = layout.app.name
    for attempt in range(ATTEMPTS):
        if isinstance(found, DeltaSinkTopic) and held.todo:
            files = _typed_alike(found, write, held, files, elsewhere)
        try:
            found.commit_files(held, files, app, identity)
            return
        except delta_commits.ConcurrentCommit:
            back_off(attempt)
        again = found.held_again(app, held)
        moved = {p: again.ends[p] - held.ends[p] for p in held.ends}
        bases = {(s, t, p): b + moved[p] for (s, t, p), b in write.bases.items()}
        write, held = dataclasses.replace(write, bases=bases), again
        files = elsewhere.write_files([write]).get(write.point, [])
    raise StreamsException(
        f"topic {write.topic!r}: the batch's append lost {ATTEMPTS} races in a row to other "
        "writers' appends; nothing of it was written (the next run replays the batch)"
    )


def _typed_alike(
    sink: DeltaSinkTopic,
    write: TableWrite,
    held: HeldAppend,
    files: list[DataFile],
    elsewhere: RowsElsewhere,
) -> list[DataFile]:
    """A Delta sink's ``files`` with one type per column: each task typed its rows alone,
    so a new column's type may differ between them (ints and doubles); then they are
    written again with the batch's types (``batch_schema``, which fails a batch whose types
    do not unify). Usually they agree and nothing is written again."""
    schema = sink.batch_schema(held, files)
    types = {f.name: f.type for f in schema}
    if all(types.get(f.name) == f.type for d in files for f in d.arrow_schema()):
        return files
    again = dataclasses.replace(write, columns=schema)
    return elsewhere.write_files([again]).get(write.point, [])


def _commit_changelog(held: HeldAppend, files: list[DataFile], app: str, identity: dict) -> None:
    """A changelog's files, committed on its newest snapshot (as the driver's append is:
    a compaction may have committed since the plan) with the task batches it still does
    not hold; a file's partition value is its task's partition (one sub-topology per
    store)."""
    if not held.todo:
        return
    table = delta_commits.open_table(held.table.table_uri)
    versions = delta_commits.txn_versions(table, app, list(held.todo))
    todo = {t: b for t, b in held.todo.items() if versions[t] < b}
    if todo:
        partitions = {t.partition for t in todo}
        adds = [f.add_action() for f in files if f.partition_value in partitions]
        delta_commits.append_files(table, adds, app, todo, identity)


def kept_topics(layout: AppLayout) -> frozenset[str]:
    """The output topics whose rows stay where they were made: the log tables and typed
    Delta sinks (a Kafka sink's rows still go to the driver)."""
    return frozenset(
        t for t in layout.outputs if isinstance(layout.topic(t), LogTableTopic | DeltaSinkTopic)
    )


def offset_bases(
    counts: Mapping[TaskId, dict[int, int]], ends: Mapping[int, int]
) -> dict[tuple[int, int, int], int]:
    """Each (sub, task, partition)'s first offset: the tasks in order, each partition's
    records numbered on from its end."""
    bases = {}
    next_offset = dict(ends)
    for task in sorted(counts):
        for p, n in sorted(counts[task].items()):
            bases[(task.subtopology, task.partition, p)] = next_offset[p]
            next_offset[p] += n
    return bases


def task_files(rows: pa.Table, writes: Sequence[TableWrite]) -> list[tuple[str, DataFile]]:
    """Where the rows are: write the rows of ``rows`` (processing output, any tasks) that
    each of ``writes`` takes, one Parquet file per task and table partition; the files, each
    with its write's ``point``."""
    written = []
    # A Spark partition holds one task's rows (or a few): skip the writes' other tasks
    # instead of filtering the rows once for each of them.
    pairs = rows.select(["sub", "task"]).group_by(["sub", "task"]).aggregate([])
    here = set(zip(pairs.column("sub").to_pylist(), pairs.column("task").to_pylist(), strict=True))
    for write in writes:
        for key in sorted(k for k in write.batches if (k[0], k[1]) in here):
            mine = _of_task(rows, write, key)
            if mine.num_rows:
                written += [(write.point, f) for f in _write_task(mine, write, key)]
    return written


def _of_task(rows: pa.Table, write: TableWrite, key: TaskId) -> pa.Table:
    """The rows of task ``key`` that ``write`` takes, in the order the task emitted them."""
    kind, column, name = (
        ("out", "topic", write.topic)
        if write.topic is not None
        else ("state", "store", write.store)
    )
    mask = pc.and_(
        pc.and_(pc.equal(rows.column("kind"), kind), pc.equal(rows.column(column), name)),
        pc.and_(pc.equal(rows.column("sub"), key[0]), pc.equal(rows.column("task"), key[1])),
    )
    return rows.filter(mask)


def _write_task(rows: pa.Table, write: TableWrite, key: TaskId) -> list[DataFile]:
    if write.topic is None:
        assert write.store_kind is not None
        data = changelog.batch_rows(write.store_kind, rows, {key[1]: write.batches[key]})
        return [write_file(write.root, "task", key[1], data.drop_columns(["task"]))]
    targets = rows.column("partition").to_numpy(zero_copy_only=False)
    base = np.array([write.bases[(key[0], key[1], int(p))] for p in targets], dtype=np.int64)
    offsets = base + rows.column("pseq").to_numpy(zero_copy_only=False)
    records = as_records(rows, pa.array(offsets, pa.int64()))
    if write.sink is not None:
        return _write_sink_rows(write.sink, write, records)
    files = []
    for p in sorted(set(targets.tolist())):
        one = records.filter(pc.equal(records.column("partition"), p))
        files.append(write_file(write.root, "partition", int(p), one.drop_columns(["partition"])))
    return files


def _write_sink_rows(sink: DeltaSink, write: TableWrite, records: pa.Table) -> list[DataFile]:
    """A task's records of a Delta sink typed (as ``write.columns``, else inferred) and
    written, one file per value of the sink's ``partition_by`` columns."""
    typed = deltasink_rows.typed(sink, records, write.columns)
    by = list(sink.partition_by)
    if not by:
        return [write_partitioned(write.root, {}, typed, typed.schema)]
    # A partition column a task's values leave all null is not typed: its value is null.
    columns = [
        typed.column(c).to_pylist() if c in typed.column_names else [None] * typed.num_rows
        for c in by
    ]
    values = list(zip(*columns, strict=True))
    groups: dict[tuple, list[int]] = {}
    for i, v in enumerate(values):
        groups.setdefault(v, []).append(i)
    files = []
    for v, indices in groups.items():
        texts = {c: partition_text(x) for c, x in zip(by, v, strict=True)}
        data = typed.take(pa.array(indices, pa.int64()))
        data = data.drop_columns([c for c in by if c in typed.column_names])
        files.append(write_partitioned(write.root, texts, data, typed.schema))
    return files


def as_records(out: pa.Table, offsets: pa.Array | pa.ChunkedArray) -> pa.Table:
    """A topic's ``out`` rows as records (``RECORD_SCHEMA``) at ``offsets``."""
    return pa.table(
        {
            "partition": out.column("partition").cast(pa.int32()),
            "offset": offsets.cast(pa.int64()),
            "timestamp": out.column("timestamp").cast(pa.int64()),
            "key": out.column("key"),
            "value": out.column("value"),
            "headers": out.column("headers"),
        },
        schema=RECORD_SCHEMA,
    )


__all__ = [
    "Planned",
    "RowsElsewhere",
    "TableWrite",
    "as_records",
    "commits",
    "kept_topics",
    "offset_bases",
    "planned",
    "task_files",
]
