"""A real Spark standalone cluster (``spark_cluster.py``: a master and two workers from
pyspark's own jars, each with its own work and state directories) running an app whose
warehouse is a bucket on the tests' S3 server. The executors own the tasks' stores
(runtime/executor_stores.py): the driver's state directory never holds one. The checks of
one machine hold here too: the run equals the in-process run on a local folder, with a
worker lost between runs (its tasks move to the other worker, which catches up or restores
from the changelogs) and back, that run losing an executor mid-batch (its task retried
elsewhere); a SIGKILL of the driver at the commit steps where executors change the rerun,
then a rerun, gives the uninterrupted result. Nothing is applied twice. An app whose
source is a Kafka topic has each task read its ranges on its executor (the driver reads
none), through driver kills too.

Tasks stay on the executor that holds their state (runtime/spark_located.py): across the
batches of a run with no worker lost, each task's store is on one worker only (a task that
had moved would have restored or caught up a store on the other). The placement is what
that check tests: with no preferred location given (``located_tasks``), the same run left
both tasks' stores on both workers (2026-11-29). An executor lost after writing a task's
files, before handing them back, never has them applied twice.

One cluster serves the module's tests (a cluster start is three JVMs); a test that stops a
worker starts it again."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

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
from engine_helpers import APPS, events, produce
from lakestate import run_app
from lakestate.io.kafka import KafkaCluster, KafkaReader, KafkaTopic
from lakestate.io.topic_records import records_of
from lakestate.runtime.executor_stores import executor_state_dir
from lakestate.warehouse import Warehouse
from spark_cluster import StandaloneCluster

pytestmark = pytest.mark.integration

MAX_RECORDS = 40
LOCALITY_MAX_RECORDS = 10  # 8 batches or more per run
TASKS = ("counts/0_0", "counts/0_1")


def _holders(cluster: StandaloneCluster, wh: Warehouse) -> dict[str, list[str]]:
    """Per task, the workers whose state directory holds a store of it for the warehouse
    ``wh`` (the module's earlier tests leave stores of their own warehouses)."""
    folder = Path(executor_state_dir(wh.root)).name
    held = {w.name: set(stores(w.state_dir / folder)) for w in cluster.workers}
    return {t: sorted(n for n, found in held.items() if t in found) for t in TASKS}


def test_tasks_stay_with_their_stores(standalone_cluster, s3_warehouse, tmp_path, capsys):
    """A run of 8 batches or more on the two workers, none lost: each task ran all its
    batches on one executor, so its store is on one worker only, and the two tasks ran on
    the two workers. (A task whose worker is lost moving to the other and restoring there:
    test_a_cluster_run_losing_a_worker_then_an_executor_equals_the_in_process_run.)"""
    cluster = standalone_cluster
    records = events(160, seed=53)
    reference = counts_reference(tmp_path, [records], LOCALITY_MAX_RECORDS)
    driver_state = tmp_path / "driver-state"

    produce(None, s3_warehouse, "events", records, partitions=2)
    first = driver_run(cluster, s3_warehouse, driver_state, LOCALITY_MAX_RECORDS)
    out = ok(first)
    assert "state: on Spark's executors" in out, out
    assert batches_of(out) >= 8, out
    # Each task ran all its batches on one executor: its store is on one worker only; but
    # a task the placement moved to balance the tasks over a late executor left one behind.
    holders = _holders(cluster, s3_warehouse)
    moved = {f"counts/{t}" for t in moved_tasks(first)}
    assert all(len(h) == 1 for t, h in holders.items() if t not in moved), (holders, moved)
    assert len(moved) <= 1, moved
    # And the two tasks ran on the two workers, one each (balanced).
    latest = {t: h[0] for t, h in holders.items() if t not in moved}
    assert len(set(latest.values())) == len(latest), holders
    assert answers(capsys, s3_warehouse.root) == answers(capsys, reference.root)
    assert stores(driver_state) == []


def test_a_cluster_run_losing_a_worker_then_an_executor_equals_the_in_process_run(
    standalone_cluster, s3_warehouse, tmp_path, capsys
):
    cluster = standalone_cluster
    phases = [events(120, seed=41)[i : i + 40] for i in (0, 40, 80)]
    reference = counts_reference(tmp_path, phases, MAX_RECORDS)
    driver_state = tmp_path / "driver-state"
    first, second = cluster.workers
    for n, records in enumerate(phases):
        produce(None, s3_warehouse, "events", records, partitions=2)
        fault = None
        if n == 1:  # a worker lost: its tasks move to the other one
            cluster.stop_worker(first)
        if n == 2:  # and back, onto a store left behind, losing an executor mid-batch
            cluster.start_worker(first)
            logs = log_sizes(cluster)
            fault = "in_task"
        proc = driver_run(cluster, s3_warehouse, driver_state, MAX_RECORDS, executor_fault=fault)
        out = ok(proc)
        assert "state: on Spark's executors" in out, out
        if n == 1:  # every task ran on the worker left while the other was down
            assert {"counts/0_0", "counts/0_1"} <= set(stores(second.state_dir))
    # The executor lost: its JVM SIGKILLed once as the first task started processing
    # (fault in_task); Spark retried the task on another executor, which brought the store
    # up from the committed batch again.
    assert (driver_state / "executor-killed").exists()
    assert executor_lost(cluster, logs)
    assert answers(capsys, s3_warehouse.root) == answers(capsys, reference.root)
    assert stores(driver_state) == []  # the driver never opened a store


# The driver's commit steps whose rerun differs with the stores on executors: a replay over
# a store that staged the batch, and the late step 4 (the other points are the driver's own
# code, killed at on every transport in test_exactly_once).
FAULT_POINTS = ["after_progress@2", "after_tables@3"]


def test_driver_killed_at_each_commit_step_then_rerun_equals_the_uninterrupted_run(
    standalone_cluster, s3_warehouse, tmp_path, capsys
):
    records = events(160, seed=43)
    reference = counts_reference(tmp_path, [records], MAX_RECORDS)
    produce(None, s3_warehouse, "events", records, partitions=2)
    driver_state = tmp_path / "driver-state"
    for fault in FAULT_POINTS:
        proc = driver_run(standalone_cluster, s3_warehouse, driver_state, MAX_RECORDS, fault=fault)
        assert proc.returncode == -9, (fault, proc.stdout[-2000:], proc.stderr[-3000:])
    ok(driver_run(standalone_cluster, s3_warehouse, driver_state, MAX_RECORDS))
    assert answers(capsys, s3_warehouse.root) == answers(capsys, reference.root)


# Appended to the cluster run's copy of kafka_counts.py (loaded by the driver and by each
# executor's Python worker before it reads): each read of the input topic's ranges notes
# where it ran (the worker's state directory, which its executors inherit; the driver has
# none) and how many records it read.
READ_NOTES = """
import json as _json
import lakestate.io.kafka.reads as _reads
_read = _reads.KafkaReader.read_range
def _noted(self, ranges):
    rows = _read(self, ranges)
    if self.topic == INPUT:
        where = os.environ.get("LAKESTATE_STATE_DIR", "driver")
        with open(os.path.join({notes!r}, str(os.getpid())), "a") as out:
            out.write(_json.dumps([where, rows.num_rows]) + "\\n")
    return rows
if not hasattr(_read, "noted"):
    _noted.noted = True
    _reads.KafkaReader.read_range = _noted
"""


def _kafka_app(folder: Path, app_id: str, bootstrap: str, source: str, notes: Path | None) -> Path:
    """kafka_counts.py with its id (app, sink topics), broker and input topic written in
    (executors do not see this process's environment); with ``notes``: its reads noted."""
    text = (APPS / "kafka_counts.py").read_text()
    text = text.replace('os.environ["KAFKA_TEST_ID"]', repr(app_id))
    text = text.replace('os.environ["KAFKA_TEST_BOOTSTRAP"]', repr(bootstrap))
    text = text.replace('f"events-{ID}"', repr(source))
    if notes is not None:
        text += READ_NOTES.format(notes=str(notes))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kafka_counts.py"
    path.write_text(text)
    return path


def _sinks(cluster: KafkaCluster, app_id: str) -> list[list[tuple]]:
    """The app's sinks as a read_committed consumer sees them: (partition, key, value,
    timestamp) in partition and offset order."""
    found = []
    for topic in (f"counts-out-{app_id}", f"sums-out-{app_id}"):
        tables = KafkaTopic(cluster, topic).read_partitions()
        found.append(
            [(r.partition, r.key, r.value, r.timestamp) for t in tables for r in records_of(t)]
        )
    return found


def _notes(folder: Path) -> list[list]:
    """The reads noted in ``folder``: [where, records] each."""
    return [json.loads(line) for f in folder.iterdir() for line in f.read_text().splitlines()]


KAFKA_RECORDS = 15  # 4 or more batches per task


def test_a_kafka_input_read_on_the_executors_through_driver_kills_equals_the_in_process_run(
    standalone_cluster, kafka_broker, s3_warehouse, tmp_path
):
    """Each task reads its Kafka ranges on its executor, with the executor's own consumer
    (runtime/spark_located.py; the driver reads none); the driver, SIGKILLed after a
    progress commit and then after one of the two Kafka sinks' transactions, and rerun,
    leaves the sinks equal to an in-process run's, every record once."""
    test_id = uuid.uuid4().hex[:8]
    bootstrap = kafka_broker.bootstrap_servers
    kafka = KafkaCluster.from_config({"bootstrap.servers": bootstrap})
    source = KafkaTopic(kafka, f"events-{test_id}")
    source.create(2)
    source.append(events(120, seed=47))
    ref_notes = tmp_path / "ref-notes"
    ref_notes.mkdir()
    reference = _kafka_app(
        tmp_path / "ref-app", f"ref-{test_id}", bootstrap, source.name, ref_notes
    )
    unnoted = KafkaReader.read_range
    try:
        run_app(
            str(reference),
            warehouse=str(tmp_path / "ref-wh"),
            state_dir=str(tmp_path / "ref-state"),
            max_records=KAFKA_RECORDS,
            until_caught_up=True,
            transport="inprocess",
            say=lambda _: None,
        )
    finally:
        KafkaReader.read_range = unnoted  # the notes are the reference app's only
    # The notes tell the driver from an executor: the in-process run's reads are the driver's.
    assert {where for where, _ in _notes(ref_notes)} == {"driver"}
    notes = tmp_path / "read-notes"
    notes.mkdir()
    app = _kafka_app(tmp_path / "app", test_id, bootstrap, source.name, notes)
    driver_state = tmp_path / "driver-state"
    for fault in ("after_progress@2", f"after_sink:counts-out-{test_id}@3", None):
        proc = driver_run(
            standalone_cluster, s3_warehouse, driver_state, KAFKA_RECORDS, app=app, fault=fault
        )
        if fault:
            assert proc.returncode == -9, (fault, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "state: on Spark's executors" in ok(proc)
    assert _sinks(kafka, test_id) == _sinks(kafka, f"ref-{test_id}")
    reads = _notes(notes)
    workers = {str(w.state_dir) for w in standalone_cluster.workers}
    assert reads and {where for where, _ in reads} <= workers, reads
    assert sum(rows for _, rows in reads) >= 120
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
    reference = counts_reference(tmp_path, [records], LOCALITY_MAX_RECORDS)
    produce(None, s3_warehouse, "events", records, partitions=2)
    driver_state = tmp_path / "driver-state"
    logs = log_sizes(standalone_cluster)
    proc = driver_run(
        standalone_cluster,
        s3_warehouse,
        driver_state,
        LOCALITY_MAX_RECORDS,
        executor_fault="in_write@2",
    )
    ok(proc)
    assert (driver_state / "executor-killed").exists()
    assert executor_lost(standalone_cluster, logs)
    assert answers(capsys, s3_warehouse.root) == answers(capsys, reference.root)
