"""The clicks demo app (jobs/clicks.py) through the engine on real Spark + Delta, in many
small batches: its final results and alerts equal the test driver's; every sample click but
the late one is counted once, in a final result or in a window its buffer still holds; the
alerts are rate limited."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from engine_helpers import produce, topic_rows
from lakestate import run_app
from lakestate.app import load_module
from lakestate.io.partitioner import partition_for
from lakestate.read.spark_engine import state_frame
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

N = 400  # about 13 minutes of clicks
JOB = str(Path(__file__).resolve().parents[2] / "jobs" / "clicks.py")


def _driver_outputs(clicks, records: list[dict]) -> dict[str, list[tuple]]:
    """(partition, key, value, timestamp) per output topic, one driver per input partition:
    the alert branch's repartition keeps each user on its input partition (same key), so a
    driver sees what the engine's two tasks of that partition see."""
    topics = (clicks.FINAL_TOPIC, clicks.ALERT_TOPIC)
    out: dict[str, list[tuple]] = {t: [] for t in topics}
    for p in range(2):
        with TopologyTestDriver(clicks.app.topology, {"application.id": clicks.app.name}) as d:
            source = d.create_input_topic(clicks.INPUT_TOPIC)
            for r in records:
                if partition_for(r["key"], 2) == p:
                    source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            for t in topics:
                for x in d.create_output_topic(t).read_records_to_list():
                    key = x.key.as_fields() if t == clicks.FINAL_TOPIC else x.key
                    out[t].append((p, key, x.value, x.timestamp))
    return out


def test_clicks_app_in_many_batches(spark, tmp_path):
    clicks = load_module(JOB)
    records = [
        {"key": k, "value": v, "timestamp": ts} for k, v, ts in clicks.sample_clicks(N, seed=3)
    ]
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, clicks.INPUT_TOPIC, records, partitions=2)
    result = run_app(
        JOB,
        warehouse=wh.root,
        state_dir=str(tmp_path / "state"),
        max_records=60,
        until_caught_up=True,
        say=lambda _: None,
    )
    assert len(result.batches) > 3

    expected = _driver_outputs(clicks, records)
    got = {
        t: [(p, k, v, ts) for p, _offset, k, v, ts in topic_rows(spark, wh, t)]
        for t in (clicks.FINAL_TOPIC, clicks.ALERT_TOPIC)
    }
    assert got == expected

    # Final results: one per user and window. With the windows the buffer still holds, they
    # count every click once, except the one that came after its window closed.
    final = got[clicks.FINAL_TOPIC]
    assert len({(k["key"], k["window_start"]) for _, k, _, _ in final}) == len(final) > 0
    still_open = [
        (json.loads(r["key"]), json.loads(r["value"]))
        for r in state_frame(spark, wh, clicks.app.name, f"{clicks.FINAL_BUFFER}-store").collect()
        if r["key"] is not None
    ]
    assert still_open
    assert not {(k["key"], k["window_start"]) for k, _ in still_open} & {
        (k["key"], k["window_start"]) for _, k, _, _ in final
    }
    assert sum(v for _, _, v, _ in final) + sum(v for _, v in still_open) == N - 1

    # Alerts: only the heavy user goes over the threshold, in (nearly) every minute, so
    # many updates pass the filter; the rate limit lets one through per 5 minutes of stream
    # time. An alert leaves the buffer when stream time reaches the timestamp of the first
    # update it held + 5 min; that update may be up to 20 s out of order (sample_clicks),
    # so consecutive alerts are at least 5 min - 20 s apart.
    alerts = got[clicks.ALERT_TOPIC]
    assert {k for _, k, _, _ in alerts} == {clicks.HEAVY_USER}
    over = Counter(
        k
        for _, _, k, _, _ in topic_rows(
            spark, wh, f"{clicks.app.name}-{clicks.BUSY_STORE}-repartition"
        )
    )
    assert over[clicks.HEAVY_USER] > 10 * len(alerts)
    times = [ts for _, _, _, ts in alerts]
    gap_ms = (clicks.ALERT_INTERVAL - timedelta(seconds=20)) // timedelta(milliseconds=1)
    assert len(times) >= 2
    assert all(b - a >= gap_ms for a, b in zip(times, times[1:], strict=False))
    for _, _, alert, ts in alerts:
        assert alert["clicks"] >= clicks.THRESHOLD
        assert alert["window_start"] <= ts < alert["window_start"] + 60_000
