"""A warehouse in lakestate's first state format: a clear error that says what to do, and
`lakestate convert` that turns it into changelogs without losing or repeating anything."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_helpers import APPS, events, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.checkpoint.standing import app_pin
from lakestate.cli import main
from lakestate.errors import StreamsException
from lakestate.io import topics
from lakestate.read.spark_engine import state_frame
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

OLD_LOG_SCHEMA = "batch_id BIGINT, kind STRING, run_id STRING, at_ms BIGINT, payload STRING"


def _run(wh, state, **kwargs):
    return run_app(
        str(APPS / "counts.py"),
        warehouse=wh.root,
        state_dir=str(state),
        until_caught_up=True,
        say=lambda _: None,
        **kwargs,
    )


def _old_format_copy(spark, new: Warehouse, old: Warehouse) -> None:
    """``old``: the same topics as ``new``, with the app's state in the first format (its
    batch log's last commit row and MERGE-style state tables holding the current rows)."""
    shutil.copytree(new.topics_dir(), old.topics_dir())
    pin = app_pin(new, "counts")
    batch = max(pin.batches.values())
    offsets: dict = {}
    for task, row in pin.rows.items():
        for topic, offset in row.offsets.items():
            offsets.setdefault(topic, {})[str(task.partition)] = offset
    versions = {}
    for store in ("counts", "sums"):
        path = f"{old.app_path('counts')}/state/{store}"
        state_frame(spark, new, "counts", store).drop("snapshot_through").write.format(
            "delta"
        ).save(path)
        versions[store] = 0
    payload = {
        "offsets": offsets,
        "stream_times": {str(t): r.stream_time for t, r in pin.rows.items()},
        "state_versions": versions,
        "stats": {},
    }
    spark.createDataFrame(
        [(batch, "plan", "old", 1, "{}"), (batch, "commit", "old", 2, json.dumps(payload))],
        OLD_LOG_SCHEMA,
    ).write.format("delta").save(old.old_format_path("counts"))


def test_an_old_format_app_is_refused_by_name_then_converted(spark, tmp_path):
    records = events(100, seed=21)
    new = Warehouse(tmp_path / "new")
    produce(spark, new, "events", records[:60], partitions=2)
    _run(new, tmp_path / "state-new", max_records=20)
    old = Warehouse(tmp_path / "old")
    _old_format_copy(spark, new, old)
    shutil.copytree(tmp_path / "state-new", tmp_path / "state-old")

    with pytest.raises(StreamsException) as err:
        _run(old, tmp_path / "state-old")
    message = str(err.value)
    assert "first format" in message and "lakestate convert counts" in message
    assert (
        topics.topic(old, "counts-out").end_offsets()
        == topics.topic(new, "counts-out").end_offsets()
    )  # nothing was written

    assert main(["convert", str(APPS / "counts.py"), "--warehouse", old.root]) == 0
    assert state_rows(spark, old, "counts", "counts") == state_rows(spark, new, "counts", "counts")
    # Converting twice is refused (nothing left to convert), and changes nothing.
    assert main(["convert", str(APPS / "counts.py"), "--warehouse", old.root]) == 1

    # More input, on both: the converted app goes on exactly where the old one stood.
    for wh in (new, old):
        topics.topic(wh, "events").append(records[60:])
    _run(new, tmp_path / "state-new", max_records=20)
    _run(old, tmp_path / "state-old", max_records=20)
    for store in ("counts", "sums"):
        assert state_rows(spark, old, "counts", store) == state_rows(spark, new, "counts", store)
    for topic in ("counts-out", "sums-out"):
        assert topic_rows(spark, old, topic) == topic_rows(spark, new, topic)
