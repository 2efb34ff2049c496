"""The rebalance (scaleout/rebalance.py) on real delta-rs tables: the first generation, no change
when nothing changed (nothing written), a new instance gets warmups and not actives, a warmup
that caught up takes the active in a later generation which is fenced, a removed instance's
tasks go to the least-lagging one, a crash between a generation and its fence is finished by
the next rebalance (in a fresh process killed at the fault point, too), the probing interval,
``--force``; the generation history (``assign/history.py``) and the lag reports
(``scaleout/lag_reports.py``) it reads and writes; and ``lakestate rebalance`` in a fresh process,
without pyspark.

The tasks' committed offsets are progress rows recorded as a run records them (no table
named: complete); the instances' local state is what their lag reports say.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import lakestate as ls
import pytest
from deltalake import DeltaTable
from engine_helpers import CLI_PROBE
from lakestate import rebalance
from lakestate.assign import Assignment, history
from lakestate.assign.history import ConcurrentRebalanceError
from lakestate.checkpoint import progress
from lakestate.checkpoint.progress import TaskProgress
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.errors import StreamsException
from lakestate.io import topics
from lakestate.scaleout import lag_reports, ownership, state_cleanup
from lakestate.scaleout.lag_reports import Report
from lakestate.scaleout.rebalance import NO_CHANGE
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
APP = "shop"
TASKS = [TaskId(0, p) for p in range(4)]
ENDS = {t: 1000 + 100 * t.partition for t in TASKS}  # each task's committed offset


def _quiet(_: str) -> None:
    pass


def _app(*names: str, **config) -> ls.App:
    b = ls.StreamsBuilder()
    b.stream("events").group_by_key().count(ls.Materialized.as_("counts")).to_stream().to("out")
    if names:
        config["lakestate.instances"] = [{"name": n} for n in names]
    return ls.App(APP, b.build(), config)


@pytest.fixture
def wh(tmp_path) -> Warehouse:
    """A warehouse whose app has 4 tasks, each with a committed batch (offsets ENDS)."""
    wh = Warehouse(tmp_path / "wh")
    topics.topic(wh, "events").create(len(TASKS))
    path = wh.progress_path(APP)
    progress.ensure_table(path, APP)
    rows = [
        TaskProgress(t, 1, "run-1", 1, {"events": (0, e)}, {"events": e}, 5, e)
        for t, e in ENDS.items()
    ]
    progress.record(path, APP, rows, {})
    return wh


def _report(
    instance: str, task: TaskId, behind: int | None, generation: int = 1, at: int = 10
) -> Report:
    offsets = None if behind is None else {"events": ENDS[task] - behind}
    return Report(
        instance,
        task,
        generation,
        "none",
        None if behind is None else 1,
        offsets,
        1,
        behind,
        1,
        at,
        "r",
    )


def _versions(wh: Warehouse) -> tuple[int, int]:
    return (
        DeltaTable(history.assignment_path(wh, APP)).version(),
        DeltaTable(wh.progress_path(APP)).version(),
    )


def _in_force(wh: Warehouse) -> dict[TaskId, str | None]:
    return ownership.owners_in_force(wh, APP, TASKS)


def test_first_generation_gives_one_instance_every_task_and_puts_it_in_force(wh):
    assert history.latest(wh, APP) is None and _in_force(wh) == dict.fromkeys(TASKS, None)
    result = rebalance(_app(), wh, now_ms=1_000, say=_quiet)
    assert result.changed and result.reason == "first" and result.old is None
    gen = history.latest(wh, APP)
    assert gen == result.new and gen.number == 1 and gen.reason == "first" and gen.at_ms == 1_000
    assert gen.assignment.active == dict.fromkeys(TASKS, "default")
    assert gen.instances == ({"name": "default", "queue": "default", "capacity": 1},)
    assert _in_force(wh) == dict.fromkeys(TASKS, "default")
    assert ownership.owner_epochs(wh.progress_path(APP), APP, TASKS) == dict.fromkeys(TASKS, 1)


def test_first_generation_over_several_instances_without_lag_reports_spreads_the_tasks(wh):
    # The tasks have committed state but no instance reported a lag: none holds them, so
    # the first generation spreads them round-robin over the sorted tasks, with nothing to
    # warm up, instead of giving every task to the first instance.
    result = rebalance(_app("a", "b"), wh, now_ms=1_000, say=_quiet)
    assert result.reason == "first" and result.changed
    active = result.new.assignment.active
    assert [active[t] for t in TASKS] == ["a", "b", "a", "b"]
    assert not result.new.assignment.warmup and not result.new.assignment.probing_rebalance_needed
    assert _in_force(wh) == active


def test_nothing_changed_writes_nothing(wh):
    app = _app("a")
    rebalance(app, wh, now_ms=1_000, say=_quiet)
    lag_reports.write(wh, APP, [_report("a", t, 0) for t in TASKS])
    before = _versions(wh)
    again = rebalance(app, wh, now_ms=2_000, say=_quiet)
    assert not again.changed and again.new is None and again.old.number == 1
    # a's reports made it caught up everywhere (generation 1 knew no lags): computed again,
    # the same assignment, so nothing is written, and the reason says no change.
    assert again.reason == NO_CHANGE and again.recomputed == "lags changed"
    assert again.lags == {"a": dict.fromkeys(TASKS, 0)}
    assert not rebalance(app, wh, now_ms=3_000, say=_quiet).changed
    assert _versions(wh) == before
    assert [g.number for g in history.history(wh, APP)] == [1]


def test_scale_up_warms_up_first_then_moves_the_caught_up_task_and_fences_it(wh):
    rebalance(_app("a"), wh, now_ms=1_000, say=_quiet)
    lag_reports.write(wh, APP, [_report("a", t, 0) for t in TASKS])
    # b joins: it holds nothing, so it gets warmups, not actives.
    two = _app("a", "b")
    _, progress_version = _versions(wh)
    up = rebalance(two, wh, now_ms=2_000, say=_quiet)
    assert up.changed and up.reason == "instances changed" and up.new.number == 2
    gen = up.new.assignment
    assert gen.active == dict.fromkeys(TASKS, "a")
    warm = sorted(t for t, w in gen.warmup.items() if "b" in w)
    assert warm and gen.probing_rebalance_needed
    assert not up.fenced and _versions(wh)[1] == progress_version  # no owner changed: no fence
    assert _in_force(wh) == dict.fromkeys(TASKS, "a")
    # b's warmup is still far behind: nothing to do yet (the probing interval has not passed).
    lag_reports.write(wh, APP, [_report("b", t, 50_000, generation=2) for t in warm])
    assert rebalance(two, wh, now_ms=3_000, say=_quiet).reason == NO_CHANGE
    # b's warmups caught up: a later generation moves their actives to b, and fences them.
    lag_reports.write(wh, APP, [_report("b", t, 0, generation=2, at=20) for t in warm])
    moved = rebalance(two, wh, now_ms=4_000, say=_quiet)
    assert moved.changed and moved.reason == "lags changed" and moved.new.number == 3
    now_b = sorted(t for t, i in moved.new.assignment.active.items() if i == "b")
    assert now_b and set(now_b) <= set(warm)
    assert moved.fenced == dict.fromkeys(now_b, 3)
    assert _in_force(wh) == {t: ("b" if t in now_b else "a") for t in TASKS}
    epochs = ownership.owner_epochs(wh.progress_path(APP), APP, TASKS)
    assert epochs == {t: (3 if t in now_b else 1) for t in TASKS}


def test_a_removed_instance_s_tasks_go_to_the_least_lagging(wh):
    three = _app("a", "b", "c")
    old = Assignment(
        active={TASKS[0]: "a", TASKS[1]: "a", TASKS[2]: "b", TASKS[3]: "c"},
        standby={},
        warmup={},
        probing_rebalance_needed=False,
    )
    history.write_generation(
        wh, APP, old, [{"name": n, "queue": n, "capacity": 1} for n in "abc"], "first", 1_000
    )
    rebalance(three, wh, now_ms=1_500, say=_quiet)  # puts generation 1 in force
    assert _in_force(wh)[TASKS[0]] == "a"
    # b and c hold a's tasks as well, b further behind on 0_0 and c on 0_1.
    lag_reports.write(
        wh,
        APP,
        [_report("a", t, 0) for t in TASKS[:2]]
        + [_report("b", TASKS[0], 20_000), _report("c", TASKS[0], 15_000)]
        + [_report("b", TASKS[1], 12_000), _report("c", TASKS[1], 30_000)]
        + [_report("b", TASKS[2], 0), _report("c", TASKS[3], 0)],
    )
    down = rebalance(_app("b", "c"), wh, now_ms=2_000, say=_quiet)
    assert down.changed and down.reason == "instances changed"
    active = down.new.assignment.active
    assert active[TASKS[0]] == "c" and active[TASKS[1]] == "b"
    assert active[TASKS[2]] == "b" and active[TASKS[3]] == "c"
    assert down.fenced == {TASKS[0]: 2, TASKS[1]: 2}
    assert _in_force(wh) == active


def test_a_generation_left_unfenced_is_put_in_force_by_the_next_rebalance(wh):
    app = _app("a", "b")
    rebalance(app, wh, now_ms=1_000, say=_quiet)
    first = history.latest(wh, APP).assignment
    # A rebalance wrote generation 2 (two tasks change owner) and crashed before its fence.
    flipped = {t: ("b" if i == "a" else "a") for t, i in first.active.items()}
    moved = dict(list(flipped.items())[:2])
    second = Assignment({**first.active, **moved}, {}, {}, False)
    history.write_generation(
        wh, APP, second, [{"name": n, "queue": n, "capacity": 1} for n in "ab"], "requested", 1_500
    )
    assert _in_force(wh) == first.active  # not in force
    result = rebalance(app, wh, now_ms=2_000, say=_quiet)
    assert result.fenced == dict.fromkeys(moved, 2)
    assert _in_force(wh) == second.active
    epochs = ownership.owner_epochs(wh.progress_path(APP), APP, TASKS)
    assert epochs == {t: (2 if t in moved else 1) for t in TASKS}


def test_a_second_writer_of_the_same_generation_fails_and_writes_nothing(wh, monkeypatch):
    assignment = Assignment(dict.fromkeys(TASKS, "a"), {}, {}, False)
    described = [{"name": "a", "queue": "a", "capacity": 1}]
    assert history.write_generation(wh, APP, assignment, described, "first", 1) == 1
    # Another rebalance read the table before this one committed generation 2.
    stale = history.delta_commits.open_table(history.assignment_path(wh, APP))
    assert history.write_generation(wh, APP, assignment, described, "requested", 2) == 2
    monkeypatch.setattr(history.delta_commits, "open_table", lambda path: stale)
    with pytest.raises(
        ConcurrentRebalanceError, match="app shop: another rebalance wrote generation 2"
    ):
        history.write_generation(wh, APP, assignment, described, "requested", 3)
    monkeypatch.undo()
    # A generation computed from generation 1 cannot be written after generation 2.
    with pytest.raises(
        ConcurrentRebalanceError,
        match="wrote generation 2 meanwhile; this one, computed as generation 2",
    ):
        history.write_generation(wh, APP, assignment, described, "requested", 3, number=2)
    assert [(g.number, g.reason, g.at_ms) for g in history.history(wh, APP)] == [
        (1, "first", 1),
        (2, "requested", 2),
    ]
    assert history.generation(wh, APP, 2).assignment == assignment
    assert history.generation(wh, APP, 3) is None


def test_a_rebalance_that_loses_to_another_computes_again_from_its_generation(wh):
    """Another rebalance writes generation 2 after this one read generation 1 and before
    it writes: this one's write fails, it reads generation 2 and finds nothing to change."""
    from lakestate.checkpoint import faults

    rebalance(_app("a"), wh, now_ms=1_000, say=_quiet)
    lag_reports.write(wh, APP, [_report("a", t, 0) for t in TASKS])
    two = _app("a", "b")
    other: list = []

    def another_rebalance(generation: int) -> None:
        if not other:  # once: the other rebalance passes this point too
            other.append(None)
            other[0] = rebalance(two, wh, now_ms=2_000, say=_quiet)

    said: list[str] = []
    with faults.hook("rebalance_before_generation", another_rebalance):
        result = rebalance(two, wh, now_ms=2_001, say=said.append)
    assert other[0].new.number == 2 and other[0].reason == "instances changed"
    assert any("another rebalance wrote generation 2 meanwhile" in line for line in said)
    assert not result.changed and result.old == history.latest(wh, APP) == other[0].new
    assert [g.number for g in history.history(wh, APP)] == [1, 2]


