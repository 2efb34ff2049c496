"""KIP-328 suppression on the engine: a rate-limited count gives the driver's output
exactly, in one batch or many, and when the local state is wiped between batches (the
buffer and the suppress node's stream time come back from the changelog); the buffer is
an SQL table, and its metrics reach the progress rows (``lakestate status``)."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_helpers import APPS, driver_outputs, events, produce, topic_rows
from lakestate import run_app
from lakestate.checkpoint.standing import app_pin
from lakestate.processors.metrics import flat
from lakestate.processors.suppress import COUNT_CURRENT, EMIT_TOTAL
from lakestate.read.spark_engine import state_frame
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

N = 150
APP = "rate_limited.py"


def _run(wh, state, **kwargs):
    kwargs.setdefault("until_caught_up", True)
    return run_app(
        str(APPS / APP), warehouse=wh.root, state_dir=str(state), say=lambda _: None, **kwargs
    )


def _outputs(spark, wh):
    return [(p, k, v, ts) for p, _, k, v, ts in topic_rows(spark, wh, "limited-counts")]


@pytest.mark.parametrize("max_records", [10_000, 17])
def test_rate_limited_count_matches_the_driver(spark, tmp_path, max_records):
    records = events(N, keys=5, seed=3)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    result = _run(wh, tmp_path / "state", max_records=max_records)
    assert (len(result.batches) == 1) == (max_records == 10_000)
    expected = driver_outputs(APP, records, 2, ["limited-counts"], with_partition=True)
    got = _outputs(spark, wh)
    assert got == expected["limited-counts"]
    assert 0 < len(got) < N  # rate limited: fewer updates than records, but some

    # The buffer as SQL: what is still held, and when it will be emitted.
    held = state_frame(spark, wh, "rate_limited", "rate-limit-store").collect()
    # The node's observed stream time is its processor metadata, in the progress rows.
    pin = app_pin(wh, "rate_limited")
    stream_times = {
        row.task.partition: row.processor_metadata["rate-limit-store.stream_time"]
        for row in pin.rows.values()
    }
    assert len(stream_times) == 2
    assert held and all(r["buffer_time"] + 100 > stream_times[r["task"]] for r in held)
    assert all(json.loads(r["value"]) >= 1 for r in held)
    # Metrics: totals over the app's life (not the last batch's), in the progress rows.
    metrics = [flat(row.metrics) for row in pin.rows.values()]
    assert sum(m.get(EMIT_TOTAL, 0) for m in metrics) == len(got)
    assert sum(m.get(COUNT_CURRENT, 0) for m in metrics) == len(held)


def test_wiped_local_state_between_batches_changes_nothing(spark, tmp_path):
    records = events(N, keys=5, seed=8)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    state = tmp_path / "state"
    batches = 0
    while True:
        result = _run(wh, state, max_records=20, max_batches=1, until_caught_up=False)
        if not result.batches:
            break
        batches += 1
        shutil.rmtree(state, ignore_errors=True)  # every batch restores from the changelogs
    assert batches > 3
    expected = driver_outputs(APP, records, 2, ["limited-counts"], with_partition=True)
    assert _outputs(spark, wh) == expected["limited-counts"]


def _readme_query() -> str:
    """The open-windows query of README.md's SQL section (over the clicks demo's buffer,
    30 s of grace), pointed at the test app's buffer (10 minutes of grace)."""
    text = (APPS.parents[2] / "README.md").read_text()
    # README has other SQL blocks (versioned tables): the one over the final-results buffer.
    blocks = [b.split("```", 1)[0] for b in text.split("```sql\n")[1:]]
    (query,) = [b for b in blocks if "clicks__final_clicks_store" in b]
    assert "buffer_time + 30000" in query
    return (
        query.replace("clicks__final_clicks_store", "alerts__final_counts_store")
        .replace("buffer_time + 30000", "buffer_time + 600000")
        .strip()
        .rstrip(";")
    )


def test_final_results_and_the_open_windows_query(spark, tmp_path):
    import random

    from lakestate.app import load_app
    from lakestate.io.partitioner import partition_for
    from lakestate.read.spark_engine import register_views
    from lakestate.testing import TopologyTestDriver

    rng = random.Random(5)
    hour = 3_600_000
    # Four hours of events, out of order by up to 5 minutes (within the grace).
    records = [
        {"key": f"u{rng.randrange(4)}", "value": {"n": i}, "timestamp": 10 * hour + i * 60_000 + rng.randrange(300_000)}
        for i in range(240)
    ]
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    run_app(
        str(APPS / "alerts.py"), warehouse=wh.root, state_dir=str(tmp_path / "state"),
        max_records=40, until_caught_up=True, say=lambda _: None,
    )
    expected = driver_outputs("alerts.py", records, 2, ["alerts"], with_partition=True)
    got = [(p, k, v, ts) for p, _, k, v, ts in topic_rows(spark, wh, "alerts")]
    # Sinks write a windowed key as {"key", "window_start", "window_end"}.
    assert got == [(p, k.as_fields(), v, ts) for p, k, v, ts in expected["alerts"]]
    # One final result per user and window.
    assert len({(k["key"], k["window_start"]) for _, k, _, _ in got}) == len(got) > 0
    # The open windows, by README's query, are what the driver's buffers hold.
    app = load_app(APPS / "alerts.py")
    open_windows = set()
    for p in range(2):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            topic = d.create_input_topic("events")
            for r in records:
                if partition_for(r["key"], 2) == p:
                    topic.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            for held in d.get_state_store("final-counts-store").all():
                w = held.key.window
                open_windows.add((held.key.key, str(w.start), w.end, w.end + 600_000, str(held.value)))
    register_views(spark, wh)
    rows = spark.sql(_readme_query()).collect()
    assert open_windows and {tuple(r) for r in rows} == open_windows
