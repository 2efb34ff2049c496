"""Test app: per-key counts in tumbling windows with grace, every update and the final
results only (in memory and spilled to disk), and per-key sums in sessions."""

from datetime import timedelta

import lakestate as ls

MS = timedelta(milliseconds=1)

b = ls.StreamsBuilder()
events = b.stream("events")
counts = (
    events.group_by_key()
    .windowed_by(ls.TimeWindows.of_size_and_grace(100 * MS, 30 * MS))
    .count(ls.Materialized.as_("window_counts"))
)
counts.to_stream().to("window-updates")
counts.suppress(
    ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded()).with_name("final")
).to_stream().to("window-final")
counts.suppress(
    ls.Suppressed.until_window_closes(
        ls.BufferConfig.max_records(5).spill_to_disk_when_full()
    ).with_name("final_spilled")
).to_stream().to("window-final-spilled")
events.group_by_key().windowed_by(
    ls.SessionWindows.of_inactivity_gap_and_grace(40 * MS, 20 * MS)
).aggregate(
    lambda: 0,
    lambda k, v, agg: agg + v["amount"],
    lambda k, a, b: a + b,
    ls.Materialized.as_("sessions"),
).to_stream().to("session-sums")
app = ls.App("windowed", b.build(), {})
