"""Test app: stores with Bytes serdes (Kafka's ``Serdes.Bytes()``), through the record
cache. A reduce keeps the last 6 bytes of a key's values concatenated (the reducer would
fail on anything but bytes), a count has a Bytes key, a table of a Bytes topic is
materialized and joined (its value getter must give bytes back)."""

import lakestate as ls

B, L = ls.Serdes.Bytes(), ls.Serdes.Long()
b = ls.StreamsBuilder()
blobs = b.stream("blobs", ls.Consumed.with_(B, B))
grouped = blobs.group_by_key(ls.Grouped.with_(B, B))
grouped.reduce(lambda agg, v: (agg + v)[-6:], ls.Materialized.as_("tails")).to_stream().to(
    "tails-out", ls.Produced.with_(B, B)
)
grouped.count(ls.Materialized.as_("bcounts")).to_stream().to("bcounts-out", ls.Produced.with_(B, L))
latest = b.table("labels", ls.Consumed.with_(B, B), ls.Materialized.as_("labels"))
blobs.join(latest, lambda v, label: label + b":" + v).to("labelled", ls.Produced.with_(B, B))
app = ls.App(
    "bytes_stores",
    b.build(),
    {"statestore.uncommitted.max.records": 100_000, "statestore.cache.max.bytes": 10_000_000},
)
