"""Test app: re-key by user, then count per user (two sub-topologies, a repartition topic)."""

import lakestate as ls

b = ls.StreamsBuilder()
(
    b.stream("events")
    .select_key(lambda k, v: v["user"])
    .group_by_key()
    .count(ls.Materialized.as_("per-user"))
    .to_stream()
    .to("per-user-out")
)
app = ls.App("regroup", b.build(), {})
