"""An app writing typed Delta tables (``ls.DeltaSink``): the tables read back as records
equal the test driver's outputs, every record once, also through a SIGKILL at every step
of a batch's commit (in process: step 3 runs in the driver for both transports); their
columns are typed, read by delta-rs, DuckDB and Spark (after a Spark-transport run) without
JSON parsing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from engine_helpers import APPS, driver_outputs, events
from lakestate import run_app
from lakestate.checkpoint import progress
from lakestate.errors import StreamsException
from lakestate.io import topics
from lakestate.io.topic_records import records_of
from lakestate.read import duckdb_engine, spark_engine, views
from lakestate.warehouse import Warehouse
from test_exactly_once import _run_in_subprocess

MAX_RECORDS = 15
SINKS = ["counts-typed", "events-typed", "sums-out"]
FAULT_POINTS = [
    "after_progress@2",
    "after_sink:counts-typed@2",
    "after_sink:events-typed@2",
    "after_sink:sums-out@2",
    "after_changelog:counts@2",
    "after_tables@3",
    "mid_local_commit@4",
]


def _order(row: tuple) -> str:
    return json.dumps(row, sort_keys=True)


def _baked_app(folder: Path) -> str:
    """typed_counts.py with its tables' folder written in (a subprocess or Spark's Python
    workers import the app without this process's environment)."""
    source = (APPS / "typed_counts.py").read_text()
    path = folder / "typed_counts.py"
    tables = repr(str(folder / "tables"))
    path.write_text(source.replace('os.environ["TYPED_SINK_DIR"]', tables))
    return str(path)


def _expected(records: list[dict], tmp_path: Path, monkeypatch) -> dict[str, list[tuple]]:
    monkeypatch.setenv("TYPED_SINK_DIR", str(tmp_path / "driver-tables"))
    out = driver_outputs("typed_counts.py", records, 2, SINKS, with_partition=True)
    return {t: sorted(rs, key=_order) for t, rs in out.items()}


def _sinks(wh: Warehouse) -> dict[str, list[tuple]]:
    found = {}
    for t in SINKS:
        rows = [r for part in topics.topic(wh, t).read_partitions() for r in records_of(part)]
        found[t] = sorted(((r.partition, r.key, r.value, r.timestamp) for r in rows), key=_order)
    return found


def _run(app: str, wh: Warehouse, state: Path, inprocess: int = 10**9) -> object:
    return run_app(
        app,
        warehouse=wh.root,
        state_dir=str(state),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        inprocess_max_records=inprocess,
        say=lambda _: None,
    )


def _produce(wh: Warehouse, records: list[dict]) -> None:
    events_topic = topics.topic(wh, "events")
    if not events_topic.exists():
        events_topic.create(2)
    events_topic.append(records)


def test_typed_tables_equal_the_test_driver_and_read_without_json(tmp_path, monkeypatch):
    wh, state = Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path)
    records = events(80, seed=3)
    _produce(wh, records[:50])
    first = _run(app, wh, state)
    assert first.transport == "in_process" and first.records == 50
    _produce(wh, records[50:])
    assert _run(app, wh, state).records == 30
    expected = _expected(records, tmp_path, monkeypatch)
    assert _sinks(wh) == expected
    assert topics.topic(wh, "counts-typed").describe().kind == "delta_sink"

    # delta-rs: typed columns, the declared ones as declared, partitioned as asked.
    counts = DeltaTable(str(tmp_path / "tables" / "counts"))
    assert counts.metadata().partition_columns == ["big"]
    schema = pa.schema(counts.schema().to_arrow())
    assert {f.name: f.type for f in schema} == {
        "key": pa.string(),
        "count": pa.int64(),
        "big": pa.bool_(),
        "_timestamp": pa.timestamp("us", "UTC"),
        "_partition": pa.int32(),
        "_offset": pa.int64(),
    }
    got = sorted(
        (r["_partition"], r["key"], r["count"], r["big"], r["_timestamp"])
        for r in counts.to_pyarrow_table().to_pylist()
    )
    want = sorted(
        (p, k, v["count"], v["big"], pa.scalar(ts * 1000, pa.timestamp("us", "UTC")).as_py())
        for p, k, v, ts in expected["counts-typed"]
    )
    assert got == want
    table = DeltaTable(str(tmp_path / "tables" / "events"))
    assert [f.type for f in pa.schema(table.schema().to_arrow())][:3] == [
        pa.string(),
        pa.string(),
        pa.int64(),
    ]

    # DuckDB over delta-rs' Arrow dataset: plain SQL on the typed columns.
    con = duckdb.connect()
    con.register("events_typed", table.to_pyarrow_dataset())
    con.register("counts_typed", counts.to_pyarrow_dataset())
    final_sums: dict[str, int] = {}
    for _, k, v, _ in expected["sums-out"]:
        final_sums[k] = max(final_sums.get(k, 0), v)
    query = "select key, sum(amount) from events_typed group by key"
    assert dict(con.sql(query).fetchall()) == final_sums
    # The latest row per key (README's view): a key's rows are in one partition, in offset order.
    final_counts: dict[str, int] = {}
    for _, k, v, _ in expected["counts-typed"]:
        final_counts[k] = max(final_counts.get(k, 0), v["count"])
    latest = (
        "select key, count from counts_typed"
        " qualify row_number() over (partition by key order by _offset desc) = 1"
    )
    assert dict(con.sql(latest).fetchall()) == final_counts
    # The same as `lakestate sql`'s views: the table, and its latest row per key.
    listed = {(v.name, v.kind) for v in views.list_views(wh)}
    assert {("counts_typed", "delta_sink"), ("counts_typed__latest", "latest")} <= listed
    query = "select key, count from counts_typed__latest"
    assert dict(duckdb_engine.sql(wh, query).rows) == final_counts
    assert len(duckdb_engine.sql(wh, "select * from counts_typed").rows) == len(got)


