"""An instance's run (scaleout/task_roles.py): it processes only the tasks it owns in force,
brings its warmups and standbys to the committed batch without writing Delta, reports its
lags (busy runs too), and never commits a batch of a task a rebalance moved away: a run
fenced before its progress commit stops with TaskMigratedException having committed
nothing, and a zombie's staged batch is never applied over another instance's batch.

Real delta-rs, RocksDB and in-process transport; two instances in one process, separate
state dirs; a separate process where a SIGKILL is needed. Generations are written with
the history and fence functions a rebalance uses (scaleout/ownership.py, assign/history.py),
so that each test decides who owns what."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from engine_helpers import APPS, events, local_state, produce
from lakestate import run_app
from lakestate.checkpoint import changelog, faults, task_dir
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.errors import TaskMigratedException
from lakestate.runtime.run_lock import instance_lock
from lakestate.scaleout import lag_reports, ownership
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
N = 120
IN_PROCESS = 10**9  # inprocess_max_records: no Spark
T0, T1 = TaskId(0, 0), TaskId(0, 1)
TOPICS = ("counts-out", "sums-out")
STORES = ("counts", "sums")


def _app(folder: Path, instances: list[dict] | None, **config) -> str:
    """The counts test app (tests/integration/apps/counts.py) with ``instances`` as its
    ``lakestate.instances`` (None: none configured) and ``config``, written in ``folder``."""
    source = (APPS / "counts.py").read_text()
    config = {"statestore.uncommitted.max.records": 100_000, **config}
    if instances is not None:
        config["lakestate.instances"] = instances
    source = source.replace('{"statestore.uncommitted.max.records": 100_000}', repr(config))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "counts_app.py"
    path.write_text(source)
    return str(path)


def _instances(tmp_path: Path, *names: str) -> list[dict]:
    return [{"name": n, "state_dir": str(tmp_path / f"state-{n}")} for n in names]


def _run(app: str, wh: Warehouse, instance: str | None = None, **kw):
    said: list[str] = []
    kw.setdefault("until_caught_up", True)
    kw.setdefault("max_records", 15)
    result = run_app(
        app,
        warehouse=wh.root,
        instance=instance,
        inprocess_max_records=IN_PROCESS,
        say=said.append,
        **kw,
    )
    return result, said


def _assign(wh: Warehouse, active: dict, warmup: dict | None = None, standby: dict | None = None):
    """Write the next generation with these roles and fence the tasks whose active changed
    (what a rebalance does); returns its number."""
    from lakestate.assign import Assignment, history

    previous = history.latest(wh, "counts")
    assignment = Assignment(
        active=dict(active),
        standby={t: frozenset(s) for t, s in (standby or {}).items()},
        warmup={t: frozenset(s) for t, s in (warmup or {}).items()},
        probing_rebalance_needed=bool(warmup),
    )
    names = sorted({*active.values(), *(n for s in (warmup or {}).values() for n in s)})
    number = history.write_generation(
        wh,
        "counts",
        assignment,
        [{"name": n, "queue": n, "capacity": 1} for n in names],
        "requested",
    )
    moved = {
        t: number
        for t, owner in active.items()
        if previous is None or previous.assignment.active.get(t) != owner
    }
    ownership.write_fence(wh.progress_path("counts"), "counts", moved, number)
    return number


def _sinks(wh: Warehouse) -> dict[str, list[tuple]]:
    """Each sink's records as (partition, key, value, timestamp), sorted: two instances'
    appends interleave, so offsets across tasks differ from one run's."""
    found = {}
    for topic in TOPICS:
        rows = DeltaTable(wh.topic_path(topic)).to_pyarrow_table().to_pylist()
        found[topic] = sorted((r["partition"], r["key"], r["value"], r["timestamp"]) for r in rows)
    return found


def _state(wh: Warehouse) -> dict[tuple[str, int], dict[bytes, bytes]]:
    """Each store's live entries per task, from its changelog."""
    return {
        (store, p): changelog.read_state(wh.changelog_path("counts", store), p, 10**9)
        for store in STORES
        for p in (0, 1)
    }


def _reference(tmp_path: Path, records: list[dict]) -> Warehouse:
    """The warehouse of one instance (none configured) that processed ``records``."""
    wh = Warehouse(tmp_path / "reference")
    produce(None, wh, "events", records, partitions=2)
    _run(_app(tmp_path / "ref-app", None), wh, state_dir=str(tmp_path / "ref-state"))
    return wh


