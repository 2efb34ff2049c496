"""The app a process's tasks run (runtime/task_executor.loaded_app): loaded once, again when
its file or LAKESTATE_KAFKA_CONFIG changed, and in a run's own process the run's app, so
that a notebook (or a kept Spark worker) rerunning an edited app processes with the edit."""

from __future__ import annotations

import os
from pathlib import Path

import lakestate as ls
from lakestate.app import KAFKA_CONFIG_ENV
from lakestate.io import topics
from lakestate.runtime.task_executor import loaded_app
from lakestate.warehouse import Warehouse

APP = """
import lakestate as ls
b = ls.StreamsBuilder()
b.stream("in").map_values(lambda v: v {op}).to("out")
app = ls.App("edited", b.build())
"""


def _write(path: Path, op: str, mtime_ns: int) -> None:
    path.write_text(APP.format(op=op))
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_an_app_is_loaded_again_when_its_file_or_kafka_settings_change(tmp_path, monkeypatch):
    monkeypatch.delenv(KAFKA_CONFIG_ENV, raising=False)
    path = tmp_path / "app.py"
    _write(path, "+ 1", 1_000_000_000)
    first = loaded_app(str(path))
    assert loaded_app(str(path)) is first  # once per process
    _write(path, "* 10", 2_000_000_000)
    edited = loaded_app(str(path))
    assert edited is not first
    monkeypatch.setenv(KAFKA_CONFIG_ENV, '{"bootstrap.servers": "b:9092"}')
    assert loaded_app(str(path)).config["bootstrap.servers"] == "b:9092"


def test_a_rerun_in_one_process_runs_the_edited_app(tmp_path, monkeypatch):
    monkeypatch.delenv(KAFKA_CONFIG_ENV, raising=False)
    path = tmp_path / "app.py"
    wh = Warehouse(tmp_path / "wh")
    topics.topic(wh, "in").create(1)
    outputs = []
    for i, op in enumerate(["+ 1", "* 10"]):
        _write(path, op, (i + 1) * 1_000_000_000)
        topics.topic(wh, "in").append([{"key": "k", "value": 5, "timestamp": 1_000 + i}])
        ls.run_app(str(path), warehouse=str(wh.root), state_dir=str(tmp_path / "state"))
        rows = [r for part in topics.topic(wh, "out").read_partitions() for r in part.to_pylist()]
        outputs.append(sorted(r["value"] for r in rows))
    assert outputs == [["6"], ["50", "6"]]
