"""Test app: per-key sums with records that fail (a total ending in 7) skipped to a
dead-letter topic (log-and-continue), records that are not JSON too; a branch forwards
every record to `copy` before the sum, so a skipped record's output must go as well."""

import lakestate as ls


def checked(total):
    if total % 10 == 7:
        raise ValueError(f"total {total} ends in 7")
    return total


b = ls.StreamsBuilder()
events = b.stream("events")
events.to("copy")
(
    events.group_by_key()
    .aggregate(lambda: 0, lambda k, v, agg: agg + v["amount"], ls.Materialized.as_("sums"))
    .to_stream()
    .map_values(checked)
    .to("sums-out")
)
app = ls.App(
    "dead_letters",
    b.build(),
    {
        "statestore.uncommitted.max.records": 100_000,
        "processing.exception.handler": "log_and_continue",
        "deserialization.exception.handler": (
            "org.apache.kafka.streams.errors.LogAndContinueExceptionHandler"
        ),
        "errors.dead.letter.queue.topic.name": "bad-events",
    },
)
