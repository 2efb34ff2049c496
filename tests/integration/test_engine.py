"""The engine on real Spark + Delta: same results as the test driver, whatever the batch
boundaries, across repartitions, after losing or rolling back local state, and a clear error
that commits nothing on bad input."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from engine_helpers import (
    APPS,
    changelog_history,
    driver_outputs,
    events,
    local_state,
    produce,
    state_rows,
    topic_rows,
)
from lakestate import run_app
from lakestate.checkpoint.standing import app_pin
from lakestate.errors import StreamsException

pytestmark = pytest.mark.integration

N = 120


def _run(warehouse, state_dir, app="counts.py", **kwargs):
    kwargs.setdefault("until_caught_up", True)
    return run_app(
        str(APPS / app),
        warehouse=warehouse.root,
        state_dir=str(state_dir),
        say=lambda _: None,
        **kwargs,
    )


def _by_key(rows):
    seqs: dict = {}
    for key, value, ts in rows:
        seqs.setdefault(key, []).append((value, ts))
    return seqs


def test_engine_matches_driver(spark, warehouse, tmp_path):
    records = events(N)
    produce(spark, warehouse, "events", records, partitions=2)
    result = _run(warehouse, tmp_path / "state", max_records=25)
    assert result.caught_up and result.records == N and len(result.batches) > 2

    expected = driver_outputs("counts.py", records, 2, ["counts-out", "sums-out"])
    for topic in ("counts-out", "sums-out"):
        got = [(k, v, ts) for _, _, k, v, ts in topic_rows(spark, warehouse, topic)]
        assert _by_key(got) == _by_key(expected[topic])
    positive = [r for r in records if r["value"]["amount"] > 0]
    assert state_rows(spark, warehouse, "counts", "counts") == Counter(r["key"] for r in positive)
    sums: Counter = Counter()
    for r in positive:
        sums[r["key"]] += r["value"]["amount"]
    assert state_rows(spark, warehouse, "counts", "sums") == sums
    # The local stores hold what Delta holds.
    local = {}
    for task in ("0_0", "0_1"):
        local.update(
            local_state(tmp_path / "state", "counts", task, "counts", "timestamped_key_value")
        )
    assert local == state_rows(spark, warehouse, "counts", "counts")
    # Every batch appends its changed keys to the changelog, once, tagged with each task's
    # batch: no MERGE, and one row per changed key per task batch.
    history = [h for h in changelog_history(spark, warehouse, "counts", "counts")][1:]
    assert {h["operation"] for h in history} == {"WRITE"}
    tagged = [json.loads(h["userMetadata"])["batches"] for h in history]
    assert tagged == result.batches
    raw = spark.read.format("delta").load(warehouse.changelog_path("counts", "counts"))
    assert raw.groupBy("task", "batch_id", "raw_key").count().where("count > 1").count() == 0


def test_batch_boundaries_do_not_change_results(spark, tmp_path):
    from lakestate.warehouse import Warehouse

    # Enough keys that later batches bring new ones beside known ones.
    records = events(N, keys=40, seed=2)
    outcomes = []
    for name, max_records in (("one", 10_000), ("many", 6)):
        wh = Warehouse(tmp_path / name)
        produce(spark, wh, "events", records, partitions=2)
        result = _run(wh, tmp_path / f"state-{name}", max_records=max_records)
        outcomes.append(
            (
                len(result.batches),
                topic_rows(spark, wh, "counts-out"),
                topic_rows(spark, wh, "sums-out"),
                state_rows(spark, wh, "counts", "counts"),
                state_rows(spark, wh, "counts", "sums"),
            )
        )
        # Keys new and keys known alike, every batch only appends.
        operations = {h["operation"] for h in changelog_history(spark, wh, "counts", "counts")}
        assert operations == {"CREATE TABLE", "WRITE"}
    (one_batches, *one), (many_batches, *many) = outcomes
    assert one_batches == 1 and many_batches >= 10
    assert one == many


def test_a_spent_time_budget_starts_no_new_batch(spark, warehouse, tmp_path):
    # A budget of 0 s is spent once the first batch ends, however fast it was; the next
    # run goes on from there.
    produce(spark, warehouse, "events", events(N, keys=40, seed=3), partitions=2)
    first = _run(warehouse, tmp_path / "state", max_records=10, time_budget_s=0)
    assert len(first.batches) == 1 and not first.caught_up
    assert first.records == sum(1 for _ in first.batches[0]) * 10
    rest = _run(warehouse, tmp_path / "state", max_records=10)
    assert rest.caught_up and len(rest.batches) >= 2
    assert first.records + rest.records == N


def test_repartition_runs_as_a_second_subtopology(spark, warehouse, tmp_path):
    records = events(80, seed=3)
    produce(spark, warehouse, "events", records, partitions=2)
    _run(warehouse, tmp_path / "state", app="regroup.py", max_records=30)
    users = Counter(r["value"]["user"] for r in records)
    assert state_rows(spark, warehouse, "regroup", "per-user") == users
    last = {}
    for _, _, key, value, _ in topic_rows(spark, warehouse, "per-user-out"):
        last[key] = value
    assert last == users
    # Every record crossed the repartition topic exactly once.
    assert len(topic_rows(spark, warehouse, "regroup-per-user-repartition")) == len(records)


def _reference_and_fresh(spark, tmp_path, seed: int):
    """An uninterrupted run's warehouse, and a fresh warehouse with the same input."""
    from lakestate.warehouse import Warehouse

    records = events(N, seed=seed)
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    _run(reference, tmp_path / "state-ref", max_records=20)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    return reference, wh


def _rerun(wh, state, max_batches: int | None = None) -> list[str]:
    said: list[str] = []
    run_app(
        str(APPS / "counts.py"),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=10,
        max_batches=max_batches,
        until_caught_up=max_batches is None,
        say=said.append,
    )
    return said


