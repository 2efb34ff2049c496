"""The demo app's maintenance DAG, run for real: ``dag.test()`` of
``lakestate_demo_maintenance`` in an isolated Airflow, against a warehouse where the demo app
has run several batches. Its three tasks (compact -> optimize -> vacuum) succeed; the app's
tables hold fewer files, the same state, records, txn versions and end offsets; VACUUM
deleted a long-orphaned file and kept what the last week's versions need."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from lakestate.checkpoint import changelog
from lakestate.io import delta_commits, topics
from lakestate.io.logtable import ends as log_ends
from lakestate.ops import maintenance
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse
from test_demo_dag import _demo_module, _lakestate

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
MAINTENANCE_DAG = "lakestate_demo_maintenance"
TASKS = [TaskId(0, 0), TaskId(0, 1)]


def _state(warehouse: Warehouse, store: str) -> dict[int, dict[bytes, bytes]]:
    """The store's state per task, from its changelog (what its SQL view shows)."""
    path = warehouse.changelog_path("demo", store)
    return {t.partition: changelog.read_state(path, t.partition, 1 << 40) for t in TASKS}


def _tables(warehouse: Warehouse) -> dict[str, dict]:
    found = {}
    for path in maintenance.app_tables(warehouse, "demo"):
        table = delta_commits.open_table(path)
        found[path] = {
            "files": set(table.file_uris()),
            "rows": sorted(
                json.dumps(r, sort_keys=True, default=repr)
                for r in table.to_pyarrow_table().to_pylist()
            ),
            "txn": delta_commits.txn_versions(table, "demo", TASKS),
        }
    return found


def test_maintenance_dag_compacts_optimizes_and_vacuums(airflow, tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path / "warehouse")
    env = airflow.environ(
        {"LAKESTATE_WAREHOUSE": warehouse.root, "LAKESTATE_STATE_DIR": str(tmp_path / "state")}
    )
    demo = _demo_module()
    events = list(demo.sample_events(80, users=5, seed=3))
    input_file = tmp_path / "events.jsonl"
    input_file.write_text(
        "".join(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n" for k, v, ts in events),
        encoding="utf-8",
    )
    start = time.monotonic()
    _lakestate(env, tmp_path, "produce", demo.INPUT_TOPIC, str(input_file), "--partitions", "2")
    # Several batches (10 records per task each): several small files per table.
    app = str(REPO / "jobs" / "demo.py")
    said = _lakestate(env, tmp_path, "run", app, "--until-caught-up", "--max-records", "10")
    assert "caught up" in said
    ran = time.monotonic()

    store = demo.STORE
    sink = warehouse.topic_path(demo.OUTPUT_TOPIC)
    tables = [warehouse.changelog_path("demo", store), warehouse.progress_path("demo"), sink]
    before = _tables(warehouse)
    assert list(before) == tables
    assert all(len(t["files"]) >= 4 for t in before.values()), {
        p: len(t["files"]) for p, t in before.items()
    }
    state = _state(warehouse, store)
    ends = topics.topic(warehouse, demo.OUTPUT_TOPIC, 2).end_offsets()
    # A file that a write left 30 days ago without committing it.
    partition_dir = Path(sink) / "partition=0"
    orphan = partition_dir / "part-00000-orphan.zstd.parquet"
    shutil.copy(next(partition_dir.glob("*.parquet")), orphan)
    old = time.time() - 30 * 86400
    os.utime(orphan, (old, old))

    result = airflow.run("test", MAINTENANCE_DAG, "{}", env=env, timeout=900)
    maintained = time.monotonic()
    assert result["state"] == "success" and result["task_states"] == {
        "compact": "success",
        "optimize": "success",
        "vacuum": "success",
    }, f"{result}\n{airflow.task_logs()[-20000:]}"

    after = _tables(warehouse)
    for path in tables:
        assert len(after[path]["files"]) < len(before[path]["files"]), path  # OPTIMIZE ran
        assert after[path]["txn"] == before[path]["txn"], path
        # Time travel over the retention (7 days): the files before maintenance are kept.
        assert all(os.path.exists(f.removeprefix("file://")) for f in before[path]["files"])
    for path in tables[1:]:  # compaction rewrites the changelog's rows, not its state
        assert after[path]["rows"] == before[path]["rows"], path
    compacted = delta_commits.open_table(tables[0]).history()
    assert any("lakestate.compaction" in (h.get("userMetadata") or "") for h in compacted)
    assert _state(warehouse, store) == state
    log_ends.clear_cache()
    assert topics.topic(warehouse, demo.OUTPUT_TOPIC, 2).end_offsets() == ends
    assert not orphan.exists()  # VACUUM ran
    history = delta_commits.open_table(sink).history()
    assert {"OPTIMIZE", "VACUUM START", "VACUUM END"} <= {h["operation"] for h in history}
    print(
        f"\nproduce+run {ran - start:.1f}s, maintenance dag.test {maintained - ran:.1f}s",
        file=sys.stderr,
    )
