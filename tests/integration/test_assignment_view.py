"""The Airflow plugin's data (``lakestate.read.assignment_view``) on a real warehouse: a
real in-process run of an app (delta-rs reads, RocksDB) commits every task's batches, then
generations and lag reports are written through their own modules (``assign.history``,
``engine.reports``) as the rebalance and the instance runs write them. The view must give
each task's active, warmups and standbys of the latest generation, each instance's lag
against the offsets committed now, a warmup's progress and the lag it started from, the
last committed batch, and the generations' history with the tasks that moved."""

from __future__ import annotations

import random

from engine_helpers import APPS, produce
from lakestate import run_app
from lakestate.assign import Assignment
from lakestate.assign import history as generations
from lakestate.checkpoint import progress
from lakestate.io.partitioner import partition_for
from lakestate.read.assignment_view import app_summary, assignment_view
from lakestate.scaleout import lag_reports
from lakestate.task_id import TaskId

PARTITIONS = 3
T0, T1, T2 = TaskId(0, 0), TaskId(0, 1), TaskId(0, 2)


def _instances(*names: str) -> list[dict]:
    return [{"name": n, "queue": f"q-{n}", "capacity": 1} for n in names]


def _report(instance: str, task: TaskId, generation: int, role: str, local: int | None, at_ms: int,
            committed: dict[TaskId, int], lag: int | None = None) -> lag_reports.Report:  # fmt: skip
    """A report as an instance run writes it: its store holds ``local`` records of the
    task's input (None: no store); ``lag``: the lag column (default: against
    ``committed``)."""
    return lag_reports.Report(
        instance=instance,
        task=task,
        generation=generation,
        role=role,
        local_batch=None if local is None else 1,
        local_offsets=None if local is None else {"events": local},
        committed_batch=1,
        lag=lag if lag is not None or local is None else committed[task] - local,
        capacity=1,
        at_ms=at_ms,
        run_id=f"run-{instance}-{at_ms}",
    )


