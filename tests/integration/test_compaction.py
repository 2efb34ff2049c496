"""Compaction (``lakestate.ops.compaction``, ``lakestate compact``): a changelog's rows up
to each task's last complete batch become one snapshot; views (current and pinned), restores
and sinks answer as without it; a catch-up from before it is refused; batches committing at
the same time never fail; a SIGKILL anywhere loses nothing.

Each app runs once (``AppRuns``): its first batches are kept as a pristine copy that every
test restores at the same path (progress rows name tables by absolute path), and the rest
of the input is run once without compaction for the expected result."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from engine_helpers import APPS, FAST_TEST_CONF, events, produce, topic_rows
from lakestate import compact, run_app
from lakestate.checkpoint import changelog, faults
from lakestate.checkpoint.changelog import SNAPSHOT_COLUMN, CompactedPastError
from lakestate.checkpoint.standing import app_pin
from lakestate.io import delta_commits, topics
from lakestate.ops import compaction
from lakestate.read.spark_engine import sql
from lakestate.read.views import view_name
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIRST_BATCHES = 3
FIRST_MAX_RECORDS = 10  # 60 records over 2 partitions: 3 batches per task
MORE_MAX_RECORDS = 6  # the next 60: 5 or more batches per task


@dataclass
class AppRuns:
    """One app's warehouse after its first batches, restorable, and the expected result
    of running the rest of the input (``more``) after them."""

    app_file: str
    app: str
    stores: tuple[str, ...]
    outputs: tuple[str, ...]
    more: list[dict]
    root: Path
    expected: tuple = ()

    @property
    def wh(self) -> Warehouse:
        return Warehouse(self.root / "wh")

    @property
    def state(self) -> Path:
        return self.root / "state"

    def keep(self) -> None:
        for name in ("wh", "state"):
            shutil.copytree(self.root / name, self.root / "pristine" / name)

    def restore(self, spark) -> None:
        for name in ("wh", "state"):
            shutil.rmtree(self.root / name, ignore_errors=True)
            # Plain copies (new inodes and times): the log tables' caches key on them.
            shutil.copytree(
                self.root / "pristine" / name, self.root / name, copy_function=shutil.copy
            )
        # The same paths now hold older tables: Spark must not serve its cached snapshots.
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()

    def run(self, max_records: int, max_batches: int | None = None, say=lambda _: None):
        return run_app(
            str(APPS / self.app_file),
            warehouse=self.wh.root,
            state_dir=str(self.state),
            max_records=max_records,
            max_batches=max_batches,
            until_caught_up=True,
            say=say,
        )

    def run_more(self, spark, say=lambda _: None) -> None:
        topics.topic(self.wh, "events").append(self.more)
        self.run(MORE_MAX_RECORDS, say=say)

    def views(self, spark, batch: int | None = None) -> dict[str, list[tuple]]:
        """Each store's view (pinned at ``batch``), sorted; ``snapshot_through`` aside."""
        out = {}
        for store in self.stores:
            df = sql(spark, self.wh, f"SELECT * FROM {view_name(f'{self.app}__{store}')}", batch)
            columns = [c for c in df.columns if c != SNAPSHOT_COLUMN]
            out[store] = sorted((tuple(r[c] for c in columns) for r in df.collect()), key=repr)
        return out

    def results(self, spark) -> tuple:
        return tuple(topic_rows(spark, self.wh, t) for t in self.outputs), self.views(spark)

    def changelog(self, store: str) -> pa.Table:
        return delta_commits.open_table(self.wh.changelog_path(self.app, store)).to_pyarrow_table()


def _app_runs(spark, root: Path, app_file, app, stores, outputs, first, more) -> AppRuns:
    runs = AppRuns(app_file, app, stores, outputs, more, root)
    produce(spark, runs.wh, "events", first, partitions=2)
    runs.run(FIRST_MAX_RECORDS, FIRST_BATCHES)
    runs.keep()
    runs.run_more(spark)
    runs.expected = runs.results(spark)
    runs.restore(spark)
    return runs


