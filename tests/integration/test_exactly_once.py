"""Exactly-once under crashes: the engine process is SIGKILLed at each step of a batch's
commit, then rerun; the sinks hold every expected record exactly once and the state equals
an uninterrupted run's. Also: two runs of one app started together never both commit a task's
batch, and two processes running disjoint tasks of one app commit side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import APPS, FAST_TEST_CONF, events, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

N = 120
MAX_RECORDS = 15  # 4 or more batches per task: 2 partitions x 15 records per batch
REPO = Path(__file__).resolve().parents[2]

# Every step of the commit protocol, in order (see lakestate.checkpoint.faults and commit.py),
# with the batch to kill it in: each run replays batch 2 up to the next table, until batch
# 2 is complete (its last table written); batch 3 is then cut between the tables and the
# local commit, and batch 4 in the middle of the local commits.
FAULT_POINTS = [
    "after_progress@2",
    "after_sink:counts-out@2",
    "after_sink:sums-out@2",
    "after_changelog:counts@2",
    "after_changelog:sums@2",
    "after_tables@3",
    "mid_local_commit@4",
]
# Through Spark (a killed run restarts Spark: about 20 s each), one kill per commit step:
# the second sink and the second changelog are left out. The transport changes step 1 (the
# processing) only; steps 2-4 are the same driver code on every transport (commit.py), so
# after the first sink the rerun's skip-what-is-held path is the second sink's too, and
# after the last changelog nothing runs before ``after_tables`` (``_steps_2_and_3``): the
# same durable state as ``after_tables@3``. The in-process transports kill after each table.
SPARK_FAULT_POINTS = [
    p for p in FAULT_POINTS if p not in ("after_sink:sums-out@2", "after_changelog:sums@2")
]


def _run_in_subprocess(
    warehouse: Warehouse,
    state_dir: Path,
    fault: str | None,
    max_batches: int | None = None,
    app: str = "counts.py",
    max_records: int = MAX_RECORDS,
    inprocess_max_records: int | None = None,
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env["LAKESTATE_SPARK_MASTER"] = "local[2]"
    env["LAKESTATE_SPARK_CONF"] = json.dumps(FAST_TEST_CONF)
    # A SIGKILLed run's output is what it printed before the kill, none lost in a buffer.
    env["PYTHONUNBUFFERED"] = "1"
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "import sys; from lakestate import run_app; "
        f"run_app({str(APPS / app)!r}, warehouse={warehouse.root!r}, "
        f"state_dir={str(state_dir)!r}, max_records={max_records}, "
        f"max_batches={max_batches!r}, until_caught_up=True, "
        f"inprocess_max_records={inprocess_max_records!r})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


def _run_together(codes: list[str]) -> list[tuple[int, str, str]]:
    """Start one Python process per code snippet at once (each its own Spark on local[1]);
    their (return code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env.update(LAKESTATE_SPARK_MASTER="local[1]", LAKESTATE_SPARK_CONF=json.dumps(FAST_TEST_CONF))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for code in codes
    ]
    return [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]


def _uninterrupted(spark, tmp_path, records) -> Warehouse:
    """A warehouse where one uninterrupted run processed ``records``."""
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "ref"),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        say=lambda _: None,
    )
    return reference


def _results(spark, wh: Warehouse):
    return (
        topic_rows(spark, wh, "counts-out"),
        topic_rows(spark, wh, "sums-out"),
        state_rows(spark, wh, "counts", "counts"),
        state_rows(spark, wh, "counts", "sums"),
    )


# The transports of a batch's processing: inprocess_max_records and the app (the same
# topology; counts_in_workers.py's tasks are processed in two worker processes,
# runtime/worker_pool.py). Through Spark, the stores are the driver's here
# (counts_on_driver.py: ``lakestate.spark.state.owner=driver``, the path of an app with
# global tables on a local master), so that the local commit (step 4) is killed too;
# Spark's default on a local master, the executors' stores and files, goes through the
# same kills in test_executor_writes_faults.py.
TRANSPORTS = {
    "spark": (0, "counts_on_driver.py"),
    "in_process": (10**9, "counts.py"),
    "in_process_workers": (10**9, "counts_in_workers.py"),
}


