"""A task's staged transaction (checkpoint/task_dir.py): what ``stage`` writes, ``apply_staged``
commits into the store exactly (puts, deletes, the offsets and the batch marker), whether it
was staged as columns per namespace (now) or as a list of writes (before 2026-11-29)."""

from __future__ import annotations

import os
import pickle

from lakestate.checkpoint.task_dir import TaskDir, local_batch
from lakestate.state.base import IsolationLevel, TopicPartition

TP = TopicPartition("in", 0)


def _entries(store, namespace: str) -> dict[bytes, bytes]:
    return dict(store.iterate(namespace, None, None, False))


def _seeded(local: TaskDir):
    store = local.open(IsolationLevel.READ_COMMITTED)
    with store.new_transaction() as txn:
        txn.put("a", b"gone", b"old")
        txn.put("a", b"kept", b"old")
        txn.commit({TP: 3})
    return store


WRITES = [
    ("a", b"gone", None),  # a delete
    ("a", b"k1", b"v1"),
    ("a", b"k2", b""),
    ("b", b"x", b"y"),
]


def test_staged_writes_are_committed_exactly_with_offsets_and_batch(tmp_path) -> None:
    local = TaskDir(tmp_path, "app", "0_0")
    store = _seeded(local)
    columns = [("a", [b"gone", b"k1", b"k2"], [None, b"v1", b""]), ("b", [b"x"], [b"y"])]
    local.stage(7, columns, {TP: 10}, "run-1")
    assert local.staged_batches() == [7] and local.staged_run_id(7) == "run-1"
    local.apply_staged(store, 7)
    assert _entries(store, "a") == {b"kept": b"old", b"k1": b"v1", b"k2": b""}
    assert _entries(store, "b") == {b"x": b"y"}
    assert store.committed_offsets() == {TP: 10}
    assert local_batch(store) == 7
    assert local.staged_batches() == []
    store.close()


def test_a_batch_staged_as_a_list_of_writes_is_applied_the_same(tmp_path) -> None:
    local = TaskDir(tmp_path, "app", "0_0")
    store = _seeded(local)
    path = local.path / "staged" / "batch-7.pkl"
    os.makedirs(path.parent)
    old = {"batch_id": 7, "writes": WRITES, "offsets": {TP: 10}, "run_id": "run-1"}
    path.write_bytes(pickle.dumps(old, protocol=pickle.HIGHEST_PROTOCOL))
    assert local.staged_run_id(7) == "run-1"
    local.apply_staged(store, 7)
    assert _entries(store, "a") == {b"kept": b"old", b"k1": b"v1", b"k2": b""}
    assert _entries(store, "b") == {b"x": b"y"}
    assert store.committed_offsets() == {TP: 10} and local_batch(store) == 7
    store.close()