def test_assignment_view_of_generations_reports_and_committed_batches(warehouse, tmp_path):
    rng = random.Random(17)
    records = [
        {"key": f"k{rng.randrange(40)}", "value": {"amount": rng.choice([1, 2, 5])},
         "timestamp": 1_000 + i} for i in range(600)
    ]  # fmt: skip
    produce(None, warehouse, "events", records, PARTITIONS)
    # Each task's committed offset once caught up: its partition's record count.
    committed = {
        TaskId(0, p): sum(1 for r in records if partition_for(r["key"], PARTITIONS) == p)
        for p in range(PARTITIONS)
    }
    assert min(committed.values()) > 20
    result = run_app(
        str(APPS / "counts.py"),
        warehouse=warehouse.root,
        state_dir=str(tmp_path / "state"),
        until_caught_up=True,
        max_records=60,
        say=lambda _: None,
    )
    assert result.caught_up
    history, _ = progress.read_all(warehouse, "counts")
    last = {t: rows[0] for t, rows in history.rows.items()}
    assert all(last[t].batch_id > 1 for t in (T0, T1, T2))

    # No generation yet: every task listed with its last batch, no owner.
    view = assignment_view(warehouse, "counts")
    assert view["generation"] is None and view["history"] == [] and view["instances"] == []
    assert [t["task"] for t in view["tasks"]] == ["0_0", "0_1", "0_2"]
    for t in view["tasks"]:
        task = TaskId.parse(t["task"])
        assert t["active"] is None and t["instances"] == []
        assert (t["last_batch"], t["last_commit_at_ms"]) == (last[task].batch_id, last[task].at_ms)
        assert t["committed_offsets"] == {"events": committed[task]} and t["input_lag"] == 0
    assert app_summary(warehouse, "counts")["generation"] is None

    # Generation 1: a and b; then a's store of 0_1 is 5 behind, b holds no store of 0_2.
    g1 = Assignment(active={T0: "a", T1: "a", T2: "b"}, standby={}, warmup={},
                    probing_rebalance_needed=False)  # fmt: skip
    assert generations.write_generation(
        warehouse, "counts", g1, _instances("a", "b"), "first", at_ms=10_000,
        lags={"a": {T0: None, T1: None, T2: None}, "b": {T0: None, T1: None, T2: None}},
    ) == 1  # fmt: skip
    lag_reports.write(
        warehouse,
        "counts",
        [
            # Its lag column is from an earlier time: the view computes the lag now.
            _report("a", T0, 1, "active", committed[T0], 11_000, committed, lag=999),
            _report("a", T1, 1, "active", committed[T1] - 5, 11_000, committed),
            _report("b", T2, 1, "active", None, 11_500, committed),
        ],
    )
    # Generation 2: c joins as 0_1's warmup (its store 7 records in when assigned), 0_2
    # moves to a, b becomes 0_0's standby.
    g2 = Assignment(active={T0: "a", T1: "a", T2: "a"}, standby={T0: frozenset({"b"})},
                    warmup={T1: frozenset({"c"})}, probing_rebalance_needed=True)  # fmt: skip
    lag_then = committed[T1] - 7
    generations.write_generation(
        warehouse, "counts", g2, _instances("a", "b", "c"), "instances changed", at_ms=20_000,
        lags={"a": {T0: 0, T1: 5, T2: None}, "b": {T0: None, T1: None, T2: None},
              "c": {T0: None, T1: lag_then, T2: None}},
    )  # fmt: skip
    # c catches up half of 0_1 (a later report replaces its earlier one).
    half = committed[T1] // 2
    lag_reports.write(warehouse, "counts", [_report("c", T1, 2, "warmup", 7, 21_000, committed)])
    lag_reports.write(warehouse, "counts", [_report("c", T1, 2, "warmup", half, 22_000, committed)])
    # Generation 3 keeps c warming up: its warmup still counts from generation 2.
    generations.write_generation(
        warehouse, "counts", g2, _instances("a", "b", "c"), "probing", at_ms=30_000,
        lags={"c": {T1: committed[T1] - half}},
    )  # fmt: skip

    view = assignment_view(warehouse, "counts", acceptable_recovery_lag=10)
    assert (view["generation"], view["reason"], view["at_ms"]) == (3, "probing", 30_000)
    assert view["probing_rebalance_needed"] is True
    assert [g["generation"] for g in view["history"]] == [3, 2, 1]
    by_gen = {g["generation"]: g for g in view["history"]}
    assert by_gen[2]["moved"] == ["0_2"] and by_gen[3]["moved"] == [] and by_gen[1]["moved"] == []
    assert (by_gen[2]["warmups"], by_gen[2]["standbys"]) == (1, 1)
    assert [i["name"] for i in by_gen[1]["instances"]] == ["a", "b"]

    tasks = {t["task"]: t for t in view["tasks"]}
    assert {n: (t["active"], t["warmup"], t["standby"]) for n, t in tasks.items()} == {
        "0_0": ("a", [], ["b"]),
        "0_1": ("a", ["c"], []),
        "0_2": ("a", [], []),
    }
    cells = {n: {e["instance"]: e for e in t["instances"]} for n, t in tasks.items()}
    assert cells["0_0"]["a"]["lag"] == 0 and cells["0_0"]["a"]["caught_up"] is True
    assert cells["0_0"]["a"]["held_pct"] == 100.0
    # b is 0_0's standby without a report: listed, no store.
    assert (cells["0_0"]["b"]["role"], cells["0_0"]["b"]["lag"]) == ("standby", None)
    assert (cells["0_1"]["a"]["lag"], cells["0_1"]["a"]["caught_up"]) == (5, True)
    warm = cells["0_1"]["c"]
    assert warm["role"] == "warmup" and warm["reported_role"] == "warmup"
    assert warm["lag"] == committed[T1] - half and warm["caught_up"] is False
    assert warm["held_pct"] == round(100.0 * half / committed[T1], 1)
    assert (warm["warmup_since"], warm["lag_at_assignment"]) == (2, lag_then)
    assert warm["reported_at_ms"] == 22_000
    # 0_2 moved from b to a: b still reports on it (no store) with role none now.
    assert cells["0_2"]["a"]["role"] == "active" and cells["0_2"]["a"]["lag"] is None
    assert (cells["0_2"]["b"]["role"], cells["0_2"]["b"]["reported_role"]) == ("none", "active")

    instances = {i["name"]: i for i in view["instances"]}
    assert [i["name"] for i in view["instances"]] == ["a", "b", "c"]
    assert {n: (i["active"], i["warmup"], i["standby"]) for n, i in instances.items()} == {
        "a": (3, 0, 0),
        "b": (0, 0, 1),
        "c": (0, 1, 0),
    }
    assert instances["c"]["queue"] == "q-c" and instances["c"]["last_report_at_ms"] == 22_000
    assert app_summary(warehouse, "counts") == {
        "app": "counts", "generation": 3, "at_ms": 30_000, "reason": "probing",
        "instances": ["a", "b", "c"], "tasks": 3,
    }  # fmt: skip
