"""Table maintenance (lakestate.ops.maintenance) on real Delta tables: OPTIMIZE keeps the
data, every task's txn version and the topics' end offsets (read from the commits, not by a
scan); VACUUM keeps time travel within its retention and deletes what only older versions
need; and maintenance runs beside an app's batches without changing what they produce."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from engine_helpers import APPS, FAST_TEST_CONF, events, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.io import delta_commits, delta_log, topics
from lakestate.io.logtable import ends as log_ends
from lakestate.ops import maintenance, table_lock
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DAY_MS = 24 * 3600 * 1000


def _run(warehouse: Warehouse, state_dir: Path, app: str = "counts.py", **kwargs) -> None:
    run_app(
        str(APPS / app),
        warehouse=warehouse.root,
        state_dir=str(state_dir),
        until_caught_up=True,
        say=lambda _: None,
        **kwargs,
    )


def _tasks(warehouse: Warehouse, app: str) -> list[TaskId]:
    table = delta_commits.open_table(warehouse.progress_path(app))
    return sorted({TaskId.parse(t) for t in table.to_pyarrow_table(columns=["task"])["task"]})


def _snapshot(warehouse: Warehouse, app: str) -> dict[str, tuple[list[str], dict]]:
    """Per table of the app: its rows (order-free) and every task's txn version."""
    tasks = _tasks(warehouse, app)
    found = {}
    for path in maintenance.app_tables(warehouse, app):
        table = delta_commits.open_table(path)
        rows = sorted(
            json.dumps(r, sort_keys=True, default=repr)
            for r in table.to_pyarrow_table().to_pylist()
        )
        found[path] = (rows, delta_commits.txn_versions(table, app, tasks))
    return found


def _file_count(path: str) -> int:
    return len(delta_commits.open_table(path).file_uris())


def _commit_actions(path: str, version: int) -> list[dict]:
    log = delta_log.local_log(path)
    text = (log / f"{version:020d}.json").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_optimize_keeps_data_txn_versions_and_end_offsets(spark, warehouse, tmp_path, monkeypatch):
    records = events(160, seed=3)
    produce(spark, warehouse, "events", records, partitions=2)
    _run(warehouse, tmp_path / "state", max_records=20)  # 4+ batches per task: small files

    tables = maintenance.app_tables(warehouse, "counts")
    assert tables == [
        warehouse.changelog_path("counts", "counts"),
        warehouse.changelog_path("counts", "sums"),
        warehouse.progress_path("counts"),
        warehouse.topic_path("counts-out"),
        warehouse.topic_path("sums-out"),
    ]  # its input topic is not the app's
    before = _snapshot(warehouse, "counts")
    files = {p: _file_count(p) for p in tables}
    versions = {p: delta_commits.open_table(p).version() for p in tables}
    ends = {t: topics.topic(warehouse, t).end_offsets() for t in ("counts-out", "sums-out")}
    assert all(v for t in ends.values() for v in t.values())
    assert all(all(v >= 4 for v in txn.values()) for _, txn in before.values())

    done = maintenance.optimize(warehouse, "counts", say=lambda _: None)
    assert [d.path for d in done] == tables
    for d in done:
        assert d.files_before == files[d.path]
        assert d.files_after < d.files_before, d  # one file per task partition now
        assert d.files_after == _file_count(d.path)
        # One OPTIMIZE commit: adds and removes, every one with dataChange false, no txn.
        version = delta_commits.open_table(d.path).version()
        assert version == versions[d.path] + 1
        actions = _commit_actions(d.path, version)
        assert actions[0]["commitInfo"]["operation"] == "OPTIMIZE"
        files_changed = [a.get("add") or a.get("remove") for a in actions[1:]]
        assert files_changed and all(f["dataChange"] is False for f in files_changed)
        assert not any("txn" in a for a in actions)
        assert delta_log.read_commit(delta_log.local_log(d.path), version).changes_data is False
    assert _snapshot(warehouse, "counts") == before  # same rows, same txn versions

    # End offsets are still read from the commits (stepping over OPTIMIZE), not by a scan.
    def no_scan(*args, **kwargs):
        raise AssertionError("end offsets scanned: the commits should have told them")

    monkeypatch.setattr(log_ends, "_scan_end_offsets", no_scan)
    log_ends.clear_cache()
    assert {t: topics.topic(warehouse, t).end_offsets() for t in ends} == ends
    monkeypatch.undo()

    # A second OPTIMIZE has nothing to do and commits nothing.
    again = maintenance.optimize(warehouse, "counts", say=lambda _: None)
    assert all(d.files_after == d.files_before for d in again)
    assert {p: delta_commits.open_table(p).version() for p in tables} == {
        p: v + 1 for p, v in versions.items()
    }

    # The engine goes on from the optimized tables, restoring its stores from them too.
    more = events(60, seed=4)
    topics.topic(warehouse, "events").append(more)
    shutil.rmtree(tmp_path / "state")
    _run(warehouse, tmp_path / "state", max_records=20)
    positive = [r for r in records + more if r["value"]["amount"] > 0]
    assert state_rows(spark, warehouse, "counts", "counts") == Counter(r["key"] for r in positive)
    out = topic_rows(spark, warehouse, "counts-out")
    assert [(p, o) for p, o, *_ in out] == sorted(
        (p, o) for p in (0, 1) for o in range(sum(1 for r in out if r[0] == p))
    )  # dense offsets: the sink's ends were right after OPTIMIZE