@pytest.fixture(scope="session")
def counts_reference(spark, tmp_path_factory) -> tuple[list[dict], tuple]:
    """The records of the kill chains and the disjoint-tasks test, and the results one
    uninterrupted run of them gives (read only). Computed once per pytest process: every
    transport's chain is compared with the same independent run."""
    records = events(N, seed=11)
    wh = _uninterrupted(spark, tmp_path_factory.mktemp("exactly-once-reference"), records)
    return records, _results(spark, wh)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_kill_at_every_commit_step_then_rerun_gives_the_uninterrupted_result(
    spark, tmp_path, transport, counts_reference
):
    records, expected = counts_reference

    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    state = tmp_path / "state"
    # One chain of runs: each is killed at the next step of batch 2's commit (the replay of
    # the same batch), then the last run finishes the input.
    said = []
    limit, app = TRANSPORTS[transport]
    points = SPARK_FAULT_POINTS if transport == "spark" else FAULT_POINTS
    for point in points:
        proc = _run_in_subprocess(wh, state, point, app=app, inprocess_max_records=limit)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        said.append(proc.stdout)
    proc = _run_in_subprocess(wh, state, None, app=app, inprocess_max_records=limit)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said.append(proc.stdout)
    # Every run, replays included, went through the transport under test.
    where = "in Spark" if transport == "spark" else "in this process"
    assert all(f"transport: {where}" in out for out in said), said
    # Killed after the progress row, the next run replayed the recorded batch.
    assert "replaying the recorded batches" in said[points.index("after_progress@2") + 1]
    # Killed between the table commits and the local commit, the next run applied the
    # staged transactions instead of replaying or restoring.
    for point, batch in (("after_changelog:sums@2", 2), ("after_tables@3", 3)):
        if point in points:
            assert (
                f"applied the staged transaction of batch {batch}" in said[points.index(point) + 1]
            )
    assert "applied the staged transaction of batch 4" in said[-1]
    assert _results(spark, wh) == expected


def test_two_runs_started_at_once_never_both_commit(spark, tmp_path):
    records = events(60, seed=13)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    code = (
        "from lakestate import run_app; "
        f"run_app({str(APPS / 'counts.py')!r}, warehouse={wh.root!r}, "
        f"state_dir={str(tmp_path / 'state')!r}, max_records=20, until_caught_up=True)"
    )
    outcomes = _run_together([code, code])
    # Neither fails: a run that finds the other holding the lock does nothing (no wait was
    # asked for), or gets the lock after it and finds nothing new (test_lock_wait.py).
    assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    # Finish whatever is left, then every record counted exactly once.
    run_app(
        str(APPS / "counts.py"),
        warehouse=wh.root,
        state_dir=str(tmp_path / "state"),
        until_caught_up=True,
        say=lambda _: None,
    )
    positive = [r for r in records if r["value"]["amount"] > 0]
    assert len(topic_rows(spark, wh, "counts-out")) == len(positive)
    counts = {}
    for r in positive:
        counts[r["key"]] = counts.get(r["key"], 0) + 1
    assert state_rows(spark, wh, "counts", "counts") == counts


def test_two_instances_racing_for_a_batch_commit_it_once(spark, tmp_path):
    """Two runs with separate local state (two instances) race: Delta's txn conflict on the
    batch log lets one plan the batch; the other stops, and nothing is duplicated."""
    records = events(60, seed=14)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    codes = [
        "from lakestate import run_app; "
        f"run_app({str(APPS / 'counts.py')!r}, warehouse={wh.root!r}, "
        f"state_dir={str(tmp_path / name)!r}, max_records=1000, max_batches=1)"
        for name in ("a", "b")
    ]
    outcomes = _run_together(codes)
    positive = [r for r in records if r["value"]["amount"] > 0]
    assert len(topic_rows(spark, wh, "counts-out")) == len(positive), outcomes
    assert any(code == 0 for code, _, _ in outcomes), outcomes


def test_two_processes_with_disjoint_tasks_commit_side_by_side(spark, tmp_path, counts_reference):
    """Per-task batch identity: one process runs task 0_0, another 0_1, at the same time,
    each with its own state directory; both commit every batch, and the result equals a
    single process's."""
    records, want = counts_reference
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    codes = [
        "from lakestate import run_app; "
        f"r = run_app({str(APPS / 'counts.py')!r}, warehouse={wh.root!r}, "
        f"state_dir={str(tmp_path / task)!r}, max_records={MAX_RECORDS}, "
        f"until_caught_up=True, tasks=[{task!r}]); "
        "print('BATCHES', len(r.batches))"
        for task in ("0_0", "0_1")
    ]
    outcomes = _run_together(codes)
    assert [code for code, _, _ in outcomes] == [0, 0], [
        (code, out, _errors(err)) for code, out, err in outcomes
    ]
    assert all("BATCHES" in out and "BATCHES 0" not in out for _, out, _ in outcomes), outcomes
    got = _results(spark, wh)
    # Sinks: the same records per partition and key (the two processes' appends interleave,
    # so offsets across tasks differ from the single run's); state: the same.
    for g, w in zip(got[:2], want[:2], strict=True):
        assert _per_key(g) == _per_key(w)
    assert got[2:] == want[2:]


def _errors(stderr: str) -> str:
    """A process's stderr without Spark's and Ivy's chatter: its traceback, if any."""
    noise = ("WARN", "from central", "::", "confs:", "found ", "artifacts", "|", "---")
    return "\n".join(line for line in stderr.splitlines() if not any(n in line for n in noise))


def _per_key(rows):
    out: dict = {}
    for partition, _offset, key, value, ts in rows:
        out.setdefault((partition, key), []).append((value, ts))
    return out
