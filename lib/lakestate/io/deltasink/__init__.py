"""Delta sinks: a typed Delta table an app writes as a sink topic (a kind of
``lakestate.io.topics``; the columns: ``lakestate.delta_sink``).

A warehouse declares the sink (``declaration``: the ``DeltaSink`` and, once the layout
created the topic, its partition count); the table itself is created by the first batch's
append (its columns then known, or declared). A batch's append (step 3 of the commit
protocol) converts the batch's records to typed rows (``rows``), numbers them on from the
table's end offsets like a log table's and commits them in one Delta commit carrying the
txn of each task batch it holds, with schema evolution (delta-rs ``schema_mode="merge"``):
a replay finds its txns held and writes nothing. The table reads back as records
(``read_partitions``, ``reader``), so the CLI and tests read it as any topic.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.schema import Field as DeltaField

from lakestate.delta_sink import META_SCHEMA, OFFSET, PARTITION, DeltaSink
from lakestate.errors import StreamsException
from lakestate.io import delta_commits, txn_ids
from lakestate.io.deltasink import declaration, rows
from lakestate.io.deltasink.declaration import Declared
from lakestate.io.logtable import appends as logtable_appends
from lakestate.io.logtable.appends import HeldAppend
from lakestate.io.table_files import DataFile
from lakestate.io.topic_records import AppendResult, Ranges, TopicDescription, check_ranges
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

if TYPE_CHECKING:
    from lakestate.io.topics import BatchRows

__all__ = ["KIND", "DeltaSinkKind", "DeltaSinkTopic", "declare", "is_declared"]

#: The kind's name, as ``TopicDescription.kind`` gives it.
KIND = "delta_sink"


def declare(warehouse: Warehouse, sink: DeltaSink) -> Declared:
    """Declare ``sink`` in ``warehouse`` (see ``declaration.declare``)."""
    return declaration.declare(warehouse, sink)


def is_declared(warehouse: Warehouse, name: str) -> bool:
    """Whether ``warehouse`` declares a Delta sink ``name``."""
    return declaration.read(warehouse, name) is not None


class DeltaSinkReader:
    """Reads of a Delta sink's offset ranges, as records, from one snapshot."""

    def __init__(self, topic: DeltaSinkTopic) -> None:
        self.topic = topic

    def read_range(self, ranges: Ranges) -> pa.Table:
        wanted = {p: r for p, r in check_ranges(self.topic.name, ranges).items() if r[1] > r[0]}
        condition = None
        for p, (s, e) in sorted(wanted.items()):
            one = (pc.field(PARTITION) == p) & (pc.field(OFFSET) >= s) & (pc.field(OFFSET) < e)
            condition = one if condition is None else condition | one
        return self.topic.read_rows(condition)


