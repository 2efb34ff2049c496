"""Tasks stay on the executor that holds their state (runtime/spark_located.py), on a real
standalone cluster of two workers (``spark_cluster.py``), each with its own state
directory: across the batches of a run with no worker lost, each task's store is on one
worker only (a task that had moved would have restored or caught up a store on the other);
a task whose worker is lost moves to the other and restores there. The results equal the
in-process run's.

The placement is what the first check tests: with no preferred location given
(``located_tasks``), the same run left both tasks' stores on both workers (2026-11-29)."""

from __future__ import annotations

import pytest
from cluster_runs import (
    answers,
    batches_of,
    counts_reference,
    driver_run,
    executor_lost,
    log_sizes,
    moved_tasks,
    ok,
    stores,
)
from engine_helpers import events, produce
from spark_cluster import StandaloneCluster

pytestmark = pytest.mark.integration

MAX_RECORDS = 10  # 8 batches or more per run
TASKS = ("counts/0_0", "counts/0_1")


def _holders(cluster: StandaloneCluster) -> dict[str, list[str]]:
    """Per task, the workers whose state directory holds a store of it."""
    held = {w.name: set(stores(w.state_dir)) for w in cluster.workers}
    return {t: sorted(n for n, found in held.items() if t in found) for t in TASKS}


def test_tasks_stay_with_their_stores_and_a_moved_task_restores(
    standalone_cluster, s3_warehouse, tmp_path, capsys
):
    cluster = standalone_cluster
    records = events(240, seed=53)
    phases = [records[:160], records[160:]]
    reference = counts_reference(tmp_path, phases, MAX_RECORDS)
    driver_state = tmp_path / "driver-state"

    produce(None, s3_warehouse, "events", phases[0], partitions=2)
    first = driver_run(cluster, s3_warehouse, driver_state, MAX_RECORDS)
    out = ok(first)
    assert "state: on Spark's executors" in out, out
    assert batches_of(out) >= 8, out
    # Each task ran all its batches on one executor: its store is on one worker only; but
    # a task the placement moved to balance the tasks over a late executor left one behind.
    holders, moved = _holders(cluster), {f"counts/{t}" for t in moved_tasks(first)}
    assert all(len(h) == 1 for t, h in holders.items() if t not in moved), (holders, moved)
    assert len(moved) <= 1, moved
    # And the two tasks ran on the two workers, one each (balanced).
    latest = {t: h[0] for t, h in holders.items() if t not in moved}
    assert len(set(latest.values())) == len(latest), holders

    # The worker of a task lost: the task moves to the other worker and restores there.
    task = next(t for t in TASKS if t not in moved)
    lost = next(w for w in cluster.workers if w.name == holders[task][0])
    kept = next(w for w in cluster.workers if w is not lost)
    cluster.stop_worker(lost)
    try:
        produce(None, s3_warehouse, "events", phases[1], partitions=2)
        ok(driver_run(cluster, s3_warehouse, driver_state, MAX_RECORDS))
        assert set(TASKS) <= set(stores(kept.state_dir))
    finally:
        cluster.start_worker(lost)
    assert answers(capsys, s3_warehouse.root) == answers(capsys, reference.root)
    assert stores(driver_state) == []


def test_an_executor_lost_during_the_write_job_never_double_applies(
    standalone_cluster, s3_warehouse, tmp_path, capsys
):
    """The executor writing a task's files is SIGKILLed once they are written, before it
    hands them back (fault ``in_write`` at batch 2): its cached output is lost with it, so
    Spark retries the write, recomputing the task's output on an executor (the task
    processes its batch again from the committed batch: its progress is not recorded yet),
    which writes new files; only the attempt that reported its files is committed."""
    records = events(80, seed=59)
    reference = counts_reference(tmp_path, [records], MAX_RECORDS)
    produce(None, s3_warehouse, "events", records, partitions=2)
    driver_state = tmp_path / "driver-state"
    logs = log_sizes(standalone_cluster)
    proc = driver_run(
        standalone_cluster, s3_warehouse, driver_state, MAX_RECORDS, executor_fault="in_write@2"
    )
    ok(proc)
    assert (driver_state / "executor-killed").exists()
    assert executor_lost(standalone_cluster, logs)
    assert answers(capsys, s3_warehouse.root) == answers(capsys, reference.root)
