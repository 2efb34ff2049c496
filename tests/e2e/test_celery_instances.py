"""The demo app on two instances through Airflow's CeleryExecutor, as docker-compose.yml runs
it, on one machine: a Redis broker (Debian's redis-server), the scheduler, api-server,
dag-processor and triggerer, and one Celery worker per instance of jobs/demo.py, consuming that
instance's queue (the first also Airflow's default queue) and keeping its local stores under its
own LAKESTATE_STATE_DIR, as a worker keeps them on its own disk.

The demo DAG's scheduled run (it is unpaused when created) runs ``rebalance``, then ``run_a`` and
``run_b``: the run is green, each run task ran on its instance's worker (its command names that
worker's state dir; the task's store is on that worker's disk and no other), and the sink holds
each user's count of positive events, as a one-instance run gives.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from airflow_server import AirflowServer, free_port, tail, wait_for
from conftest import base_env
from test_demo_dag import _counts, _demo_module, _lakestate

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "lakestate_demo"
#: A bound for a broken deployment, not a timing assertion.
RUN_TIMEOUT_S = 1200
DEFAULT_QUEUE = "default"


@dataclass
class CeleryAirflow(AirflowServer):
    """``AirflowServer`` with the CeleryExecutor on a Redis broker (results in SQLite)."""

    broker: str = ""

    def environ(self) -> dict[str, str]:
        env = super().environ()
        env.update(
            AIRFLOW__CORE__EXECUTOR="CeleryExecutor",
            AIRFLOW__CELERY__BROKER_URL=self.broker,
            AIRFLOW__CELERY__RESULT_BACKEND=f"db+sqlite:///{self.home / 'celery-results.db'}",
        )
        return env


def _ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith(b"+PONG")


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server on a free local port, nothing persisted; its URL."""
    server = shutil.which("redis-server")
    if server is None:  # scripts/setup.sh installs it: a skip would hide a failed setup
        pytest.fail("no redis-server on this machine (scripts/setup.sh installs Debian's)")
    port = free_port()
    log = tmp_path / "redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for("redis-server to answer PING", lambda: _ping(port), timeout=60)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_the_demo_runs_on_two_celery_workers(redis: str, tmp_path: Path) -> None:
    from lakestate.app import load_app
    from lakestate.assign import history
    from lakestate.scaleout.instances import instances_of
    from lakestate.warehouse import Warehouse

    warehouse = tmp_path / "warehouse"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "demo.py").write_text(
        "from lakestate.airflow import make_dag\n"
        f"dag = make_dag({str(REPO / 'jobs' / 'demo.py')!r})\n",
        encoding="utf-8",
    )
    # The workers' disks; the other components parse the DAG with a state root of their own.
    disks = {name: tmp_path / f"disk-{name}" for name in ("scheduler", "a", "b")}
    env = base_env(tmp_path / "airflow")
    env.update(
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        LAKESTATE_WAREHOUSE=str(warehouse),
        LAKESTATE_STATE_DIR=str(disks["scheduler"]),
    )

    demo = _demo_module()
    events = list(demo.sample_events(60, users=5, seed=5))
    input_file = tmp_path / "events.jsonl"
    input_file.write_text(
        "".join(json.dumps({"key": k, "value": v, "timestamp": t}) + "\n" for k, v, t in events),
        encoding="utf-8",
    )
    _lakestate(env, tmp_path, "produce", demo.INPUT_TOPIC, str(input_file), "--partitions", "2")
    expected = Counter(k for k, v, _ in events if v["amount"] > 0)

    instances = instances_of(load_app(REPO / "jobs" / "demo.py"))
    assert len(instances) == 2
    server = CeleryAirflow(home=tmp_path / "airflow", env=env, broker=redis)
    workers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        server.start()
        for i, instance in enumerate(instances):
            queues = [instance.queue, *([DEFAULT_QUEUE] if i == 0 else [])]
            worker_env = dict(server.environ(), LAKESTATE_STATE_DIR=str(disks[instance.name]))
            with (server.log_dir / f"worker-{instance.name}.log").open("wb") as out:
                workers[instance.name] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", "celery", "worker",
                     "--queues", ",".join(queues), "--concurrency", "1", "--skip-serve-logs",
                     "--celery-hostname", f"{instance.name}@%h"],
                    env=worker_env, cwd=server.home, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip

        def green_run() -> dict | None:
            server.check_alive()
            for name, proc in workers.items():
                if proc.poll() is not None:
                    log = server.log_dir / f"worker-{name}.log"
                    raise AssertionError(f"worker {name} exited:\n{tail(log)}")
            runs = server.api(f"/dags/{DAG_ID}/dagRuns")["dag_runs"]
            failed = [r for r in runs if r["state"] == "failed"]
            assert not failed, f"{failed}\n{server.logs()}"
            return next((r for r in runs if r["state"] == "success"), None)

        try:
            run = wait_for("a green run of the demo DAG", green_run, RUN_TIMEOUT_S, every=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{server.logs()}") from None
        run_id = run["dag_run_id"]
        tis = server.api(f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")["task_instances"]
        states = {ti["task_id"]: (ti["state"], ti["queue"]) for ti in tis}
        assert states == {
            "rebalance": ("success", instances[0].queue),
            **{f"run_{i.name}": ("success", i.queue) for i in instances},
        }, states
        logs = {
            ti["task_id"]: "\n".join(
                p.read_text(errors="replace")
                for p in (server.home / "logs").rglob("*.log")
                if f"task_id={ti['task_id']}" in str(p) and f"run_id={run_id}" in str(p)
            )
            for ti in tis
        }
    finally:
        for proc in workers.values():
            _stop(proc)
        server.stop()

    generation = history.latest(Warehouse(str(warehouse)), "demo")
    assert generation is not None
    active = {str(t): owner for t, owner in generation.assignment.active.items()}
    assert set(active) == {"0_0", "0_1"}
    for instance in instances:
        state_dir = disks[instance.name] / instance.name
        # The worker re-parsed the DAG file: the state dir is its own disk's.
        assert (
            f"--state-dir {state_dir} --instance {instance.name}" in logs[f"run_{instance.name}"]
        ), logs[f"run_{instance.name}"][-3000:]
        for task, owner in active.items():
            store = state_dir / "demo" / task / "db"
            assert store.exists() == (owner == instance.name), (task, owner, store)
    assert not (disks["scheduler"] / "a").exists() and not (disks["scheduler"] / "b").exists()
    assert _counts(env, tmp_path) == dict(expected)
