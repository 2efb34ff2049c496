"""Exactly-once when Spark's executors own the state and write the batch's tables' files
(checkpoint/executor_writes.py): the driver is SIGKILLed at the commit steps where that
path differs from the driver's (files written but not committed; progress recorded, some
tables committed), then rerun; the sinks, changelogs and state equal an uninterrupted run's
whose driver owns the stores, and the files of the killed runs are never committed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import APPS, FAST_TEST_CONF, events, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.checkpoint import faults
from lakestate.io import delta_commits
from lakestate.io import topics as io_topics
from lakestate.runtime.executor_stores import STATE_OWNER, executor_state_dir
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

N = 120
MAX_RECORDS = 15  # 4 or more batches per task
REPO = Path(__file__).resolve().parents[2]

# Batch 2 is killed before its progress (its files written, uncommitted), then replayed up
# to each next table; batch 3 between its tables and the end of its commit.
FAULT_POINTS = [
    "before_progress@2",
    "after_progress@2",
    "after_sink:counts-out@2",
    "after_changelog:counts@2",
    "after_tables@3",
]


def _app_on_executors(tmp_path: Path) -> Path:
    wrapper = tmp_path / "counts_on_executors.py"
    wrapper.write_text(
        "import dataclasses, runpy\n"
        f"_app = runpy.run_path({str(APPS / 'counts.py')!r})['app']\n"
        f"app = dataclasses.replace(_app, config={{**_app.config, {STATE_OWNER!r}: 'executors'}})\n"
    )
    return wrapper


def _run(app: Path, wh: Warehouse, state: Path, fault: str | None) -> subprocess.CompletedProcess:
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
        f"run_app({str(app)!r}, warehouse={wh.root!r}, state_dir={str(state)!r}, "
        f"max_records={MAX_RECORDS}, until_caught_up=True, transport='spark')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


def _changelog(wh: Warehouse, store: str) -> list[tuple]:
    rows = delta_commits.open_table(wh.changelog_path("counts", store)).to_pyarrow_table()
    columns = ["task", "batch_id", "raw_key", "raw_value"]
    return sorted(tuple(r.values()) for r in rows.select(columns).to_pylist())


def _results(spark, wh: Warehouse) -> tuple:
    return (
        topic_rows(spark, wh, "counts-out"),
        topic_rows(spark, wh, "sums-out"),
        state_rows(spark, wh, "counts", "counts"),
        state_rows(spark, wh, "counts", "sums"),
        _changelog(wh, "counts"),
        _changelog(wh, "sums"),
    )


def _parquet_files(path: str) -> set[str]:
    root = Path(path)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


def test_driver_killed_at_each_executor_write_step_then_rerun_is_exactly_once(spark, tmp_path):
    records = events(N, seed=23)
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "ref"),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        say=lambda _: None,
    )
    expected = _results(spark, reference)

    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    # The app's own config: on a local master Spark's executors own the stores by default
    # (``lakestate.spark.state.owner`` auto), as on a cluster.
    app, state = APPS / "counts.py", tmp_path / "state"
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
        assert _results(spark, wh) == expected
        # The killed runs left files no commit references (batch 2's, written before its
        # progress, and its replays' for the tables already holding it): never committed.
        path = wh.topic_path("counts-out")
        committed = {
            uri.removeprefix("file://").removeprefix(path + "/")
            for uri in delta_commits.open_table(path).file_uris()
        }
        written = _parquet_files(path)
        assert committed < written
    finally:
        shutil.rmtree(executor_state_dir(wh.root), ignore_errors=True)


def test_a_sink_append_racing_the_batch_commit_is_renumbered(spark, tmp_path):
    """A producer's append commits between the batch's plan (its ends read) and its
    commit, as a writer on another machine can on a bucket: the executors' files are
    written again, numbered on from the new ends, and the topic stays dense and exact."""
    records = events(40, seed=29)
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "r"),
        until_caught_up=True,
        say=lambda _: None,
    )
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    extra = {"key": "racer", "value": 1, "timestamp": 5, "partition": 0}
    raced = []

    def race(batch: int) -> None:
        if not raced:  # the append lock is this thread's: the producer's append goes in
            raced.append(io_topics.topic(wh, "counts-out").append([extra]))

    try:
        with faults.hook("after_progress", race):
            run_app(
                str(_app_on_executors(tmp_path)),
                warehouse=wh.root,
                state_dir=str(tmp_path / "s"),
                until_caught_up=True,
                transport="spark",
                say=lambda _: None,
            )
        got, want = topic_rows(spark, wh, "counts-out"), topic_rows(spark, reference, "counts-out")
        assert raced and raced[0].ranges == {0: (0, 1)}
        for p in (0, 1):
            offsets = [r[1] for r in got if r[0] == p]
            assert offsets == list(range(len(offsets)))
        racer = [r for r in got if 'racer' in r[2]]
        assert [(r[0], r[1]) for r in racer] == [(0, 0)]
        # The batch's records, in their order, numbered after the racer's.
        assert [r[2:] for r in got if r not in racer] == [r[2:] for r in want]
        assert sorted(r[:2] for r in got if r not in racer) == sorted(
            (p, o + (p == 0)) for p, o, *_ in want
        )
    finally:
        shutil.rmtree(executor_state_dir(wh.root), ignore_errors=True)
