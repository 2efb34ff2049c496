"""Test app: a foreign-key left join (KIP-213). Each order names its customer; the enriched
order joins the customer's row (or None: no customer, or no such customer), follows a
change of customer or of the customer's row, and a deleted order retracts its result."""

import lakestate as ls

b = ls.StreamsBuilder()
orders = b.table("orders", ls.Materialized.as_("orders"))
customers = b.table("customers", ls.Materialized.as_("customers"))
(
    orders.left_join(
        customers,
        lambda order: order.get("customer"),
        lambda order, customer: f"{order['item']} for {customer}",
        materialized=ls.Materialized.as_("enriched"),
    )
    .to_stream()
    .to("enriched-orders")
)
app = ls.App("fk_join", b.build(), {})