def _dedup_events(start: int, n: int) -> list[dict]:
    """Keys seen again mostly after the 10 s window: their ids are purged (tombstones)."""
    rng = random.Random(start)
    return [
        {
            "key": f"k{rng.randrange(8)}",
            "value": {"n": i},
            "timestamp": 100_000 + i * 3_000 + rng.randrange(-4_000, 4_000),
        }
        for i in range(start, start + n)
    ]


@pytest.fixture(scope="module")
def counts_runs(spark, tmp_path_factory) -> AppRuns:
    first, more = events(60, seed=51), events(60, seed=52)
    return _app_runs(
        spark,
        tmp_path_factory.mktemp("counts"),
        "counts.py",
        "counts",
        ("counts", "sums"),
        ("counts-out", "sums-out"),
        first,
        more,
    )


@pytest.fixture(scope="module")
def dedup_runs(spark, tmp_path_factory) -> AppRuns:
    return _app_runs(
        spark,
        tmp_path_factory.mktemp("dedup"),
        "dedup.py",
        "dedup",
        ("seen-keys",),
        ("unique-events",),
        _dedup_events(0, 60),
        _dedup_events(60, 60),
    )


def _task_rows(rows: pa.Table, task: TaskId, through: int) -> pa.Table:
    mine = pc.and_(
        pc.equal(rows.column("task"), task.partition),
        pc.less_equal(rows.column("batch_id"), through),
    )
    return rows.filter(mine)


def _assert_one_snapshot(rows: pa.Table, through: int, live: dict[bytes, bytes]) -> None:
    """``rows`` (a task's rows up to ``through``) are the snapshot of ``live`` as of it."""
    assert rows.column(SNAPSHOT_COLUMN).to_pylist() == [through] * rows.num_rows
    keys, values = rows.column("raw_key").to_pylist(), rows.column("raw_value").to_pylist()
    assert len(set(keys)) == len(keys)
    if live:
        assert dict(zip(keys, values, strict=True)) == live
    else:  # every key deleted: one tombstone stays, the mark of the compaction
        assert values == [None]


def _compaction_commits(wh: Warehouse, app: str, stores: tuple[str, ...]) -> int:
    n = 0
    for store in stores:
        history = delta_commits.open_table(wh.changelog_path(app, store)).history()
        n += sum(compaction.METADATA_KEY in (h.get("userMetadata") or "") for h in history)
    return n


@pytest.mark.parametrize("runs_name", ["counts_runs", "dedup_runs"])
def test_compaction_leaves_one_snapshot_and_views_restores_agree(spark, request, runs_name):
    runs: AppRuns = request.getfixturevalue(runs_name)
    runs.restore(spark)
    wh = runs.wh
    pin = app_pin(wh, runs.app).batches
    assert set(pin.values()) == {FIRST_BATCHES}
    before = {s: runs.changelog(s) for s in runs.stores}
    live = {
        (s, t): changelog.read_state(wh.changelog_path(runs.app, s), t.partition, c)
        for s in runs.stores
        for t, c in pin.items()
    }
    views, pinned = runs.views(spark), runs.views(spark, batch=FIRST_BATCHES)
    if runs.app == "dedup":  # the case this app is here for: purged ids
        assert before["seen-keys"].column("raw_value").null_count > 0

    said: list[str] = []
    result = compact(wh, runs.app, say=said.append)

    assert sorted((r.store, r.task, r.through) for r in result.committed) == sorted(
        (s, t, c) for s in runs.stores for t, c in pin.items()
    )
    assert len(said) == len(result.tasks)
    for store in runs.stores:
        after = runs.changelog(store)
        assert after.num_rows < before[store].num_rows
        for task, through in pin.items():
            _assert_one_snapshot(_task_rows(after, task, through), through, live[(store, task)])
            path = wh.changelog_path(runs.app, store)
            with pytest.raises(CompactedPastError):
                changelog.read_changes(path, runs.app, task, through - 1, through)
            assert changelog.read_changes(path, runs.app, task, through, through) == {}
    assert runs.views(spark) == views
    assert runs.views(spark, batch=FIRST_BATCHES) == pinned
    # Nothing left to gain: a second compaction commits nothing.
    assert compact(wh, runs.app, say=lambda _: None).committed == []

    # A restore reads the snapshot plus the later batches: as an uninterrupted run.
    shutil.rmtree(runs.state)
    said.clear()
    runs.run_more(spark, say=said.append)
    assert any("restored" in line for line in said), said
    assert runs.results(spark) == runs.expected


