"""Test app: counts.py's per-key count and sum with Kafka's record cache on (KIP-63): one
update per key per batch reaches each sink."""

import lakestate as ls

b = ls.StreamsBuilder()
events = b.stream("events").filter(lambda k, v: v["amount"] > 0)
events.group_by_key().count(ls.Materialized.as_("counts")).to_stream().to("counts-out")
events.group_by_key().aggregate(
    lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sums")
).to_stream().to("sums-out")
app = ls.App(
    "counts_cached",
    b.build(),
    {"statestore.uncommitted.max.records": 100_000, "statestore.cache.max.bytes": 10_000_000},
)
