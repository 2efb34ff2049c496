"""Test app: counts.py over a Delta table other writers append to (DELTA_SOURCE_TABLE):
per-key count and sum of positive amounts."""

import os

import lakestate as ls

orders_table = ls.DeltaSource(
    "orders", os.environ["DELTA_SOURCE_TABLE"], key="id", timestamp="ts", partitions=2
)
b = ls.StreamsBuilder()
orders = b.stream(orders_table).filter(lambda k, v: v["amount"] > 0)
orders.group_by_key().count(ls.Materialized.as_("counts")).to_stream().to("counts-out")
orders.group_by_key().aggregate(
    lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sums")
).to_stream().to("sums-out")
app = ls.App("delta_counts", b.build(), {"statestore.uncommitted.max.records": 100_000})