def test_probing_rebalance_waits_for_its_interval(wh):
    app = _app("a", "b", **{"probing.rebalance.interval.ms": 60_000})
    rebalance(_app("a"), wh, now_ms=1_000, say=_quiet)
    lag_reports.write(wh, APP, [_report("a", t, 0) for t in TASKS])
    up = rebalance(app, wh, now_ms=2_000, say=_quiet)
    assert up.new.assignment.probing_rebalance_needed
    warm = sorted(up.new.assignment.warmup)
    lag_reports.write(wh, APP, [_report("b", t, 40_000, generation=2) for t in warm])
    before = _versions(wh)
    assert rebalance(app, wh, now_ms=2_000 + 59_999, say=_quiet).reason == NO_CHANGE
    due = rebalance(app, wh, now_ms=2_000 + 60_000, say=_quiet)
    if due.changed:
        assert due.reason == "probing"
    else:  # the same assignment again: nothing written, and no change said
        assert due.reason == NO_CHANGE and due.recomputed == "probing"
        assert _versions(wh) == before
    forced = rebalance(app, wh, now_ms=2_000 + 1, force=True, say=_quiet)
    assert "requested" in (forced.reason, forced.recomputed)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"max.warmup.replicas": 0}, "app shop: max.warmup.replicas must be >= 1"),
        (
            {"probing.rebalance.interval.ms": "soon"},
            "app shop: config 'probing.rebalance.interval.ms'",
        ),
        ({"lakestate.instances": [{"name": "a", "capacity": 0}]}, "instance 'a': key 'capacity'"),
    ],
)
def test_a_bad_config_is_refused_before_anything_is_written(wh, config, named):
    rebalance(_app("a"), wh, now_ms=1_000, say=_quiet)
    lag_reports.write(wh, APP, [_report("a", t, 0) for t in TASKS])
    before = _versions(wh)
    with pytest.raises(StreamsException, match=named):
        rebalance(_app(**config), wh, now_ms=2_000, force=True, say=_quiet)
    assert _versions(wh) == before


