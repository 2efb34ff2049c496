"""Every table lakestate creates checkpoints its Delta log every 10 commits (Spark's default;
delta-rs's own is 100), so that opening one replays at most ~10 commit files, one request
each on an object store. A checkpoint keeps the txn actions the batches' fences rely on.
delta-rs only, no Spark."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction
from lakestate.io import delta_commits
from lakestate.io.logtable import create_topic
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

SCHEMA = pa.schema([("x", pa.int64())])
INTERVAL = {"delta.checkpointInterval": "10"}


def _configuration(path: Path) -> dict[str, str]:
    return dict(DeltaTable(str(path)).metadata().configuration)


def _checkpoints(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path / "_delta_log") if n.endswith(".checkpoint.parquet"))


def test_each_way_of_creating_a_table_sets_the_checkpoint_interval(tmp_path):
    delta_commits.create_table(str(tmp_path / "made"), SCHEMA, [], "made", "a table")
    delta_commits.append(str(tmp_path / "appended"), pa.table({"x": [1]}), "app", {}, {})
    files = tmp_path / "from_files"
    files.mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), files / "part-0.parquet")
    add = AddAction(
        "part-0.parquet", (files / "part-0.parquet").stat().st_size, {}, int(time.time() * 1000),
        True, None,
    )
    delta_commits.create_with_files(str(files), SCHEMA, [add], [], "app", {TaskId(0, 0): 1}, {})
    path = create_topic(Warehouse(tmp_path / "wh"), "clicks", 3)

    for made in ("made", "appended", "from_files"):
        assert _configuration(tmp_path / made) == INTERVAL, made
    topic = _configuration(Path(path.removeprefix("file://")))
    assert topic["delta.checkpointInterval"] == "10"
    assert "3" in topic.values()  # the topic's own property (its partitions) is kept


def test_a_checkpoint_every_ten_commits_keeps_the_rows_and_the_txns(tmp_path):
    path = str(tmp_path / "t")
    for batch in range(1, 13):
        delta_commits.append(
            path, pa.table({"x": [batch]}), "app", {TaskId(0, 0): batch, TaskId(0, 1): 100 + batch},
            {"batch": batch},
        )

    assert _checkpoints(tmp_path / "t") == ["00000000000000000009.checkpoint.parquet"]
    reopened = DeltaTable(path)
    assert sorted(reopened.to_pyarrow_table()["x"].to_pylist()) == list(range(1, 13))
    assert delta_commits.txn_versions(reopened, "app", [TaskId(0, 0), TaskId(0, 1)]) == {
        TaskId(0, 0): 12,
        TaskId(0, 1): 112,
    }


def test_appending_to_an_existing_table_leaves_its_properties_alone(tmp_path):
    path = str(tmp_path / "older")
    DeltaTable.create(path, SCHEMA, configuration={"delta.checkpointInterval": "100"})
    for batch in range(1, 13):
        delta_commits.append(path, pa.table({"x": [batch]}), "app", {TaskId(0, 0): batch}, {})

    assert _configuration(tmp_path / "older") == {"delta.checkpointInterval": "100"}
    assert _checkpoints(tmp_path / "older") == []
