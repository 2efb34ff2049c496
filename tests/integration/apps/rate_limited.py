"""Test app: per-key counts, rate limited to one update per key per 100 ms of stream time
(KIP-328 ``until_time_limit``)."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
(
    b.stream("events")
    .group_by_key()
    .count(ls.Materialized.as_("counts"))
    .suppress(
        ls.Suppressed.until_time_limit(
            timedelta(milliseconds=100), ls.BufferConfig.unbounded()
        ).with_name("rate-limit")
    )
    .to_stream()
    .to("limited-counts")
)
app = ls.App("rate_limited", b.build(), {})
