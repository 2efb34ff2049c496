"""The demo DAG, run for real: ``dag.test()`` in an isolated Airflow against a warehouse
holding sample events: its ``rebalance`` task computes the app's first assignment generation,
then one run task per instance of the app (jobs/demo.py has two) runs ``lakestate run
--instance NAME``, each processing the tasks the generation gives it. A run limited to one
batch stops there; a run with the default Params processes until caught up, and the sink topic
``event-counts`` then holds, per user, the count of that user's events with a positive amount
(jobs/demo.py's topology), as a one-instance run would."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEMO_DAG = "lakestate_demo"


def _demo_module():
    spec = importlib.util.spec_from_file_location(
        "lakestate_e2e_demo_job", REPO / "jobs" / "demo.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lakestate(env: dict[str, str], cwd: Path, *args: str) -> str:
    """Runs the lakestate CLI (``python -m lakestate.cli ARGS``); its stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "lakestate.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"lakestate {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def _instances(state_dir: Path) -> list:
    """jobs/demo.py's instances, their state dirs under ``state_dir``."""
    from lakestate.app import load_app
    from lakestate.scaleout.instances import instances_of

    return instances_of(load_app(REPO / "jobs" / "demo.py"), state_dir)


def _green(result: dict, state_dir: Path) -> bool:
    """The DAG run succeeded, its rebalance task and every instance's run task too."""
    tasks = {"rebalance", *(f"run_{i.name}" for i in _instances(state_dir))}
    return result["state"] == "success" and result["task_states"] == dict.fromkeys(tasks, "success")


def _batches(warehouse: Path) -> dict[str, list[int]]:
    """Per task, the batches the demo app's progress table records."""
    from lakestate.io import delta_commits

    rows = delta_commits.open_table(str(warehouse / "apps" / "demo" / "_progress"))
    found: dict[str, list[int]] = {}
    for row in rows.to_pyarrow_table(columns=["task", "batch_id"]).to_pylist():
        found.setdefault(row["task"], []).append(row["batch_id"])
    return {task: sorted(b) for task, b in found.items()}


def test_demo_dag_counts_positive_events_per_user(airflow, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    state_dir = tmp_path / "state"
    env = airflow.environ(
        {"LAKESTATE_WAREHOUSE": str(warehouse), "LAKESTATE_STATE_DIR": str(state_dir)}
    )
    demo = _demo_module()

    # Sample input: 60 events of 5 users over 2 partitions, some with amount 0.
    events = list(demo.sample_events(60, users=5, seed=11))
    input_file = tmp_path / "events.jsonl"
    input_file.write_text(
        "".join(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n" for k, v, ts in events),
        encoding="utf-8",
    )
    expected = Counter(key for key, value, _ in events if value["amount"] > 0)
    assert 0 < sum(expected.values()) < len(events)  # the filter has something to drop

    start = time.monotonic()
    _lakestate(env, tmp_path, "produce", demo.INPUT_TOPIC, str(input_file), "--partitions", "2")
    produced = time.monotonic()

    # One batch of at most 10 records per task (the time budget's own test is the
    # engine's: a batch in process can take less than the Param's 1 s minimum).
    budget = {"until_caught_up": False, "max_batches": 1, "max_records": 10}
    result = airflow.run("test", DEMO_DAG, json.dumps(budget), env=env, timeout=900)
    assert result["conf"] == budget
    assert _green(result, state_dir), f"{result}\n{airflow.task_logs()[-20000:]}"
    assert _batches(warehouse) == {"0_0": [1], "0_1": [1]}

    # The default run (what the schedule does): until caught up, within 240 s; it goes on
    # from the first run's offsets.
    result = airflow.run("test", DEMO_DAG, "{}", env=env, timeout=900)
    ran = time.monotonic()
    assert _green(result, state_dir), f"{result}\n{airflow.task_logs()[-20000:]}"

    out = _lakestate(env, tmp_path, "consume", demo.OUTPUT_TOPIC)
    consumed = time.monotonic()
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert records, "event-counts is empty"

    # Every update is emitted; a key's updates are in one partition, in offset order: the last
    # one is the final count.
    final: dict[str, int] = {}
    updates: dict[str, list[int]] = {}
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        final[r["key"]] = r["value"]
        updates.setdefault(r["key"], []).append(r["value"])
    assert final == dict(expected)
    for key, values in updates.items():
        assert values == sorted(values), f"{key}: counts went down: {values}"

    print(
        f"\nproduce {produced - start:.1f}s, dag.test {ran - produced:.1f}s, "
        f"consume {consumed - ran:.1f}s, db migrate {airflow.timings.get('db_migrate', 0):.1f}s",
        file=sys.stderr,
    )
    assert os.path.isdir(warehouse / "topics" / demo.OUTPUT_TOPIC)
    _assert_each_instance_ran_its_actives(warehouse, state_dir)


def _assert_each_instance_ran_its_actives(warehouse: Path, state_dir: Path) -> None:
    """The rebalance task wrote a generation that gives every task an active among the
    app's instances; each instance's run reported its actives as such, its stores holding
    the committed batch (lag 0: the run was until caught up)."""
    from lakestate.assign import history
    from lakestate.scaleout import lag_reports
    from lakestate.warehouse import Warehouse

    wh = Warehouse(str(warehouse))
    generation = history.latest(wh, "demo")
    assert generation is not None and generation.number >= 1
    names = {i.name for i in _instances(state_dir)}
    active = {str(task): owner for task, owner in generation.assignment.active.items()}
    assert set(active) == {"0_0", "0_1"} and set(active.values()) <= names, active
    reported = lag_reports.latest_by_instance(wh, "demo")
    for task, owner in active.items():
        (report,) = [r for t, r in reported[owner].items() if str(t) == task]
        assert (report.role, report.lag) == ("active", 0), report
        assert report.local_batch == report.committed_batch, report
        # Each task's store is in its owner's state dir only.
        others = names - {owner}
        assert (Path(state_dir) / owner / "demo" / task).is_dir()
        assert not any((Path(state_dir) / o / "demo" / task / "db").exists() for o in others)


# -- failures, backfills and rewinds --------------------------------------------------------

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)  # two 5-minute intervals: [T0, T1), [T1, T2)
T1 = T0 + timedelta(minutes=5)
T2 = T1 + timedelta(minutes=5)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _counts(env: dict[str, str], cwd: Path) -> dict[str, int]:
    """The demo app's final count per user, from its sink topic (the last update of each
    key, in partition/offset order)."""
    out = _lakestate(env, cwd, "consume", "event-counts")
    final: dict[str, int] = {}
    for r in sorted(
        (json.loads(line) for line in out.splitlines() if line.strip()),
        key=lambda r: (r["partition"], r["offset"]),
    ):
        final[r["key"]] = r["value"]
    return final


def test_a_failed_run_ends_its_task_log_with_the_lakestate_error(airflow, tmp_path: Path) -> None:
    """``airflow dags test`` of the demo DAG against a warehouse without its input topic:
    the first task, ``rebalance``, fails, and its log ends with the CLI's one error line (no
    Spark stack trace); the instances' run tasks do not run."""
    env = airflow.environ(
        {
            "LAKESTATE_WAREHOUSE": str(tmp_path / "warehouse"),
            "LAKESTATE_STATE_DIR": str(tmp_path / "state"),
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", DEMO_DAG],
        env=env,
        cwd=airflow.home,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "DagRun failed" in out, out[-5000:]
    # The task's log is what `dags test` prints up to the end of the task.
    task_log = out[: out.index("[DAG TEST] end task task_id=rebalance")].splitlines()
    assert "[DAG TEST] starting task_id=run_" not in out  # upstream failed
    error = (
        "lakestate rebalance: error: app demo: input topic 'events' of sub-topology 0 does not "
        "exist"
    )
    # Its last lines: the exception naming the error (then Airflow's own framing lines).
    tail = "\n".join(task_log[-6:])
    assert f"AirflowException: {error}" in tail, "\n".join(task_log[-40:])
    assert "Py4J" not in out and "at org.apache" not in out


def test_backfill_runs_process_their_intervals_and_a_rewind_is_guarded(
    airflow, tmp_path: Path
) -> None:
    """Backfill runs (run type ``backfill``, as ``airflow backfill create`` makes them;
    driven here by ``dag.test`` without a scheduler) process the records stamped before
    their interval's end; again, a no-op. A rewind without the app's name as confirmation
    fails before changing anything; with it, the app's sinks and state go back to before the
    interval and the run reprocesses it."""
    warehouse, state_dir = tmp_path / "warehouse", tmp_path / "state"
    env = airflow.environ(
        {"LAKESTATE_WAREHOUSE": str(warehouse), "LAKESTATE_STATE_DIR": str(state_dir)}
    )
    # 40 events of 4 users, 20 in each interval, in time order, amounts all positive.
    events = [
        {"key": f"u{i % 4}", "value": {"amount": 1 + i % 3}, "timestamp": _ms(T0) + i * 15_000}
        for i in range(40)
    ]
    assert {e["timestamp"] < _ms(T1) for e in events} == {True, False}
    input_file = tmp_path / "events.jsonl"
    input_file.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    _lakestate(env, tmp_path, "produce", "events", str(input_file), "--partitions", "2")
    first = Counter(e["key"] for e in events if e["timestamp"] < _ms(T1))
    every = Counter(e["key"] for e in events)

    def backfill(start: datetime, end: datetime, conf: dict | None = None) -> dict:
        return airflow.run(
            "test-backfill", DEMO_DAG, json.dumps(conf or {}), start.isoformat(),
            end.isoformat(), env=env, timeout=900,
        )  # fmt: skip

    result = backfill(T0, T1)
    assert result["run_type"] == "backfill"
    assert result["state"] == "success", f"{result}\n{airflow.task_logs()[-20000:]}"
    assert _counts(env, tmp_path) == dict(first)
    batches = _batches(warehouse)

    # A wrong confirmation: the run fails before touching anything.
    result = backfill(T1, T2, {"rewind": True, "confirm_rewind": "yes"})
    assert result["state"] == "failed"
    assert _batches(warehouse) == batches and _counts(env, tmp_path) == dict(first)

    result = backfill(T1, T2)
    assert result["state"] == "success"
    assert _counts(env, tmp_path) == dict(every)

    # Rewind to before [T1, T2), reprocess up to T2: the same counts again, not doubled.
    result = backfill(T1, T2, {"rewind": True, "confirm_rewind": "demo"})
    assert result["state"] == "success", f"{result}\n{airflow.task_logs()[-20000:]}"
    assert _counts(env, tmp_path) == dict(every)


def test_a_run_that_finds_the_app_running_waits_and_succeeds(airflow, tmp_path: Path) -> None:
    """A DAG run started while another run of the app holds its lock on instance ``a``
    (held here by the test, as a run under way does) waits for it on that instance, then
    processes the input: green."""
    from lakestate.runtime.run_lock import instance_lock

    warehouse, state_dir = tmp_path / "warehouse", tmp_path / "state"
    env = airflow.environ(
        {"LAKESTATE_WAREHOUSE": str(warehouse), "LAKESTATE_STATE_DIR": str(state_dir)}
    )
    events = [{"key": f"u{i % 3}", "value": {"amount": 1}, "timestamp": i} for i in range(12)]
    input_file = tmp_path / "events.jsonl"
    input_file.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    _lakestate(env, tmp_path, "produce", "events", str(input_file), "--partitions", "2")

    out, result_file = tmp_path / "dag-test.out", tmp_path / "dag-test.json"
    actions = Path(__file__).with_name("airflow_actions.py")
    first = _instances(state_dir)[0]  # the rebalance task runs there: a rewind waits too
    with instance_lock(first.state_dir, "demo"), open(out, "w", encoding="utf-8") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(actions), "test", DEMO_DAG, "{}", str(result_file)],
            env=env, cwd=airflow.home, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        for _ in range(6000):  # a bound for a broken run, not a timing assertion
            said = out.read_text(encoding="utf-8", errors="replace")
            if "app demo is running on this instance" in said or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert "waiting up to 240s for it to finish" in said, said[-5000:]
    assert proc.wait(timeout=900) == 0, out.read_text(errors="replace")[-5000:]
    result = json.loads(result_file.read_text(encoding="utf-8"))
    assert result["state"] == "success", out.read_text(errors="replace")[-5000:]
    assert "the other run of app demo finished" in out.read_text(errors="replace")
    assert _counts(env, tmp_path) == {"u0": 4, "u1": 4, "u2": 4}