def _versions(wh: Warehouse) -> dict[str, int]:
    """The version of every table the app writes."""
    paths = [wh.progress_path("counts")]
    paths += [wh.topic_path(t) for t in TOPICS]
    paths += [wh.changelog_path("counts", s) for s in STORES]
    return {p: DeltaTable(p).version() for p in paths}


def _reports(wh: Warehouse, run_id: str | None = None) -> list[dict]:
    rows = DeltaTable(lag_reports.reports_path(wh, "counts")).to_pyarrow_table().to_pylist()
    return [r for r in rows if run_id is None or r["run_id"] == run_id]


def _subprocess_run(app: str, wh: Warehouse, instance: str, fault: str | None, max_records: int):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({app!r}, warehouse={wh.root!r}, instance={instance!r}, "
        f"max_records={max_records}, until_caught_up=True, inprocess_max_records={IN_PROCESS})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


def test_an_instance_runs_only_the_tasks_it_owns(tmp_path):
    records = events(N, seed=31)
    reference = _reference(tmp_path, records)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "b"})

    result_a, said = _run(app, wh, "a")
    # The run's first line says which transport ran and why; the instance's roles follow.
    assert said[0].startswith("transport: in this process, no Spark ("), said
    assert said[1] == "instance a (generation 1): active 0_0", said
    assert {t for batch in result_a.batches for t in batch} == {"0_0"}
    assert not TaskDir(tmp_path / "state-a", "counts", T1).exists()
    result_b, _ = _run(app, wh, "b")
    assert {t for batch in result_b.batches for t in batch} == {"0_1"}
    assert not TaskDir(tmp_path / "state-b", "counts", T0).exists()

    assert _sinks(wh) == _sinks(reference)
    assert _state(wh) == _state(reference)
    # --tasks restricts to the instance's own; another's task is a clear error.
    with pytest.raises(Exception, match=r"task 0_1 is owned by instance b .*not by a"):
        _run(app, wh, "a", tasks=["0_1"])
    # Each run reported its active task, caught up.
    rows = {(r["instance"], r["task"]): r for r in _reports(wh)}
    assert rows[("a", "0_0")]["role"] == "active" and rows[("a", "0_0")]["lag"] == 0
    assert rows[("b", "0_1")]["role"] == "active" and rows[("b", "0_1")]["lag"] == 0
    assert ("a", "0_1") not in rows and ("b", "0_0") not in rows


def test_a_warmup_reaches_the_committed_batch_without_writing_delta(tmp_path):
    records = events(N, seed=32)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "a"})
    _run(app, wh, "a")
    _assign(wh, {T0: "a", T1: "a"}, warmup={T0: {"b"}}, standby={T1: {"b"}})

    before = _versions(wh)
    result, said = _run(app, wh, "b")
    assert result.batches == [] and _versions(wh) == before  # nothing written but its report
    assert any("warmed 2 task(s) of instance b" in line for line in said), said
    rows = {r["task"]: r for r in _reports(wh) if r["instance"] == "b"}
    assert {t: r["role"] for t, r in rows.items()} == {"0_0": "warmup", "0_1": "standby"}
    for row in rows.values():
        assert row["lag"] == 0 and row["local_batch"] == row["committed_batch"] > 0
    # The warm stores hold what the owner's hold.
    for task in (T0, T1):
        assert _local(tmp_path / "state-b", task) == _local(tmp_path / "state-a", task)

    # More input; the owner commits; the warmup catches up again from where it stands.
    produce(None, wh, "events", events(40, seed=33), partitions=2)
    _run(app, wh, "a")
    _, said = _run(app, wh, "b")
    assert any("caught up from batch" in line for line in said), said
    assert _local(tmp_path / "state-b", T0) == _local(tmp_path / "state-a", T0)


def test_the_warmup_bound_leaves_the_rest_for_the_next_run(tmp_path):
    records = events(N, seed=34)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    bound = {"lakestate.warmup.max.records": 1}
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"), **bound)
    _assign(wh, {T0: "a", T1: "a"})
    _run(app, wh, "a")
    _assign(wh, {T0: "a", T1: "a"}, warmup={T0: {"b"}, T1: {"b"}})

    _, said = _run(app, wh, "b")
    assert any("warmed 1 task(s)" in line for line in said), said  # the first always goes
    assert any("task 0_1 (warmup): lag" in line and "next run" in line for line in said), said
    _, said = _run(app, wh, "b")
    assert any("warmed" in line and "0_1" in line for line in said), said