class DeltaSinkTopic:
    """A Delta sink as a ``lakestate.io.topics.Topic``."""

    kind = KIND

    def __init__(self, warehouse: Warehouse, name: str, partitions: int | None = None) -> None:
        self.warehouse = warehouse
        self.name = name
        self._declared = declaration.read(warehouse, name)
        self._partitions = partitions

    def __repr__(self) -> str:
        return f"DeltaSinkTopic({self.name!r})"

    @property
    def declared(self) -> Declared:
        if self._declared is None:
            raise ValueError(f"no Delta sink {self.name!r} is declared in {self.warehouse.root}")
        return self._declared

    @property
    def sink(self) -> DeltaSink:
        return self.declared.sink

    @property
    def location(self) -> str:
        return self.sink.table

    def exists(self) -> bool:
        return self._declared is not None and self._declared.partitions is not None

    def create(self, partitions: int, *, exist_ok: bool = True) -> None:
        with self.append_lock():
            self._declared = declaration.read(self.warehouse, self.name)
            if self.exists():
                if self.declared.partitions != partitions or not exist_ok:
                    raise ValueError(
                        f"Delta sink {self.name!r} exists with {self.declared.partitions} "
                        f"partitions (asked: {partitions})"
                    )
                return
            table = self._table()
            if table is not None:
                names = pa.schema(table.schema().to_arrow()).names
                if PARTITION not in names or OFFSET not in names:
                    raise StreamsException(
                        f"DeltaSink {self.name!r}: {self.location} is a Delta table that no "
                        f"DeltaSink wrote (no {PARTITION}, {OFFSET} columns); give the sink a "
                        "new table path"
                    )
            self._declared = Declared(self.sink, partitions)
            declaration.write(self.warehouse, self._declared, "overwrite")

    def partitions(self) -> int:
        if self._partitions is None:
            found = self.declared.partitions
            if found is None:
                raise ValueError(f"Delta sink {self.name!r} is declared but not created yet")
            self._partitions = found
        return self._partitions

    def check_columns(self) -> None:
        """Its records are the table's rows read back: nothing to check."""

    def _table(self) -> Any:
        if not delta_commits.table_exists(self.location):
            return None
        return delta_commits.open_table(self.location)

    def end_offsets(self) -> dict[int, int]:
        """``max(_offset) + 1`` per partition, by a scan of the two columns."""
        return _ends(self._table(), self.partitions())

    def describe(self) -> TopicDescription:
        return TopicDescription(
            self.name, KIND, self.location, self.partitions(), self.end_offsets()
        )

    def read_rows(self, condition: Any) -> pa.Table:
        """The table's rows matching ``condition`` (an Arrow dataset expression; None:
        every row) as records."""
        table = self._table()
        if table is None:
            return rows.records(self.sink, META_SCHEMA.empty_table())
        return rows.records(self.sink, table.to_pyarrow_dataset().to_table(filter=condition))

    def reader(self) -> DeltaSinkReader:
        return DeltaSinkReader(self)

    def read_partitions(
        self, partitions: Iterable[int] | None = None, limit: int | None = None
    ) -> Iterator[pa.Table]:
        left = limit
        wanted = range(self.partitions()) if partitions is None else sorted(set(partitions))
        for p in wanted:
            if left is not None and left <= 0:
                return
            condition = pc.field(PARTITION) == p
            if left is not None:
                condition = condition & (pc.field(OFFSET) < left)
            found = self.read_rows(condition).sort_by("offset")
            if left is not None:
                left -= found.num_rows
            yield found

    def append_lock(self) -> contextlib.AbstractContextManager[None]:
        where = declaration.path(self.warehouse, self.name)
        return logtable_appends.append_lock(self.warehouse, self.name, where)

    def check_append(self, records: pa.Table) -> None:
        """The records typed as the table's columns now (``rows.typed``): a value that
        does not fit a column's type, declared or taken from earlier batches, fails the
        batch before its progress is recorded."""
        if not records.num_rows:
            return
        table = self._table()
        existing = table.schema().to_arrow() if table is not None else None
        rows.typed(self.sink, records, pa.schema(existing) if existing else None)

    def append(
        self,
        records: Sequence[Any],
        *,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
        labels: Sequence[str] | None = None,
    ) -> AppendResult:
        raise StreamsException(
            f"topic {self.name!r} is a Delta sink (the table {self.location}), written by the "
            "app that declares it: produce to the app's input topics instead"
        )

    def append_batch(
        self,
        app: str,
        batches: Mapping[TaskId, int],
        build: BatchRows,
        metadata: Mapping[str, Any],
    ) -> AppendResult:
        """Step 3 for this sink (``Topic.append_batch``): the batch's records as typed rows
        (``rows.typed``), with schema evolution, in one commit with the txns and the
        topic's append txn, as a log table's (``logtable.appends``): two instances appending
        from one snapshot conflict, and the loser renumbers from the winner's end offsets.
        TaskMigratedException when another writer committed one of these task batches."""
        with self.append_lock():
            todo: dict[TaskId, int] | None = None
            for attempt in range(logtable_appends.ATTEMPTS):
                table = self._table()
                held = delta_commits.txn_versions(table, app, list(batches)) if table else {}
                if todo is None:
                    todo = {t: b for t, b in batches.items() if held.get(t, 0) < b}
                    if not todo:
                        return AppendResult(self.name, {}, skipped=True, version=table.version())
                elif any(held.get(t, 0) >= b for t, b in todo.items()):
                    raise delta_commits.ConcurrentCommit(
                        f"{self.location}: another writer committed a batch of "
                        f"{', '.join(str(t) for t in sorted(todo))} at the same time"
                    )
                ends = _ends(table, self.partitions())
                records = build(todo, dict(ends))
                try:
                    version = self._commit(table, records, app, todo, metadata)
                except delta_commits.ConcurrentCommit:
                    logtable_appends.back_off(attempt)
                    continue
                break
            else:
                raise StreamsException(
                    f"Delta sink {self.name!r}: an append lost "
                    f"{logtable_appends.ATTEMPTS} races in a row to other writers"
                )
        after = dict(ends)
        for p in records.column("partition").to_pylist():
            after[p] += 1
        return AppendResult(
            self.name,
            {p: (ends[p], after[p]) for p in sorted(ends) if after[p] > ends[p]},
            skipped=False,
            version=version,
        )

    def held_append(
        self, app: str, batches: Mapping[TaskId, int]
    ) -> contextlib.AbstractContextManager[HeldAppend]:
        """``append_batch`` for rows typed and written as files elsewhere (Spark's
        executors), as a log table's (``LogTableTopic.held_append``): while the block runs
        the sink's append lock is held; the block numbers the rows on from
        ``HeldAppend.ends``, has them typed as the table's columns (``columns``) and
        written, and commits them with ``commit_files``."""
        return self._held_append(app, batches)

    @contextlib.contextmanager
    def _held_append(self, app: str, batches: Mapping[TaskId, int]) -> Iterator[HeldAppend]:
        with self.append_lock():
            table = self._table()
            held = delta_commits.txn_versions(table, app, list(batches)) if table else {}
            todo = {t: b for t, b in batches.items() if held.get(t, 0) < b}
            yield HeldAppend(table, todo, _ends(table, self.partitions()) if todo else {})

    def held_again(self, app: str, held: HeldAppend) -> HeldAppend:
        """``held`` after its commit lost a race (``LogTableTopic.held_again``)."""
        table = self._table()
        versions = delta_commits.txn_versions(table, app, list(held.todo)) if table else {}
        taken = sorted(t for t, b in held.todo.items() if versions.get(t, 0) >= b)
        if taken:
            raise delta_commits.ConcurrentCommit(
                f"{self.location}: another writer committed a batch of "
                f"{', '.join(str(t) for t in taken)} at the same time"
            )
        return HeldAppend(table, held.todo, _ends(table, self.partitions()))

    def columns(self, held: HeldAppend) -> pa.Schema | None:
        """The table's columns at ``held``'s snapshot (None: no table yet)."""
        if held.table is None:
            return None
        return pa.schema(held.table.schema().to_arrow())

    def batch_schema(self, held: HeldAppend, files: Sequence[DataFile]) -> pa.Schema:
        """The columns the table has once ``files`` (typed where they were written) are
        committed on ``held`` (``rows.batch_schema``)."""
        return rows.batch_schema(self.sink, [f.arrow_schema() for f in files], self.columns(held))

    def commit_files(
        self, held: HeldAppend, files: Sequence[DataFile], app: str, metadata: Mapping[str, Any]
    ) -> AppendResult:
        """Commit ``files`` (the typed rows of ``held.todo``, numbered from ``held.ends``,
        each file's types those of ``batch_schema``) in one commit with the tasks' txns and
        the sink's append txn; the first creates the table (its columns: ``batch_schema``,
        partitioned by ``partition_by``). Columns the batch adds are added by a commit of
        their own first (delta-rs commits files without changing the schema), which must
        directly follow ``held``'s snapshot. ConcurrentCommit if another writer committed
        meanwhile (``held_again`` then renumbers)."""
        if not held.todo:
            return AppendResult(self.name, {}, skipped=True, version=held.table.version())
        schema = self.batch_schema(held, files)
        adds = [f.add_action() for f in files]
        table = held.table
        if table is None:
            version = delta_commits.create_with_files(
                self.location, schema, adds, self.sink.partition_by, app, held.todo, metadata
            )
            return AppendResult(self.name, {}, skipped=False, version=version)
        before = table.version()
        had = set(pa.schema(table.schema().to_arrow()).names)
        new = [f for f in schema if f.name not in had]
        if new:
            table.alter.add_columns([DeltaField.from_arrow(f) for f in new])
            table.update_incremental()
            if table.version() != before + 1:
                raise delta_commits.ConcurrentCommit(
                    f"{self.location}: another writer committed while the batch added columns"
                )
        txn = {txn_ids.topic_append(self.name): table.version() + 1}
        version = delta_commits.append_files(table, adds, app, held.todo, metadata, txn)
        return AppendResult(self.name, {}, skipped=False, version=version)

    def _commit(
        self,
        table: Any,
        records: pa.Table,
        app: str,
        todo: Mapping[TaskId, int],
        metadata: Mapping[str, Any],
    ) -> int:
        existing = table.schema().to_arrow() if table is not None else None
        data = rows.typed(self.sink, records, pa.schema(existing) if existing else None)
        options: dict[str, Any] = {"schema_mode": "merge"}
        if table is None:
            if self.sink.partition_by:
                options["partition_by"] = list(self.sink.partition_by)
            return delta_commits.append(self.location, data, app, todo, metadata, **options)
        txn = {txn_ids.topic_append(self.name): table.version() + 1}
        return delta_commits.append(table, data, app, todo, metadata, extra_txns=txn, **options)


def _ends(table: Any, partitions: int) -> dict[int, int]:
    ends = dict.fromkeys(range(partitions), 0)
    if table is None:
        return ends
    found = table.to_pyarrow_table(columns=[PARTITION, OFFSET])
    if found.num_rows:
        last = found.group_by(PARTITION).aggregate([(OFFSET, "max")])
        for p, n in zip(
            last.column(PARTITION).to_pylist(),
            last.column(f"{OFFSET}_max").to_pylist(),
            strict=True,
        ):
            ends[p] = n + 1
    return ends


class DeltaSinkKind:
    """Delta sinks as a ``lakestate.io.topics.TopicKind``."""

    name = KIND

    def topic(
        self, warehouse: Warehouse, name: str, partitions: int | None = None
    ) -> DeltaSinkTopic:
        return DeltaSinkTopic(warehouse, name, partitions)
