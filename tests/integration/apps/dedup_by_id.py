"""Test app: deduplicate events by their "id" field across partitions (KIP-655's
deduplicate, which repartitions by id)."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
(
    b.stream("events")
    .deduplicate(lambda k, v: v["id"], timedelta(seconds=30), ls.Deduplicated.as_("seen-ids"))
    .to("unique-ids")
)
app = ls.App("dedupid", b.build(), {})
