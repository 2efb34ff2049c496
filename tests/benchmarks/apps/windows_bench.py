"""The windows/suppress benchmark's app (``benchmarks/bench_windows.py``).

clicks --group_by_key().windowed_by(1-minute tumbling windows, 30 s grace).count()
       --suppress(until_window_closes)--> final

One final count per (key, window), emitted once stream time reaches the window's end plus
its grace; the counts are kept in the store ``counts``, the updates waiting for their
window to close in the suppression buffer ``final-results-store``. A windowed key lands in
the sink as JSON ``{"key", "window_start", "window_end"}``.

``make_app(buffer)``: the same topology with another ``BufferConfig`` (the benchmark's
memory case generates one-line app files calling it with
``BufferConfig.max_records(n).spill_to_disk_when_full()``); ``app`` is the unbounded one.
"""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls

APP_NAME = "windows-bench"
INPUT_TOPIC = "clicks"
OUTPUT_TOPIC = "final"
STORE = "counts"
SUPPRESS_NAME = "final-results"
WINDOW = timedelta(minutes=1)
GRACE = timedelta(seconds=30)


def build_topology(buffer: ls.BufferConfig) -> ls.Topology:
    builder = ls.StreamsBuilder()
    (
        builder.stream(INPUT_TOPIC)
        .group_by_key()
        .windowed_by(ls.TimeWindows.of_size_and_grace(WINDOW, GRACE))
        .count(ls.Materialized.as_(STORE))
        .suppress(ls.Suppressed.until_window_closes(buffer).with_name(SUPPRESS_NAME))
        .to_stream()
        .to(OUTPUT_TOPIC)
    )
    return builder.build()


def make_app(buffer: ls.BufferConfig, name: str = APP_NAME) -> ls.App:
    return ls.App(name, build_topology(buffer), {"processing.guarantee": "exactly_once_v2"})


app = make_app(ls.BufferConfig.unbounded())
