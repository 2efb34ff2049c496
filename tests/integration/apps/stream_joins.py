"""Test app: a stream-stream outer join. Clicks and views of the same key at most 50 ms
apart are paired; a click or view without a partner is emitted alone once its window has
closed (20 ms of grace)."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
windows = ls.JoinWindows.of_time_difference_and_grace(
    timedelta(milliseconds=50), timedelta(milliseconds=20)
)
(
    b.stream("clicks")
    .outer_join(b.stream("views"), lambda c, v: f"{c}/{v}", windows, ls.StreamJoined.as_("pairs"))
    .to("paired")
)
app = ls.App("stream_joins", b.build(), {})