def test_a_value_that_does_not_fit_the_declared_schema_fails_the_batch(tmp_path):
    wh, state = Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path)
    _produce(wh, [{"key": "k1", "value": {"user": "u1", "amount": 2}, "timestamp": 1000}])
    assert _run(app, wh, state).records == 1
    _produce(wh, [{"key": "k1", "value": {"user": 7, "amount": 3}, "timestamp": 2000}])
    with pytest.raises(StreamsException) as failed:
        _run(app, wh, state)
    message = str(failed.value)
    for part in ("events-typed", "'user'", "k1", "string", "processing.exception.handler"):
        assert part in message, message
    # Nothing of the failed batch anywhere: each table holds the first record's rows only.
    found = _sinks(wh)
    assert [len(found[t]) for t in SINKS] == [1, 1, 1]


def test_a_value_that_does_not_fit_a_column_taken_from_earlier_batches_fails_whole(tmp_path):
    """No declared schema: the columns' types come from the first batch, and a later value
    of another type fails its batch before the progress commit: no table holds any of it,
    and the progress table does not record it."""
    wh, state = Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = tmp_path / "loose.py"
    app.write_text(
        "import lakestate as ls\n"
        f"sink = ls.DeltaSink('loose-typed', {str(tmp_path / 'loose')!r})\n"
        "b = ls.StreamsBuilder()\n"
        "events = b.stream('events')\n"
        "events.to(sink)\n"
        "events.group_by_key().count().to_stream().to('loose-counts')\n"
        "app = ls.App('loose', b.build(), {})\n"
    )
    _produce(wh, [{"key": "k1", "value": {"amount": 2}, "timestamp": 1000}])
    assert _run(str(app), wh, state).records == 1
    _produce(wh, [{"key": "k2", "value": {"amount": "two"}, "timestamp": 2000}])
    with pytest.raises(StreamsException, match="'amount'.*k2"):
        _run(str(app), wh, state)
    assert [len(list(records_of(p))) for p in _parts(wh, "loose-typed")] == [1]
    assert sum(len(list(records_of(p))) for p in _parts(wh, "loose-counts")) == 1
    history, _ = progress.read_all(wh, "loose")
    assert sum(r.records for rows in history.rows.values() for r in rows) == 1


def _parts(wh: Warehouse, topic: str) -> list[pa.Table]:
    return [p for p in topics.topic(wh, topic).read_partitions() if p.num_rows]


def _killed_at(app: str, wh: Warehouse, state: Path, fault: str | None):
    return _run_in_subprocess(
        wh, state, fault, app=app, max_records=MAX_RECORDS, inprocess_max_records=10**9
    )


def test_kill_at_every_commit_step_then_rerun_writes_each_row_once(tmp_path, monkeypatch):
    wh, state = Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path)
    records = events(120, seed=7)
    _produce(wh, records[:60])
    said = []
    for point in FAULT_POINTS:
        if point == "after_tables@3":
            _produce(wh, records[60:])
        proc = _killed_at(app, wh, state, point)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        said.append(proc.stdout)
    proc = _killed_at(app, wh, state, None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    killed = _sinks(wh)
    assert "replaying the recorded batches" in said[FAULT_POINTS.index("after_progress@2") + 1]
    assert killed == _expected(records, tmp_path, monkeypatch)

    # An uninterrupted run over the same records writes the same typed rows.
    calm = tmp_path / "calm"
    calm.mkdir()
    calm_app = _baked_app(calm)
    calm_wh = Warehouse(calm / "wh")
    _produce(calm_wh, records)
    _run(calm_app, calm_wh, calm / "state")
    for name in ("counts", "events"):
        a = DeltaTable(str(tmp_path / "tables" / name)).to_pyarrow_table()
        b = DeltaTable(str(calm / "tables" / name)).to_pyarrow_table()
        order = [("_partition", "ascending"), ("_offset", "ascending")]
        assert a.sort_by(order).select(b.column_names).equals(b.sort_by(order)), name
    shutil.rmtree(calm)


def test_a_spark_run_writes_the_typed_tables_spark_reads(spark, tmp_path, monkeypatch):
    wh, state = Warehouse(tmp_path / "wh"), tmp_path / "state"
    app = _baked_app(tmp_path)
    records = events(40, seed=5)
    _produce(wh, records)
    result = _run(app, wh, state, inprocess=0)
    assert result.transport == "spark" and result.records == 40
    expected = _expected(records, tmp_path, monkeypatch)
    assert _sinks(wh) == expected
    frame = spark.read.format("delta").load(str(tmp_path / "tables" / "counts"))
    assert dict(frame.dtypes) == {
        "key": "string",
        "count": "bigint",
        "big": "boolean",
        "_timestamp": "timestamp",
        "_partition": "int",
        "_offset": "bigint",
    }
    got = sorted(
        (r["_partition"], r["key"], r["count"], r["big"], r["_offset"]) for r in frame.collect()
    )
    want = [(p, k, v["count"], v["big"]) for p, k, v, _ in expected["counts-typed"]]
    assert [g[:4] for g in got] == sorted(want)
    latest = spark.sql(
        f"select key, max_by(count, _offset) as count from delta.`{tmp_path}/tables/counts`"
        " group by key"
    ).collect()
    final = {
        k: max(v["count"] for _, kk, v, _ in expected["counts-typed"] if kk == k)
        for _, k, _, _ in expected["counts-typed"]
    }
    assert {r["key"]: r["count"] for r in latest} == final
    view = spark_engine.sql(spark, wh, "select key, count from counts_typed__latest").collect()
    assert {r["key"]: r["count"] for r in view} == final
