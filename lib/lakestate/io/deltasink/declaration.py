"""A Delta sink as a warehouse declares it: ``<warehouse>/sinks/<name>/declaration``, a
one-row Delta table holding the ``DeltaSink`` (its schema as Arrow IPC bytes) and, once
the app's layout created the topic, its partition count (the tasks writing it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import pyarrow as pa
from deltalake import write_deltalake

from lakestate.delta_sink import DeltaSink
from lakestate.errors import StreamsException
from lakestate.io import delta_commits
from lakestate.warehouse import Warehouse

SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("key", pa.list_(pa.string()), nullable=False),
        pa.field("key_fields", pa.bool_(), nullable=False),
        pa.field("schema", pa.binary()),
        pa.field("partition_by", pa.list_(pa.string()), nullable=False),
        pa.field("partitions", pa.int32()),
    ]
)


@dataclass(frozen=True)
class Declared:
    """A declared sink, and its partition count (None until its topic is created)."""

    sink: DeltaSink
    partitions: int | None = None

    def to_table(self) -> pa.Table:
        s = self.sink
        row = {
            "name": [s.name],
            "table": [s.table],
            "key": [list(s.key_columns)],
            "key_fields": [s.key_fields],
            "schema": [s.schema.serialize().to_pybytes() if s.schema is not None else None],
            "partition_by": [list(s.partition_by)],
            "partitions": [self.partitions],
        }
        return pa.table(row, schema=SCHEMA)

    @classmethod
    def from_row(cls, r: dict) -> Declared:
        key = tuple(r["key"])
        schema = pa.ipc.read_schema(pa.py_buffer(r["schema"])) if r["schema"] else None
        sink = DeltaSink(
            r["name"],
            r["table"],
            schema,
            key if r["key_fields"] else key[0],
            tuple(r["partition_by"]),
        )
        return cls(sink, r["partitions"])


def path(warehouse: Warehouse, name: str) -> str:
    return warehouse.sink_path(name) + "/declaration"


def read(warehouse: Warehouse, name: str) -> Declared | None:
    """Sink ``name``'s declaration, or None."""
    where = path(warehouse, name)
    if warehouse.is_local and not os.path.isdir(
        os.path.join(where.removeprefix("file://"), "_delta_log")
    ):
        return None
    if not delta_commits.table_exists(where):
        return None
    rows = delta_commits.open_table(where).to_pyarrow_table().to_pylist()
    return Declared.from_row(rows[0]) if rows else None


def declare(warehouse: Warehouse, sink: DeltaSink) -> Declared:
    """Declare ``sink`` in ``warehouse``, or check it against its declaration: its table,
    key and partition columns never change (the rows written would not match); its
    schema may (a declaration may widen as the app's values do). ``StreamsException`` for
    a changed declaration, or a log-table topic of that name."""
    found = read(warehouse, sink.name)
    if found is None:
        if delta_commits.table_exists(warehouse.topic_path(sink.name)):
            raise StreamsException(
                f"DeltaSink {sink.name!r}: the warehouse has a log-table topic of that name "
                "already; name the sink differently"
            )
        declared = Declared(sink)
        try:
            write(warehouse, declared, "error")
        except Exception:
            if read(warehouse, sink.name) is None:  # else: two first runs at once
                raise
            return declare(warehouse, sink)
        return declared
    was = found.sink
    changed = [f for f in ("table", "key", "partition_by") if getattr(was, f) != getattr(sink, f)]
    if changed:
        raise StreamsException(
            f"DeltaSink {sink.name!r} is declared with "
            + ", ".join(f"{f}={getattr(was, f)!r}" for f in changed)
            + ", now given "
            + ", ".join(f"{f}={getattr(sink, f)!r}" for f in changed)
            + ": they never change (the table's rows would not match); write to a new sink "
            "under another name and table"
        )
    if was.schema != sink.schema:
        found = replace(found, sink=sink)
        write(warehouse, found, "overwrite")
    return found


def write(warehouse: Warehouse, declared: Declared, mode: str) -> None:
    write_deltalake(
        path(warehouse, declared.sink.name).removeprefix("file://"),
        declared.to_table(),
        mode=mode,  # type: ignore[arg-type]
        description="lakestate: a typed Delta table written as a topic",
    )


__all__ = ["Declared", "declare", "path", "read", "write"]
