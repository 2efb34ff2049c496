"""Windowed aggregations and final results through the engine on real Spark + Delta: the
same output as the test driver, whatever the batch boundaries, with the local state wiped
between batches, and with the process SIGKILLed at every step of a batch's commit."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_helpers import APPS, driver_outputs, events, produce, topic_rows
from lakestate import run_app
from lakestate.warehouse import Warehouse
from test_exactly_once import _run_in_subprocess

pytestmark = pytest.mark.integration

N = 150
OUTPUTS = ["session-sums", "window-final", "window-final-spilled", "window-updates"]
STORES = ["final-store", "final_spilled-store", "sessions", "window_counts"]


def _run(wh: Warehouse, state_dir, **kwargs):
    kwargs.setdefault("until_caught_up", True)
    return run_app(
        str(APPS / "windowed.py"),
        warehouse=wh.root,
        state_dir=str(state_dir),
        say=lambda _: None,
        **kwargs,
    )


def _normalised(rows):
    """(partition, key, value, ts); a windowed key reads back as the sink wrote it:
    {"key", "window_start", "window_end"}."""
    return [(p, k, v, ts) for p, _offset, k, v, ts in rows]


def _expected(records):
    raw = driver_outputs("windowed.py", records, 2, OUTPUTS, with_partition=True)
    return {
        topic: [
            (p, k.as_fields(), v, ts)
            for p, k, v, ts in rows
        ]
        for topic, rows in raw.items()
    }


def _got(spark, wh):
    return {topic: _normalised(topic_rows(spark, wh, topic)) for topic in OUTPUTS}


@pytest.fixture(scope="module")
def records():
    return events(N, keys=5, seed=7)


def _per_partition(rows):
    return {p: [r for r in rows if r[0] == p] for p in (0, 1)}


def test_windows_and_final_results_match_the_driver_in_many_batches(spark, tmp_path, records):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    state = tmp_path / "state"
    # Batches of 12 records per task, the local state wiped before every other batch: each
    # such batch restores its stores (and the observed stream times) from Delta.
    for i in range(20):
        result = _run(wh, state, max_records=12, max_batches=1, until_caught_up=False)
        if result.records == 0:
            break
        if i % 2:
            shutil.rmtree(state)
    expected = _expected(records)
    got = _got(spark, wh)
    for topic in OUTPUTS:
        assert _per_partition(got[topic]) == _per_partition(expected[topic]), topic
    final = [r for r in got["window-final"]]
    assert final and final == got["window-final-spilled"]
    # Final results: one record per window, its last count.
    assert len({json.dumps(r[1], sort_keys=True) for r in final}) == len(final)


def test_kill_at_every_commit_step_gives_the_uninterrupted_result(spark, tmp_path, records):
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    _run(reference, tmp_path / "ref-state", max_records=15)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    state = tmp_path / "state"
    # Each step of the commit protocol (test_exactly_once.py kills after every table of
    # its app): the progress commit, a sink (the final results), a changelog (the final
    # results' buffer, then the window store), all tables, mid local commit.
    points = [
        "after_progress@2",
        "after_sink:window-final@2",
        "after_changelog:final-store@2",
        "after_changelog:window_counts@2",
        "after_tables@3",
        "mid_local_commit@4",
    ]
    for point in points:
        proc = _run_in_subprocess(wh, state, point, app="windowed.py", max_records=15)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
    proc = _run_in_subprocess(wh, state, None, app="windowed.py", max_records=15)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _got(spark, wh) == _got(spark, reference)
