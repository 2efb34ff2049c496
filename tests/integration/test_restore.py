"""A wiped task store restored from the changelogs (``recovery.restore``: Arrow columns
written straight to RocksDB for the kinds that offer them) holds, key for key and byte for
byte in every column family, what the restore through transactions (``_model_restore``,
the restore as it was before) leaves, and what the never-wiped store holds but for the
dedup store's purge floor; a SIGKILL in the middle of a restore leaves a store that the
next start restores again, to the same bytes."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest
from engine_helpers import APPS, dump_store, events, produce
from lakestate import compact, run_app
from lakestate.app import load_app
from lakestate.checkpoint import changelog, task_dir
from lakestate.checkpoint.layout import ensure_layout
from lakestate.checkpoint.standing import where_tasks_stand
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.restore import recovery, restored
from lakestate.state.base import IsolationLevel
from lakestate.state.dedup import FLOOR_KEY
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

ISOLATION = IsolationLevel.READ_COMMITTED


def _dedup_events(n: int, seed: int) -> list[dict]:
    """Ids seen again within the 10 s interval (dropped), after it (forwarded again at a new
    timestamp: the id entry changes) and purged (tombstone rows)."""
    rng = random.Random(seed)
    return [
        {
            "key": f"id{rng.randrange(150)}",
            "value": {"n": i},
            "timestamp": 100_000 + i * 100 + rng.randrange(-2_000, 2_000),
        }
        for i in range(n)
    ]


APPS_AND_INPUT = {
    "dedup": ("dedup.py", "seen-keys", lambda: _dedup_events(400, seed=3)),
    "counts": ("counts.py", "counts", lambda: events(300, keys=40, seed=5)),
}


def _model_restore(layout, task, committed, state_dir) -> None:
    """The restore through transactions: the changelog rows as Python objects, each chunk
    applied by the kind's ``restore_entries`` in a transaction, the batch marker last."""
    app = layout.app.name
    TaskDir(state_dir, app, task).wipe()
    store = TaskDir(state_dir, app, task).open(ISOLATION)
    try:
        for name in layout.stores_of(task.subtopology):
            kind = layout.app.topology.stores[name].kind
            path = layout.changelog_path(name)
            entries = list(changelog.read_state(path, task.partition, committed.batch_id).items())
            for start in range(0, len(entries), 7):
                with store.new_transaction() as txn:
                    changelog.restore_into(txn, kind, name, entries[start : start + 7])
                    txn.commit()
        restored.commit_restored(store, layout, task, committed, [])
    finally:
        store.close()


@pytest.fixture(scope="module", params=sorted(APPS_AND_INPUT))
def built(request, spark, tmp_path_factory):
    """An app run in many small batches with a compaction half-way: (layout, state dir)."""
    app_file, _, make_input = APPS_AND_INPUT[request.param]
    base = tmp_path_factory.mktemp(request.param)
    wh = Warehouse(base / "wh")
    produce(spark, wh, "events", make_input(), partitions=2)
    state = str(base / "state")
    path = str(APPS / app_file)
    common = {"warehouse": wh.root, "state_dir": state, "max_records": 40, "say": lambda _: None}
    run_app(path, max_batches=3, **common)
    compact(wh, load_app(path).name, say=lambda _: None)
    run_app(path, until_caught_up=True, **common)
    return ensure_layout(load_app(path), wh), state


def test_restore_equals_the_restore_through_transactions_and_the_live_store(
    built, tmp_path, monkeypatch
):
    layout, live_state = built
    app = layout.app.name
    monkeypatch.setattr(recovery, "LOAD_CHUNK", 9)  # several writes per store
    tasks = layout.tasks()
    standing = where_tasks_stand(layout, tasks)
    restored: list[tuple[dict, list]] = []
    said: list[str] = []
    for task in tasks:
        committed = standing.committed[task]
        rows = recovery.restore(
            layout, task, committed, str(tmp_path / "new"), ISOLATION, said.append, "test"
        )
        _model_restore(layout, task, committed, str(tmp_path / "model"))
        new = dump_store(tmp_path / "new", app, task)
        assert rows > 9
        assert new == dump_store(tmp_path / "model", app, task)
        live = dump_store(live_state, app, task)
        floors = [live[name].pop(FLOOR_KEY) for name in live if FLOOR_KEY in live[name]]
        assert new == live
        restored.append((new, floors))
    assert len(said) == len(tasks)
    if app == "dedup":  # what the restore rebuilds and what it leaves to the next purge
        assert all(floors for _, floors in restored)
        assert all(any(k.startswith(b"t") for k in new["seen-keys"]) for new, _ in restored)


CHILD = textwrap.dedent(
    """
    import sys
    from lakestate.app import load_app
    from lakestate.restore import recovery
    from lakestate.checkpoint.layout import ensure_layout
    from lakestate.checkpoint.standing import where_tasks_stand
    from lakestate.state.base import IsolationLevel
    from lakestate.task_id import TaskId
    from lakestate.warehouse import Warehouse

    app_path, warehouse, state_dir, task = sys.argv[1:]
    layout = ensure_layout(load_app(app_path), Warehouse(warehouse))
    task = TaskId.parse(task)
    recovery.LOAD_CHUNK = recovery.RESTORE_CHUNK = 5
    committed = where_tasks_stand(layout, [task]).committed[task]
    recovery.restore(layout, task, committed, state_dir, IsolationLevel.READ_COMMITTED, print, "t")
    """
)


def test_a_kill_mid_restore_leaves_a_store_the_next_start_restores(built, tmp_path):
    layout, _ = built
    app = layout.app.name
    task = layout.tasks()[0]
    state = str(tmp_path / "killed")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    app_path = str(APPS / APPS_AND_INPUT[app][0])
    env = {**os.environ, "LAKESTATE_FAULT": "mid_restore"}
    args = [sys.executable, str(script), app_path, layout.warehouse.root, state, str(task)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == -9, proc.stderr
    # Killed after its first store's load: its entries, no batch marker.
    partial = dump_store(state, app, task)
    first = layout.stores_of(task.subtopology)[0]
    assert list(partial) == [first] and partial[first]
    store = TaskDir(state, app, task).open(ISOLATION)
    try:
        assert task_dir.local_batch(store) is None
    finally:
        store.close()
    said: list[str] = []
    recovery.recover(layout, [task], state, ISOLATION, said.append)
    assert len(said) == 1 and "restored" in said[0] and "inconsistent" in said[0], said
    committed = where_tasks_stand(layout, [task]).committed[task]
    _model_restore(layout, task, committed, str(tmp_path / "model"))
    assert dump_store(state, app, task) == dump_store(tmp_path / "model", app, task)