def test_local_state_behind_catches_up_and_lost_state_is_restored(spark, tmp_path):
    reference, wh = _reference_and_fresh(spark, tmp_path, seed=4)
    state = tmp_path / "state"
    # 10 records per task batch: 6 batches per task, so that each rerun below has input
    # (a run that finds nothing new ends before it touches the local stores).
    _run(wh, state, max_records=10, max_batches=1, until_caught_up=False)
    shutil.copytree(state, tmp_path / "old-state")
    _run(wh, state, max_records=10, max_batches=2, until_caught_up=False)
    # An instance that was away for two batches comes back: it catches up from the CDF.
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "old-state", state)
    said = _rerun(wh, state, max_batches=1)
    assert any("caught up from batch 1 to 3" in line for line in said), said
    # The instance loses its disk between batches: the next batch restores from Delta.
    shutil.rmtree(state)
    said = _rerun(wh, state)
    assert any("restored" in line for line in said), said
    for topic in ("counts-out", "sums-out"):
        assert topic_rows(spark, wh, topic) == topic_rows(spark, reference, topic)
    assert state_rows(spark, wh, "counts", "sums") == state_rows(spark, reference, "counts", "sums")


# inprocess_max_records of each transport (runtime/inprocess.py): 0 is always Spark.
@pytest.mark.parametrize("inprocess_max_records", [0, 10**9], ids=["spark", "in_process"])
def test_bad_json_in_a_log_table_names_the_record_and_commits_nothing(
    spark, warehouse, tmp_path, inprocess_max_records
):
    produce(spark, warehouse, "events", events(10, seed=6), partitions=1)
    path = warehouse.topic_path("events")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (0, 10, 5000, '\"k1\"', '{{not json', NULL)")
    with pytest.raises(StreamsException) as err:
        _run(warehouse, tmp_path / "state", inprocess_max_records=inprocess_max_records)
    message = str(err.value)
    assert "'events'" in message and "partition 0" in message and "offset 10" in message
    assert "committed nothing" in message
    assert app_pin(warehouse, "counts").rows == {}
    assert topic_rows(spark, warehouse, "counts-out") == []
    assert state_rows(spark, warehouse, "counts", "counts") == {}


def test_log_table_without_key_column_is_rejected_by_name(spark, warehouse, tmp_path):
    path = warehouse.topic_path("events")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (partition INT, offset BIGINT, timestamp BIGINT, "
        "value STRING, headers STRING) USING delta TBLPROPERTIES ('lakestate.partitions' = '1')"
    )
    with pytest.raises(StreamsException, match=r"topic 'events'.*key"):
        _run(warehouse, tmp_path / "state")


def test_a_task_batch_is_committed_once_and_complete_when_its_tables_hold_it(warehouse):
    """The progress table fences a task's batch: a second run's rows for it are refused
    and nothing of theirs is written; a batch is complete only when every table it names
    holds its txn."""
    from lakestate.checkpoint import progress
    from lakestate.checkpoint.standing import is_complete
    from lakestate.errors import TaskMigratedException
    from lakestate.io import delta_commits
    from lakestate.task_id import TaskId

    path = warehouse.progress_path("fenced")
    progress.ensure_table(path, "fenced")
    other = warehouse.changelog_path("fenced", "store")
    from lakestate.checkpoint import changelog

    changelog.ensure_table(other, "store", "timestamped_key_value")
    t0, t1 = TaskId(0, 0), TaskId(0, 1)

    def row(task, batch, run):
        return progress.TaskProgress(
            task, batch, run, 1, {"events": (0, 5)}, {"events": 5}, 7, 5, (other,), {}
        )

    progress.record(path, "fenced", [row(t0, 1, "a"), row(t1, 1, "a")], {})
    with pytest.raises(TaskMigratedException, match="batch 1 of task 0_1"):
        progress.record(path, "fenced", [row(t1, 1, "b")], {})
    # Another task set commits beside it.
    progress.record(path, "fenced", [row(t0, 2, "c")], {})
    history = progress.read(path)
    assert [r.run_id for r in history.rows[t1]] == ["a"]
    assert [(r.batch_id, r.run_id) for r in history.rows[t0]] == [(2, "c"), (1, "a")]
    # Not complete until the changelog it names holds task 0_0's batch 2.
    assert not is_complete(warehouse, "fenced", history.last(t0))
    import pyarrow as pa

    table = delta_commits.open_table(other)
    delta_commits.append(
        table,
        pa.Table.from_pylist([], changelog.schema("timestamped_key_value")),
        "fenced",
        {t0: 2},
        {},
    )
    assert is_complete(warehouse, "fenced", history.last(t0))
    assert not is_complete(warehouse, "fenced", history.last(t1))


def test_a_run_that_finds_nothing_new_starts_no_jvm(spark, warehouse, tmp_path):
    """A scheduled run with no new input reads where its tasks stand and the topics' ends
    from the Delta logs (delta-rs), and ends without starting Spark."""
    import subprocess
    import sys

    produce(spark, warehouse, "events", events(20, seed=8), partitions=2)
    _run(warehouse, tmp_path / "state")
    code = (
        "import pyspark; from lakestate import run_app; "
        f"r = run_app({str(APPS / 'counts.py')!r}, warehouse={warehouse.root!r}, "
        f"state_dir={str(tmp_path / 'state')!r}, until_caught_up=True); "
        "print('CAUGHT_UP', r.caught_up, len(r.batches)); "
        "print('JVM', pyspark.SparkContext._active_spark_context is not None)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CAUGHT_UP True 0" in proc.stdout and "JVM False" in proc.stdout, proc.stdout
