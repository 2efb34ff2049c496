"""Rewind (ops/rewind.py): an app's sinks and state back to an earlier point through
Delta time travel, then reprocessed. A rewind then a rerun equals never rewinding; a rewind
gives exactly what a run stopped at the target gave; it refuses, changing nothing, when a
table has another writer's commits or vacuumed files; it is a no-op at the current point;
and a SIGKILL after each of its steps, then the same rewind again, ends in the same result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from engine_helpers import APPS, events, local_state, produce, state_rows, topic_rows
from lakestate import rewind, run_app
from lakestate.checkpoint import progress, rewind_intent
from lakestate.checkpoint.rewind_intent import MidRewindError
from lakestate.cli import main as cli_main
from lakestate.io import topics
from lakestate.ops.rewind import RewindRefused
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MAX_RECORDS = 15  # several batches per task
IN_PROCESS = 10**9  # the in-process transport (rewind itself does not process)
TOPICS = {"counts": ["counts-out", "sums-out"], "regroup": ["per-user-out"]}
STORES = {"counts": ["counts", "sums"], "regroup": ["per-user"]}
SEED_INPUT = {"counts": 11, "regroup": 12}


def _quiet(_: str) -> None:
    pass


def _run(wh: Warehouse, state: Path, app: str, **kw) -> object:
    kw.setdefault("until_caught_up", "max_batches" not in kw)
    return run_app(
        str(APPS / f"{app}.py"),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=MAX_RECORDS,
        inprocess_max_records=IN_PROCESS,
        say=_quiet,
        **kw,
    )


def _warehouse(spark, root: Path, app: str) -> Warehouse:
    wh = Warehouse(root)
    produce(spark, wh, "events", events(120, seed=SEED_INPUT[app]), partitions=2)
    return wh


def _results(spark, wh: Warehouse, app: str) -> tuple:
    return tuple(topic_rows(spark, wh, t) for t in TOPICS[app]) + tuple(
        state_rows(spark, wh, app, s) for s in STORES[app]
    )


def _local(state: Path, app: str) -> dict:
    """Every task's local stores (what the next batch builds on)."""
    from lakestate.app import load_app

    topology = load_app(str(APPS / f"{app}.py")).topology
    found = {}
    for task in sorted(p.name for p in (state / app).iterdir() if p.is_dir()):
        for name, spec in topology.stores.items():
            found[(task, name)] = local_state(state, app, task, name, spec.kind)
    return found


def _progress_version(wh: Warehouse, app: str) -> int:
    return DeltaTable(wh.progress_path(app)).version()


@pytest.mark.parametrize("app", ["counts", "regroup"])
def test_rewind_gives_the_target_then_a_rerun_equals_never_rewinding(spark, tmp_path, app):
    # The target: a run of two batches.
    at_two = _warehouse(spark, tmp_path / "two", app)
    _run(at_two, tmp_path / "two-state", app, max_batches=2)
    expected_at_two = _results(spark, at_two, app)
    # Never rewound: every record at once.
    never = _warehouse(spark, tmp_path / "never", app)
    _run(never, tmp_path / "never-state", app)
    expected = _results(spark, never, app)

    wh = _warehouse(spark, tmp_path / "wh", app)
    state = tmp_path / "state"
    _run(wh, state, app)
    assert _results(spark, wh, app) == expected

    said: list[str] = []
    result = rewind(wh, app, to_batch=2, state_dir=str(state), say=said.append)
    assert not result.noop and result.plan is not None
    targets = {t.task: t.batch for t in result.plan.tasks}
    assert max(targets.values()) == 2
    assert _results(spark, wh, app) == expected_at_two
    # Each task's rewind row: a new batch id with the offsets of its target batch.
    history, _ = progress.read_all(wh, app)
    for task, rows in history.rows.items():
        last = rows[0]
        assert last.is_rewind and last.rewound_to["batch"] == targets[task]
        assert last.batch_id > rows[1].batch_id
        assert last.offsets == _batch_row(wh, app, task, targets[task]).offsets

    runs: list[str] = []
    run_app(
        str(APPS / f"{app}.py"),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=MAX_RECORDS,
        inprocess_max_records=IN_PROCESS,
        until_caught_up=True,
        say=runs.append,
    )
    # The local stores were ahead of the rewound state: restored from the changelogs.
    assert any("behind the rewind" in line for line in runs), runs
    assert _results(spark, wh, app) == expected
    assert _local(state, app) == _local(tmp_path / "never-state", app)