def _local(state_dir: Path, task: TaskId) -> dict:
    """The task's local store: its stores' entries, batch and offsets."""
    from lakestate.state.base import IsolationLevel

    held = {
        name: local_state(state_dir, "counts", str(task), name, "timestamped_key_value")
        for name in STORES
    }
    store = TaskDir(state_dir, "counts", task).open(IsolationLevel.READ_COMMITTED)
    try:
        return held | {"batch": task_dir.local_batch(store), "offsets": store.committed_offsets()}
    finally:
        store.close()


def test_a_run_fenced_before_its_progress_commit_stops_and_commits_nothing(tmp_path):
    records = events(N, seed=35)
    reference = _reference(tmp_path, records)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "a"})
    _run(app, wh, "a", max_batches=1)

    # A rebalance moves 0_1 to b while a's next batch is processed and staged.
    fenced = []

    def rebalance(batch: int) -> None:
        if not fenced:
            fenced.append(_assign(wh, {T0: "a", T1: "b"}))

    before = _versions(wh)
    with faults.hook("before_progress", rebalance), pytest.raises(TaskMigratedException) as err:
        _run(app, wh, "a")
    message = str(err.value)
    assert "task 0_1" in message and "instance a" in message and "owner: b" in message, message
    assert "owner epoch 1" in message and "is now 2" in message, message
    after = _versions(wh)
    progress = wh.progress_path("counts")
    assert after[progress] == before[progress] + 1  # the fence only: no batch of a's
    assert {p: v for p, v in after.items() if p != progress} == {
        p: v for p, v in before.items() if p != progress
    }
    for task in (T0, T1):
        assert TaskDir(tmp_path / "state-a", "counts", task).staged_batches() == []

    # The new owner takes 0_1 over; a goes on with 0_0: one instance's result.
    result_b, _ = _run(app, wh, "b")
    assert {t for batch in result_b.batches for t in batch} == {"0_1"}
    result_a, said = _run(app, wh, "a")
    # The run's first line says which transport ran and why; the instance's roles follow
    # (generation 2: the rebalance that fenced a).
    assert said[0].startswith("transport: in this process, no Spark ("), said
    assert said[1] == "instance a (generation 2): active 0_0", said
    assert {t for batch in result_a.batches for t in batch} == {"0_0"}
    assert _sinks(wh) == _sinks(reference)
    assert _state(wh) == _state(reference)


def test_a_fence_landing_during_the_progress_commit_fails_it(tmp_path):
    """The fence lands between the run's check of the epochs and its commit: delta-rs
    fails the commit (the same owner txn), and the run stops the same way."""
    records = events(60, seed=36)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "a"})

    fenced = []

    def rebalance(batch: int) -> None:  # after the run's check, before its commit
        if not fenced:
            fenced.append(_assign(wh, {T0: "b", T1: "a"}))

    with (
        faults.hook("progress_checked", rebalance),
        pytest.raises(TaskMigratedException, match=r"task 0_0 migrated.*owner: b"),
    ):
        _run(app, wh, "a")
    assert fenced == [2]
    assert DeltaTable(wh.progress_path("counts")).to_pyarrow_table().num_rows == 0


def test_a_zombie_killed_mid_batch_never_commits_nor_applies_its_staged_batch(tmp_path):
    """Instance a is SIGKILLed with batch 2 processed and staged; a rebalance moves every
    task to b, which commits batch 2 with other ranges; a, restarted as a warmup, commits
    nothing, and its staged batch 2 is never applied (the store catches up instead)."""
    records = events(N, seed=37)
    reference = _reference(tmp_path, records)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "a"})

    proc = _subprocess_run(app, wh, "a", "before_progress@2", max_records=15)
    assert proc.returncode == -9, proc.stderr[-3000:]
    state_a = tmp_path / "state-a"
    assert all(TaskDir(state_a, "counts", t).staged_batches() == [2] for t in (T0, T1))

    _assign(wh, {T0: "b", T1: "b"}, warmup={T0: {"a"}, T1: {"a"}})
    _run(app, wh, "b", max_records=10, max_batches=1)  # batch 2: other ranges than a's
    rows = DeltaTable(wh.progress_path("counts")).to_pyarrow_table().to_pylist()
    b_run = {r["run_id"] for r in rows if r["batch_id"] == 2}
    before = _versions(wh)

    result, said = _run(app, wh, "a")
    assert result.batches == [] and _versions(wh) == before
    assert not any("applied the staged transaction" in line for line in said), said
    assert any("caught up from batch 1 to 2" in line for line in said), said
    rows = DeltaTable(wh.progress_path("counts")).to_pyarrow_table().to_pylist()
    assert {r["run_id"] for r in rows if r["batch_id"] == 2} == b_run
    assert all(TaskDir(state_a, "counts", t).staged_batches() == [] for t in (T0, T1))

    _run(app, wh, "b")
    assert _sinks(wh) == _sinks(reference)
    assert _state(wh) == _state(reference)
    for task in (T0, T1):
        assert _local(state_a, task)["batch"] == 2  # warm at the batch b committed then