def _batches_command(runs: AppRuns) -> tuple[dict[str, str], str]:
    """The environment and code of a process that runs the rest of the input."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env["LAKESTATE_SPARK_MASTER"] = "local[2]"
    env["LAKESTATE_SPARK_CONF"] = json.dumps(FAST_TEST_CONF)
    code = (
        "from lakestate import run_app; "
        f"run_app({str(APPS / runs.app_file)!r}, warehouse={runs.wh.root!r}, "
        f"state_dir={str(runs.state)!r}, max_records={MORE_MAX_RECORDS}, until_caught_up=True)"
    )
    return env, code


def test_batches_commit_while_compaction_runs_again_and_again(spark, counts_runs):
    runs = counts_runs
    runs.restore(spark)
    topics.topic(runs.wh, "events").append(runs.more)
    env, code = _batches_command(runs)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    rounds = []
    try:
        while proc.poll() is None:
            rounds.append(compact(runs.wh, runs.app, say=lambda _: None))
            time.sleep(0.1)
    finally:
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "another writer" not in out + err

    assert runs.results(spark) == runs.expected
    assert sum(len(r.committed) for r in rounds) >= 4  # the first batches, then later ones
    # Compaction commits and batch appends interleaved in the changelogs.
    for store in runs.stores:
        history = delta_commits.open_table(runs.wh.changelog_path(runs.app, store)).history()
        kinds = [
            compaction.METADATA_KEY in (h.get("userMetadata") or "")
            for h in sorted(history, key=lambda h: h["version"])
        ]
        first = kinds.index(True)
        assert not all(kinds[first:]) and True in kinds[first + 1 :], kinds
    # And what compaction leaves after the run is one snapshot per task.
    final = compact(runs.wh, runs.app, say=lambda _: None)
    pin = app_pin(runs.wh, runs.app).batches
    for store in runs.stores:
        path = runs.wh.changelog_path(runs.app, store)
        for task, through in pin.items():
            live = changelog.read_state(path, task.partition, through)
            _assert_one_snapshot(_task_rows(runs.changelog(store), task, through), through, live)
    assert all(r.through == pin[r.task] for r in final.tasks)
    assert runs.results(spark) == runs.expected


def _batch_rows(path: str, task: TaskId, batch: int, key: bytes) -> pa.Table:
    """One changelog row of ``task``'s batch ``batch`` (typed columns null)."""
    schema = delta_commits.open_table(path).to_pyarrow_dataset().schema
    row = {f.name: pa.nulls(1, f.type) for f in schema}
    row.update(
        task=pa.array([task.partition], pa.int32()),
        batch_id=pa.array([batch], pa.int64()),
        raw_key=pa.array([key], pa.binary()),
        raw_value=pa.array([b"1"], pa.binary()),
    )
    return pa.table(row, schema=schema)


def test_a_batch_append_and_a_compaction_commit_in_either_order(spark, counts_runs, monkeypatch):
    runs = counts_runs
    runs.restore(spark)
    wh = runs.wh
    pin = app_pin(wh, "counts").batches
    task = TaskId(0, 0)
    nxt = pin[task] + 1
    counts, sums = wh.changelog_path("counts", "counts"), wh.changelog_path("counts", "sums")

    # The batch opened its snapshot, then compaction committed, then the batch appends.
    stale = delta_commits.open_table(counts)
    assert len(compact(wh, "counts", "counts", say=lambda _: None).committed) == 2
    delta_commits.append(stale, _batch_rows(counts, task, nxt, b"new"), "counts", {task: nxt}, {})

    # Compaction read the table, then a batch committed, then compaction commits.
    appended = []
    fail = faults.maybe_fail

    def batch_commits_first(point: str, batch_id: int) -> None:
        if point == compaction.FAULT_BEFORE_COMMIT and not appended:
            table = delta_commits.open_table(sums)
            rows = _batch_rows(sums, task, nxt, b"new")
            appended.append(delta_commits.append(table, rows, "counts", {task: nxt}, {}))
        fail(point, batch_id)

    monkeypatch.setattr(faults, "maybe_fail", batch_commits_first)
    result = compact(wh, "counts", "sums", say=lambda _: None)
    assert appended and [(r.committed, r.tries) for r in result.tasks] == [(True, 1), (True, 1)]

    for path, store in ((counts, "counts"), (sums, "sums")):
        table = delta_commits.open_table(path)
        assert delta_commits.txn_versions(table, "counts", [task]) == {task: nxt}
        rows = runs.changelog(store)
        newer = rows.filter(pc.greater(rows.column("batch_id"), pin[task]))
        assert newer.column("raw_key").to_pylist() == [b"new"]
        assert newer.column(SNAPSHOT_COLUMN).null_count == 1
        for t, through in pin.items():
            assert _task_rows(rows, t, through).column(SNAPSHOT_COLUMN).null_count == 0


