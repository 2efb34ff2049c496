"""A batch's records bounded in all (``lakestate.batch.max.records``, runtime/plan.py): a
backlog larger than the bound goes in several batches, each committed before the next,
and commits what one unbounded batch commits; a run killed between two bounded batches
reruns exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from engine_helpers import APPS, dump_store, events
from lakestate import run_app
from lakestate.io import topics
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

PARTITIONS = 4
N = 400
BOUND = 50  # counts_bounded.py's lakestate.batch.max.records
REPO = Path(__file__).resolve().parents[2]


def _warehouse(tmp_path: Path, name: str) -> Warehouse:
    wh = Warehouse(tmp_path / name / "wh")
    topics.topic(wh, "events").create(PARTITIONS)
    # Keys spread unevenly over the partitions: the tasks' backlogs differ.
    topics.topic(wh, "events").append(events(N, keys=11, seed=5))
    return wh


def _run(wh: Warehouse, state: Path, app: str):
    return run_app(
        str(APPS / app),
        warehouse=wh.root,
        state_dir=str(state),
        until_caught_up=True,
        transport="inprocess",
        say=lambda _: None,
    )


def _committed(wh: Warehouse, state: Path) -> dict:
    """The output topics' records per partition in offset order, the user stores' entries
    of every task (byte for byte), and the latest changelog row of every key."""
    outputs = {
        t: [p.to_pylist() for p in topics.topic(wh, t).read_partitions()]
        for t in ("counts-out", "sums-out")
    }
    stores = {
        p: {
            name: entries
            for name, entries in dump_store(state, "counts", f"0_{p}").items()
            if name not in RESERVED_NAMESPACES
        }
        for p in range(PARTITIONS)
    }
    changelogs = {}
    for store in ("counts", "sums"):
        rows = DeltaTable(wh.changelog_path("counts", store)).to_pyarrow_table().to_pylist()
        latest: dict = {}
        for r in sorted(rows, key=lambda r: r["batch_id"]):
            latest[(r["task"], r["key"])] = (r["value"], r["ts"], r["raw_value"])
        changelogs[store] = latest
    return {"outputs": outputs, "stores": stores, "changelogs": changelogs}


def test_a_bounded_run_commits_in_batches_what_one_batch_commits(tmp_path):
    whole_wh = _warehouse(tmp_path, "whole")
    whole = _run(whole_wh, tmp_path / "whole" / "state", "counts.py")
    assert len(whole.batches) == 1
    bounded_wh = _warehouse(tmp_path, "bounded")
    bounded = _run(bounded_wh, tmp_path / "bounded" / "state", "counts_bounded.py")
    records = [f["records"] for f in bounded.figures]
    assert sum(records) == whole.records == N
    assert len(records) >= N // BOUND and max(records) <= BOUND, records
    # Every batch was committed: each task's batch numbers run 1, 2, ... without a gap.
    for task in {t for b in bounded.batches for t in b}:
        numbers = [b[task] for b in bounded.batches if task in b]
        assert numbers == list(range(1, len(numbers) + 1)), (task, numbers)
    expected = _committed(whole_wh, tmp_path / "whole" / "state")
    assert expected["outputs"]["counts-out"] and expected["changelogs"]["sums"]
    assert _committed(bounded_wh, tmp_path / "bounded" / "state") == expected


def _run_killed(wh: Warehouse, state: Path, fault: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({str(APPS / 'counts_bounded.py')!r}, warehouse={wh.root!r}, "
        f"state_dir={str(state)!r}, until_caught_up=True, transport='inprocess')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )


@pytest.mark.parametrize("fault", ["after_progress@3", "after_tables@3"])
def test_a_kill_between_bounded_batches_reruns_exactly_once(tmp_path, fault):
    whole_wh = _warehouse(tmp_path, "whole")
    _run(whole_wh, tmp_path / "whole" / "state", "counts.py")
    wh, state = _warehouse(tmp_path, "killed"), tmp_path / "killed" / "state"
    killed = _run_killed(wh, state, fault)
    assert killed.returncode == -9, killed.stderr[-3000:]
    # Batches 1 and 2 were committed whole before batch 3 was killed mid-commit.
    committed = [line for line in killed.stdout.splitlines() if line.startswith("batch ")]
    assert len(committed) == 2, killed.stdout
    rerun = _run_killed(wh, state, None)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    if fault.startswith("after_progress"):
        assert "replaying the recorded batches" in rerun.stdout, rerun.stdout
    else:
        assert "applied the staged transaction of batch 3" in rerun.stdout, rerun.stdout
    assert _committed(wh, state) == _committed(whole_wh, tmp_path / "whole" / "state")