def _backdate(path: str, version: int, days: int) -> None:
    """Make commit ``version`` look ``days`` old: its files were removed back then."""
    log = delta_log.local_log(path) / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    for action in actions:
        for kind, key in (("commitInfo", "timestamp"), ("remove", "deletionTimestamp")):
            if kind in action:
                action[kind][key] -= days * DAY_MS
    log.write_text("".join(json.dumps(a) + "\n" for a in actions))


def _append(path: str, x: int) -> None:
    data = pa.table({"task": pa.array([0], pa.int32()), "x": pa.array([x], pa.int64())})
    write_deltalake(path, data, mode="append", partition_by=["task"])


def _version_files(path: str, version: int) -> set[str]:
    uris = DeltaTable(path, version=version).file_uris()
    return {u.removeprefix("file://") for u in uris}


def _age(path: Path, days: int) -> None:
    old = time.time() - days * 86400
    os.utime(path, (old, old))


def test_vacuum_keeps_time_travel_within_the_retention(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    path = warehouse.changelog_path("app", "store")  # a table of app "app"; delta-rs only
    for x in range(3):
        _append(path, x)  # versions 0-2
    maintenance.optimize(warehouse, "app", say=lambda _: None)  # version 3
    _backdate(path, 3, days=8)  # as if that OPTIMIZE ran 8 days ago
    for x in range(3, 5):
        _append(path, x)  # versions 4, 5: version 3 was the latest until now
    maintenance.optimize(warehouse, "app", say=lambda _: None)  # version 6
    latest = delta_commits.open_table(path).version()
    partition = Path(path) / "task=0"
    old_orphan, new_orphan = partition / "part-old-orphan.parquet", partition / "part-new.parquet"
    for orphan in (old_orphan, new_orphan):
        shutil.copy(next(partition.glob("*.parquet")), orphan)
    _age(old_orphan, days=8)  # written 8 days ago and never committed: a crashed write
    needed = {v: _version_files(path, v) for v in range(latest + 1)}
    data = sorted(delta_commits.open_table(path).to_pyarrow_table()["x"].to_pylist())

    with pytest.raises(ValueError, match="at least 1:00:00"):
        maintenance.vacuum(warehouse, "app", timedelta(minutes=30))
    (done,) = maintenance.vacuum(warehouse, "app", timedelta(days=7), say=lambda _: None)

    gone = {str(Path(path) / f) for f in done.deleted}
    assert gone == set().union(*(needed[v] for v in range(3))) - needed[3] | {str(old_orphan)}
    for v in range(3, latest + 1):  # current at some moment of the last 7 days: readable
        assert all(os.path.exists(f) for f in needed[v]), v
    for v in range(3):  # only current before that: their files are gone
        assert not any(os.path.exists(f) for f in needed[v] - needed[3]), v
    assert new_orphan.exists()  # younger than the retention: maybe a write under way
    assert sorted(delta_commits.open_table(path).to_pyarrow_table()["x"].to_pylist()) == data
    assert data == [0, 1, 2, 3, 4]


def _x(path: str) -> list[int]:
    return sorted(delta_commits.open_table(path).to_pyarrow_table()["x"].to_pylist())


def test_delta_rs_lets_two_optimizes_of_one_snapshot_both_commit(tmp_path):
    """Why maintenance locks a table: in delta-rs 1.6.6 two rewrites that remove the same
    files (dataChange false) from one snapshot both commit, and the rows are doubled."""
    path = str(tmp_path / "t")
    for x in range(3):
        _append(path, x)
    first, second = DeltaTable(path), DeltaTable(path)
    first.optimize.compact()
    second.optimize.compact()  # no conflict raised
    assert _x(path) == [0, 0, 1, 1, 2, 2]


def test_optimize_waits_for_the_table_lock(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    path = warehouse.changelog_path("app", "store")
    for x in range(3):
        _append(path, x)
    with table_lock.table_lock(path):
        with table_lock.table_lock(path):  # reentrant
            pass
        worker = threading.Thread(
            target=maintenance.optimize, args=(warehouse, "app"), kwargs={"say": print}
        )
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and delta_commits.open_table(path).version() == 2
        DeltaTable(path).optimize.compact()  # what the lock holder does meanwhile
    worker.join(timeout=60)
    assert not worker.is_alive()
    # The waiting OPTIMIZE read the table after the holder's commit: nothing doubled.
    assert _x(path) == [0, 1, 2]


def test_concurrent_optimizes_and_appends_keep_every_row_once(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    path = warehouse.changelog_path("app", "store")
    _append(path, 0)
    failures: list[BaseException] = []

    def optimize_repeatedly() -> None:
        try:
            for _ in range(8):
                maintenance.optimize(warehouse, "app", say=lambda _: None)
        except BaseException as exc:  # reported below
            failures.append(exc)

    workers = [threading.Thread(target=optimize_repeatedly) for _ in range(2)]
    for worker in workers:
        worker.start()
    for x in range(1, 25):
        _append(path, x)
    for worker in workers:
        worker.join(timeout=120)
    assert not failures
    maintenance.optimize(warehouse, "app", say=lambda _: None)
    assert _x(path) == list(range(25))
    assert _file_count(path) == 1


def test_retention_is_whole_hours_of_at_least_one():
    assert maintenance.retention_hours(timedelta(days=7)) == 168
    assert maintenance.retention_hours(timedelta(hours=1)) == 1
    assert maintenance.retention_hours(timedelta(hours=1, minutes=1)) == 2  # rounded up
    with pytest.raises(ValueError):
        maintenance.retention_hours(timedelta(0))


def test_no_tables_before_the_first_run(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    assert maintenance.app_tables(warehouse, "counts") == []
    assert maintenance.optimize(warehouse, "counts") == []
    assert maintenance.vacuum(warehouse, "counts") == []


def _maintain_beside(warehouse: Warehouse, app: str, proc: subprocess.Popen) -> list[int]:
    """Maintenance rounds (compaction, OPTIMIZE, VACUUM) one after another until ``proc``
    ends; per round, the files OPTIMIZE compacted away."""
    rounds = []
    while proc.poll() is None:
        optimized, _ = maintenance.maintain(
            warehouse, app, maintenance.MIN_RETENTION, say=lambda _: None
        )
        rounds.append(sum(d.files_before - d.files_after for d in optimized))
        time.sleep(0.2)
    return rounds


def _regroup_results(spark, warehouse: Warehouse) -> tuple:
    return (
        topic_rows(spark, warehouse, "per-user-out"),
        topic_rows(spark, warehouse, "regroup-per-user-repartition"),
        state_rows(spark, warehouse, "regroup", "per-user"),
    )


def test_maintenance_runs_beside_the_batches(spark, tmp_path):
    records = events(300, keys=11, seed=5)
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    _run(reference, tmp_path / "ref-state", app="regroup.py", max_records=15)
    expected = _regroup_results(spark, reference)

    warehouse = Warehouse(tmp_path / "wh")
    produce(spark, warehouse, "events", records, partitions=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env.update(LAKESTATE_SPARK_MASTER="local[1]", LAKESTATE_SPARK_CONF=json.dumps(FAST_TEST_CONF))
    code = (
        "from lakestate import run_app; "
        f"r = run_app({str(APPS / 'regroup.py')!r}, warehouse={warehouse.root!r}, "
        f"state_dir={str(tmp_path / 'state')!r}, max_records=15, until_caught_up=True); "
        "assert r.caught_up"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        rounds = _maintain_beside(warehouse, "regroup", proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert sum(line.startswith("batch ") for line in out.splitlines()) >= 10, out
    # Maintenance really ran while the batches committed: OPTIMIZE compacted files they
    # had just written, round after round.
    assert len(rounds) >= 3 and sum(1 for n in rounds if n) >= 2, (rounds, out)
    maintenance.maintain(warehouse, "regroup", maintenance.MIN_RETENTION, say=lambda _: None)
    assert _regroup_results(spark, warehouse) == expected


def test_maintain_command(tmp_path, capsys):
    from lakestate.cli import main

    warehouse = Warehouse(tmp_path / "wh")
    path = warehouse.changelog_path("app", "store")
    for x in range(4):
        _append(path, x)
    assert main(["--warehouse", warehouse.root, "maintain", "app", "--retention-hours", "0"]) == 1
    assert "at least 1:00:00" in capsys.readouterr().err
    assert _file_count(path) == 4  # a bad retention changes nothing
    assert main(["--warehouse", warehouse.root, "maintain", "app", "--retention-hours", "1"]) == 0
    assert "app app: 1 table(s), 4 -> 1 files, 0 file(s) vacuumed" in capsys.readouterr().out
    assert _file_count(path) == 1 and _x(path) == [0, 1, 2, 3]
