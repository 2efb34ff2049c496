"""A run in process with worker processes (runtime/worker_pool.py): the tasks are processed
in other processes, both at once, and the run commits exactly what a run processing them
in the driver commits."""

from __future__ import annotations

import os

import pytest
from engine_helpers import APPS, dump_store, events
from lakestate import run_app
from lakestate.io import topics
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

PARTITIONS = 4


def _run(tmp_path, name: str, app: str, records: list[dict]) -> tuple[dict, dict]:
    wh = Warehouse(tmp_path / name / "wh")
    topics.topic(wh, "events").create(PARTITIONS)
    topics.topic(wh, "events").append(records)
    state = tmp_path / name / "state"
    result = run_app(
        str(APPS / app),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=40,
        until_caught_up=True,
        transport="inprocess",
        say=lambda _: None,
    )
    assert len(result.batches) >= 3
    outputs = {
        t: [p.to_pylist() for p in topics.topic(wh, t).read_partitions()]
        for t in ("counts-out", "sums-out")
    }
    stores = {p: dump_store(state, "counts", f"0_{p}") for p in range(PARTITIONS)}
    return outputs, stores


def test_workers_commit_what_the_driver_commits(tmp_path, monkeypatch):
    records = events(400, keys=11, seed=5)
    in_driver = _run(tmp_path, "driver", "counts.py", records)
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("LAKESTATE_TEST_PIDS", str(pids))
    in_workers = _run(tmp_path, "workers", "counts_in_workers.py", records)
    assert in_workers == in_driver
    assert in_driver[0]["counts-out"] and any(in_driver[1].values())
    workers = {int(p.name) for p in pids.iterdir()} - {os.getpid()}
    # Batches of two tasks or more went to two worker processes (a batch whose records
    # all fall in one task stays in the driver).
    assert len(workers) == 2, workers
