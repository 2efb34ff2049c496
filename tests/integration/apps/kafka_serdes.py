"""Test app: a count per Long key of a topic with Long keys and String values, written to
a Kafka topic with Long keys and Long values (Kafka's Serdes), in the cluster at
$KAFKA_TEST_BOOTSTRAP, topics named with $KAFKA_TEST_ID, and per 10 ms window with no serde
given (Kafka's time-windowed key layout). Records that do not deserialize go to the
dead-letter topic (log_and_continue)."""

import os
from datetime import timedelta

import lakestate as ls

ID = os.environ["KAFKA_TEST_ID"]
INPUT, COUNTS = f"clicks-{ID}", f"click-counts-{ID}"

b = ls.StreamsBuilder()
clicks = b.stream(INPUT, ls.Consumed.with_(ls.Serdes.Long(), ls.Serdes.String()))
(
    clicks.group_by_key()
    .count(ls.Materialized.as_("counts"))
    .to_stream()
    .to(COUNTS, ls.Produced.with_(ls.Serdes.Long(), ls.Serdes.Long()))
)
# Per 10 ms window, no serde given: the table's (a time-windowed serde of the carried Long
# key, and Long) go to the topic, as Kafka's.
(
    clicks.group_by_key()
    .windowed_by(ls.TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10)))
    .count()
    .to_stream()
    .to(f"windowed-counts-{ID}")
)
app = ls.App(
    f"kserdes-{ID}",
    b.build(),
    {
        "bootstrap.servers": os.environ["KAFKA_TEST_BOOTSTRAP"],
        "deserialization.exception.handler": "log_and_continue",
    },
)
