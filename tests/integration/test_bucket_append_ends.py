"""An append to a log table on a bucket numbers its records from the end offsets recorded
in the commit files of its snapshot's version, not from a scan of every data file (which
reads each file over the network, and a topic gains files every run); a commit by another
writer that changed data without recording them falls back to the scan, and the offsets
stay dense either way."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from lakestate.io import delta_commits, topics
from lakestate.io.logtable import appends, ends
from lakestate.io.topic_records import RECORD_SCHEMA
from lakestate.task_id import TaskId

pytestmark = pytest.mark.integration


def _offsets(path: str) -> dict[int, list[int]]:
    rows = delta_commits.open_table(path).to_pyarrow_table(columns=["partition", "offset"])
    out: dict[int, list[int]] = {}
    for p, o in zip(
        rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True
    ):
        out.setdefault(p, []).append(o)
    return {p: sorted(v) for p, v in sorted(out.items())}


def _batch_rows(n: int):
    def build(todo: dict[TaskId, int], at: dict[int, int]) -> pa.Table:
        return pa.table(
            {
                "partition": pa.array([i % 2 for i in range(n)], pa.int32()),
                "offset": pa.array([at[i % 2] + i // 2 for i in range(n)], pa.int64()),
                "timestamp": pa.array([0] * n, pa.int64()),
                "key": pa.array([json.dumps(f"b{i}") for i in range(n)]),
                "value": pa.array([json.dumps(i) for i in range(n)]),
                "headers": pa.array([None] * n, pa.string()),
            }
        )

    return build


def _foreign_row(offset: int) -> pa.Table:
    return pa.table(
        {
            "partition": pa.array([0], pa.int32()),
            "offset": pa.array([offset], pa.int64()),
            "timestamp": pa.array([0], pa.int64()),
            "key": pa.array([json.dumps("f")]),
            "value": pa.array([json.dumps(0)]),
            "headers": pa.array([None], pa.string()),
        },
        schema=RECORD_SCHEMA,
    )


def test_appends_on_a_bucket_number_from_the_commit_files_not_a_scan(s3_warehouse, monkeypatch):
    topic = topics.topic(s3_warehouse, "ends")
    topic.create(2)
    scans: list[str] = []
    real_scan = ends.scan_end_offsets

    def counted(table, num_partitions):
        scans.append(table.table_uri)
        return real_scan(table, num_partitions)

    monkeypatch.setattr(ends, "scan_end_offsets", counted)
    for n in range(3):  # producers' appends
        topic.append([{"key": f"k{n}-{i}", "value": i, "partition": i % 2} for i in range(4)])
    for batch in (1, 2):  # a task's batches (step 3 of the commit protocol)
        appends.append_batch(
            s3_warehouse, "ends", topic.path, 2, "app", {TaskId(0, 0): batch}, _batch_rows(6), {}
        )
    assert scans == []
    assert _offsets(topic.path) == {0: list(range(12)), 1: list(range(12))}

    # Another writer's append that records no end offsets: the next append must scan.
    write_deltalake(topic.path, _foreign_row(12), mode="append")
    appends.append_batch(
        s3_warehouse, "ends", topic.path, 2, "app", {TaskId(0, 0): 3}, _batch_rows(2), {}
    )
    assert len(scans) == 1
    assert _offsets(topic.path) == {0: list(range(14)), 1: list(range(13))}
    assert topic.end_offsets() == {0: 14, 1: 13}


def test_a_table_s_existence_on_a_bucket_is_one_listing_not_an_open(s3_warehouse, monkeypatch):
    # Opening a table reads its checkpoint and newest commits (a dozen requests); a run's
    # start asks whether each of its tables exists.
    topic = topics.topic(s3_warehouse, "there")
    topic.create(3)
    progress_like = s3_warehouse.progress_path("app")
    delta_commits.create_table(progress_like, RECORD_SCHEMA, [], name="p", description="d")

    def no_open(*args, **kwargs):
        raise AssertionError("opened")

    with monkeypatch.context() as patched:
        patched.setattr(delta_commits, "DeltaTable", no_open)
        assert delta_commits.table_exists(topic.path)
        assert delta_commits.table_exists(progress_like)
        assert not delta_commits.table_exists(s3_warehouse.topic_path("absent"))
        assert topic.exists() and not topics.topic(s3_warehouse, "absent").exists()
    assert topics.topic(s3_warehouse, "there").partitions() == 3
    with pytest.raises(ValueError, match="does not exist"):
        topics.topic(s3_warehouse, "absent").partitions()


def test_a_released_snapshot_on_a_bucket_is_reused_brought_up_to_date_and_never_shared(
    s3_warehouse,
):
    topic = topics.topic(s3_warehouse, "reused")
    topic.create(2)
    first = delta_commits.open_table(topic.path)
    other = delta_commits.open_table(topic.path)  # the first is held: a snapshot of its own
    assert other is not first
    delta_commits.release(first)
    write_deltalake(topic.path, _foreign_row(0), mode="append")  # another writer's commit
    again = delta_commits.open_table(topic.path)
    assert again is first and again.version() == other.version() + 1
    assert delta_commits.open_table(topic.path) is not again  # held until released again
    assert delta_commits.open_table(topic.path, version=0).version() == 0


def test_txn_versions_on_a_bucket_read_in_one_pass_equal_delta_rs_s_at_every_version(
    s3_warehouse,
):
    # delta-rs replays the log from the checkpoint at every transaction_version call; the
    # one-pass read (checkpoint + commits after it, kept per version) must say the same,
    # before and after the checkpoint (version 10) and read on from a kept version.
    from lakestate.io import txn_log

    path = s3_warehouse.topic_path("txns")
    tasks = [TaskId(0, p) for p in range(3)]
    data = pa.table({"x": [1]})
    for v in range(14):
        batches = {t: v + 1 for t in tasks if (v + t.partition) % 3 != 0}
        extra = {"other-app": v} if v % 4 == 0 else None
        delta_commits.append(path, data, "app", batches, {}, extra_txns=extra)
    ids = [delta_commits.txn_app_id("app", t) for t in tasks] + ["other-app", "never"]
    for v in [3, 9, 10, 11, 13, 12, 0]:
        table = delta_commits.open_table(path, version=v)
        expected = {i: table.transaction_version(i) or 0 for i in ids}
        assert {i: delta_commits.txn_version(table, i) for i in ids} == expected, v
        assert txn_log.txns_at(table) is not None
    latest = delta_commits.open_table(path)
    assert delta_commits.txn_versions(latest, "app", tasks) == {
        TaskId(0, 0): 14, TaskId(0, 1): 14, TaskId(0, 2): 13
    }  # fmt: skip
