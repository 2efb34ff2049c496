"""The first experience of the project-local Airflow: ``scripts/airflow.sh standalone``, as
the README says to start it, on a fresh AIRFLOW_HOME.

The demo DAG is unpaused when created, so its first scheduled run starts as soon as the
dag-processor has parsed it, before the api-server (whose execution API every task needs in
Airflow 3) answers: that run must still go green. A plugin of the test's holds the
api-server back until the scheduler has queued that run's first task, and a few seconds
more for its worker to find the API down (at most 30 s), so that this holds on any machine
(unloaded, the api-server may win the race; on a busy 2-core machine it answers a minute
after the scheduler starts). The admin
logs in with the password the README points to (the simple auth manager's generated
passwords file), triggers a run through the REST API and waits for it to go green. Then one
SIGTERM to scripts/airflow.sh must stop everything it started: standalone, the scheduler and
its LocalExecutor workers, the dag-processor, the api-server, the triggerer and any task
running. The processes checked are those under the script before the signal, any process
in their process groups after it, and any whose environment holds this test's marker.

One DAG (the demo) in a DAGs folder of its own, over a warehouse holding the demo's input.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
from airflow_server import free_port, tail
from conftest import base_env
from test_demo_dag import _demo_module, _lakestate

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "lakestate_demo"
#: A bound for a broken setup, not a timing assertion (a run takes about a minute).
RUN_TIMEOUT_S = 600
#: How long scripts/airflow.sh may take to stop everything after SIGTERM.
STOP_TIMEOUT_S = 120
MARKER = "LAKESTATE_TEST_STANDALONE"
#: How much later than usual the api-server starts listening, at most: until a task is
#: queued, then ``API_SERVER_AFTER_QUEUED_S`` more (the worker's first call to the API fails).
API_SERVER_DELAY_S = 30
API_SERVER_AFTER_QUEUED_S = 5
#: The plugin that holds the api-server back (its plugins load before it listens).
SLOW_API_SERVER = f"""
import contextlib, os, sqlite3, sys, time
if sys.argv[1:2] == ["api-server"]:
    db = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    start = time.monotonic()
    deadline = start + {API_SERVER_DELAY_S}
    queued = 0
    while time.monotonic() < deadline:
        try:
            with contextlib.closing(sqlite3.connect(db, timeout=1)) as db_conn:
                queued = db_conn.execute(
                    "SELECT count(*) FROM task_instance WHERE state IN ('queued', 'running')"
                ).fetchone()[0]
        except sqlite3.Error:  # no such table yet, or locked
            queued = 0
        if queued:
            time.sleep(min({API_SERVER_AFTER_QUEUED_S}, max(0.0, deadline - time.monotonic())))
            break
        time.sleep(0.5)
    print(f"slow_api_server: held {{time.monotonic() - start:.0f}} s, task queued: {{bool(queued)}}",
          file=sys.stderr)
"""


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _started_by(script: psutil.Process, marker: str, groups: set[int]) -> list[psutil.Process]:
    """The live processes under ``script``, or marked as the run's (``_marked``)."""
    found = {p.pid: p for p in script.children(recursive=True) if _alive(p)}
    for proc in _marked(marker, groups):
        if proc.pid != script.pid:
            found.setdefault(proc.pid, proc)
    return list(found.values())


def _marked(marker: str, groups: set[int]) -> list[psutil.Process]:
    """The live processes in one of ``groups``, or whose environment holds
    ``MARKER=marker`` (a process that changes its title may hide its environment, one that
    left its parent and group would escape the others). Not every child of the test's
    process: under xdist those include the session's Spark, broker and S3 server."""
    found = []
    for proc in psutil.process_iter():
        try:
            if _alive(proc) and (
                os.getpgid(proc.pid) in groups or proc.environ().get(MARKER) == marker
            ):
                found.append(proc)
        except (psutil.Error, ProcessLookupError):
            pass
    return found


def _describe(procs: list[psutil.Process]) -> str:
    lines = []
    for proc in procs:
        try:
            lines.append(f"{proc.pid} pgid={os.getpgid(proc.pid)} {' '.join(proc.cmdline())[:150]}")
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    return "\n".join(lines)


