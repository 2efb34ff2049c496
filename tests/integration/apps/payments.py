"""Test app: payments deduplicated by their transaction id across partitions (KIP-655),
named as in docs/guide.md's dedup example, so its SQL runs as written: ``payments_app`` with the
store ``seen-payments``."""

from datetime import timedelta

import lakestate as ls

b = ls.StreamsBuilder()
(
    b.stream("payments")
    .deduplicate(lambda k, v: v["txn"], timedelta(hours=1), ls.Deduplicated.as_("seen-payments"))
    .to("unique-payments")
)
app = ls.App("payments_app", b.build(), {})
