"""Test app: joins. Orders re-keyed by customer (a repartition topic) joined with a versioned
customers table as of each order's time; accounts left-joined with profiles, materialized."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
customers = b.table("customers", ls.Materialized.as_versioned("customers", timedelta(hours=1)))
(
    b.stream("orders")
    .select_key(lambda k, v: v["customer"])
    .left_join(customers, lambda order, tier: {"amount": order["amount"], "tier": tier})
    .to("enriched")
)
accounts = b.table("accounts", ls.Materialized.as_("accounts"))
profiles = b.table("profiles", ls.Materialized.as_("profiles"))
(
    accounts.left_join(profiles, lambda a, p: f"{a}/{p}", ls.Materialized.as_("joined"))
    .to_stream()
    .to("joined-out")
)
app = ls.App("joins", b.build(), {})
