"""Test app: counts.py into typed Delta tables (TYPED_SINK_DIR): per-key counts with a flag
(schema from the data, partitioned by the flag), every positive event under a declared
schema, and per-key sums into a log table."""

import os

import lakestate as ls

TABLES = os.environ["TYPED_SINK_DIR"]
counts_table = ls.DeltaSink("counts-typed", f"{TABLES}/counts", partition_by="big")
events_table = ls.DeltaSink(
    "events-typed", f"{TABLES}/events", schema={"key": "string", "user": "string", "amount": "long"}
)
b = ls.StreamsBuilder()
events = b.stream("events").filter(lambda k, v: v["amount"] > 0)
events.to(events_table)
counts = events.group_by_key().count(ls.Materialized.as_("counts")).to_stream()
counts.map_values(lambda n: {"count": n, "big": n >= 3}).to(counts_table)
events.group_by_key().aggregate(
    lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sums")
).to_stream().to("sums-out")
app = ls.App("typed_counts", b.build(), {"statestore.uncommitted.max.records": 100_000})