def _batch_row(wh: Warehouse, app: str, task: TaskId, batch: int) -> progress.TaskProgress:
    rows = DeltaTable(wh.progress_path(app)).to_pyarrow_table().to_pylist()
    (row,) = [r for r in rows if r["task"] == str(task) and r["batch_id"] == batch]
    return progress.TaskProgress.from_row(row)


def test_rewind_before_a_stream_time_and_a_no_op_at_the_current_point(spark, tmp_path):
    wh = _warehouse(spark, tmp_path / "wh", "counts")
    state = tmp_path / "state"
    _run(wh, state, "counts")
    head = _progress_version(wh, "counts")
    # At or past the newest batch: nothing to do, nothing written.
    assert rewind(wh, "counts", to_batch=1000, state_dir=str(state), say=_quiet).noop
    assert _progress_version(wh, "counts") == head

    cut = 1_400  # the events' timestamps run from 1,000 to about 2,240
    result = rewind(wh, "counts", before_stream_time=cut, state_dir=str(state), say=_quiet)
    assert not result.noop
    history, _ = progress.read_all(wh, "counts")
    for rows in history.rows.values():
        rewound = rows[0]
        assert rewound.is_rewind
        assert rewound.stream_time is None or rewound.stream_time < cut
    # The latest such point: one more batch of some task would have reached the cut.
    batches = {t.task: t.batch for t in result.plan.tasks}
    later = [
        _batch_row(wh, "counts", task, batch + 1)
        for task, batch in batches.items()
        if _has_batch(wh, "counts", task, batch + 1)
    ]
    assert any(row.stream_time >= cut for row in later)
    # Rewinding to the same point again changes nothing.
    head = _progress_version(wh, "counts")
    assert rewind(wh, "counts", before_stream_time=cut, state_dir=str(state), say=_quiet).noop
    assert _progress_version(wh, "counts") == head


def _has_batch(wh: Warehouse, app: str, task: TaskId, batch: int) -> bool:
    rows = DeltaTable(wh.progress_path(app)).to_pyarrow_table(columns=["task", "batch_id"])
    return (str(task), batch) in set(
        zip(rows.column("task").to_pylist(), rows.column("batch_id").to_pylist(), strict=True)
    )


def _unchanged(wh: Warehouse, app: str):
    """The versions of the app's tables and whether it is mid-rewind, to compare."""
    paths = [wh.progress_path(app), *(wh.topic_path(t) for t in TOPICS[app])]
    paths += [wh.changelog_path(app, s) for s in STORES[app]]
    return [DeltaTable(p).version() for p in paths], rewind_intent.read(wh, app)


def test_refused_when_another_writer_wrote_a_sink(spark, tmp_path):
    wh = _warehouse(spark, tmp_path / "wh", "counts")
    state = tmp_path / "state"
    _run(wh, state, "counts")
    topics.topic(wh, "sums-out").append([{"key": "x", "value": 1, "timestamp": 5}])
    before = _unchanged(wh, "counts")
    with pytest.raises(RewindRefused, match=r"topics/sums-out: version \d+ .*another writer"):
        rewind(wh, "counts", to_batch=1, state_dir=str(state), say=_quiet)
    assert _unchanged(wh, "counts") == before


def test_refused_when_the_target_files_were_vacuumed(spark, tmp_path):
    wh = _warehouse(spark, tmp_path / "wh", "counts")
    state = tmp_path / "state"
    _run(wh, state, "counts")
    sink = DeltaTable(wh.topic_path("counts-out"))
    sink.optimize.compact()
    sink.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    before = _unchanged(wh, "counts")
    with pytest.raises(RewindRefused, match="topics/counts-out: .* vacuumed"):
        rewind(wh, "counts", to_batch=1, state_dir=str(state), say=_quiet)
    assert _unchanged(wh, "counts") == before


