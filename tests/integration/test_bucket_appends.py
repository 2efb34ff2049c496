"""Appends to one log table from several processes (or machines) at once number dense,
unique offsets through Delta's conflict check alone (the topic's append txn,
``txn_ids.topic_append``), on a bucket of the tests' S3 server and on a local folder with
the local append lock switched off: every record lands once, offsets 0..end-1 per partition.
The engine's step-3 appends (per-task txns) racing a producer stay exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from lakestate.io import delta_commits, topics, txn_ids
from lakestate.io.logtable import appends
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

ROUNDS = 8  # appends per process (each ~1 s on the tests' server: a scan of the topic)
PARTITIONS = 2

# One writer process: waits for the shared start time, then appends ROUNDS times. Without
# the local lock (argv[5] == "nolock") only the txn keeps two local writers apart.
_WRITER = """
import contextlib, json, sys, time
import pyarrow as pa
from lakestate.io import topics
from lakestate.io.logtable import appends
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

root, topic, who, start, lock = sys.argv[1:6]
rounds = int(sys.argv[6])
if lock == "nolock":
    appends.append_lock = lambda *a: contextlib.nullcontext()
lost = [0]
back_off = appends.back_off
def counted(attempt):
    lost[0] += 1
    back_off(attempt)
appends.back_off = counted
wh = Warehouse(root)
t = topics.topic(wh, topic)
time.sleep(max(0.0, float(start) - time.time()))
for i in range(rounds):
    records = [{"key": f"{who}-{i}-{p}", "value": i, "partition": p} for p in range(2)]
    if who.startswith("batch"):
        def build(todo, ends, records=records):
            return pa.table({
                "partition": pa.array([0, 1], pa.int32()),
                "offset": pa.array([ends[0], ends[1]], pa.int64()),
                "timestamp": pa.array([0, 0], pa.int64()),
                "key": pa.array([json.dumps(r["key"]) for r in records]),
                "value": pa.array([json.dumps(r["value"]) for r in records]),
                "headers": pa.array([None, None], pa.string()),
            })
        t.append_batch("app", {TaskId(0, 0): i + 1}, build, {})
    else:
        t.append(records)
