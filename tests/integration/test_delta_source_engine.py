"""An app reading a Delta table other writers append to (``ls.DeltaSource``), appended to
between runs by delta-rs and by Spark: its sinks equal the test driver's outputs fed the
same rows as records, every row once, also through a SIGKILL at every step of a batch's
commit (the offsets a batch read are committed with it in the progress table)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from engine_helpers import APPS, driver_outputs
from lakestate import run_app
from lakestate.io import topics
from lakestate.io.topic_records import records_of
from lakestate.warehouse import Warehouse
from test_exactly_once import FAULT_POINTS, _run_in_subprocess

MAX_RECORDS = 15
SINKS = ["counts-out", "sums-out"]


def _orders(n: int, seed: int) -> list[dict]:
    """Rows of the source table: id (the key), amount, ts (the event time, ms-aligned)."""
    rng = random.Random(seed)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return [
        {
            "id": f"k{rng.randrange(20)}",
            "amount": rng.choice([0, 1, 2, 5]),
            "ts": epoch + timedelta(milliseconds=1_000 + i * 10 + rng.randrange(50)),
        }
        for i in range(n)
    ]


SCHEMA = pa.schema([("id", pa.string()), ("amount", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])


def _append(table: Path, rows: list[dict]) -> None:
    write_deltalake(str(table), pa.Table.from_pylist(rows, SCHEMA), mode="append")


def _as_records(rows: list[dict]) -> list[dict]:
    """The rows as the records a producer would give the test driver."""
    return [
        {
            "key": r["id"],
            "value": {"id": r["id"], "amount": r["amount"], "ts": r["ts"].isoformat()},
            "timestamp": (r["ts"] - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1),
        }
        for r in rows
    ]


def _baked_app(folder: Path, table: Path, workers: bool = False) -> str:
    """delta_counts.py with the table's path written in (Spark's Python workers import the
    app without this process's environment); with ``workers``, processed (and read) in
    two worker processes whatever the batch's size."""
    source = (APPS / "delta_counts.py").read_text()
    source = source.replace('os.environ["DELTA_SOURCE_TABLE"]', repr(str(table)))
    if workers:
        config = '"lakestate.inprocess.workers": 2, "lakestate.inprocess.workers.min.records": 0'
        source = source.replace("{", "{" + config + ", ", 1)
    path = folder / "delta_counts.py"
    path.write_text(source)
    return str(path)


def _expected(rows: list[dict], table: Path, monkeypatch) -> dict[str, list[tuple]]:
    monkeypatch.setenv("DELTA_SOURCE_TABLE", str(table))
    out = driver_outputs(
        "delta_counts.py", _as_records(rows), 2, SINKS, with_partition=True, in_topic="orders"
    )
    return {t: sorted(rs, key=lambda r: r[0]) for t, rs in out.items()}


def _sinks(wh: Warehouse) -> dict[str, list[tuple]]:
    found = {}
    for t in SINKS:
        rows = [r for part in topics.topic(wh, t).read_partitions() for r in records_of(part)]
        found[t] = [(r.partition, r.key, r.value, r.timestamp) for r in rows]
    return found


def _run(app: str, wh: Warehouse, state: Path, inprocess: int) -> object:
    return run_app(
        app,
        warehouse=wh.root,
        state_dir=str(state),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        inprocess_max_records=inprocess,
        say=lambda _: None,
    )


@pytest.mark.parametrize("workers", [False, True], ids=["driver", "workers"])
def test_an_app_over_a_table_appended_to_by_delta_rs_equals_the_test_driver(
    tmp_path, monkeypatch, workers
):
    table, wh, state = tmp_path / "bronze", Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path, table, workers)
    rows = _orders(120, seed=3)
    _append(table, rows[:50])
    first = _run(app, wh, state, 10**9)
    assert first.transport == "in_process" and first.records == 50
    _append(table, rows[50:80])
    _append(table, rows[80:100])
    DeltaTable(str(table)).optimize.compact()  # not a change: nothing read twice
    assert _run(app, wh, state, 10**9).records == 50
    _append(table, rows[100:])
    assert _run(app, wh, state, 10**9).records == 20
    again = _run(app, wh, state, 10**9)
    assert again.caught_up and not again.batches
    assert _sinks(wh) == _expected(rows, table, monkeypatch)
    # The committed offsets are the source's end offsets.
    assert sum(topics.topic(wh, "orders").end_offsets().values()) == 120


def test_a_spark_run_over_a_table_appended_to_by_spark(spark, tmp_path, monkeypatch):
    table, wh, state = tmp_path / "bronze", Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path, table)
    rows = _orders(40, seed=5)
    spark_schema = "id string, amount long, ts timestamp"
    for part in (rows[:25], rows[25:]):
        frame = spark.createDataFrame([(r["id"], r["amount"], r["ts"]) for r in part], spark_schema)
        frame.coalesce(1).write.format("delta").mode("append").save(str(table))
        result = _run(app, wh, state, 0)
        assert result.transport == "spark" and result.records == len(part)
    assert _sinks(wh) == _expected(rows, table, monkeypatch)


def _run_killed_at(app: str, wh: Warehouse, state: Path, fault: str | None):
    return _run_in_subprocess(
        wh, state, fault, app=app, max_records=MAX_RECORDS, inprocess_max_records=10**9
    )


def test_kill_at_every_commit_step_then_rerun_reads_each_row_once(tmp_path, monkeypatch):
    table, wh, state = tmp_path / "bronze", Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path, table)
    rows = _orders(120, seed=7)
    _append(table, rows[:60])
    said = []
    # Every step of a batch's commit, the rest of the rows appended between two killed runs.
    for point in FAULT_POINTS:
        if point == "after_tables@3":
            _append(table, rows[60:])
        proc = _run_killed_at(app, wh, state, point)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        said.append(proc.stdout)
    proc = _run_killed_at(app, wh, state, None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said.append(proc.stdout)
    assert _sinks(wh) == _expected(rows, table, monkeypatch)
    after = said[FAULT_POINTS.index("after_progress@2") + 1]
    assert "replaying the recorded batches" in after, said


@pytest.mark.parametrize("skip", [False, True])
def test_a_delete_in_the_source_fails_the_run_or_is_skipped(tmp_path, monkeypatch, skip):
    table, wh, state = tmp_path / "bronze", Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path, table)
    if skip:
        text = (
            Path(app).read_text().replace("partitions=2", "partitions=2, skip_change_commits=True")
        )
        Path(app).write_text(text)
    rows = _orders(30, seed=9)
    _append(table, rows[:20])
    assert _run(app, wh, state, 10**9).records == 20
    DeltaTable(str(table)).delete("amount = 0")
    _append(table, rows[20:])
    if not skip:
        with pytest.raises(Exception, match="DELETE commit .* skip_change_commits=True"):
            _run(app, wh, state, 10**9)
        return
    assert _run(app, wh, state, 10**9).records == 10
    # The rows deleted had been read: the sinks hold every appended row's result once.
    assert _sinks(wh) == _expected(rows, table, monkeypatch)