def test_the_cli_asks_first_and_prints_the_plan(spark, tmp_path, capsys, monkeypatch):
    wh = _warehouse(spark, tmp_path / "wh", "counts")
    state = tmp_path / "state"
    _run(wh, state, "counts")
    before = _unchanged(wh, "counts")
    args = [
        "--warehouse",
        wh.root,
        "rewind",
        "counts",
        "--to-batch",
        "1",
        "--state-dir",
        str(state),
    ]
    # Not at a terminal and no --yes: refused, nothing changed.
    assert cli_main(args) == 1
    assert "--yes" in capsys.readouterr().err
    assert _unchanged(wh, "counts") == before
    # At a terminal, a wrong name: not rewound.
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "demo")
    assert cli_main(args) == 1
    out = capsys.readouterr()
    assert "restore topics/counts-out: version" in out.out and "not confirmed" in out.err
    assert _unchanged(wh, "counts") == before
    # --yes --json: the plan carried out, as JSON.
    assert cli_main([*args, "--yes", "--json"]) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert done["plan"]["tasks"][0]["batch"] == 1 and not done["noop"]
    assert _unchanged(wh, "counts") != before


def _rewind_in_subprocess(wh: Warehouse, state: Path, fault: str | None, resume: bool = False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    if fault:
        env["LAKESTATE_FAULT"] = fault
    target = "resume=True" if resume else "to_batch=2"
    code = (
        "from lakestate.ops.rewind import rewind; "
        f"rewind({wh.root!r}, 'counts', {target}, state_dir={str(state)!r})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


# Every step of a rewind of the counts app (4 tables), in order.
REWIND_FAULTS = [
    "rewind:after_intent",
    "rewind:after_progress",
    "rewind:after_table@1",
    "rewind:after_table@2",
    "rewind:after_table@3",
    "rewind:after_table@4",
]


def test_kill_after_each_rewind_step_then_rerun_gives_the_uninterrupted_result(spark, tmp_path):
    never = _warehouse(spark, tmp_path / "never", "counts")
    _run(never, tmp_path / "never-state", "counts")
    expected = _results(spark, never, "counts")
    at_two = _warehouse(spark, tmp_path / "two", "counts")
    _run(at_two, tmp_path / "two-state", "counts", max_batches=2)
    expected_at_two = _results(spark, at_two, "counts")

    wh = _warehouse(spark, tmp_path / "wh", "counts")
    state = tmp_path / "state"
    _run(wh, state, "counts")
    # One chain: each rerun of the same rewind completes the recorded one up to the next
    # step, where it is killed.
    for index, point in enumerate(REWIND_FAULTS):
        proc = _rewind_in_subprocess(wh, state, point, resume=index == 2)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        # Mid-rewind: runs and readers refuse, naming what to do.
        assert rewind_intent.read(wh, "counts") is not None
        with pytest.raises(MidRewindError, match="lakestate rewind counts --resume"):
            _run(wh, state, "counts")
        with pytest.raises(MidRewindError):
            progress.read_all(wh, "counts")
    proc = _rewind_in_subprocess(wh, state, None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "completing the interrupted rewind" in proc.stdout
    assert rewind_intent.read(wh, "counts") is None
    assert _results(spark, wh, "counts") == expected_at_two
    # Every task has one rewind row: the reruns recorded it once.
    rows = DeltaTable(wh.progress_path("counts")).to_pyarrow_table().to_pylist()
    assert sum(1 for r in rows if r.get("rewound_to")) == 2
    # The same rewind once more: already there.
    assert rewind(wh, "counts", to_batch=2, state_dir=str(state), say=_quiet).noop
    _run(wh, state, "counts")
    assert _results(spark, wh, "counts") == expected
    assert _local(state, "counts") == _local(tmp_path / "never-state", "counts")


def _global_join(spark, root: Path) -> Warehouse:
    """The global_join app's input: every product (3 partitions), then the purchases."""
    wh = Warehouse(root)
    topics.topic(wh, "products").create(3)
    topics.topic(wh, "purchases").create(2)
    products = [
        {"key": f"p{i % 6}", "value": {"name": f"n{i}", "price": i}, "timestamp": 500 + i}
        for i in range(10)
    ]
    purchases = [
        {
            "key": f"o{i}",
            "value": {"product": f"p{i % 8}", "qty": 1 + i % 3},
            "timestamp": 1_000 + i,
        }
        for i in range(60)
    ]
    topics.topic(wh, "products").append(products)
    topics.topic(wh, "purchases").append(purchases)
    return wh


def test_rewind_of_an_app_with_a_global_table(spark, tmp_path):
    """Local stores hold the global table too: behind the rewind they are restored (no
    global data) and read the global topic again from 0; the result equals never rewinding."""
    never = _global_join(spark, tmp_path / "never")
    _run(never, tmp_path / "never-state", "global_join")
    expected = topic_rows(spark, never, "priced")

    wh = _global_join(spark, tmp_path / "wh")
    state = tmp_path / "state"
    _run(wh, state, "global_join")
    assert topic_rows(spark, wh, "priced") == expected
    rewind(wh, "global_join", to_batch=1, state_dir=str(state), say=_quiet)
    assert len(topic_rows(spark, wh, "priced")) < len(expected)
    runs: list[str] = []
    run_app(
        str(APPS / "global_join.py"),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=MAX_RECORDS,
        inprocess_max_records=IN_PROCESS,
        until_caught_up=True,
        say=runs.append,
    )
    assert sum("behind the rewind" in line for line in runs) == 2, runs
    assert topic_rows(spark, wh, "priced") == expected
    assert _local(state, "global_join") == _local(tmp_path / "never-state", "global_join")


def _split_input(spark, root: Path) -> Warehouse:
    """Partition 0 stamped early; partition 1's second half late (from 5,000)."""
    wh = Warehouse(root)
    topics.topic(wh, "events").create(2)
    records = [
        {
            "key": f"k{i % 5}",
            "value": {"user": f"u{i % 3}", "amount": 1 + i % 3},
            "timestamp": (5_000 if p == 1 and i >= 15 else 1_000) + i,
            "partition": p,
        }
        for p in (0, 1)
        for i in range(30)
    ]
    topics.topic(wh, "events").append(records)
    return wh


def _run_task(wh: Warehouse, state: Path, task: str, fault: str | None = None) -> None:
    """One batch of one task in its own process and state directory (another instance)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({str(APPS / 'counts.py')!r}, warehouse={wh.root!r}, state_dir={str(state)!r}, "
        f"max_records={MAX_RECORDS}, max_batches=1, tasks=[{task!r}], "
        f"inprocess_max_records={IN_PROCESS})"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert proc.returncode == (-9 if fault else 0), proc.stderr[-3000:]


def _unordered(spark, wh: Warehouse) -> tuple:
    """Sinks without offsets (two instances append in another order than one) and state."""
    sinks = tuple(
        sorted((p, k, json.dumps(v), ts) for p, _o, k, v, ts in topic_rows(spark, wh, t))
        for t in TOPICS["counts"]
    )
    return sinks + tuple(state_rows(spark, wh, "counts", s) for s in STORES["counts"])


def test_interleaved_instances_rewind_to_the_latest_point_every_table_holds(spark, tmp_path):
    """Tasks run by two instances: 0_0's batch 2 is recorded (progress) before 0_1's, but
    its tables are written after (a crash, then a replay). The point (0_0 at 2, 0_1 at 1)
    is the latest before stream time 4,000, but the sinks hold 0_1's batch 2 before 0_0's:
    no version holds exactly it, so the rewind goes to the point before, where every table
    can be restored; reprocessing then equals never rewinding."""
    never = _split_input(spark, tmp_path / "never")
    _run(never, tmp_path / "never-state", "counts")
    expected = _unordered(spark, never)

    wh = _split_input(spark, tmp_path / "wh")
    a, b = tmp_path / "a", tmp_path / "b"
    _run_task(wh, a, "0_0")
    _run_task(wh, b, "0_1")
    _run_task(wh, a, "0_0", fault="after_progress@2")
    _run_task(wh, b, "0_1")
    _run_task(wh, a, "0_0")  # the replay of 0_0's batch 2
    result = rewind(wh, "counts", before_stream_time=4_000, state_dir=str(a), say=_quiet)
    assert {str(t.task): t.batch for t in result.plan.tasks} == {"0_0": 1, "0_1": 1}
    assert "the latest point every table can be restored to" in result.plan.target_text
    for state, task in ((a, "0_0"), (b, "0_1")):
        _run(wh, state, "counts", tasks=[task])
    assert _unordered(spark, wh) == expected
