"""Test app: per-key sums over sliding windows (KIP-450, 50 ms apart, 20 ms grace), every
update, and per-key counts over the same windows, final results only."""

from datetime import timedelta

import lakestate as ls

MS = timedelta(milliseconds=1)
WINDOWS = ls.SlidingWindows.of_time_difference_and_grace(50 * MS, 20 * MS)

b = ls.StreamsBuilder()
events = b.stream("events")
events.group_by_key().windowed_by(WINDOWS).aggregate(
    lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sliding_sums")
).to_stream().to("sliding-updates")
events.group_by_key().windowed_by(WINDOWS).count(ls.Materialized.as_("sliding_counts")).suppress(
    ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded()).with_name("final")
).to_stream().to("sliding-final")
app = ls.App("sliding", b.build(), {})
