"""Typed Delta sinks written by Spark's executors (checkpoint/executor_writes.py): when the
executors own the state, a Delta sink's rows are typed and written as Parquet files where
they were made, and the driver commits the files. The tables equal a driver-owned run's
row for row, schema for schema: partitioned by a value column, a column added by a later
batch (schema evolution), and a column the tasks type differently (one task's ints, the
other's doubles: the batch's type is Arrow's for the values together, as the driver's
append infers it). Exactly once through SIGKILLs of the driver at each commit step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from engine_helpers import FAST_TEST_CONF, events
from lakestate import run_app
from lakestate.io import topics
from lakestate.io.partitioner import partition_for
from lakestate.runtime.executor_stores import STATE_OWNER, executor_state_dir
from lakestate.runtime.spark_transport import SparkTransport
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MAX_RECORDS = 15
KEYS = [f"k{i}" for i in range(7)]
# One kill per commit step (each killed run restarts Spark): after the first sink only, as
# the second sink's commit is the same code (executor_writes.commits: _commit_topic for
# each table, skipping what the table holds); the rerun after it replays the batch, which
# types and commits the second sink's files as the driver's rows (_typed_alike).
FAULT_POINTS = [
    "before_progress@2",
    "after_progress@2",
    "after_sink:counts-typed@2",
    "after_changelog:counts@2",
    "after_tables@3",
]

APP = """
import lakestate as ls

counts_table = ls.DeltaSink("counts-typed", {tables!r} + "/counts", partition_by="big")
events_table = ls.DeltaSink(
    "events-typed", {tables!r} + "/events",
    schema={{"key": "string", "user": "string", "amount": "long"}},
)
INTS = {ints!r}  # the keys of partition 0: their scores are ints, the others' doubles


def counted(k, n):
    v = {{"count": n, "big": n >= 3, "score": n if k in INTS else n + 0.5}}
    if n >= 8:  # a column that a later batch adds
        v["note"] = "many"
    return v


b = ls.StreamsBuilder()
events = b.stream("events").filter(lambda k, v: v["amount"] > 0)
events.to(events_table)
counts = events.group_by_key().count(ls.Materialized.as_("counts")).to_stream()
counts.map(lambda k, n: (k, counted(k, n))).to(counts_table)
app = ls.App("typed_exec", b.build(), {{{owner_key!r}: {owner!r}}})
"""


def _app(folder: Path, owner: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    ints = sorted(k for k in KEYS if partition_for(k, 2) == 0)
    assert ints and len(ints) < len(KEYS)
    path = folder / f"typed_exec_{owner}.py"
    text = APP.format(tables=str(folder / "tables"), ints=ints, owner_key=STATE_OWNER, owner=owner)
    path.write_text(text)
    return str(path)


def _produce(wh: Warehouse, records: list[dict]) -> None:
    topic = topics.topic(wh, "events")
    if not topic.exists():
        topic.create(2)
    topic.append(records)


def _tables(folder: Path) -> dict[str, tuple]:
    """Each sink table: its columns, partition columns and rows in (partition, offset)
    order."""
    found = {}
    for name in ("counts", "events"):
        table = DeltaTable(str(folder / "tables" / name))
        schema = pa.schema(table.schema().to_arrow())
        rows = table.to_pyarrow_table().select(schema.names)
        order = [("_partition", "ascending"), ("_offset", "ascending")]
        # By name: delta-rs' schema merge (the driver's append) moves the partition columns
        # after the others; a column added to the executors' table stays where it was.
        found[name] = (
            sorted((f.name, str(f.type)) for f in schema),
            table.metadata().partition_columns,
            rows.sort_by(order).to_pylist(),
        )
    return found


def _parquet_files(path: Path) -> tuple[set[str], set[str]]:
    """The table's Parquet files: committed, and all written."""
    table = DeltaTable(str(path))
    committed = {u.removeprefix("file://").removeprefix(str(path) + "/") for u in table.file_uris()}
    written = {str(p.relative_to(path)) for p in path.rglob("*.parquet")}
    return committed, written


