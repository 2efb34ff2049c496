"""``lakestate status``: every task of every sub-topology, its offsets, last batch and the
totals of its metrics per operator, read in a fresh process without a JVM.

Real runs (in process: delta-rs reads, the driver processes, real Delta and RocksDB) of a
dedup app and a windowed app with suppression, many batches each, until caught up; the
status totals must equal what the test driver counts on the same input, one task per
partition, and what the sinks hold."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from typing import Any

from engine_helpers import APPS, CLI_PROBE, produce, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io import delta_commits, topics
from lakestate.io.partitioner import partition_for
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

PARTITIONS = 3


def _status(warehouse, state_dir, app: str, as_json: bool = True) -> tuple[Any, str]:
    """``lakestate --json status`` (or plain ``status``) in a fresh process: the document
    (or the text), and its stderr, which says whether pyspark was imported (it must not be)."""
    options = ["--json"] if as_json else []
    args = ["--warehouse", warehouse.root, *options, "status", app, "--state-dir", str(state_dir)]
    proc = subprocess.run(
        [sys.executable, "-c", CLI_PROBE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=state_dir.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (json.loads(proc.stdout) if as_json else proc.stdout), proc.stderr


def _driver_metrics(app_file: str, records: list[dict]) -> dict[int, dict]:
    """Per partition, the test driver's metrics (by scope) for the partition's records."""
    app = load_app(APPS / app_file)
    found = {}
    for p in range(PARTITIONS):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            topic = d.create_input_topic("events")
            for r in records:
                if partition_for(r["key"], PARTITIONS) == p:
                    topic.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            found[p] = d.scoped_metrics()
    return found


def _run(warehouse, state_dir, app_file: str, max_records: int):
    return run_app(
        str(APPS / app_file),
        warehouse=warehouse.root,
        state_dir=str(state_dir),
        until_caught_up=True,
        max_records=max_records,
        say=lambda _: None,
    )


def _scoped(task: dict) -> dict:
    return {k: v for k, v in task["metrics"].items() if k != "task"}


def test_dedup_status_shows_totals_over_every_batch_and_tasks_that_never_ran(
    spark, warehouse, tmp_path
):
    rng = random.Random(5)
    # Keys of partitions 0 and 1 only: task 0_2 has nothing to read and never commits.
    keys = [k for k in (f"k{i}" for i in range(40)) if partition_for(k, PARTITIONS) != 2][:12]
    records = [
        {"key": rng.choice(keys), "value": {"n": i}, "timestamp": 1_000 + i * 700}
        for i in range(300)
    ]
    produce(spark, warehouse, "events", records, PARTITIONS)
    state = tmp_path / "state"
    result = _run(warehouse, state, "dedup.py", max_records=25)
    assert result.caught_up and len(result.batches) > 4
    # Records for the idle task arrive after the run: it has lag and no batch.
    late_keys = [k for k in (f"x{i}" for i in range(40)) if partition_for(k, PARTITIONS) == 2]
    topics.topic(warehouse, "events").append([(k, {"n": -1}, 500_000) for k in late_keys[:4]])

    doc, stderr = _status(warehouse, state, str(APPS / "dedup.py"))
    assert "PYSPARK False" in stderr
    assert doc["app"] == "dedup"
    tasks = {t["task"]: t for t in doc["tasks"]}
    assert sorted(tasks) == ["0_0", "0_1", "0_2"]
    idle = tasks["0_2"]
    assert idle["last_batch"] == 0 and idle["last_commit_at"] is None
    assert idle["inputs"] == [
        {
            "topic": "events",
            "partition": 2,
            "committed": 0,
            "end": 4,
            "lag": 4,
            "local_offset": None,
        }
    ]
    assert idle["metrics"] == {}

    driver = _driver_metrics("dedup.py", records)
    out = topic_rows(spark, warehouse, "unique-events")
    for p in (0, 1):
        task = tasks[f"0_{p}"]
        mine = sum(1 for r in records if partition_for(r["key"], PARTITIONS) == p)
        (inp,) = task["inputs"]
        assert (inp["committed"], inp["end"], inp["lag"], inp["local_offset"]) == (
            mine,
            mine,
            0,
            mine,
        )
        assert task["last_batch"] == max(b.get(f"0_{p}", 0) for b in result.batches)
        assert task["last_commit_at"] > 0 and task["stream_time"] > 0
        assert _scoped(task) == driver[p]
        nodes = task["metrics"]["nodes"]
        (node,) = [m for n, m in nodes.items() if n.startswith("KSTREAM-DEDUPLICATE-")]
        (source,) = [m for n, m in nodes.items() if n.startswith("KSTREAM-SOURCE-")]
        forwarded = sum(1 for r in out if r[0] == p)
        assert node["dedup-records-forwarded"] == node["forward-total"] == forwarded
        assert source == {"forward-total": mine}
        assert node["dedup-duplicates-dropped"] == mine - forwarded > 0
        assert task["metrics"]["stores"]["seen-keys"]["dedup-store-size"] > 0
        assert task["metrics"]["task"] == {"dropped-records": 0}

    # By name, without the module: the same tasks (the idle one from its topic's partitions).
    by_name, _ = _status(warehouse, state, "dedup")
    assert by_name == doc

    # The same as text: a row per task and input, a row per task and operator or store.
    text, _ = _status(warehouse, state, "dedup", as_json=False)
    lines = [line.split() for line in text.splitlines()]
    assert text.startswith("app dedup: 3 tasks in 1 sub-topologies, lag 4, dropped-records 0;")
    assert ["0_2", "-", "-", "-", "events[2]", "0", "4", "4", "-"] in lines
    for p in (0, 1):
        nodes = tasks[f"0_{p}"]["metrics"]["nodes"]
        ((node_name, node),) = [(n, m) for n, m in nodes.items() if "DEDUPLICATE" in n]
        ((source_name, source),) = [(n, m) for n, m in nodes.items() if "SOURCE" in n]
        ((store_name, store),) = tasks[f"0_{p}"]["metrics"]["stores"].items()
        forwarded, duplicates = node["dedup-records-forwarded"], node["dedup-duplicates-dropped"]
        assert [f"0_{p}", node_name, str(forwarded), "-", str(duplicates), "-", "-", "-"] in lines
        read = str(source["forward-total"])
        assert [f"0_{p}", source_name, read, "-", "-", "-", "-", "-"] in lines
        size = str(store["dedup-store-size"])
        assert [f"0_{p}", store_name, "(store)", "-", "-", "-", "-", size, "-"] in lines


def test_windowed_status_equals_the_driver_per_operator(spark, warehouse, tmp_path):
    rng = random.Random(11)
    records = []
    for i in range(400):
        ts = 1_000 + i * 7
        if i % 37 == 5:
            ts -= 400  # too late for its window (grace 30 ms): dropped and counted
        records.append({"key": f"u{rng.randrange(9)}", "value": {"amount": i % 4}, "timestamp": ts})
    produce(spark, warehouse, "events", records, PARTITIONS)
    state = tmp_path / "state"
    result = _run(warehouse, state, "windowed.py", max_records=30)
    assert result.caught_up and len(result.batches) > 4

    doc, stderr = _status(warehouse, state, str(APPS / "windowed.py"))
    assert "PYSPARK False" in stderr
    driver = _driver_metrics("windowed.py", records)
    late = ran = 0
    for task in doc["tasks"]:
        p = task["partition"]
        assert all(i["lag"] == 0 for i in task["inputs"])
        assert _scoped(task) == driver[p]
        if task["last_batch"] == 0:  # no key of this partition: nothing to count
            assert task["metrics"] == {} and driver[p] == {}
            continue
        ran += 1
        nodes = task["metrics"]["nodes"]
        late += sum(n.get("late-record-drop-total", 0) for n in nodes.values())
        dropped = sum(n.get("dropped-records", 0) for n in nodes.values())
        assert task["metrics"]["task"]["dropped-records"] == dropped
        # The suppression buffers' figures are their stores'.
        assert "suppression-buffer-count-current" in task["metrics"]["stores"]["final-store"]
    assert late > 0 and ran >= 2


def test_an_app_that_never_ran_lists_the_tasks_its_module_knows(spark, warehouse, tmp_path):
    """Before any run: the first sub-topology's tasks, from its input topic's partitions,
    with all of the input as lag; the one reading the repartition topic (not created yet)
    is named as unresolved. By name there is nothing to go by."""
    records = [{"key": f"k{i}", "value": {"user": f"u{i % 3}"}, "timestamp": i} for i in range(30)]
    produce(spark, warehouse, "events", records, 2)
    state = tmp_path / "state"
    state.mkdir()
    doc, stderr = _status(warehouse, state, str(APPS / "regroup.py"))
    assert "PYSPARK False" in stderr
    assert doc["unresolved_subtopologies"] == [1]
    assert [(t["task"], t["last_batch"], t["metrics"]) for t in doc["tasks"]] == [
        ("0_0", 0, {}),
        ("0_1", 0, {}),
    ]
    ends = topics.topic(warehouse, "events").end_offsets()
    for t in doc["tasks"]:
        (inp,) = t["inputs"]
        assert inp["committed"] == 0 and inp["lag"] == inp["end"] == ends[t["partition"]] > 0
    # By name there is nothing to go by: an error that says so, with the way forward.
    failed = _status_fails(warehouse, state, "regroup")
    assert f"app regroup has not run in warehouse {warehouse.root}" in failed.stderr
    assert "jobs/regroup.py" in failed.stderr and "--warehouse DIR" in failed.stderr


def test_status_by_name_lists_sub_topologies_that_never_committed(spark, warehouse, tmp_path):
    """The app's layout is recorded in the warehouse when a run prepares it: status by name
    then lists every sub-topology's tasks, the repartition-fed one's included, before any
    batch committed (by name it had only the progress rows to go by)."""
    from lakestate.checkpoint.layout import ensure_layout

    records = [{"key": f"k{i}", "value": {"user": f"u{i % 3}"}, "timestamp": i} for i in range(30)]
    produce(spark, warehouse, "events", records, 2)
    ensure_layout(load_app(APPS / "regroup.py"), warehouse)  # what a run does before its first batch
    state = tmp_path / "state"
    state.mkdir()
    doc, _ = _status(warehouse, state, "regroup")
    assert doc["unresolved_subtopologies"] == []
    assert [(t["task"], t["last_batch"]) for t in doc["tasks"]] == [
        ("0_0", 0),
        ("0_1", 0),
        ("1_0", 0),
        ("1_1", 0),
    ]
    ends = topics.topic(warehouse, "events").end_offsets()
    assert [t["inputs"][0]["lag"] for t in doc["tasks"][:2]] == [ends[0], ends[1]]


def _status_fails(warehouse, cwd, app: str, *options: str) -> subprocess.CompletedProcess:
    """``lakestate [--warehouse W] status APP`` in a fresh process, which must fail (exit 1)
    with one error line and no traceback on stderr."""
    where = [] if warehouse is None else ["--warehouse", warehouse.root]
    env = {k: v for k, v in os.environ.items() if k != "LAKESTATE_WAREHOUSE"}
    proc = subprocess.run(
        [sys.executable, "-c", CLI_PROBE, *where, *options, "status", app],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "lakestate status: error: " in proc.stderr and "Traceback" not in proc.stderr
    return proc


def test_status_of_an_app_from_a_folder_without_its_warehouse_says_where_it_looked(tmp_path):
    """`lakestate status demo` where ./warehouse does not exist (the default, as a new user
    runs it from another folder): an error naming the path looked at and how to point at
    the warehouse; not an empty status with exit 0."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for options in ((), ("--json",)):
        failed = _status_fails(None, folder, "demo", *options)
        assert f"no warehouse at {folder / 'warehouse'}" in failed.stderr
        assert "--warehouse DIR or LAKESTATE_WAREHOUSE" in failed.stderr
        assert failed.stdout == ""