def test_two_compactions_of_a_task_at_once_leave_one_snapshot(spark, counts_runs, monkeypatch):
    """delta-rs lets two commits that remove the same files with dataChange=false both
    through; compaction's own txn per task makes the later one retry instead."""
    runs = counts_runs
    runs.restore(spark)
    wh = runs.wh
    pin = app_pin(wh, "counts").batches
    live = {
        t: changelog.read_state(wh.changelog_path("counts", "counts"), t.partition, c)
        for t, c in pin.items()
    }
    inner = []
    fail = faults.maybe_fail

    def another_compaction_first(point: str, batch_id: int) -> None:
        if point == compaction.FAULT_BEFORE_COMMIT and not inner:
            inner.append(None)
            inner.append(compact(wh, "counts", "counts", say=lambda _: None))
        fail(point, batch_id)

    monkeypatch.setattr(faults, "maybe_fail", another_compaction_first)
    outer = compact(wh, "counts", "counts", say=lambda _: None)

    assert [(r.task, r.committed) for r in inner[1].tasks] == [(t, True) for t in sorted(pin)]
    # The outer one's first task lost to the inner one, retried, and found one snapshot.
    assert [(r.committed, r.tries) for r in outer.tasks] == [(False, 2), (False, 1)]
    rows = runs.changelog("counts")
    for task, through in pin.items():
        _assert_one_snapshot(_task_rows(rows, task, through), through, live[task])
    assert _compaction_commits(wh, "counts", ("counts",)) == 2


def _compact_in_subprocess(wh: Warehouse, app: str, fault: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate.ops.compaction import compact; "
        "from lakestate.warehouse import Warehouse; "
        f"compact(Warehouse({wh.root!r}), {app!r})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )


def test_sigkill_in_compaction_loses_nothing_and_a_rerun_finishes(spark, counts_runs):
    runs = counts_runs
    runs.restore(spark)
    views, pinned = runs.views(spark), runs.views(spark, batch=FIRST_BATCHES)
    # Killed before its first commit, then after it (each at the first task).
    for point, commits in ((compaction.FAULT_BEFORE_COMMIT, 0), (compaction.FAULT_AFTER_COMMIT, 1)):
        proc = _compact_in_subprocess(runs.wh, "counts", f"{point}@{FIRST_BATCHES}")
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-2000:])
        assert _compaction_commits(runs.wh, runs.app, runs.stores) == commits
        assert runs.views(spark) == views
    result = compact(runs.wh, "counts", say=lambda _: None)
    assert [r.committed for r in result.tasks] == [False, True, True, True]
    assert result.tasks[0].rows_before == result.tasks[0].rows_after > 0
    assert _compaction_commits(runs.wh, runs.app, runs.stores) == 4
    assert runs.views(spark) == views
    assert runs.views(spark, batch=FIRST_BATCHES) == pinned