def test_lags_are_recomputed_against_the_offsets_committed_now(wh):
    lag_reports.write(wh, APP, [_report("a", TASKS[0], 5), _report("a", TASKS[1], None)])
    lag_reports.write(wh, APP, [_report("a", TASKS[0], 0, at=30)])  # a's newer report of 0_0
    newest = lag_reports.latest_by_instance(wh, APP)
    assert set(newest) == {"a"} and newest["a"][TASKS[0]].lag == 0
    # The task committed 70 more records since: the store is 70 behind now.
    committed = {TASKS[0]: {"events": ENDS[TASKS[0]] + 70, "globals@0": 9}, TASKS[1]: {"events": 3}}
    assert lag_reports.lags(newest, committed) == {"a": {TASKS[0]: 70, TASKS[1]: None}}
    assert lag_reports.lag_of({"events": 10}, {"events": 4}) is None  # ahead of Delta: unusable
    with pytest.raises(ValueError, match="unknown role 'leader'"):
        lag_reports.write(
            wh, APP, [Report("a", TASKS[0], 1, "leader", None, None, 0, None, 1, 1, "r")]
        )


def test_a_task_that_committed_nothing_is_caught_up_everywhere(tmp_path):
    # Kafka's lag of a task whose changelogs are empty is 0 on every client: nothing to warm
    # up, so no instance is "lagging" on it and no warmup is spent on it.
    wh = Warehouse(tmp_path / "wh")
    topics.topic(wh, "events").create(len(TASKS))
    path = wh.progress_path(APP)
    progress.ensure_table(path, APP)
    idle = TASKS[3]
    rows = [
        TaskProgress(t, 1, "run-1", 1, {"events": (0, e)}, {"events": e}, 5, e)
        for t, e in ENDS.items()
        if t != idle
    ]
    progress.record(path, APP, rows, {})
    rebalance(_app("a"), wh, now_ms=1_000, say=_quiet)
    lag_reports.write(wh, APP, [_report("a", t, 0) for t in TASKS if t != idle])
    up = rebalance(_app("a", "b"), wh, now_ms=2_000, say=_quiet)
    assert up.lags["a"][idle] == 0 and up.lags["b"][idle] == 0
    assert all(up.lags["b"][t] is None for t in TASKS if t != idle)
    assert idle not in up.new.assignment.warmup


