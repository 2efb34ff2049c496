"""Runs of an app on the tests' standalone Spark cluster (``spark_cluster.py``; the
``standalone_cluster`` fixture in conftest.py), each driver in a process of its own, and
what the cluster tests compare them with: the in-process run, the tables' answers, the
stores left in a state directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from engine_helpers import APPS, FAST_TEST_CONF, produce
from lakestate import run_app
from lakestate.cli import main
from lakestate.warehouse import Warehouse
from spark_cluster import StandaloneCluster

COUNTS_APP = APPS / "counts.py"

#: counts.py's stores and sinks, as ``lakestate sql`` answers them.
COUNTS_QUERIES = (
    "SELECT key, value FROM counts__counts ORDER BY key",
    "SELECT key, value FROM counts__sums ORDER BY key",
    "SELECT partition, offset, key, value FROM counts_out ORDER BY partition, offset",
    "SELECT partition, offset, key, value FROM sums_out ORDER BY partition, offset",
)


def driver_run(
    cluster: StandaloneCluster,
    wh: Warehouse,
    state: Path,
    max_records: int,
    *,
    app: Path = COUNTS_APP,
    fault: str | None = None,
    executor_fault: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """One run of ``app`` on the cluster until caught up, its driver in a process of its
    own (no ``LAKESTATE_*`` from this one but ``env``'s), which prints ``batches <n>``.
    ``fault``: the driver's ``LAKESTATE_FAULT``; ``executor_fault``: the executors', once
    (noted by the file ``executor-killed`` in ``state``)."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    conf = {**FAST_TEST_CONF, "spark.driver.host": "127.0.0.1"}
    conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf["spark.executor.memory"] = "768m"
    # The executors' JVMs as the driver's (FAST_TEST_CONF): tiny data, short lives.
    conf["spark.executor.extraJavaOptions"] = FAST_TEST_CONF["spark.driver.extraJavaOptions"]
    if executor_fault:
        conf["spark.executorEnv.LAKESTATE_FAULT"] = executor_fault
        conf["spark.executorEnv.LAKESTATE_FAULT_ONCE"] = str(state / "executor-killed")
        state.mkdir(parents=True, exist_ok=True)
    run_env["LAKESTATE_SPARK_CONF"] = json.dumps(conf)
    run_env["PYTHONUNBUFFERED"] = "1"
    if fault:
        run_env["LAKESTATE_FAULT"] = fault
    run_env.update(env or {})
    code = (
        # The placement's moves (runtime/spark_located.py) on stderr, for the checks.
        "import logging; logging.getLogger('lakestate.spark').setLevel(logging.INFO); "
        "logging.getLogger('lakestate.spark').addHandler(logging.StreamHandler()); "
        "from lakestate import run_app; "
        f"r = run_app({str(app)!r}, warehouse={wh.root!r}, "
        f"state_dir={str(state)!r}, max_records={max_records}, until_caught_up=True, "
        f"master={cluster.url!r}, transport='spark'); print('batches', len(r.batches))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=run_env, timeout=900
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    """The run's output, once it exited 0 (else its output's tail, failing)."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def moved_tasks(proc: subprocess.CompletedProcess) -> set[str]:
    """The tasks a ``driver_run``'s placement moved off a live executor to balance them
    (an executor that registered late): those leave a store behind."""
    return set(re.findall(r"moves task (\S+) from", proc.stderr))


def batches_of(out: str) -> int:
    """The batches a ``driver_run`` printed it ran."""
    return int(out.rsplit("batches", 1)[1].split()[0])


def counts_reference(
    tmp_path: Path,
    phases: list[list[dict]],
    max_records: int,
) -> Warehouse:
    """counts.py run in process on a local warehouse, once per phase of events."""
    wh = Warehouse(tmp_path / "reference")
    for records in phases:
        produce(None, wh, "events", records, partitions=2)
        run_app(
            str(COUNTS_APP),
            warehouse=wh.root,
            state_dir=str(tmp_path / "ref-state"),
            max_records=max_records,
            until_caught_up=True,
            transport="inprocess",
            say=lambda _: None,
        )
    return wh


def answers(capsys, root: str, queries: tuple[str, ...] = COUNTS_QUERIES) -> list[str]:
    """``lakestate sql``'s answer to each query on the warehouse at ``root``."""
    found = []
    for query in queries:
        capsys.readouterr()
        assert main(["sql", query, "--warehouse", root]) == 0
        found.append(capsys.readouterr().out)
    return found


def stores(root: Path) -> list[str]:
    """The task stores (``<app>/<task>``) under a state directory."""
    return sorted(f"{p.parents[2].name}/{p.parents[1].name}" for p in root.glob("**/db/CURRENT"))


def executor_lost(cluster: StandaloneCluster, logs: dict[str, int]) -> bool:
    """Whether a worker's log says, past the offsets ``logs`` (by worker name), that one
    of its executors was SIGKILLed."""
    text = "".join(
        w.log.read_bytes()[logs.get(w.name, 0) :].decode(errors="replace") for w in cluster.workers
    )
    return "Command exited with code 137" in text


def log_sizes(cluster: StandaloneCluster) -> dict[str, int]:
    """Each worker's log size now (for ``executor_lost``)."""
    return {w.name: w.log.stat().st_size for w in cluster.workers}
