"""Reading a log table with delta-rs and Arrow (no JVM): offset ranges per partition, and
whole partitions in offset order. Spark's reading of log tables is
``lakestate.runtime.spark_topics``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakestate.io import delta_commits
from lakestate.io.topic_records import RECORD_SCHEMA, Ranges, check_ranges

# The columns as read: nullable, as Spark reads them (a reader takes them by name).
_READ_SCHEMA = pa.schema([pa.field(f.name, f.type) for f in RECORD_SCHEMA])


class LogTableReader:
    """Reads of one log table's ranges, all from one snapshot, taken at the first read (a
    batch's reads: a plan never reaches past the ends it was made from, and records are
    never deleted from a log table, so that snapshot holds every planned range)."""

    def __init__(self, topic: str, path: str) -> None:
        self.topic = topic
        self.path = path
        self._table: DeltaTable | None = None

    def read_range(self, ranges: Ranges) -> pa.Table:
        """The records with ``start <= offset < end`` of each partition in ``ranges``, in
        ``RECORD_SCHEMA``'s columns, in no particular order."""
        wanted = {p: (s, e) for p, (s, e) in check_ranges(self.topic, ranges).items() if e > s}
        if not wanted:
            return _READ_SCHEMA.empty_table()
        if self._table is None:
            self._table = delta_commits.open_table(self.path)
        return read_range(self._table, wanted)


def read_range(table: DeltaTable, ranges: dict[int, tuple[int, int]]) -> pa.Table:
    """The log table's rows with ``start <= offset < end`` of each non-empty range. Only
    files that may hold them are read: their partition values and offset statistics
    (Delta's per-file min/max) prune the rest."""
    pruning = [
        [("partition", "=", p), ("offset", ">=", s), ("offset", "<", e)]
        for p, (s, e) in sorted(ranges.items())
    ]
    exact = None
    for p, (s, e) in sorted(ranges.items()):
        one = (pc.field("partition") == p) & (pc.field("offset") >= s) & (pc.field("offset") < e)
        exact = one if exact is None else exact | one
    rows = table.to_pyarrow_dataset(file_pruning_predicate=pruning).to_table(
        columns=_READ_SCHEMA.names, filter=exact
    )
    return rows.cast(_READ_SCHEMA)


def read_partitions(
    path: str, num_partitions: int, partitions: Iterable[int] | None, limit: int | None
) -> Iterator[pa.Table]:
    """The records of the log table at ``path`` as Arrow tables (``RECORD_SCHEMA``'s
    columns), one per partition in partition order (of ``partitions`` only, when given),
    each in offset order, at most ``limit`` records in all. Offsets being dense from 0, a
    partition's first n records are those below offset n, so a limit reads no more than it
    returns (and files the Parquet statistics rule out)."""
    dataset = delta_commits.open_table(path).to_pyarrow_dataset()
    remaining = limit
    for p in sorted(set(range(num_partitions) if partitions is None else partitions)):
        if remaining is not None and remaining <= 0:
            return
        condition = pc.field("partition") == p
        if remaining is not None:
            condition = condition & (pc.field("offset") < remaining)
        rows = dataset.to_table(filter=condition).sort_by("offset")
        if remaining is not None:
            rows = rows.slice(0, remaining)
            remaining -= rows.num_rows
        yield rows.select(RECORD_SCHEMA.names)
