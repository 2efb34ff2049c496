"""Test app: a count per Long key of a topic with Long keys and String values, written to
a Kafka topic with Long keys and Long values (Kafka's Serdes), in the cluster at
$KAFKA_TEST_BOOTSTRAP, topics named with $KAFKA_TEST_ID. Records that do not deserialize
go to the dead-letter topic (log_and_continue)."""

import os

import lakestate as ls

ID = os.environ["KAFKA_TEST_ID"]
INPUT, COUNTS = f"clicks-{ID}", f"click-counts-{ID}"

b = ls.StreamsBuilder()
(
    b.stream(INPUT, ls.Consumed.with_(ls.Serdes.Long(), ls.Serdes.String()))
    .group_by_key()
    .count(ls.Materialized.as_("counts"))
    .to_stream()
    .to(COUNTS, ls.Produced.with_(ls.Serdes.Long(), ls.Serdes.Long()))
)
app = ls.App(
    f"kserdes-{ID}",
    b.build(),
    {
        "bootstrap.servers": os.environ["KAFKA_TEST_BOOTSTRAP"],
        "deserialization.exception.handler": "log_and_continue",
    },
)