def test_cli_compact(spark, counts_runs, capsys, monkeypatch):
    from lakestate import cli
    from lakestate.runtime import spark_session as engine_spark

    runs = counts_runs
    runs.restore(spark)

    def no_spark(*args, **kwargs):
        raise AssertionError("lakestate compact started Spark")

    monkeypatch.setattr(engine_spark, "get_spark", no_spark)
    root = runs.wh.root
    assert cli.main(["compact", "counts", "--store", "sums", "--warehouse", root]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"counts/sums task 0_0 through batch {FIRST_BATCHES}: ")
    assert "rows ->" in out[0] and len(out) == 3
    assert out[-1].startswith("app counts: compacted 2 of 2 store task(s)")
    # By module path; the store compacted already says so.
    assert cli.main(["compact", str(APPS / "counts.py"), "--warehouse", root]) == 0
    out = capsys.readouterr().out
    assert f"counts/sums task 0_1 through batch {FIRST_BATCHES}: already one snapshot" in out
    assert "app counts: compacted 2 of 4 store task(s)" in out

    assert cli.main(["compact", "nope", "--warehouse", root]) == 1
    err = capsys.readouterr().err
    assert "no app 'nope'" in err and "(apps: counts)" in err
    assert cli.main(["compact", "counts", "--store", "nope", "--warehouse", root]) == 1
    assert "app counts has no store 'nope' (its stores: counts, sums)" in capsys.readouterr().err


def test_files_mixing_batches_after_optimize_keep_the_later_rows(spark, counts_runs):
    """OPTIMIZE (maintenance) merges a task's files across batches: compaction carries the
    rows of batches after the one it compacts through over unchanged."""
    runs = counts_runs
    runs.restore(spark)
    wh = runs.wh
    path = wh.changelog_path("counts", "counts")
    pin = app_pin(wh, "counts").batches
    task = TaskId(0, 0)
    nxt = pin[task] + 1
    live = changelog.read_state(path, task.partition, pin[task])
    # Rows of a batch after the pin (as an incomplete batch leaves), then OPTIMIZE.
    table = delta_commits.open_table(path)
    delta_commits.append(table, _batch_rows(path, task, nxt, b"later"), "counts", {task: nxt}, {})
    delta_commits.open_table(path).optimize.compact()
    files = pa.table(delta_commits.open_table(path).get_add_actions(flatten=True))
    mine = files.filter(pc.equal(files.column("partition.task"), task.partition))
    assert mine.num_rows == 1 and mine.column("max.batch_id")[0].as_py() == nxt

    result = compact(wh, "counts", "counts", say=lambda _: None)
    assert [(r.task, r.through, r.committed) for r in result.tasks][0] == (task, pin[task], True)
    rows = runs.changelog("counts")
    _assert_one_snapshot(_task_rows(rows, task, pin[task]), pin[task], live)
    later = rows.filter(pc.greater(rows.column("batch_id"), pin[task]))
    assert later.select(["raw_key", "raw_value", SNAPSHOT_COLUMN]).to_pylist() == [
        {"raw_key": b"later", "raw_value": b"1", SNAPSHOT_COLUMN: None}
    ]
    assert changelog.read_state(path, task.partition, nxt) == {**live, b"later": b"1"}


def test_snapshot_of_a_task_whose_keys_are_all_deleted_keeps_one_tombstone():
    """read_changes learns of a compaction from its rows only: an empty snapshot would let
    a catch-up from before it miss the deletes."""
    schema = changelog.schema("timestamped_key_value")
    rows = pa.Table.from_pylist(
        [
            {"task": 0, "batch_id": 1, "raw_key": b"a", "raw_value": b"1"},
            {"task": 0, "batch_id": 2, "raw_key": b"b", "raw_value": b"2"},
            {"task": 0, "batch_id": 3, "raw_key": b"a", "raw_value": None},
            {"task": 0, "batch_id": 4, "raw_key": b"b", "raw_value": None},
        ],
        schema=schema,
    )
    snapshot = compaction.snapshot_rows(rows, 5)
    assert snapshot.select(["batch_id", "raw_key", "raw_value", SNAPSHOT_COLUMN]).to_pylist() == [
        {"batch_id": 4, "raw_key": b"b", "raw_value": None, SNAPSHOT_COLUMN: 5}
    ]
    # Otherwise: the newest row per key, live ones only.
    rows = rows.slice(0, 3)
    assert compaction.snapshot_rows(rows, 5).select(["batch_id", "raw_key"]).to_pylist() == [
        {"batch_id": 2, "raw_key": b"b"}
    ]


