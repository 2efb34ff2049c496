"""Test app: deduplicate events by key within 10 seconds (KIP-655)."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
(
    b.stream("events")
    .deduplicate_by_key(timedelta(seconds=10), ls.Deduplicated.as_("seen-keys"))
    .to("unique-events")
)
app = ls.App("dedup", b.build(), {})