class Api:
    """The REST API of the standalone, as the admin (password from the generated file)."""

    def __init__(self, url: str, passwords_file: Path) -> None:
        self.url = url
        self.passwords_file = passwords_file

    def token(self) -> str:
        password = json.loads(self.passwords_file.read_text(encoding="utf-8"))["admin"]
        body = json.dumps({"username": "admin", "password": password}).encode()
        req = urllib.request.Request(
            f"{self.url}/auth/token",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)["access_token"]

    def __call__(self, path: str, method: str = "GET", body: object = None) -> dict:
        req = urllib.request.Request(
            f"{self.url}/api/v2{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)


def test_standalone_first_runs_go_green_and_one_sigterm_stops_everything(tmp_path: Path) -> None:
    home, dags, warehouse = tmp_path / "airflow_home", tmp_path / "dags", tmp_path / "warehouse"
    dags.mkdir()
    (dags / "demo.py").write_text(
        "from lakestate.airflow import make_dag\n"
        f"dag = make_dag({str(REPO / 'jobs' / 'demo.py')!r})\n",
        encoding="utf-8",
    )
    # The api-server listens only once the first run's task is queued (its plugins load
    # first), so that the run starts before it answers, as on a busy 2-core machine, on any
    # machine.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "slow_api_server.py").write_text(SLOW_API_SERVER, encoding="utf-8")
    marker = uuid.uuid4().hex
    port = free_port()
    env = base_env(home)
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
            # Another port than 8080 (maybe taken): scripts/airflow.sh derives the URLs.
            "AIRFLOW__API__PORT": str(port),
            "LAKESTATE_WAREHOUSE": str(warehouse),
            "LAKESTATE_STATE_DIR": str(tmp_path / "state"),
            MARKER: marker,
        }
    )
    demo = _demo_module()
    events = list(demo.sample_events(40, users=4, seed=3))
    input_file = tmp_path / "events.jsonl"
    input_file.write_text(
        "".join(json.dumps({"key": k, "value": v, "timestamp": t}) + "\n" for k, v, t in events),
        encoding="utf-8",
    )
    _lakestate(env, tmp_path, "produce", demo.INPUT_TOPIC, str(input_file), "--partitions", "2")

    log = tmp_path / "airflow-standalone.log"
    api = Api(f"http://127.0.0.1:{port}", home / "simple_auth_manager_passwords.json.generated")
    with log.open("wb") as out:
        script = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "airflow.sh"), "standalone"],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # signals from the test's terminal do not reach it
        )
    running: list[psutil.Process] = []
    groups: set[int] = set()
    try:

        def green(run_id: str | None) -> dict:
            """Waits for the run (None: the first one) to succeed; fails at once on a
            failed run, or if airflow.sh exits."""
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while time.monotonic() < deadline:
                assert script.poll() is None, f"airflow.sh exited:\n{tail(log)}"
                try:
                    runs = api(f"/dags/{DAG_ID}/dagRuns")["dag_runs"]
                except (OSError, KeyError, ValueError):  # not up yet, no password yet
                    runs = []
                failed = [r for r in runs if r["state"] == "failed"]
                assert not failed, f"a run failed: {failed}\n{tail(log, 80)}\n{_task_logs(home)}"
                for run in runs:
                    if run["state"] == "success" and run_id in (None, run["dag_run_id"]):
                        return run
                time.sleep(1)  # a REST call a second: a run's end is seen within 1 s, not 5
            raise AssertionError(f"no green run {run_id} in {RUN_TIMEOUT_S}s:\n{tail(log, 80)}")

        # The first, scheduled run started before the api-server was up: it goes green.
        first = green(None)
        assert first["run_type"] == "scheduled", first
        triggered = api(f"/dags/{DAG_ID}/dagRuns", "POST", {"logical_date": None})
        green(triggered["dag_run_id"])

        running = _started_by(psutil.Process(script.pid), marker, set())
        names = " ".join(" ".join(p.cmdline()) for p in running)
        for component in ("scheduler", "dag-processor", "api[-_]server", "triggerer", "worker"):
            assert re.search(component, names), f"no {component} among:\n{_describe(running)}"
        groups = {os.getpgid(p.pid) for p in running}
        stopping = time.monotonic()
        script.send_signal(signal.SIGTERM)  # one signal, to scripts/airflow.sh only
        try:
            rc = script.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"airflow.sh still running {STOP_TIMEOUT_S}s after SIGTERM:\n{tail(log)}"
            ) from None
        print(f"\n{len(running)} processes stopped in {time.monotonic() - stopping:.0f}s")
        left = [p for p in running if _alive(p)]
        left += [p for p in _marked(marker, groups)
                 if p.pid not in {q.pid for q in left}]  # fmt: skip
        assert not left, (
            f"{len(left)} of {len(running)} processes still running after airflow.sh "
            f"exited:\n{_describe(left)}"
        )
        assert rc == 128 + signal.SIGTERM, f"exit {rc}:\n{tail(log)}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)  # its own session's group (the test's start)
        for proc in [*running, *_marked(marker, groups)]:
            if _alive(proc):
                proc.kill()


def _task_logs(home: Path, lines: int = 30) -> str:
    logs = sorted((home / "logs").rglob("*.log")) if (home / "logs").is_dir() else []
    return "\n".join(f"=== {p}\n{tail(p, lines)}" for p in logs)
