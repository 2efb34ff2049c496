"""Tasks stay on the executor that holds their state (runtime/spark_located.py), on a real
standalone cluster of two workers (``spark_cluster.py``), each with its own state
directory: across the batches of a run with no worker lost, each task's store is on one
worker only (a task that had moved would have restored or caught up a store on the other);
a task whose worker is lost moves to the other and restores there. The results equal the
in-process run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import APPS, FAST_TEST_CONF, events, produce
from lakestate import run_app
from lakestate.warehouse import Warehouse
from spark_cluster import StandaloneCluster
from test_spark_cluster import _answers, _ok, _stores

pytestmark = pytest.mark.integration

MAX_RECORDS = 10  # 8 batches or more per run
TASKS = ("counts/0_0", "counts/0_1")


@pytest.fixture(scope="module")
def two_workers(s3_server, tmp_path_factory):
    running = StandaloneCluster(tmp_path_factory.mktemp("locality-cluster"), s3_server.env())
    try:
        running.start(workers=2)
        yield running
    finally:
        running.stop()


def _run(
    cluster: StandaloneCluster, wh: Warehouse, state: Path, executor_fault: str | None = None
) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    conf = {**FAST_TEST_CONF, "spark.driver.host": "127.0.0.1"}
    conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf["spark.executor.memory"] = "768m"
    if executor_fault:
        conf["spark.executorEnv.LAKESTATE_FAULT"] = executor_fault
        conf["spark.executorEnv.LAKESTATE_FAULT_ONCE"] = str(state / "executor-killed")
        state.mkdir(parents=True, exist_ok=True)
    env["LAKESTATE_SPARK_CONF"] = json.dumps(conf)
    env["PYTHONUNBUFFERED"] = "1"
    code = (
        "from lakestate import run_app; "
        f"r = run_app({str(APPS / 'counts.py')!r}, warehouse={wh.root!r}, "
        f"state_dir={str(state)!r}, max_records={MAX_RECORDS}, until_caught_up=True, "
        f"master={cluster.url!r}, transport='spark'); print('batches', len(r.batches))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900
    )
    return _ok(proc)


def _reference(tmp_path: Path, phases: list[list[dict]]) -> Warehouse:
    reference = Warehouse(tmp_path / "reference")
    for phase in phases:
        produce(None, reference, "events", phase, partitions=2)
        run_app(
            str(APPS / "counts.py"),
            warehouse=reference.root,
            state_dir=str(tmp_path / "ref-state"),
            max_records=MAX_RECORDS,
            until_caught_up=True,
            transport="inprocess",
            say=lambda _: None,
        )
    return reference


def _holders(cluster: StandaloneCluster) -> dict[str, list[str]]:
    """Per task, the workers whose state directory holds a store of it."""
    held = {w.name: set(_stores(w.state_dir)) for w in cluster.workers}
    return {t: sorted(n for n, stores in held.items() if t in stores) for t in TASKS}


def test_tasks_stay_with_their_stores_and_a_moved_task_restores(
    two_workers, s3_warehouse, tmp_path, capsys
):
    records = events(240, seed=53)
    phases = [records[:160], records[160:]]
    reference = _reference(tmp_path, phases)
    driver_state = tmp_path / "driver-state"

    produce(None, s3_warehouse, "events", phases[0], partitions=2)
    out = _run(two_workers, s3_warehouse, driver_state)
    assert "state: on Spark's executors" in out, out
    batches = int(out.rsplit("batches", 1)[1].split()[0])
    assert batches >= 8, out
    # Each task ran all its batches on one executor: its store is on one worker only.
    holders = _holders(two_workers)
    assert all(len(h) == 1 for h in holders.values()), holders

    # The worker of task 0_0 lost: the task moves to the other worker and restores there.
    lost = next(w for w in two_workers.workers if w.name == holders["counts/0_0"][0])
    kept = next(w for w in two_workers.workers if w is not lost)
    two_workers.stop_worker(lost)
    try:
        produce(None, s3_warehouse, "events", phases[1], partitions=2)
        _run(two_workers, s3_warehouse, driver_state)
        assert set(TASKS) <= set(_stores(kept.state_dir))
    finally:
        two_workers.start_worker(lost)
    assert _answers(capsys, s3_warehouse.root) == _answers(capsys, reference.root)
    assert _stores(driver_state) == []


def test_an_executor_lost_during_the_write_job_never_double_applies(
    two_workers, s3_warehouse, tmp_path, capsys
):
    """The executor writing a task's files is SIGKILLed once they are written, before it
    hands them back (fault ``in_write`` at batch 2): its cached output is lost with it, so
    Spark retries the write, recomputing the task's output on an executor (the task
    processes its batch again from the committed batch: its progress is not recorded yet),
    which writes new files; only the attempt that reported its files is committed."""
    records = events(80, seed=59)
    reference = _reference(tmp_path, [records])
    produce(None, s3_warehouse, "events", records, partitions=2)
    driver_state = tmp_path / "driver-state"
    logs = {w.name: w.log.stat().st_size for w in two_workers.workers}
    _run(two_workers, s3_warehouse, driver_state, executor_fault="in_write@2")
    assert (driver_state / "executor-killed").exists()
    lost = "".join(
        w.log.read_bytes()[logs[w.name] :].decode(errors="replace") for w in two_workers.workers
    )
    assert "Command exited with code 137" in lost
    assert _answers(capsys, s3_warehouse.root) == _answers(capsys, reference.root)