def test_compaction_keeps_each_instance_s_newest_report_per_task(wh, monkeypatch):
    for at in (10, 20, 30):
        lag_reports.write(wh, APP, [_report(n, t, at, at=at) for n in "ab" for t in TASKS[:2]])
    lag_reports.write(wh, APP, [_report("a", TASKS[3], None, at=5)])
    assert not lag_reports.compact(wh, APP, min_files=5)  # 4 files: not yet
    lag_reports.write(wh, APP, [_report("b", TASKS[0], 0, at=40)])
    newest = lag_reports.latest_by_instance(wh, APP)
    assert lag_reports.compact(wh, APP, min_files=5)
    table = DeltaTable(lag_reports.reports_path(wh, APP))
    assert table.to_pyarrow_table().num_rows == 5 and len(table.file_uris()) == 1
    assert lag_reports.latest_by_instance(wh, APP) == newest
    assert newest["b"][TASKS[0]].at_ms == 40 and newest["a"][TASKS[1]].at_ms == 30
    # A run reports after a compaction read the table, before it commits: its report stays.
    read = lag_reports.delta_commits.open_table(lag_reports.reports_path(wh, APP))
    lag_reports.write(wh, APP, [_report("b", TASKS[1], 0, at=50)])
    monkeypatch.setattr(lag_reports.delta_commits, "open_table", lambda path: read)
    assert lag_reports.compact(wh, APP, min_files=1)
    monkeypatch.undo()
    after = lag_reports.latest_by_instance(wh, APP)
    assert after["b"][TASKS[1]].at_ms == 50 and after["a"] == newest["a"]
    # A rebalance compacts once the table has COMPACT_FILES files.
    monkeypatch.setattr(lag_reports, "COMPACT_FILES", 3)
    lag_reports.write(wh, APP, [_report("a", TASKS[2], 0, at=60)])
    assert len(DeltaTable(lag_reports.reports_path(wh, APP)).file_uris()) == 3
    before = lag_reports.latest_by_instance(wh, APP)
    rebalance(_app("a", "b"), wh, now_ms=1_000, say=_quiet)
    assert len(DeltaTable(lag_reports.reports_path(wh, APP)).file_uris()) == 1
    assert lag_reports.latest_by_instance(wh, APP) == before


