"""Test app: re-key by user, through a repartition topic of 3 partitions
(``Repartitioned``), then count per user."""

import os

import lakestate as ls

# The test changes the count to see an existing topic's count kept.
PARTITIONS = int(os.environ.get("REPARTITIONED_PARTITIONS", "3"))

b = ls.StreamsBuilder()
(
    b.stream("events")
    .select_key(lambda k, v: v["user"])
    .repartition(ls.Repartitioned.as_("by-user").with_number_of_partitions(PARTITIONS))
    .group_by_key()
    .count(ls.Materialized.as_("per-user"))
    .to_stream()
    .to("per-user-out")
)
app = ls.App("repartitioned", b.build(), {})