print("lost races:", lost[0])
"""


def _race(wh: Warehouse, topic: str, writers: list[str], lock: str) -> tuple[float, int]:
    """Run ``writers`` as processes appending at once; the seconds they took and the races
    they lost (each renumbered and retried)."""
    topics.topic(wh, topic).create(PARTITIONS)
    start = time.time() + 4.0  # after every interpreter has started
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, wh.root, topic, who, str(start), lock, str(ROUNDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in writers
    ]
    lost = 0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        lost += int(out.split("lost races:")[1])
    return time.time() - start, lost


def _check_dense_and_once(wh: Warehouse, topic: str, writers: list[str]) -> None:
    rows = pa.concat_tables(list(topics.topic(wh, topic).read_partitions()))
    by_partition: dict[int, list[int]] = {}
    keys = []
    for p, o, k in zip(
        rows.column("partition").to_pylist(),
        rows.column("offset").to_pylist(),
        rows.column("key").to_pylist(),
        strict=True,
    ):
        by_partition.setdefault(p, []).append(o)
        keys.append(json.loads(k))
    for p in range(PARTITIONS):
        assert sorted(by_partition[p]) == list(range(len(writers) * ROUNDS)), p
    expected = [f"{w}-{i}-{p}" for w in writers for i in range(ROUNDS) for p in range(2)]
    assert sorted(keys) == sorted(expected)
    assert topics.topic(wh, topic).end_offsets() == dict.fromkeys(
        range(PARTITIONS), len(writers) * ROUNDS
    )


def test_two_producers_on_a_bucket_number_dense_unique_offsets(s3_warehouse):
    writers = ["p1", "p2"]
    took, lost = _race(s3_warehouse, "raced", writers, "lock")
    _check_dense_and_once(s3_warehouse, "raced", writers)
    print(f"2 producers x {ROUNDS} appends on the bucket: {took:.1f} s, {lost} races lost")


def test_two_producers_on_a_folder_without_the_lock_number_dense_unique_offsets(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    writers = ["p1", "p2"]
    took, lost = _race(wh, "raced", writers, "nolock")
    _check_dense_and_once(wh, "raced", writers)
    print(f"2 producers x {ROUNDS} appends on a folder, no lock: {took:.1f} s, {lost} races lost")


def test_a_batch_append_racing_a_producer_on_a_bucket_lands_each_batch_once(s3_warehouse):
    writers = ["batch", "p1"]
    took, lost = _race(s3_warehouse, "sink", writers, "lock")
    _check_dense_and_once(s3_warehouse, "sink", writers)
    print(f"a batch writer and a producer x {ROUNDS} on the bucket: {took:.1f} s, {lost} lost")
    table = delta_commits.open_table(s3_warehouse.topic_path("sink"))
    assert delta_commits.txn_versions(table, "app", [TaskId(0, 0)]) == {TaskId(0, 0): ROUNDS}


@pytest.mark.parametrize("where", ["bucket", "folder"])
def test_an_append_numbered_from_a_stale_snapshot_renumbers(where, s3_warehouse, tmp_path):
    # The append's snapshot is taken before another append commits (as when two machines
    # race): its commit conflicts on the topic's append txn, and the retry renumbers.
    wh = s3_warehouse if where == "bucket" else Warehouse(tmp_path / "wh")
    topic = topics.topic(wh, "t")
    topic.create(1)
    topic.append([{"key": "a", "value": 0}])
    path = wh.topic_path("t")
    stale = [delta_commits.open_table(path)]
    opened = []

    def open_table(p: str):
        opened.append(p)
        return stale.pop() if stale else delta_commits.DeltaTable(p.removeprefix("file://"))

    topic.append([{"key": "b", "value": 1}])  # the racing append, committed first
    real = appends.delta_commits.open_table
    try:
        appends.delta_commits.open_table = open_table
        result = topic.append([{"key": "c", "value": 2}])
    finally:
        appends.delta_commits.open_table = real
    assert len(opened) == 2  # lost once, then renumbered
    assert result.ranges == {0: (2, 3)}
    rows = pa.concat_tables(list(topic.read_partitions()))
    pairs = sorted(
        zip(rows.column("offset").to_pylist(), rows.column("key").to_pylist(), strict=True)
    )
    assert pairs == [(0, '"a"'), (1, '"b"'), (2, '"c"')]
    table = delta_commits.open_table(path)
    assert table.transaction_version(txn_ids.topic_append("t")) == table.version()


@pytest.mark.parametrize("where", ["bucket", "folder"])
def test_an_append_raced_right_after_its_commit_keeps_its_own_version(
    where, s3_warehouse, tmp_path
):
    # Another producer (its own process, so no lock) commits just after this append's
    # commit: the append's version, and the end offsets it remembers for it, are its own
    # commit's, not the racer's, so that the next append numbers on after both.
    wh = s3_warehouse if where == "bucket" else Warehouse(tmp_path / "wh")
    topic = topics.topic(wh, "t")
    topic.create(1)
    topic.append([{"key": "a", "value": 0}])
    real = delta_commits.write_deltalake
    raced = []

    def write_then_race(*args, **kwargs):
        real(*args, **kwargs)
        if not raced:
            raced.append(1)
            topic.append([{"key": "racer", "value": 1}])

    try:
        delta_commits.write_deltalake = write_then_race
        first = topic.append([{"key": "b", "value": 2}])
    finally:
        delta_commits.write_deltalake = real
    second = topic.append([{"key": "c", "value": 3}])
    assert first.ranges == {0: (1, 2)}
    assert first.version == 2  # the racer's commit is version 3
    assert second.ranges == {0: (3, 4)}
    rows = pa.concat_tables(list(topic.read_partitions()))
    pairs = sorted(
        zip(rows.column("offset").to_pylist(), rows.column("key").to_pylist(), strict=True)
    )
    assert pairs == [(0, '"a"'), (1, '"b"'), (2, '"racer"'), (3, '"c"')]


def test_two_commits_carrying_one_txn_id_conflict_on_the_bucket(s3_warehouse):
    # What the design rests on: delta-rs fails the second of two commits from one snapshot
    # that carry the same txn app id (ConcurrentTransaction), and lets them both land when
    # the ids differ (blind appends).
    path = s3_warehouse.resolve("plain")
    delta_commits.create_table(path, pa.schema([("x", pa.int64())]), [], "plain", "test")
    first, second = delta_commits.open_table(path), delta_commits.open_table(path)
    delta_commits.append(first, pa.table({"x": [1]}), "", {}, {}, extra_txns={"a": 1})
    with pytest.raises(delta_commits.ConcurrentCommit):
        delta_commits.append(second, pa.table({"x": [2]}), "", {}, {}, extra_txns={"a": 1})
    third = delta_commits.open_table(path)
    fourth = delta_commits.open_table(path)
    delta_commits.append(third, pa.table({"x": [3]}), "", {}, {}, extra_txns={"a": 2})
    delta_commits.append(fourth, pa.table({"x": [4]}), "", {}, {}, extra_txns={"b": 1})
    xs = delta_commits.open_table(path).to_pyarrow_table().column("x").to_pylist()
    assert sorted(xs) == [1, 3, 4]


def test_a_commit_of_files_gets_its_own_version_whoever_commits_around_it(tmp_path):
    # delta-rs leaves the snapshot of a create_write_transaction where it was: the version
    # returned is the commit carrying the txns, not a blind append before or after it.
    path = str(tmp_path / "plain")
    delta_commits.create_table(path, pa.schema([("x", pa.int64())]), [], "plain", "test")

    def other(x: int) -> None:
        delta_commits.append(delta_commits.open_table(path), pa.table({"x": [x]}), "", {}, {})

    table = delta_commits.open_table(path)
    other(1)  # version 1, after the snapshot: the commit lands on it as version 2
    real = table.create_write_transaction

    def commit_then_race(*args, **kwargs):
        real(*args, **kwargs)
        other(2)  # version 3

    table.create_write_transaction = commit_then_race
    version = delta_commits.append_files(table, [], "", {}, {}, extra_txns={"a": 1})
    assert version == 2
    assert table.version() == 3
    assert delta_commits.open_table(path, 2).transaction_version("a") == 1
    assert delta_commits.open_table(path, 1).transaction_version("a") is None
