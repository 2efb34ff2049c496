"""A real Spark standalone cluster (``spark_cluster.py``: a master and two workers from
pyspark's own jars, each with its own work and state directories) running an app whose
warehouse is a bucket on the tests' S3 server. The executors own the tasks' stores
(runtime/executor_stores.py): the driver's state directory never holds one. The checks of
one machine hold here too: the run equals the in-process run on a local folder, with a
worker lost between runs (its tasks move to the other worker, which catches up or restores
from the changelogs) and back, that run losing an executor mid-batch (its task retried
elsewhere); a SIGKILL of the driver at the commit steps where executors change the rerun,
then a rerun, gives the uninterrupted result. Nothing is applied twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import APPS, FAST_TEST_CONF, events, produce
from lakestate import run_app
from lakestate.cli import main
from lakestate.warehouse import Warehouse
from spark_cluster import StandaloneCluster

pytestmark = pytest.mark.integration

MAX_RECORDS = 40
QUERIES = (
    "SELECT key, value FROM counts__counts ORDER BY key",
    "SELECT key, value FROM counts__sums ORDER BY key",
    "SELECT partition, offset, key, value FROM counts_out ORDER BY partition, offset",
    "SELECT partition, offset, key, value FROM sums_out ORDER BY partition, offset",
)


@pytest.fixture(scope="module")
def cluster(s3_server, tmp_path_factory):
    running = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), s3_server.env())
    try:
        running.start(workers=2)
        yield running
    finally:
        running.stop()


def _driver(
    cluster: StandaloneCluster,
    wh: Warehouse,
    state: Path,
    fault: str | None = None,
    executor_fault: str | None = None,
) -> subprocess.CompletedProcess:
    """One run of counts.py on the cluster, its driver in a process of its own."""
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
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({str(APPS / 'counts.py')!r}, warehouse={wh.root!r}, "
        f"state_dir={str(state)!r}, max_records={MAX_RECORDS}, until_caught_up=True, "
        f"master={cluster.url!r}, transport='spark')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def _reference(tmp_path: Path, phases: list[list[dict]]) -> Warehouse:
    wh = Warehouse(tmp_path / "reference")
    for records in phases:
        produce(None, wh, "events", records, partitions=2)
        run_app(
            str(APPS / "counts.py"),
            warehouse=wh.root,
            state_dir=str(tmp_path / "ref-state"),
            max_records=MAX_RECORDS,
            until_caught_up=True,
            transport="inprocess",
            say=lambda _: None,
        )
    return wh


def _answers(capsys, root: str) -> list[str]:
    answers = []
    for query in QUERIES:
        capsys.readouterr()
        assert main(["sql", query, "--warehouse", root]) == 0
        answers.append(capsys.readouterr().out)
    return answers


def _stores(root: Path) -> list[str]:
    """The task stores (``<app>/<task>``) under a state directory."""
    return sorted(f"{p.parents[2].name}/{p.parents[1].name}" for p in root.glob("**/db/CURRENT"))


def test_a_cluster_run_losing_a_worker_then_an_executor_equals_the_in_process_run(
    cluster, s3_warehouse, tmp_path, capsys
):
    phases = [events(120, seed=41)[i : i + 40] for i in (0, 40, 80)]
    reference = _reference(tmp_path, phases)
    driver_state = tmp_path / "driver-state"
    first, second = cluster.workers
    for n, records in enumerate(phases):
        produce(None, s3_warehouse, "events", records, partitions=2)
        fault = None
        if n == 1:  # a worker lost: its tasks move to the other one
            cluster.stop_worker(first)
        if n == 2:  # and back, onto a store left behind, losing an executor mid-batch
            cluster.start_worker(first)
            logs = {w.name: w.log.stat().st_size for w in cluster.workers}
            fault = "in_task"
        out = _ok(_driver(cluster, s3_warehouse, driver_state, executor_fault=fault))
        assert "state: on Spark's executors" in out, out
        if n == 1:  # every task ran on the worker left while the other was down
            assert {"counts/0_0", "counts/0_1"} <= set(_stores(second.state_dir))
    # The executor lost: its JVM SIGKILLed once as the first task started processing
    # (fault in_task); Spark retried the task on another executor, which brought the store
    # up from the committed batch again.
    assert (driver_state / "executor-killed").exists()
    lost = "".join(
        w.log.read_bytes()[logs[w.name] :].decode(errors="replace") for w in cluster.workers
    )
    assert "finished with state EXITED message Command exited with code 137" in lost
    assert _answers(capsys, s3_warehouse.root) == _answers(capsys, reference.root)
    assert _stores(driver_state) == []  # the driver never opened a store


# The driver's commit steps whose rerun differs with the stores on executors: a replay over
# a store that staged the batch, and the late step 4 (the other points are the driver's own
# code, killed at on every transport in test_exactly_once).
FAULT_POINTS = ["after_progress@2", "after_tables@3"]


def test_driver_killed_at_each_commit_step_then_rerun_equals_the_uninterrupted_run(
    cluster, s3_warehouse, tmp_path, capsys
):
    records = events(160, seed=43)
    reference = _reference(tmp_path, [records])
    produce(None, s3_warehouse, "events", records, partitions=2)
    driver_state = tmp_path / "driver-state"
    for fault in FAULT_POINTS:
        proc = _driver(cluster, s3_warehouse, driver_state, fault=fault)
        assert proc.returncode == -9, (fault, proc.stdout[-2000:], proc.stderr[-3000:])
    _ok(_driver(cluster, s3_warehouse, driver_state))
    assert _answers(capsys, s3_warehouse.root) == _answers(capsys, reference.root)
