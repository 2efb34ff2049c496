"""Test app: impressions left-joined with ad clicks within 10 minutes (1 minute of grace),
named as in docs/guide.md's stream-stream join example, so its SQL runs as written: ``ads`` with
the stores ``impression-clicks-*``."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
b.stream("impressions").left_join(
    b.stream("ad-clicks"),
    lambda impression, click: {"ad": impression["ad"], "clicked": click is not None},
    ls.JoinWindows.of_time_difference_and_grace(timedelta(minutes=10), timedelta(minutes=1)),
    ls.StreamJoined.as_("impression-clicks"),
).to("ad-outcomes")
app = ls.App("ads", b.build(), {})
