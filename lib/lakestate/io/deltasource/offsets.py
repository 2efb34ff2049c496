"""A Delta source's offsets: positions in its table's commit history.

The rows version v appended (``records.version_records``) come after every row of the
versions before it, from the declared start version on: in partition p, version v's rows
have offsets ``base(v, p) .. base(v, p) + count(v, p) - 1`` where ``base(v, p)`` is the
sum of ``count(u, p)`` over the versions u before v. A commit appending nothing
(OPTIMIZE, a schema change, a skipped change commit) counts 0. Versions never change, so
neither do the counts: offsets are dense per partition and every run numbers every row
alike, which is what lets a batch's committed end offsets say exactly which rows it read.

The counts are kept in ``<warehouse>/sources/<name>/index`` (a row per version, appended
as versions are first counted; a version counted twice by two runs at once has the same
row twice), so a run reads only the versions committed since the last one counted.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from lakestate.errors import StreamsException
from lakestate.io import delta_commits, delta_log
from lakestate.io.deltasource.commits import read_commit
from lakestate.io.deltasource.declaration import Declared
from lakestate.io.deltasource.records import version_records
from lakestate.io.topic_records import RECORD_SCHEMA
from lakestate.warehouse import Warehouse

INDEX_SCHEMA = pa.schema(
    [
        pa.field("version", pa.int64(), nullable=False),
        pa.field("counts", pa.list_(pa.int64()), nullable=False),
    ]
)

#: Records of versions read lately, by (declaration, version): versions never change.
_CACHE: OrderedDict[tuple[Declared, int], pa.Table] = OrderedDict()
_CACHE_ROWS = 1_000_000


@dataclass(frozen=True)
class OffsetIndex:
    """Rows per partition of every version from the start version to ``latest``."""

    partitions: int
    counts: dict[int, tuple[int, ...]]  # version -> rows per partition

    def ends(self) -> dict[int, int]:
        """Each partition's end offset: its rows over all versions."""
        return {p: sum(c[p] for c in self.counts.values()) for p in range(self.partitions)}

    def bases(self) -> list[tuple[int, tuple[int, ...]]]:
        """(version, each partition's first offset in it) for the versions with rows."""
        out = []
        run = [0] * self.partitions
        for v in sorted(self.counts):
            c = self.counts[v]
            if any(c):
                out.append((v, tuple(run)))
                run = [a + b for a, b in zip(run, c, strict=True)]
        return out

    def versions_for(self, ranges: dict[int, tuple[int, int]]) -> list[tuple[int, tuple[int, ...]]]:
        """(version, bases) of the versions holding an offset of ``ranges``."""
        found = []
        for v, base in self.bases():
            c = self.counts[v]
            if any(
                s < e and base[p] < e and base[p] + c[p] > s
                for p, (s, e) in ranges.items()
                if p < self.partitions
            ):
                found.append((v, base))
        return found


def index_path(warehouse: Warehouse, name: str) -> str:
    return warehouse.source_path(name) + "/index"


def latest_version(table: str) -> int:
    """The table's newest version (from a listing of its log, locally)."""
    log = delta_log.local_log(table)
    if log is not None:
        found = delta_log.versions(log)
        if found:
            return found[0]
    return DeltaTable(table.removeprefix("file://")).version()


def table_schema(table: str) -> pa.Schema:
    """The table's columns now; ``StreamsException`` for a table with column mapping,
    whose files name columns by physical names this reader does not map."""
    found = DeltaTable(table.removeprefix("file://"))
    mode = found.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise StreamsException(
            f"Delta table {table} has column mapping (delta.columnMapping.mode={mode}), "
            "which a Delta source does not read yet; read it with a table without it"
        )
    return pa.schema(found.schema().to_arrow())


def records(declared: Declared, version: int, schema: pa.Schema | None = None) -> pa.Table:
    """Version ``version``'s records (offsets from 0 per partition within it), cached."""
    key = (declared, version)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    commit = read_commit(declared.source.table, version)
    if commit.added and not commit.removes_rows:
        schema = schema or table_schema(declared.source.table)
    rows = version_records(declared.source, commit, schema or pa.schema([]))
    _CACHE[key] = rows
    while sum(t.num_rows for t in _CACHE.values()) > _CACHE_ROWS and len(_CACHE) > 1:
        _CACHE.popitem(last=False)
    return rows


