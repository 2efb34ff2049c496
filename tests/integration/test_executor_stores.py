"""State on Spark's executors (runtime/executor_stores.py): with
``lakestate.spark.state.owner=executors`` the driver never opens a store; each task's
store lives in the executor's own state directory, brought to the task's committed batch
by the executor (the staged transaction applied late, a catch-up or a restore from the
changelogs), and the tables, state and progress equal those of a run whose driver owns the
stores."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from engine_helpers import APPS, events, topic_rows
from lakestate import run_app
from lakestate.errors import StreamsException
from lakestate.io import delta_commits
from lakestate.io import topics as io_topics
from lakestate.read.spark_engine import state_frame
from lakestate.runtime.executor_stores import STATE_OWNER, executor_state_dir
from lakestate.runtime.spark_transport import SparkTransport
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration


def _owned_by(tmp_path: Path, app_file: str, owner: str) -> Path:
    """``app_file``'s app with its stores owned by ``owner`` (``driver`` or ``executors``)."""
    wrapper = tmp_path / f"{owner}_{app_file}"
    wrapper.write_text(
        "import dataclasses, runpy\n"
        f"_app = runpy.run_path({str(APPS / app_file)!r})['app']\n"
        f"app = dataclasses.replace(_app, config={{**_app.config, {STATE_OWNER!r}: {owner!r}}})\n"
    )
    return wrapper


def _run(app_path: Path, wh: Warehouse, state: Path, transport: str, said: list) -> None:
    run_app(
        str(app_path),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=9,
        until_caught_up=True,
        transport=transport,
        say=said.append,
    )


def _tables(spark, wh: Warehouse) -> tuple:
    rows = delta_commits.open_table(wh.progress_path("regroup")).to_pyarrow_table()
    same = [c for c in rows.column_names if c not in ("run_id", "at_ms")]
    recorded = sorted(tuple(r.values()) for r in rows.select(same).to_pylist())
    outputs = {
        t: topic_rows(spark, wh, t) for t in ("per-user-out", "regroup-per-user-repartition")
    }
    state = sorted(tuple(r) for r in state_frame(spark, wh, "regroup", "per-user").collect())
    return recorded, outputs, state


def _received_rows(monkeypatch) -> list:
    """The kinds of the rows each Spark batch handed to the driver, and whether the rest
    stayed on the executors."""
    received = []
    run_batch = SparkTransport.run_batch

    def recording(self, batch):
        output = run_batch(self, batch)
        received.append((set(output.rows.column("kind").to_pylist()), output.elsewhere))
        return output

    monkeypatch.setattr(SparkTransport, "run_batch", recording)
    return received


def test_executor_owned_stores_give_the_driver_owned_result(spark, tmp_path, monkeypatch):
    phases = [events(60, seed=31)[i : i + 20] for i in (0, 20, 40)]
    results = {}
    received = _received_rows(monkeypatch)
    for owner in ("driver", "executors"):
        received.clear()
        wh = Warehouse(tmp_path / f"wh-{owner}")
        state = tmp_path / f"state-{owner}"
        # Pinned both ways: the default (auto) is the executors on a local master too.
        app = _owned_by(tmp_path, "regroup.py", owner)
        io_topics.topic(wh, "events").create(2)
        said: list[str] = []
        for n, records in enumerate(phases):
            io_topics.topic(wh, "events").append(records)
            if n == 1:  # the stores lost: the executors restore them from the changelogs
                shutil.rmtree(state, ignore_errors=True)
                shutil.rmtree(executor_state_dir(wh.root), ignore_errors=True)
            _run(app, wh, state, "spark", said)
        results[owner] = _tables(spark, wh)
        if owner == "executors":
            assert any(line.startswith("state: on Spark's executors") for line in said)
            # The driver never opened a store (its run lock is all it keeps there).
            assert [p.name for p in (state / "regroup").iterdir()] == [".lock"]
            tasks = sorted(
                p.name for p in (Path(executor_state_dir(wh.root)) / "regroup").iterdir()
            )
            assert tasks == ["0_0", "0_1", "1_0", "1_1"]
            # No batch's records or changelog rows came to the driver: only the outcomes.
            assert received and all(
                kinds == {"task"} and kept is not None for kinds, kept in received
            )
        else:
            assert not any(line.startswith("state: on Spark's executors") for line in said)
            assert any({"out", "state"} <= kinds for kinds, _ in received)
            assert all(kept is None for _, kept in received)
    recorded, outputs, state_rows = results["executors"]
    assert len(recorded) > 6 and all(outputs.values()) and state_rows
    assert results["executors"] == results["driver"]


def test_global_tables_with_executor_owned_stores_are_refused_by_name(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    io_topics.topic(wh, "products").create(1)
    io_topics.topic(wh, "purchases").create(1)
    io_topics.topic(wh, "purchases").append(
        [{"key": "o1", "value": {"product": "p"}, "timestamp": 1}]
    )
    with pytest.raises(StreamsException, match=f"global tables.*{STATE_OWNER}=driver"):
        _run(_owned_by(tmp_path, "global_join.py", "executors"), wh, tmp_path / "s", "spark", [])
