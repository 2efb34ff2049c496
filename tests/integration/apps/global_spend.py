"""Test app: purchases joined with a global table of products (inner: the priced purchases
to a topic; left: each customer's spend, a store with a changelog), so that a batch writes
a sink and a changelog from the same global state."""

import lakestate as ls

b = ls.StreamsBuilder()
products = b.global_table("products", ls.Materialized.as_("products"))
purchases = b.stream("purchases")
(
    purchases.join(
        products,
        lambda customer, purchase: purchase["product"],
        lambda purchase, product: {**purchase, "price": product["price"]},
    ).to("priced")
)
(
    purchases.left_join(
        products,
        lambda customer, purchase: purchase["product"],
        lambda purchase, product: purchase["qty"] * (product["price"] if product else 0),
    )
    .group_by_key()
    .aggregate(lambda: 0, lambda customer, cost, spend: spend + cost, ls.Materialized.as_("spend"))
)
app = ls.App("global_spend", b.build(), {})
