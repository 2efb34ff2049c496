"""Delta sources: an existing Delta table other writers append to, read as a topic (a kind
of ``lakestate.io.topics``), read-only.

A warehouse declares the source (``declare``: ``declaration``), which fixes its key, event
time, partition count and start version; its offsets are positions in the table's commit
history (``offsets``: each version's appended rows numbered on, per partition, from those
of the versions before), so the offsets a batch commits in the progress table say exactly
which rows it read, and the next run reads exactly the rows appended since. A commit's
rows are read from the files it added (``commits``) and become records (``records``). A
commit deleting or rewriting rows fails the run with the choices, or is skipped whole
(``skip_change_commits``); OPTIMIZE's (``dataChange=false``) appends nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakestate.delta_source import DeltaSource
from lakestate.errors import StreamsException
from lakestate.io.deltasource import declaration, offsets
from lakestate.io.deltasource.declaration import Declared
from lakestate.io.topic_records import AppendResult, Ranges, TopicDescription, check_ranges
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

if TYPE_CHECKING:
    from lakestate.io.topics import BatchRows

__all__ = [
    "KIND",
    "DeltaSourceKind",
    "DeltaSourceTopic",
    "declare",
    "declare_delta_source",
    "is_declared",
]

#: The kind's name, as ``TopicDescription.kind`` gives it.
KIND = "delta_table"


def declare(warehouse: Warehouse, source: DeltaSource) -> Declared:
    """Declare ``source`` in ``warehouse`` (see ``declaration.declare``)."""
    return declaration.declare(warehouse, source)


def declare_delta_source(warehouse: Warehouse | str | None, source: DeltaSource) -> None:
    """Declare ``source`` in ``warehouse`` (a ``Warehouse`` or its root; None: the default
    one), so that topic ``source.name`` is the Delta table (an app's run does this for
    ``builder.stream(DeltaSource(...))``): its start resolves now, and its table, key,
    timestamp and partitions are fixed from now on (``StreamsException`` if they differ
    from an earlier declaration)."""
    if not isinstance(warehouse, Warehouse):
        warehouse = Warehouse(warehouse)
    declaration.declare(warehouse, source)


def is_declared(warehouse: Warehouse, name: str) -> bool:
    """Whether ``warehouse`` declares a Delta source ``name``."""
    return declaration.read(warehouse, name) is not None


class DeltaSourceReader:
    """Reads of a Delta source's offset ranges for one batch."""

    def __init__(self, warehouse: Warehouse, declared: Declared) -> None:
        self.warehouse = warehouse
        self.declared = declared

    def read_range(self, ranges: Ranges) -> pa.Table:
        checked = check_ranges(self.declared.source.name, ranges)
        return offsets.read_range(self.warehouse, self.declared, checked)


class DeltaSourceTopic:
    """A Delta source as a ``lakestate.io.topics.Topic`` (read-only)."""

    kind = KIND

    def __init__(self, warehouse: Warehouse, name: str) -> None:
        self.warehouse = warehouse
        self.name = name
        self._declared = declaration.read(warehouse, name)

    def __repr__(self) -> str:
        return f"DeltaSourceTopic({self.name!r})"

    @property
    def declared(self) -> Declared:
        if self._declared is None:
            raise ValueError(f"no Delta source {self.name!r} is declared in {self.warehouse.root}")
        return self._declared

    @property
    def location(self) -> str:
        return self.declared.source.table

    def exists(self) -> bool:
        return self._declared is not None

    def create(self, partitions: int, *, exist_ok: bool = True) -> None:
        self._read_only("created")

    def partitions(self) -> int:
        return self.declared.source.partitions

    def check_columns(self) -> None:
        source = self.declared.source
        names = offsets.table_schema(source.table).names
        wanted = [*source.key_columns, *([source.timestamp] if source.timestamp else [])]
        missing = [c for c in wanted if c not in names]
        if missing:
            raise StreamsException(
                f"DeltaSource {self.name!r}: the table {source.table} has no column "
                f"{', '.join(map(repr, missing))} (its columns: {', '.join(names)})"
            )

    def end_offsets(self) -> dict[int, int]:
        return offsets.index(self.warehouse, self.declared).ends()

    def describe(self) -> TopicDescription:
        return TopicDescription(
            self.name, KIND, self.location, self.partitions(), self.end_offsets()
        )

    def reader(self) -> DeltaSourceReader:
        return DeltaSourceReader(self.warehouse, self.declared)

    def read_partitions(
        self, partitions: Iterable[int] | None = None, limit: int | None = None
    ) -> Iterator[pa.Table]:
        ends = self.end_offsets()
        wanted = sorted(set(partitions)) if partitions is not None else sorted(ends)
        left = limit
        for p in wanted:
            if left is not None and left <= 0:
                return
            end = ends.get(p, 0) if left is None else min(ends.get(p, 0), left)
            rows = self.reader().read_range({p: (0, end)})
            rows = rows.take(pc.sort_indices(rows, [("offset", "ascending")]))
            if left is not None:
                left -= rows.num_rows
            yield rows

    def append_lock(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def check_append(self, records: pa.Table) -> None:
        pass  # any records a producer or a batch gives are appendable here

    def append(
        self,
        records: Sequence[Any],
        *,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
        labels: Sequence[str] | None = None,
    ) -> AppendResult:
        self._read_only("appended to")

    def append_batch(
        self,
        app: str,
        batches: Mapping[TaskId, int],
        build: BatchRows,
        metadata: Mapping[str, Any],
    ) -> AppendResult:
        self._read_only("written by an app")

    def _read_only(self, what: str) -> Any:
        raise StreamsException(
            f"topic {self.name!r} is a Delta source (the table {self.location}), read-only: "
            f"it cannot be {what}; its writers append to the table itself"
        )


class DeltaSourceKind:
    """Delta sources as a ``lakestate.io.topics.TopicKind``."""

    name = KIND

    def topic(
        self, warehouse: Warehouse, name: str, partitions: int | None = None
    ) -> DeltaSourceTopic:
        return DeltaSourceTopic(warehouse, name)