def _reference(tmp_path: Path, records: list[dict]) -> dict[str, tuple]:
    """The driver-owned run in process (the driver types and appends the rows)."""
    folder = tmp_path / "reference"
    wh = Warehouse(folder / "wh")
    _produce(wh, records)
    run_app(
        _app(folder, "driver"),
        warehouse=wh.root,
        state_dir=str(folder / "state"),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        transport="inprocess",
        say=lambda _: None,
    )
    return _tables(folder)


def test_executors_write_typed_sinks_equal_to_the_driver(spark, tmp_path, monkeypatch):
    records = events(90, keys=7, seed=41)
    expected = _reference(tmp_path, records)
    received = []
    run_batch = SparkTransport.run_batch

    def recording(self, batch):
        output = run_batch(self, batch)
        received.append(set(output.rows.column("kind").to_pylist()))
        return output

    monkeypatch.setattr(SparkTransport, "run_batch", recording)
    folder = tmp_path / "executors"
    wh = Warehouse(folder / "wh")
    _produce(wh, records)
    said: list[str] = []
    try:
        run_app(
            _app(folder, "executors"),
            warehouse=wh.root,
            state_dir=str(folder / "state"),
            max_records=MAX_RECORDS,
            until_caught_up=True,
            transport="spark",
            say=said.append,
        )
        assert any(line.startswith("state: on Spark's executors") for line in said)
        # Only the tasks' outcomes came to the driver, no sink row.
        assert len(received) >= 3 and all(kinds == {"task"} for kinds in received)
        got = _tables(folder)
        assert got == expected
        schema = dict(got["counts"][0])
        assert schema["score"] == "double" and schema["note"] == "string"
        assert got["counts"][1] == ["big"]
        # The column "note" came with a later batch than the table's first.
        first = DeltaTable(str(folder / "tables" / "counts"), version=0)
        assert "note" not in pa.schema(first.schema().to_arrow()).names
        assert sum(1 for r in got["counts"][2] if r["note"] is not None) > 0
        # Task 0 typed its first scores as ints: its files were written again as doubles,
        # and the int files were never committed.
        committed, written = _parquet_files(folder / "tables" / "counts")
        assert committed < written
    finally:
        shutil.rmtree(executor_state_dir(wh.root), ignore_errors=True)


def _run(app: str, wh: Warehouse, state: Path, fault: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env.update(
        LAKESTATE_SPARK_MASTER="local[2]",
        LAKESTATE_SPARK_CONF=json.dumps(FAST_TEST_CONF),
        PYTHONUNBUFFERED="1",
    )
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({app!r}, warehouse={wh.root!r}, state_dir={str(state)!r}, "
        f"max_records={MAX_RECORDS}, until_caught_up=True, transport='spark')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


def test_driver_killed_at_each_commit_step_with_typed_sinks_is_exactly_once(spark, tmp_path):
    records = events(120, keys=7, seed=43)
    expected = _reference(tmp_path, records)
    folder = tmp_path / "killed"
    wh = Warehouse(folder / "wh")
    _produce(wh, records)
    app, state = _app(folder, "executors"), folder / "state"
    said = []
    try:
        for point in FAULT_POINTS:
            proc = _run(app, wh, state, point)
            assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
            said.append(proc.stdout)
        proc = _run(app, wh, state, None)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said.append(proc.stdout)
        assert all("state: on Spark's executors" in out for out in said), said
        assert "replaying the recorded batches" in said[FAULT_POINTS.index("after_progress@2") + 1]
        assert _tables(folder) == expected
        for name in ("counts", "events"):
            committed, written = _parquet_files(folder / "tables" / name)
            assert committed < written, name  # the killed runs' files, never committed
    finally:
        shutil.rmtree(executor_state_dir(wh.root), ignore_errors=True)
