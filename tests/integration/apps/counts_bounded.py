"""Test app: counts.py's topology and name, with batches of at most 50 records in all
(``lakestate.batch.max.records``), so that a backlog goes in several bounded batches."""

import lakestate as ls

b = ls.StreamsBuilder()
events = b.stream("events").filter(lambda k, v: v["amount"] > 0)
events.group_by_key().count(ls.Materialized.as_("counts")).to_stream().to("counts-out")
events.group_by_key().aggregate(
    lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sums")
).to_stream().to("sums-out")
config = {"statestore.uncommitted.max.records": 100_000, "lakestate.batch.max.records": 50}
app = ls.App("counts", b.build(), config)
