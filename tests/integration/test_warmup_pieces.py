"""A warmup's restore in bounded pieces (restore/warmup.py, through ``recovery.warm``
with a budget): it takes several runs, each applying at most the budget, and ends with a
store equal, column family by column family and byte for byte, to a one-shot restore, for a
key-value app (two stores) and a dedup app (its time index and count derived piece by
piece); a SIGKILL mid-piece or mid-swap (fresh processes) is resumed; a compaction past the
shadow's target makes it start over; the owner committing between pieces is caught up after
the last one; and an instance's lag report does not show the task held while its shadow is
in progress.

Real delta-rs and RocksDB, in-process transport (no Spark)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from engine_helpers import APPS, dump_store, events, produce
from lakestate import compact, run_app
from lakestate.app import load_app
from lakestate.checkpoint import changelog
from lakestate.checkpoint.layout import ensure_layout
from lakestate.checkpoint.standing import where_tasks_stand
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.restore import recovery, warmup
from lakestate.scaleout import ownership
from lakestate.state.base import IsolationLevel
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

ISOLATION = IsolationLevel.READ_COMMITTED
BUDGET = 7


def _dedup_events(n: int, seed: int, start: int = 0) -> list[dict]:
    """Ids seen again within the 10 s interval, after it, and purged (tombstones)."""
    rng = random.Random(seed)
    return [
        {
            "key": f"id{rng.randrange(150)}",
            "value": {"n": i},
            "timestamp": 100_000 + i * 100 + rng.randrange(-2_000, 2_000),
        }
        for i in range(start, start + n)
    ]


APPS_AND_INPUT = {
    "dedup": ("dedup.py", lambda seed, start=0: _dedup_events(200, seed, start)),
    "counts": ("counts.py", lambda seed, start=0: events(300, keys=40, seed=seed)),
}


def _owner_runs(path: str, wh: Warehouse, state: str) -> None:
    run_app(
        path,
        warehouse=wh.root,
        state_dir=state,
        max_records=40,
        until_caught_up=True,
        inprocess_max_records=10**9,
        say=lambda _: None,
    )


@pytest.fixture(params=sorted(APPS_AND_INPUT))
def built(request, tmp_path):
    """An app run by its owner in several batches: (app file, layout, owner's state dir)."""
    app_file, make_input = APPS_AND_INPUT[request.param]
    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", make_input(3), partitions=2)
    path = str(APPS / app_file)
    owner = str(tmp_path / "owner")
    _owner_runs(path, wh, owner)
    return path, ensure_layout(load_app(path), wh), owner


def _one_shot(layout, task, state_dir) -> dict:
    committed = where_tasks_stand(layout, [task]).committed[task]
    recovery.restore(layout, task, committed, str(state_dir), ISOLATION, lambda _: None, "t")
    return dump_store(state_dir, layout.app.name, task)


def _warm_until_done(layout, task, state: str, said: list[str]) -> list[int]:
    """recovery.warm with the budget until the store stands at the committed batch; the
    rows each call applied."""
    applied = []
    for _ in range(200):
        applied.append(recovery.warm(layout, task, state, ISOLATION, said.append, budget=BUDGET))
        if not warmup.in_progress(state, layout.app.name, task):
            return applied
        assert not TaskDir(state, layout.app.name, task).exists()  # the shadow only
    raise AssertionError("the warmup restore did not complete in 200 runs")


def test_a_warmup_restores_in_pieces_of_the_budget_to_the_one_shot_store(built, tmp_path):
    _, layout, _ = built
    app = layout.app.name
    for task in layout.tasks():
        state = str(tmp_path / "warm")
        said: list[str] = []
        applied = _warm_until_done(layout, task, state, said)
        assert len(applied) > 2 and all(n <= BUDGET for n in applied), applied
        assert sum(applied) > 2 * BUDGET
        assert any("warmup restore complete" in line for line in said), said
        assert dump_store(state, app, task) == _one_shot(layout, task, tmp_path / f"one-{task}")
        # At the batch now: the next warm has nothing to do.
        assert recovery.warm(layout, task, state, ISOLATION, said.append, budget=BUDGET) == 0


CHILD = textwrap.dedent(
    """
    import sys
    from lakestate.app import load_app
    from lakestate.restore import recovery
    from lakestate.checkpoint.layout import ensure_layout
    from lakestate.state.base import IsolationLevel
    from lakestate.task_id import TaskId
    from lakestate.warehouse import Warehouse

    app_path, warehouse, state_dir, task, budget = sys.argv[1:]
    layout = ensure_layout(load_app(app_path), Warehouse(warehouse))
    task = TaskId.parse(task)
    recovery.warm(layout, task, state_dir, IsolationLevel.READ_COMMITTED, print, budget=int(budget))
    """
)


def _killed(tmp_path: Path, path: str, layout, state: str, task, fault: str, budget: int) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    args = [sys.executable, str(script), path, layout.warehouse.root, state, str(task), str(budget)]
    env = {**os.environ, "LAKESTATE_FAULT": fault}
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == -9, proc.stdout + proc.stderr


def test_a_kill_mid_piece_is_resumed_to_the_same_store(built, tmp_path):
    path, layout, _ = built
    app = layout.app.name
    task = layout.tasks()[0]
    state = str(tmp_path / "warm")
    said: list[str] = []
    assert recovery.warm(layout, task, state, ISOLATION, said.append, budget=BUDGET) == BUDGET
    # Killed inside the second piece's transaction, before its commit.
    _killed(tmp_path, path, layout, state, task, "mid_warmup_piece", BUDGET)
    assert warmup.in_progress(state, app, task)
    applied = _warm_until_done(layout, task, state, said)
    assert all(n <= BUDGET for n in applied)
    assert not any("dropped" in line for line in said), said  # resumed, not started over
    assert dump_store(state, app, task) == _one_shot(layout, task, tmp_path / "one")


def test_a_kill_between_the_last_piece_and_the_swap_leaves_a_shadow_recovery_adopts(
    built, tmp_path
):
    path, layout, _ = built
    app = layout.app.name
    task = layout.tasks()[0]
    state = str(tmp_path / "warm")
    said: list[str] = []
    recovery.warm(layout, task, state, ISOLATION, said.append, budget=BUDGET)
    # The task's store exists (an old one); the child completes the shadow, removes the
    # old store and is killed before the rename.
    TaskDir(state, app, task).open(ISOLATION).close()
    _killed(tmp_path, path, layout, state, task, "mid_warmup_swap", 10**6)
    assert not TaskDir(state, app, task).path.exists()
    assert warmup.in_progress(state, app, task)
    # The task became this instance's active: its recovery adopts the complete shadow.
    recovery.recover(layout, [task], state, ISOLATION, said.append)
    assert any("adopted its complete warmup restore" in line for line in said), said
    assert not any("restored" in line for line in said), said  # no restore at all
    assert not warmup.in_progress(state, app, task)
    assert dump_store(state, app, task) == _one_shot(layout, task, tmp_path / "one")


def _more_input(path: str, layout, owner: str, seed: int) -> None:
    app_file = Path(path).name
    make_input = next(f for name, (file, f) in APPS_AND_INPUT.items() if file == app_file)
    produce(None, layout.warehouse, "events", make_input(seed, 10_000), partitions=2)
    _owner_runs(path, layout.warehouse, owner)


def test_the_owner_committing_between_pieces_is_caught_up_after_the_last(built, tmp_path):
    path, layout, owner = built
    app = layout.app.name
    task = layout.tasks()[1]
    state = str(tmp_path / "warm")
    said: list[str] = []
    start = where_tasks_stand(layout, [task]).committed[task].batch_id
    recovery.warm(layout, task, state, ISOLATION, said.append, budget=BUDGET)
    _more_input(path, layout, owner, seed=7)
    now = where_tasks_stand(layout, [task]).committed[task].batch_id
    assert now > start
    _warm_until_done(layout, task, state, said)
    assert any(f"at batch {start} in pieces" in line for line in said), said
    assert any(f"caught up from batch {start} to {now}" in line for line in said), said
    assert dump_store(state, app, task) == _one_shot(layout, task, tmp_path / "one")


def test_a_compaction_past_the_target_starts_the_shadow_over(built, tmp_path):
    path, layout, owner = built
    app = layout.app.name
    task = layout.tasks()[0]
    state = str(tmp_path / "warm")
    said: list[str] = []
    recovery.warm(layout, task, state, ISOLATION, said.append, budget=BUDGET)
    _more_input(path, layout, owner, seed=8)
    compact(layout.warehouse, app, say=lambda _: None)  # through the newest batch, after N
    recovery.warm(layout, task, state, ISOLATION, said.append, budget=BUDGET)
    assert any("dropped its warmup restore in progress" in line for line in said), said
    assert any("was compacted through batch" in line for line in said), said
    _warm_until_done(layout, task, state, said)
    assert dump_store(state, app, task) == _one_shot(layout, task, tmp_path / "one")


def test_a_shadow_in_progress_is_not_reported_as_held(tmp_path):
    """Through instance runs: b's warmup of 0_1 takes several runs; until the last, b's
    report says it holds no store of it (lag null), then lag 0 at the committed batch."""
    from lakestate.assign import Assignment, history
    from lakestate.task_id import TaskId

    wh = Warehouse(tmp_path / "wh")
    produce(None, wh, "events", events(300, keys=40, seed=5), partitions=2)
    instances = [{"name": n, "state_dir": str(tmp_path / f"state-{n}")} for n in ("a", "b")]
    config = {
        "statestore.uncommitted.max.records": 100_000,
        "lakestate.instances": instances,
        "lakestate.warmup.max.records": BUDGET,
    }
    source = (APPS / "counts.py").read_text()
    source = source.replace('{"statestore.uncommitted.max.records": 100_000}', repr(config))
    path = tmp_path / "counts_app.py"
    path.write_text(source)
    t0, t1 = TaskId(0, 0), TaskId(0, 1)

    def generation(warmup: dict) -> None:
        assignment = Assignment({t0: "a", t1: "a"}, {}, warmup, bool(warmup))
        caps = [{"name": n, "queue": n, "capacity": 1} for n in ("a", "b")]
        number = history.write_generation(wh, "counts", assignment, caps, "requested")
        if number == 1:
            ownership.write_fence(wh.progress_path("counts"), "counts", {t0: 1, t1: 1}, 1)

    def run(instance: str) -> list[dict]:
        said: list[str] = []
        run_app(
            str(path),
            warehouse=wh.root,
            instance=instance,
            until_caught_up=True,
            max_records=40,
            inprocess_max_records=10**9,
            say=said.append,
        )
        from deltalake import DeltaTable

        rows = DeltaTable(str(Path(wh.root) / "apps" / "counts" / "_instances")).to_pyarrow_table()
        mine = [r for r in rows.to_pylist() if r["instance"] == instance and r["task"] == "0_1"]
        return sorted(mine, key=lambda r: r["at_ms"])

    generation({})
    run("a")
    generation({t1: frozenset({"b"})})
    runs = 0
    while True:
        runs += 1
        newest = run("b")[-1]
        assert newest["role"] == "warmup"
        if not warmup.in_progress(str(tmp_path / "state-b"), "counts", t1):
            break
        assert newest["lag"] is None and newest["local_batch"] is None, newest
        assert runs < 100
    assert runs > 2
    assert newest["lag"] == 0 and newest["local_batch"] == newest["committed_batch"] > 0


def test_a_piece_ending_exactly_at_a_store_s_end_goes_on_with_the_next_store(built, tmp_path):
    _, layout, _ = built
    app = layout.app.name
    task = layout.tasks()[0]
    stores = sorted(layout.stores_of(task.subtopology))
    n = where_tasks_stand(layout, [task]).committed[task].batch_id
    # The budget of the first store's keys (tombstones too): its last piece ends at its end.
    keys = changelog.read_live_after(
        layout.changelog_path(stores[0]), task.partition, n, None, 10**9
    )
    first = keys[3]
    state = str(tmp_path / "warm")
    said: list[str] = []
    budget = first if len(stores) > 1 else max(first // 2, 1)
    applied = []
    for _ in range(50):
        applied.append(recovery.warm(layout, task, state, ISOLATION, said.append, budget=budget))
        if not warmup.in_progress(state, app, task):
            break
    assert applied[0] == budget and len(applied) >= 2, applied
    assert dump_store(state, app, task) == _one_shot(layout, task, tmp_path / "one")
