"""Test app: counts.py's per-key count and sum of positive amounts, Kafka to Kafka: its
source and sink topics are in the cluster at $KAFKA_TEST_BOOTSTRAP, named with
$KAFKA_TEST_ID (so that tests sharing a broker do not share topics, groups or producers)."""

import os

import lakestate as ls

ID = os.environ["KAFKA_TEST_ID"]
INPUT, COUNTS, SUMS = f"events-{ID}", f"counts-out-{ID}", f"sums-out-{ID}"

b = ls.StreamsBuilder()
events = b.stream(INPUT).filter(lambda k, v: v["amount"] > 0)
events.group_by_key().count(ls.Materialized.as_("counts")).to_stream().to(COUNTS)
events.group_by_key().aggregate(
    lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sums")
).to_stream().to(SUMS)
app = ls.App(
    f"kcounts-{ID}",
    b.build(),
    {
        "bootstrap.servers": os.environ["KAFKA_TEST_BOOTSTRAP"],
        "statestore.uncommitted.max.records": 100_000,
        "producer.transaction.timeout.ms": int(
            os.environ.get("KAFKA_TEST_TXN_TIMEOUT_MS", 120_000)
        ),
    },
)
