"""The ownership fence (scaleout/ownership.py) on real delta-rs tables: a commit with no rows
can carry txns; two concurrent commits carrying the same txn app id cannot both land, whatever
their versions; a fence is idempotent; a run's progress commit planned at owner epoch e fails
once a fence moved the task to e+1, committing nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from lakestate.checkpoint import progress
from lakestate.checkpoint.progress import TaskProgress
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_commits
from lakestate.scaleout import ownership
from lakestate.scaleout.ownership import owner_epochs, owner_txn_id, owner_txns, write_fence
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = "shop"
T0, T1 = TaskId(0, 0), TaskId(0, 1)


@pytest.fixture
def path(tmp_path) -> str:
    path = Warehouse(tmp_path).progress_path(APP)
    progress.ensure_table(path, APP)
    return path


def _empty() -> pa.Table:
    return pa.Table.from_pylist([], schema=progress.SCHEMA)


def _row(task: TaskId, batch: int) -> TaskProgress:
    return TaskProgress(task, batch, "run-1", 1, {"events": (0, 5)}, {"events": 5}, 10, 5)


def test_a_commit_without_rows_carries_the_txns(path):
    before = DeltaTable(path).version()
    version = write_fence(path, APP, {T0: 3, T1: 1}, generation=3)
    table = DeltaTable(path)
    assert version == before + 1 == table.version()
    assert table.to_pyarrow_table().num_rows == 0
    assert owner_epochs(table, APP, [T0, T1, TaskId(1, 0)]) == {T0: 3, T1: 1, TaskId(1, 0): 0}


@pytest.mark.parametrize("second", [2, 1, 3])
def test_concurrent_commits_of_the_same_txn_cannot_both_land(path, second):
    """The second writer committed on the same snapshot as the first: delta-rs refuses it
    whether its version equals, is below or is above the winner's."""
    stale = delta_commits.open_table(path)
    winner = delta_commits.open_table(path)
    delta_commits.append(winner, _empty(), APP, {}, {}, {owner_txn_id(APP, T0): 2})
    with pytest.raises(TaskMigratedException, match="oncurrent"):
        delta_commits.append(stale, _empty(), APP, {}, {}, {owner_txn_id(APP, T0): second})
    assert owner_epochs(path, APP, [T0]) == {T0: 2}
    # A stale writer of other txns is not refused.
    delta_commits.append(stale, _empty(), APP, {}, {}, {owner_txn_id(APP, T1): 1})
    assert owner_epochs(path, APP, [T0, T1]) == {T0: 2, T1: 1}


def test_a_fence_is_idempotent_and_skips_tasks_at_or_past_its_epoch(path):
    assert owner_epochs(path, APP, [T0]) == {T0: 0}
    write_fence(path, APP, {T0: 2})
    version = DeltaTable(path).version()
    assert write_fence(path, APP, {T0: 2}) is None  # already in force: nothing written
    assert write_fence(path, APP, {T0: 1}) is None  # never back
    assert DeltaTable(path).version() == version
    write_fence(path, APP, {T0: 2, T1: 2})  # only T1 is written
    assert DeltaTable(path).version() == version + 1
    assert owner_epochs(path, APP, [T0, T1]) == {T0: 2, T1: 2}


def test_a_fence_retries_past_a_concurrent_commit_of_its_txns(path, monkeypatch):
    """The fence loses its first attempt to a commit of the same txn (another fence, or a
    batch's progress commit), re-reads and lands."""
    real = delta_commits.append
    raced = []

    def racing(table, data, app, batches, metadata, extra_txns=None):
        if not raced:  # another writer lands first, on the same snapshot
            raced.append(real(delta_commits.open_table(path), _empty(), APP, {}, {}, {owner_txn_id(APP, T0): 1}))
        return real(table, data, app, batches, metadata, extra_txns)

    monkeypatch.setattr(ownership.delta_commits, "append", racing)
    write_fence(path, APP, {T0: 2, T1: 2})
    assert raced and owner_epochs(path, APP, [T0, T1]) == {T0: 2, T1: 2}


def test_a_progress_commit_planned_at_epoch_e_fails_after_a_fence_to_e_plus_1(path):
    write_fence(path, APP, {T0: 1, T1: 1})
    planned = owner_epochs(path, APP, [T0, T1])
    # A run plans at epoch 1 and commits batch 1 of both tasks as it will: the owner txns as
    # fences (checked on the snapshot the commit is made on, and carried by the commit).
    progress.record(path, APP, [_row(T0, 1), _row(T1, 1)], {}, fences=owner_txns(APP, planned))
    # A rebalance moves T0 (epoch 2); the run's next commit, planned at epoch 1, fails.
    write_fence(path, APP, {T0: 2})
    version = DeltaTable(path).version()
    with pytest.raises(TaskMigratedException, match="lakestate-owner/shop/0_0"):
        progress.record(path, APP, [_row(T0, 2), _row(T1, 2)], {}, fences=owner_txns(APP, planned))
    assert DeltaTable(path).version() == version  # nothing committed
    assert delta_commits.txn_versions(DeltaTable(path), APP, [T0, T1]) == {T0: 1, T1: 1}


def test_a_fence_landing_while_a_run_commits_fails_the_run(path):
    """The race the snapshot check cannot see: the fence lands after the run read the table
    and before its commit. Epoch 0 (never fenced) included: the first fence."""
    planned = owner_epochs(path, APP, [T0])
    assert planned == {T0: 0}
    # Never fenced: a run's commit carries the owner txn at version 0, and lands.
    progress.record(path, APP, [_row(T1, 1)], {}, fences=owner_txns(APP, {T1: 0}))
    assert owner_epochs(path, APP, [T1]) == {T1: 0}
    assert delta_commits.txn_versions(DeltaTable(path), APP, [T1]) == {T1: 1}
    stale = delta_commits.open_table(path)  # the run's snapshot, checked: epoch 0
    write_fence(path, APP, {T0: 1})
    with pytest.raises(TaskMigratedException, match="oncurrent"):
        delta_commits.append(
            stale,
            pa.Table.from_pylist([_row(T0, 1).row()], schema=progress.SCHEMA),
            APP,
            {T0: 1},
            {},
            owner_txns(APP, planned),
        )
    assert owner_epochs(path, APP, [T0]) == {T0: 1}
    assert delta_commits.txn_versions(DeltaTable(path), APP, [T0]) == {T0: 0}