# -- the command, in a fresh process --------------------------------------------------------

_NO_PYSPARK = CLI_PROBE


def _module(tmp_path: Path, *names: str) -> str:
    path = tmp_path / "shop.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import lakestate as ls
            b = ls.StreamsBuilder()
            b.stream("events").group_by_key().count(ls.Materialized.as_("counts")).to_stream().to("out")
            app = ls.App("shop", b.build(), {{"lakestate.instances": {[{"name": n} for n in names]!r}}})
            """
        )
    )
    return str(path)


def _cli(wh: Warehouse, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib")}
    env.pop("LAKESTATE_FAULT", None)
    if fault:
        env["LAKESTATE_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-c", _NO_PYSPARK, "--warehouse", wh.root, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_the_command_prints_old_and_new_per_task_without_pyspark(wh, tmp_path):
    first = _cli(wh, "rebalance", _module(tmp_path, "a"))
    assert first.returncode == 0, first.stderr
    assert "PYSPARK False" in first.stderr
    lines = first.stdout.splitlines()
    assert "generation 1 (first)" in lines
    table = lines[lines.index("generation 1 (first)") + 1 :]
    assert table[0].split() == ["task", "active", "warmup", "standby", "lag", "a"]
    # No generation before: each task's active goes from none to a; a reported no lags yet.
    assert [line.split() for line in table[1:]] == [
        [str(t), "-", "->", "a", "-", "-", "-"] for t in TASKS
    ]
    lag_reports.write(wh, APP, [_report("a", t, 0) for t in TASKS])
    same_run = _cli(wh, "rebalance", _module(tmp_path, "a"))
    same = same_run.stdout.splitlines()
    assert same[0] == "no change (generation 1 stays)"
    # The lags moved but the assignment did not: nothing says "lags changed".
    assert "lags changed" not in same_run.stdout + same_run.stderr
    assert [line.split() for line in same[-len(TASKS) :]] == [
        [str(t), "a", "-", "-", "0"] for t in TASKS
    ]
    # b joins: the JSON names the old and the new generation and each instance's lags.
    up = _cli(wh, "--json", "rebalance", _module(tmp_path, "a", "b"))
    assert up.returncode == 0, up.stderr
    doc = json.loads(up.stdout)
    assert doc["changed"] and doc["reason"] == "instances changed"
    assert doc["old"]["generation"] == 1 and doc["new"]["generation"] == 2
    assert doc["lags"] == {"a": {str(t): 0 for t in TASKS}, "b": {str(t): None for t in TASKS}}
    assert {t["active"] for t in doc["new"]["tasks"].values()} == {"a"}
    assert any("b" in t["warmup"] for t in doc["new"]["tasks"].values())


def test_a_rebalance_killed_between_generation_and_fence_is_finished_by_the_next(wh, tmp_path):
    assert _cli(wh, "rebalance", _module(tmp_path, "a")).returncode == 0
    lag_reports.write(wh, APP, [_report(n, t, 0) for n in "ab" for t in TASKS])
    killed = _cli(wh, "rebalance", _module(tmp_path, "a", "b"), fault="rebalance_after_generation")
    assert killed.returncode == -9
    latest = history.latest(wh, APP)
    assert latest.number == 2
    moving = {t for t, i in latest.assignment.active.items() if i == "b"}
    assert moving  # b is caught up everywhere: it gets its share of actives at once
    assert {t for t, i in _in_force(wh).items() if i == "b"} == set()  # not in force
    again = _cli(wh, "--json", "rebalance", _module(tmp_path, "a", "b"))
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["fenced"] == {str(t): 2 for t in sorted(moving)}
    assert _in_force(wh) == latest.assignment.active


# -- with real runs -------------------------------------------------------------------------


def _counts_app(folder: Path, names: list[str], state: Path, **extra: object) -> str:
    """The counts test app with these instances (state dirs under ``state``) and ``extra``
    config, in ``folder``."""
    from engine_helpers import APPS

    config = {
        "statestore.uncommitted.max.records": 100_000,
        "lakestate.instances": [{"name": n, "state_dir": str(state / n)} for n in names],
        **extra,
    }
    source = (APPS / "counts.py").read_text()
    source = source.replace('{"statestore.uncommitted.max.records": 100_000}', repr(config))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "counts_app.py"
    path.write_text(source)
    return str(path)


def _sinks_and_state(wh: Warehouse) -> tuple[dict, dict]:
    """Each sink's records (partition, key, value, timestamp), sorted (two instances'
    appends interleave), and each store's live entries per task, from its changelog."""
    from lakestate.checkpoint import changelog

    sinks = {
        topic: sorted(
            (r["partition"], r["key"], r["value"], r["timestamp"])
            for r in DeltaTable(wh.topic_path(topic)).to_pyarrow_table().to_pylist()
        )
        for topic in ("counts-out", "sums-out")
    }
    state = {
        (store, p): changelog.read_state(wh.changelog_path("counts", store), p, 10**9)
        for store in ("counts", "sums")
        for p in (0, 1)
    }
    return sinks, state


