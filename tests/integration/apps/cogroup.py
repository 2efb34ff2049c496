"""Test app: a cogroup (KIP-150). Clicks and views of a user fold into one activity string
per user, and into one per user and 100 ms tumbling window (20 ms of grace)."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
clicks = b.stream("clicks").group_by_key()
views = b.stream("views").group_by_key()
(
    clicks.cogroup(lambda k, v, agg: f"{agg}c{v}")
    .cogroup(views, lambda k, v, agg: f"{agg}v{v}")
    .aggregate(lambda: "", ls.Materialized.as_("activity"))
    .to_stream()
    .to("activity-updates")
)
windows = ls.TimeWindows.of_size_and_grace(timedelta(milliseconds=100), timedelta(milliseconds=20))
(
    clicks.cogroup(lambda k, v, agg: agg + 1)
    .cogroup(views, lambda k, v, agg: agg + 10)
    .windowed_by(windows)
    .aggregate(lambda: 0, ls.Materialized.as_("activity_windows"))
    .to_stream()
    .map(lambda k, v: (k.key, f"{k.window.start}:{v}"))
    .to("activity-windows")
)
app = ls.App("cogroup", b.build(), {})