def _counts(rows: pa.Table, partitions: int) -> tuple[int, ...]:
    if rows.num_rows == 0:
        return (0,) * partitions
    found = rows.group_by("partition").aggregate([("offset", "count")]).to_pylist()
    out = [0] * partitions
    for r in found:
        out[r["partition"]] = r["offset_count"]
    return tuple(out)


def _stored(warehouse: Warehouse, name: str) -> dict[int, tuple[int, ...]]:
    where = index_path(warehouse, name)
    local = delta_log.local_log(where)
    if local is not None and not os.path.isdir(local):
        return {}
    if not delta_commits.table_exists(where):
        return {}
    rows = delta_commits.open_table(where).to_pyarrow_table().to_pylist()
    return {r["version"]: tuple(r["counts"]) for r in rows}


def _counted(warehouse: Warehouse, declared: Declared) -> OffsetIndex:
    """The index of the versions counted already: those stored, from the start version on
    while there is no gap."""
    stored = _stored(warehouse, declared.source.name)
    counts = {}
    v = declared.start_version
    while v in stored:
        counts[v] = stored[v]
        v += 1
    return OffsetIndex(declared.source.partitions, counts)


def index(warehouse: Warehouse, declared: Declared) -> OffsetIndex:
    """The source's offset index up to its table's newest version, the versions not
    counted yet counted (their records read) and stored. ``StreamsException`` at a commit
    that deletes or rewrites rows, unless the source skips them."""
    source = declared.source
    counts = _stored(warehouse, source.name)
    latest = latest_version(source.table)
    new: dict[int, tuple[int, ...]] = {}
    schema = None
    for v in range(declared.start_version, latest + 1):
        if v in counts:
            continue
        if schema is None:
            schema = table_schema(source.table)
        new[v] = _counts(records(declared, v, schema), source.partitions)
    if new:
        _store(warehouse, source.name, new)
        counts.update(new)
    wanted = {v: c for v, c in counts.items() if declared.start_version <= v <= latest}
    return OffsetIndex(source.partitions, wanted)


def _store(warehouse: Warehouse, name: str, new: dict[int, tuple[int, ...]]) -> None:
    rows = pa.table(
        {"version": sorted(new), "counts": [list(new[v]) for v in sorted(new)]},
        schema=INDEX_SCHEMA,
    )
    write_deltalake(
        index_path(warehouse, name).removeprefix("file://"),
        rows,
        mode="append",
        description="lakestate: rows per partition of each version of a Delta source",
        configuration=delta_commits.TABLE_PROPERTIES,
    )


def read_range(
    warehouse: Warehouse, declared: Declared, ranges: dict[int, tuple[int, int]]
) -> pa.Table:
    """The records of ``ranges`` (partition -> (start, end)), offsets as the index gives.
    The stored counts serve when they reach the ranges' ends (a batch's ranges were planned
    from them), so a replayed batch reads its rows also past a later change commit."""
    found = _counted(warehouse, declared)
    ends = found.ends()
    if any(e > ends.get(p, 0) for p, (_, e) in ranges.items()):
        found = index(warehouse, declared)
    parts = []
    for v, base in found.versions_for(ranges):
        rows = _based(records(declared, v), base)
        keep = None
        for p, (s, e) in ranges.items():
            one = pc.and_(
                pc.equal(rows["partition"], p),
                pc.and_(pc.greater_equal(rows["offset"], s), pc.less(rows["offset"], e)),
            )
            keep = one if keep is None else pc.or_(keep, one)
        if keep is not None:
            parts.append(rows.filter(keep))
    return pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()


def _based(rows: pa.Table, base: tuple[int, ...]) -> pa.Table:
    """``rows`` with each partition's offsets moved on by its base."""
    shift = pc.take(pa.array(base, pa.int64()), rows["partition"])
    offsets = pc.add(rows["offset"], shift)
    return rows.set_column(1, RECORD_SCHEMA.field("offset"), offsets)


__all__ = ["INDEX_SCHEMA", "OffsetIndex", "index", "index_path", "latest_version", "read_range"]
