"""The engine on real Spark + Delta: same results as the test driver, whatever the batch
boundaries, across repartitions, after losing or rolling back local state, and a clear error
that commits nothing on bad input."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from delta.tables import DeltaTable
from engine_helpers import (
    APPS,
    driver_outputs,
    events,
    local_state,
    produce,
    state_rows,
    topic_rows,
)
from lakestate.engine import batches
from lakestate.engine.runner import run_app
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
    # A batch whose state changes are all keys new to the table appends them; one whose
    # changes are all keys the table holds merges without an insert clause; a mix merges
    # with one. Each batch writes the table once.
    history = (
        DeltaTable.forPath(spark, warehouse.state_table_path("counts", "counts"))
        .history()
        .where("operation IN ('WRITE', 'MERGE')")
        .orderBy("version")
        .collect()
    )
    assert history[0]["operation"] == "WRITE"
    assert "MERGE" in {h["operation"] for h in history[1:]}
    assert [json.loads(h["userMetadata"])["batch_id"] for h in history] == result.batches


def _state_writes(spark, wh, store: str) -> list[str]:
    """How each batch wrote the state table: "append", "update" (a MERGE without an insert
    clause) or "merge"."""
    history = (
        DeltaTable.forPath(spark, wh.state_table_path("counts", store))
        .history()
        .where("operation IN ('WRITE', 'MERGE')")
        .orderBy("version")
        .collect()
    )
    return [
        "append"
        if h["operation"] == "WRITE"
        else "merge"
        if json.loads(h["operationParameters"]["notMatchedPredicates"])
        else "update"
        for h in history
    ]


def test_batch_boundaries_do_not_change_results(spark, tmp_path):
    from lakestate.warehouse import Warehouse

    # Enough keys that later batches bring new ones beside known ones.
    records = events(N, keys=40, seed=2)
    outcomes, writes = [], {}
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
        writes[name] = _state_writes(spark, wh, "counts")
    (one_batches, *one), (many_batches, *many) = outcomes
    assert one_batches == 1 and many_batches >= 10
    assert one == many
    # The same state, whichever way each batch wrote it.
    assert writes["one"] == ["append"]
    assert writes["many"][0] == "append" and {"update", "merge"} <= set(writes["many"])


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
        max_records=20,
        max_batches=max_batches,
        until_caught_up=max_batches is None,
        say=said.append,
    )
    return said


def test_local_state_behind_catches_up_and_lost_state_is_restored(spark, tmp_path):
    reference, wh = _reference_and_fresh(spark, tmp_path, seed=4)
    state = tmp_path / "state"
    _run(wh, state, max_records=20, max_batches=1, until_caught_up=False)
    shutil.copytree(state, tmp_path / "old-state")
    _run(wh, state, max_records=20, max_batches=2, until_caught_up=False)
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


def test_bad_json_in_a_log_table_names_the_record_and_commits_nothing(spark, warehouse, tmp_path):
    produce(spark, warehouse, "events", events(10, seed=6), partitions=1)
    path = warehouse.topic_path("events")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (0, 10, 5000, '\"k1\"', '{{not json', NULL)")
    with pytest.raises(StreamsException) as err:
        _run(warehouse, tmp_path / "state")
    message = str(err.value)
    assert "'events'" in message and "partition 0" in message and "offset 10" in message
    assert "committed nothing" in message
    log = batches.read_log(spark, warehouse.batches_path("counts"))
    assert log.last_commit is None
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


def test_the_batch_log_reads_the_same_from_its_commit_files_as_from_the_table(
    spark, warehouse, monkeypatch
):
    from lakestate.engine.plan import BatchPlan, TaskPlan
    from lakestate.errors import TaskMigratedException

    path = warehouse.batches_path("logged")
    batches.ensure_table(spark, path)

    def read():
        """The log from the commit files alone (no Spark session), checked against the
        log read from the table with Spark."""
        fast = batches.read_log(None, path)
        with monkeypatch.context() as m:
            m.setattr(batches.delta_log, "local_log", lambda _path: None)
            assert batches.read_log(spark, path) == fast
        return fast

    assert read() == batches.BatchLog(None, None, None)
    plan1 = BatchPlan(1, [TaskPlan(0, 0, {"events": (0, 5)}), TaskPlan(0, 1, {"events": (0, 2)})])
    batches.write_plan(spark, path, plan1, "run-a")
    log = read()
    assert log.last_commit is None and log.pending_run_id == "run-a"
    assert log.pending_plan.to_json() == plan1.to_json()
    commit1 = batches.CommitRecord(
        1, "run-a", 1_234, {"events": {0: 5, 1: 2}}, {"0_0": 99}, {"counts": 3}, {"records": 7}
    )
    batches.write_commit(spark, path, commit1)
    assert read() == batches.BatchLog(commit1, None, None)
    plan2 = BatchPlan(2, [TaskPlan(0, 0, {"events": (5, 9)})])
    batches.write_plan(spark, path, plan2, "run-b")
    # Another run planning the same batch is skipped by Delta (txn) and told so.
    with pytest.raises(TaskMigratedException):
        batches.write_plan(spark, path, plan2, "run-c")
    log = read()
    assert log.last_commit == commit1 and log.pending_run_id == "run-b"
    assert log.pending_plan.to_json() == plan2.to_json()
    # A row written without its metadata (another writer): the table is read instead.
    commit2 = batches.CommitRecord(2, "run-x", 5_678, {"events": {0: 9, 1: 2}})
    spark.createDataFrame(
        [(2, "commit", "run-x", 5_678, commit2.payload())], batches.SCHEMA
    ).write.format("delta").mode("append").save(path)
    assert batches.read_log(spark, path) == batches.BatchLog(commit2, None, None)
