"""The progress table's schema: a table written by an earlier lakestate (without the
``processor_metadata`` column) gains the column in place, and its old rows read as having
no processor metadata. delta-rs only, no Spark."""

from __future__ import annotations

import pyarrow as pa
from lakestate.checkpoint import progress
from lakestate.io import delta_commits
from lakestate.task_id import TaskId


def test_an_older_progress_table_gains_the_processor_metadata_column(tmp_path):
    path = str(tmp_path / "_progress")
    old_schema = pa.schema([f for f in progress.SCHEMA if f.name != "processor_metadata"])
    delta_commits.create_table(path, old_schema, [], name="old", description="older lakestate")
    old_row = progress.TaskProgress(TaskId(0, 0), 1, "run-1", 5, {"in": (0, 3)}, {"in": 3}, 7, 3)
    row = {k: v for k, v in old_row.row().items() if k != "processor_metadata"}
    table = delta_commits.open_table(path)
    delta_commits.append(
        table, pa.Table.from_pylist([row], schema=old_schema), "app", {TaskId(0, 0): 1}, {}
    )

    progress.ensure_table(path, "app")
    assert "processor_metadata" in delta_commits.open_table(path).schema().to_arrow().names
    new_row = progress.TaskProgress(
        TaskId(0, 0), 2, "run-2", 6, {"in": (3, 4)}, {"in": 4}, 9, 1, processor_metadata={"s.t": 9}
    )
    progress.record(path, "app", [new_row], {})
    rows = progress.read(path).rows[TaskId(0, 0)]
    assert [(r.batch_id, r.processor_metadata) for r in rows] == [(2, {"s.t": 9}), (1, {})]
    progress.ensure_table(path, "app")  # nothing left to add: no new commit
    assert delta_commits.open_table(path).version() == 3
