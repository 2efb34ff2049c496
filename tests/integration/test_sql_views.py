"""SQL over the changelogs: each store's current state (latest row per key, tombstones
removed), all stores of an app pinned together, `--batch N` for the app a query names, and
the raw changelog beside it."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from engine_helpers import APPS, events, produce
from lakestate import run_app
from lakestate.checkpoint import changelog, progress
from lakestate.checkpoint.changelog import SNAPSHOT_COLUMN
from lakestate.checkpoint.standing import app_pin
from lakestate.cli import main
from lakestate.io import delta_commits
from lakestate.ops import compaction
from lakestate.read.spark_engine import sql, state_frame
from lakestate.read.views import _store_pin
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration


def _run(wh, state, **kwargs):
    return run_app(
        str(APPS / "counts.py"),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=10,
        say=lambda _: None,
        **kwargs,
    )


def _state(spark, wh, view, batch=None):
    rows = sql(spark, wh, f"SELECT key, value FROM {view}", batch).collect()
    return {json.loads(r["key"]): json.loads(r["value"]) for r in rows}


def test_views_show_current_state_pinned_per_app_and_the_raw_changelog(spark, tmp_path):
    records = events(60, seed=31)
    # The reference: the same app stopped after two batches.
    two = Warehouse(tmp_path / "two")
    produce(spark, two, "events", records, partitions=2)
    _run(two, tmp_path / "s2", max_batches=2)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    result = _run(wh, tmp_path / "s", until_caught_up=True)
    assert len(result.batches) > 2

    assert _state(spark, wh, "counts__counts", batch=2) == _state(spark, two, "counts__counts")
    assert _state(spark, wh, "counts__sums", batch=2) == _state(spark, two, "counts__sums")
    # The last batch: every positive record counted once.
    counts: dict = {}
    for r in records:
        if r["value"]["amount"] > 0:
            counts[r["key"]] = counts.get(r["key"], 0) + 1
    assert _state(spark, wh, "counts__counts") == counts
    # The helper for plain Spark gives the same rows as the view.
    helper = {
        json.loads(r["key"]): json.loads(r["value"])
        for r in state_frame(spark, wh, "counts", "counts").collect()
    }
    assert helper == counts
    # The raw changelog: every row each batch appended, one per changed key per task batch.
    raw = sql(spark, wh, "SELECT task, batch_id, key FROM counts__counts__changelog").collect()
    assert len(raw) >= len(counts) and {r["batch_id"] for r in raw} >= {1, 2, 3}
    # --batch applies to the one app a query names.
    with pytest.raises(ValueError, match="applies to one app"):
        sql(spark, wh, "SELECT * FROM counts_out", batch=2)
    with pytest.raises(ValueError, match="no committed batch 99"):
        sql(spark, wh, "SELECT * FROM counts__counts", batch=99)


def test_cli_sql_with_a_batch(spark, tmp_path, capsys):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", events(40, seed=32), partitions=2)
    _run(wh, tmp_path / "s", until_caught_up=True)
    query = "SELECT count(*) AS n FROM counts__counts WHERE batch_id <= 1"
    assert main(["sql", query, "--batch", "1", "--warehouse", wh.root]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "n" and int(out[1]) > 0


def test_a_last_batch_that_changed_nothing_keeps_the_view(spark, tmp_path):
    """Each task's last batch filters every record out (no changelog rows): the view still
    shows the state of the batches before it (a store's tasks are known from every
    progress row, not only the last)."""
    from lakestate.io import topics

    wh = Warehouse(tmp_path / "wh")
    records = events(40, seed=33)
    produce(spark, wh, "events", records, partitions=2)
    _run(wh, tmp_path / "s", until_caught_up=True)
    before = _state(spark, wh, "counts__counts")
    assert before
    zeros = [
        {"key": r["key"], "value": {"user": "u0", "amount": 0}, "timestamp": 99_000 + i}
        for i, r in enumerate(records)
    ]
    topics.topic(wh, "events").append(zeros)
    result = _run(wh, tmp_path / "s", max_batches=1)
    assert {t for b in result.batches for t in b} == {"0_0", "0_1"}
    assert _state(spark, wh, "counts__counts") == before


def test_cli_status_shows_every_task_its_batch_and_lag(spark, tmp_path, capsys):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", events(40, seed=34), partitions=2)
    _run(wh, tmp_path / "s", max_batches=1)
    capsys.readouterr()
    args = [
        "--json",
        "status",
        "counts",
        "--warehouse",
        wh.root,
        "--state-dir",
        str(tmp_path / "s"),
    ]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    tasks = {t["task"]: t for t in doc["tasks"]}
    assert sorted(tasks) == ["0_0", "0_1"]
    for t in tasks.values():
        assert t["last_batch"] == 1
        (read,) = t["inputs"]
        assert (read["topic"], read["committed"], read["local_offset"]) == ("events", 10, 10)
        assert read["lag"] == read["end"] - 10 > 0


# A store's changelog written batch by batch as the engine writes it (the progress row, the
# fence, first; then the changelog append with the task's txn), for pins that a run of an
# app reaches only by chance: a compacted snapshot that is one tombstone, later batches'
# rows past the pin, a task never compacted.
KIND = "timestamped_key_value"


def _commit(wh, task, batch: int, changes: dict[bytes, bytes | None]) -> None:
    path = wh.changelog_path("views", "store")
    changelog.ensure_table(path, "store", KIND)
    progress.ensure_table(wh.progress_path("views"), "views")
    row = progress.TaskProgress(
        task, batch, "run", 0, {}, {}, 0, len(changes), (wh.relative(path),)
    )
    progress.record(wh.progress_path("views"), "views", [row], {})
    rows = [
        {
            "task": task.partition,
            "batch_id": batch,
            "key": k.decode(),
            "value": None if v is None else v.decode(),
            "raw_key": k,
            "raw_value": v,
        }
        for k, v in changes.items()
    ]
    data = pa.Table.from_pylist(rows, schema=changelog.schema(KIND))
    delta_commits.append(delta_commits.open_table(path), data, "views", {task: batch}, {})


def _view(spark, wh, batch=None) -> dict[str, str]:
    rows = state_frame(spark, wh, "views", "store", batch).collect()
    assert len({r["key"] for r in rows}) == len(rows)
    return {r["key"]: r["value"] for r in rows}


def _restored(wh, pins: dict) -> dict[str, str]:
    """The state as a restore reads it (changelog.read_state: no Spark, no view)."""
    path = wh.changelog_path("views", "store")
    out = {}
    for task, batch in pins.items():
        out.update(
            {
                k.decode(): v.decode()
                for k, v in changelog.read_state(path, task.partition, batch).items()
            }
        )
    return out


def test_views_pinned_at_compactions_with_tombstone_snapshots_and_later_batches(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    t0, t1, t2 = TaskId(0, 0), TaskId(0, 1), TaskId(0, 2)
    # Task 0: every key deleted by batch 3 (its snapshot keeps one tombstone); task 1: keys
    # changed and deleted; task 2: never compacted.
    for batch, changes in enumerate(
        [{b"a": b"1", b"b": b"2"}, {b"a": b"3"}, {b"a": None, b"b": None}], start=1
    ):
        _commit(wh, t0, batch, changes)
    for batch, changes in enumerate(
        [{b"c": b"1", b"d": b"2", b"x": b"0"}, {b"c": b"5", b"x": None}, {b"d": b"6"}], start=1
    ):
        _commit(wh, t1, batch, changes)
    _commit(wh, t2, 1, {b"m": b"1"})
    _commit(wh, t2, 2, {b"m": None, b"n": b"2"})
    pins = {t0: 3, t1: 3, t2: 2}
    uncompacted = _view(spark, wh)
    assert uncompacted == _restored(wh, pins) == {"c": "5", "d": "6", "n": "2"}

    compacted = compaction.compact(wh, "views", say=lambda _: None).committed
    assert {r.task for r in compacted} == {t0, t1, t2}
    # Every task pinned at its compaction: the snapshot rows as they are, less the tombstone.
    path = wh.changelog_path("views", "store")
    pin = _store_pin("views", app_pin(wh, "views"), path)
    assert pin.snapshot_only and "raw_value IS NOT NULL" in pin.condition
    assert _view(spark, wh) == uncompacted

    # Later batches of tasks 1 and 2 (a delete and a new key each); then task 1 and 2 pinned
    # at their compaction, with the later rows in the table, and after them.
    _commit(wh, t1, 4, {b"c": None, b"e": b"7"})
    _commit(wh, t2, 3, {b"n": None, b"o": b"8"})
    pin = _store_pin("views", app_pin(wh, "views", batch=3), path)
    assert not pin.snapshot_only  # task 2 is pinned past its compaction
    at_3 = _view(spark, wh, batch=3)
    assert at_3 == _restored(wh, {t0: 3, t1: 3, t2: 3})
    assert (
        _view(spark, wh) == _restored(wh, {t0: 3, t1: 4, t2: 3}) == {"d": "6", "e": "7", "o": "8"}
    )
    _commit(wh, t0, 4, {b"z": b"9"})
    compaction.compact(wh, "views", say=lambda _: None)
    pin = _store_pin("views", app_pin(wh, "views"), path)
    assert pin.snapshot_only and pin.condition == "task IN (0, 1, 2)"
    assert _view(spark, wh) == {"d": "6", "e": "7", "o": "8", "z": "9"}
    # Pinned at batch 3: tasks 0 and 1 now compacted past it, read from the table version
    # before their compactions (time travel), task 2 as it is: the same state as before.
    pin = _store_pin("views", app_pin(wh, "views", batch=3), path)
    assert pin.condition.startswith("task IN (2)") and len(pin.older) >= 1
    assert all(p.version < pin.version for p in pin.older)
    assert _view(spark, wh, batch=3) == at_3


def test_views_pinned_at_a_compaction_skip_later_rows_of_the_tail(spark, tmp_path):
    """Each task pinned at exactly its compaction while later batches' rows (a delete among
    them) are in the table: the pin reads snapshot rows only."""
    wh = Warehouse(tmp_path / "wh")
    t0, t1 = TaskId(0, 0), TaskId(0, 1)
    for task in (t0, t1):
        _commit(wh, task, 1, {b"a%d" % task.partition: b"1", b"b%d" % task.partition: b"2"})
    compaction.compact(wh, "views", say=lambda _: None)
    before = _view(spark, wh, batch=1)
    for task in (t0, t1):
        _commit(wh, task, 2, {b"a%d" % task.partition: None, b"c%d" % task.partition: b"3"})
    path = wh.changelog_path("views", "store")
    pin = _store_pin("views", app_pin(wh, "views", batch=1), path)
    assert pin.snapshot_only and f"{SNAPSHOT_COLUMN} IS NOT NULL" in pin.condition
    assert "raw_value" not in pin.condition  # no tombstone among the snapshot rows
    assert _view(spark, wh, batch=1) == before == {"a0": "1", "b0": "2", "a1": "1", "b1": "2"}
    assert _view(spark, wh) == {"b0": "2", "c0": "3", "b1": "2", "c1": "3"}


def test_sql_registers_the_views_a_query_names(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    _commit(wh, TaskId(0, 0), 1, {b"a": b"1"})
    for view in ("views__store", "views__store__changelog"):
        spark.catalog.dropTempView(view)
    rows = sql(spark, wh, "SELECT key FROM VIEWS__STORE__CHANGELOG").collect()
    assert [r["key"] for r in rows] == ["a"]
    assert not spark.catalog.tableExists("views__store")
    assert sql(spark, wh, "SELECT key, value FROM views__store").collect()[0]["value"] == "1"