def _progress_metrics(warehouse, app: str) -> dict[tuple[str, int], dict]:
    """Every progress row's metrics, by task and batch."""
    rows = delta_commits.open_table(warehouse.progress_path(app)).to_pyarrow_table().to_pylist()
    return {(r["task"], r["batch_id"]): json.loads(r["metrics"]) for r in rows}


def _killed_run(warehouse, state_dir, fault: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({str(APPS / 'dedup.py')!r}, warehouse={warehouse.root!r}, "
        f"state_dir={str(state_dir)!r}, max_records=20, until_caught_up=True)"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )


def test_totals_do_not_count_a_replayed_batch_twice(spark, tmp_path):
    """SIGKILL at each commit step of a dedup app's batches (the recorded batch replayed,
    staged transactions applied, a wiped local store restored), then a run to the end: every
    progress row's totals equal an uninterrupted run's, batch by batch, and the driver's."""
    rng = random.Random(17)
    records = [
        {"key": f"k{rng.randrange(15)}", "value": {"n": i}, "timestamp": 1_000 + i * 900}
        for i in range(200)
    ]
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, PARTITIONS)
    assert _killed_run(reference, tmp_path / "reference-state", None).returncode == 0

    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, PARTITIONS)
    state = tmp_path / "state"
    for fault in (
        "after_progress@2",
        "after_sink:unique-events@2",
        "after_changelog:seen-keys@2",
        "after_tables@3",
        "mid_local_commit@4",
    ):
        proc = _killed_run(wh, state, fault)
        assert proc.returncode == -9, (fault, proc.returncode, proc.stderr[-3000:])
        if fault == "after_sink:unique-events@2":
            shutil.rmtree(state / "dedup" / "0_0")  # restored from the changelog next run
    proc = _killed_run(wh, state, None)
    assert proc.returncode == 0, proc.stderr[-3000:]

    got, want = _progress_metrics(wh, "dedup"), _progress_metrics(reference, "dedup")
    assert len(got) > 3 * PARTITIONS and got == want
    doc, _ = _status(wh, state, "dedup")
    driver = _driver_metrics("dedup.py", records)
    for task in doc["tasks"]:
        assert _scoped(task) == driver[task["partition"]]