def test_a_busy_run_and_a_run_without_input_still_report(tmp_path):
    records = events(60, seed=38)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a"))
    _assign(wh, {T0: "a", T1: "a"})
    _run(app, wh, "a")
    first = len(_reports(wh))
    assert first == 2

    result, said = _run(app, wh, "a")  # no new input: still a report
    assert result.caught_up and result.batches == []
    assert said[:2] == ["caught up: no new input", "instance a (generation 1): active 0_0, 0_1"]
    assert len(_reports(wh)) == 4

    with instance_lock(str(tmp_path / "state-a"), "counts") as held:
        assert held
        result, _ = _run(app, wh, "a", lock_wait_s=0)
    assert result.busy
    rows = _reports(wh)
    assert len(rows) == 6
    newest = sorted(rows, key=lambda r: r["at_ms"])[-2:]
    for row in newest:
        # What the last run holding the lock saw of its stores, against Delta now.
        assert row["role"] == "active" and row["lag"] == 0 and row["local_batch"] > 0
        assert json.loads(row["local_offsets"]) == {"events": row_offset(wh, row["task"])}


def row_offset(wh: Warehouse, task: str) -> int:
    """The committed next offset of ``events`` of the task's last progress row."""
    rows = DeltaTable(wh.progress_path("counts")).to_pyarrow_table().to_pylist()
    last = max((r for r in rows if r["task"] == task), key=lambda r: r["batch_id"])
    return json.loads(last["offsets"])["events"]


def test_lakestate_run_instance_on_the_command_line(tmp_path, capsys):
    from lakestate.cli import main

    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", events(60, seed=39), partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "b"})
    common = ["--warehouse", wh.root, "--json", "run", app, "--until-caught-up"]

    assert main([*common, "--instance", "b"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["instance"] == "b" and {t for b in result["per_batch"] for t in b["tasks"]} == {
        "0_1"
    }
    assert TaskDir(tmp_path / "state-b", "counts", T1).exists()  # the instance's state dir

    assert main([*common, "--instance", "c"]) == 1
    assert "app counts has no instance 'c'; its instances: a, b" in capsys.readouterr().err
    assert main([*common, "--instance", "a", "--tasks", "0_1"]) == 1
    assert "task 0_1 is owned by instance b" in capsys.readouterr().err


def test_a_warmup_killed_mid_restore_restores_again_and_writes_nothing(tmp_path):
    records = events(N, seed=40)
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", records, partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "a"})
    _run(app, wh, "a")
    _assign(wh, {T0: "a", T1: "a"}, warmup={T0: {"b"}})
    before = _versions(wh)
    committed = _local(tmp_path / "state-a", T0)["batch"]

    proc = _subprocess_run(app, wh, "b", f"mid_restore@{committed}", max_records=15)
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert _versions(wh) == before
    _, said = _run(app, wh, "b")
    assert any("task 0_0: restored" in line for line in said), said
    assert _versions(wh) == before
    assert _local(tmp_path / "state-b", T0) == _local(tmp_path / "state-a", T0)


def test_a_migrated_run_exits_1_with_one_line_naming_the_move(tmp_path, capsys):
    from lakestate.cli import main

    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", events(60, seed=41), partitions=2)
    app = _app(tmp_path / "app", _instances(tmp_path, "a", "b"))
    _assign(wh, {T0: "a", T1: "a"})
    moved = []

    def rebalance(batch: int) -> None:
        if not moved:
            moved.append(_assign(wh, {T0: "b", T1: "a"}))

    with faults.hook("before_progress", rebalance):
        code = main(["--warehouse", wh.root, "run", app, "--instance", "a"])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err[0] == (
        "lakestate run: error: app counts: task 0_0 migrated: instance a planned its batch at "
        "owner epoch 1, the task's owner epoch is now 2 (owner: b); this run committed "
        "nothing, discarded its staged work and stops (the next run follows the new assignment)"
    ), err
    assert err[1].startswith("full log: ")
