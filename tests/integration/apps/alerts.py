"""Test app: per-user counts in hourly windows with 10 minutes' grace, final results only
(KIP-328 ``until_window_closes``): the app of README's open-windows SQL query."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
(
    b.stream("events")
    .group_by_key()
    .windowed_by(ls.TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(minutes=10)))
    .count()
    .suppress(ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded()).with_name("final-counts"))
    .to_stream()
    .to("alerts")
)
app = ls.App("alerts", b.build(), {})
