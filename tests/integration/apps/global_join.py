"""Test app: purchases left-joined with a global table of products (the product id is in
the purchase's value: a key selector, no repartition)."""

import lakestate as ls

b = ls.StreamsBuilder()
products = b.global_table("products", ls.Materialized.as_("products"))
(
    b.stream("purchases")
    .left_join(
        products,
        lambda key, purchase: purchase["product"],
        lambda purchase, product: {"qty": purchase["qty"], "product": product},
    )
    .to("priced")
)
app = ls.App("global_join", b.build(), {})