def test_sigkills_in_batches_and_in_compaction_racing_them_lose_nothing(spark, counts_runs):
    """Batches killed at commit steps and compactions killed at theirs, at the same time;
    reruns of both finish with the uninterrupted result."""
    import threading

    runs = counts_runs
    runs.restore(spark)
    topics.topic(runs.wh, "events").append(runs.more)
    env, code = _batches_command(runs)
    stop = threading.Event()
    compactions: list[int] = []

    def compact_and_get_killed() -> None:
        points = (compaction.FAULT_BEFORE_COMMIT, compaction.FAULT_AFTER_COMMIT, None)
        while not stop.is_set():
            point = points[len(compactions) % len(points)]
            proc = _compact_in_subprocess(runs.wh, runs.app, point or "")
            compactions.append(proc.returncode)

    racer = threading.Thread(target=compact_and_get_killed)
    racer.start()
    try:
        for fault in ("after_progress@5", "after_changelog:counts@5", "after_tables@6", None):
            run_env = dict(env, LAKESTATE_FAULT=fault) if fault else env
            proc = subprocess.run(
                [sys.executable, "-c", code],
                env=run_env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == (-9 if fault else 0), (fault, proc.stderr[-3000:])
    finally:
        stop.set()
        racer.join()
    assert -9 in compactions and 0 in compactions, compactions
    compact(runs.wh, runs.app, say=lambda _: None)
    assert runs.results(spark) == runs.expected


def _duckdb_views(runs: AppRuns, batch: int | None = None) -> dict[str, list[tuple]]:
    """``AppRuns.views`` through the DuckDB engine."""
    from lakestate.read import duckdb_engine

    out = {}
    for store in runs.stores:
        query = f"SELECT * FROM {view_name(f'{runs.app}__{store}')}"
        result = duckdb_engine.sql(runs.wh, query, batch)
        keep = [i for i, c in enumerate(result.columns) if c != SNAPSHOT_COLUMN]
        out[store] = sorted((tuple(r[i] for i in keep) for r in result.rows), key=repr)
    return out


def test_a_view_pinned_before_a_compaction_reads_the_older_version_until_vacuum(spark, counts_runs):
    """`--batch N` before the batch compaction folded a task's rows through: the view
    reads the changelog's version from before that compaction (time travel), on both
    engines, with the rows it had before; after VACUUM removed that version, a clear error
    naming the retention that would have kept it."""
    from lakestate.read import duckdb_engine

    runs = counts_runs
    runs.restore(spark)
    wh = runs.wh
    pinned = {b: (runs.views(spark, b), _duckdb_views(runs, b)) for b in (1, 2)}
    for spark_rows, duckdb_rows in pinned.values():
        assert spark_rows == duckdb_rows and all(spark_rows.values())
    assert pinned[1] != pinned[2]
    compact(wh, runs.app, say=lambda _: None)  # through batch 3
    runs.run_more(spark)
    compact(wh, runs.app, say=lambda _: None)  # through the last batch: a second snapshot
    assert min(app_pin(wh, runs.app).batches.values()) > FIRST_BATCHES
    for batch, (spark_rows, duckdb_rows) in pinned.items():
        assert runs.views(spark, batch) == spark_rows
        assert _duckdb_views(runs, batch) == duckdb_rows
    # The raw changelog view is the table as it is now: compacted.
    raw = duckdb_engine.sql(wh, "SELECT count(*) AS n FROM counts__counts__changelog", 1)
    assert raw.rows[0][0] == runs.changelog("counts").num_rows

    for store in runs.stores:  # VACUUM with no retention: the replaced files go
        delta_commits.open_table(wh.changelog_path(runs.app, store)).vacuum(
            retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True
        )
    error = r"VACUUM has removed .* retention of at least 1 hours .*--retention-hours 1"
    with pytest.raises(ValueError, match=error):
        duckdb_engine.sql(wh, "SELECT * FROM counts__counts", 2)
    with pytest.raises(ValueError, match=error):
        runs.views(spark, 2)
    assert runs.views(spark) == _duckdb_views(runs)  # the newest version is unharmed