def test_scale_up_with_real_runs_moves_a_task_only_after_its_warmup_caught_up(tmp_path):
    """One instance, then two: the rebalance gives b a warmup, b's run warms it up and
    reports, the next rebalance moves the task to b and fences it; a stops processing it,
    b processes it from its warm store; sinks and state equal one instance's run."""
    from engine_helpers import events
    from lakestate import run_app

    batches = [events(120, seed=21), events(60, seed=22), events(60, seed=23)]
    for i, batch in enumerate(batches):  # later records are later in time
        for r in batch:
            r["timestamp"] += 100_000 * i
    wh = Warehouse(tmp_path / "wh")
    state = tmp_path / "state"
    one = _counts_app(tmp_path / "one", ["a"], state)
    # a keeps a store it lost until its next run: state.cleanup.delay.ms 0.
    two = _counts_app(tmp_path / "two", ["a", "b"], state, **{"state.cleanup.delay.ms": 0})
    t0, t1 = TaskId(0, 0), TaskId(0, 1)

    def run(app: str, instance: str) -> None:
        run_app(
            app,
            warehouse=wh.root,
            instance=instance,
            until_caught_up=True,
            max_records=15,
            inprocess_max_records=10**9,
            say=_quiet,
        )

    def owners() -> dict:
        return ownership.owners_in_force(wh, "counts", [t0, t1])

    topics.topic(wh, "events").create(2)
    topics.topic(wh, "events").append(batches[0])
    assert rebalance(one, wh, say=_quiet).reason == "first"
    run(one, "a")
    up = rebalance(two, wh, say=_quiet)
    assert up.reason == "instances changed" and owners() == {t0: "a", t1: "a"}
    warm = {t for t, w in up.new.assignment.warmup.items() if "b" in w}
    assert warm and set(up.new.assignment.active.values()) == {"a"}
    # No report of b yet: a rebalance moves nothing.
    assert not rebalance(two, wh, say=_quiet).changed
    topics.topic(wh, "events").append(batches[1])
    run(two, "a")
    run(two, "b")  # warms up, reports
    newest = lag_reports.latest_by_instance(wh, "counts")["b"]
    assert {t for t, r in newest.items() if r.role == "warmup" and r.lag == 0} == warm
    moved = rebalance(two, wh, say=_quiet)
    assert moved.changed and moved.reason == "lags changed"
    to_b = {t for t, i in moved.new.assignment.active.items() if i == "b"}
    assert to_b and to_b <= warm
    assert moved.fenced == dict.fromkeys(to_b, moved.new.number)
    assert {t for t, i in owners().items() if i == "b"} == to_b

    # The moved task's batches are b's from now on (a run's id is in its instance's reports).
    def batches_by_instance() -> dict[tuple[str, int], str]:
        runs = {
            r["run_id"]: r["instance"]
            for r in DeltaTable(lag_reports.reports_path(wh, "counts"))
            .to_pyarrow_table()
            .to_pylist()
        }
        rows = DeltaTable(wh.progress_path("counts")).to_pyarrow_table().to_pylist()
        return {(r["task"], r["batch_id"]): runs[r["run_id"]] for r in rows}

    before = batches_by_instance()
    assert set(before.values()) == {"a"}
    topics.topic(wh, "events").append(batches[2])
    run(two, "a")
    run(two, "b")
    after = {k: i for k, i in batches_by_instance().items() if k not in before}
    assert {task for task, _ in after} == {"0_0", "0_1"}  # both tasks had new batches
    assert after == {(task, b): ("b" if TaskId.parse(task) in to_b else "a") for task, b in after}
    assert lag_reports.latest_by_instance(wh, "counts")["b"][min(to_b)].role == "active"
    # a's store of a moved task: released by a's first run without a role for it (kept,
    # in case it comes back), deleted by the next one once state.cleanup.delay.ms passed;
    # b's stores and a's own stay.
    gone = [TaskDir(state / "a", "counts", t).path for t in sorted(to_b)]
    assert all((p / state_cleanup.RELEASED_FILE).exists() for p in gone)
    run(two, "a")
    assert not any(p.exists() for p in gone)
    assert all(TaskDir(state / "b", "counts", t).exists() for t in to_b)
    assert all(TaskDir(state / "a", "counts", t).exists() for t in {t0, t1} - to_b)
    # a's report says so: no store (lag None), so no rebalance counts its older reports.
    newest_a = lag_reports.latest_by_instance(wh, "counts")["a"]
    assert all(newest_a[t].lag is None and newest_a[t].role == "none" for t in to_b)
    # The same sinks and state as one instance that processed everything.
    ref = Warehouse(tmp_path / "reference")
    topics.topic(ref, "events").create(2)
    for batch in batches:
        topics.topic(ref, "events").append(batch)
    run_app(
        _counts_app(tmp_path / "ref", ["a"], tmp_path / "ref-state"),
        warehouse=ref.root,
        until_caught_up=True,
        max_records=15,
        inprocess_max_records=10**9,
        say=_quiet,
    )
    assert _sinks_and_state(wh) == _sinks_and_state(ref)
