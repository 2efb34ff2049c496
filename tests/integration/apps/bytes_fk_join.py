"""Test app: a foreign-key table join over Bytes values (issue 26): "rows" (String keys,
Bytes values whose first byte's hex is the foreign key) joined with "labels" (String
keys, Bytes values); the joiner concatenates label and row (it would fail on anything
but bytes), written with Bytes values."""

import lakestate as ls

B, S = ls.Serdes.Bytes(), ls.Serdes.String()
b = ls.StreamsBuilder()
rows = b.table("rows", ls.Consumed.with_(S, B))
labels = b.table("labels", ls.Consumed.with_(S, B))
rows.join(
    labels,
    lambda v: v[:1].hex(),
    lambda v, label: label + b":" + v,
    materialized=ls.Materialized.with_(S, B),
).to_stream().to("joined", ls.Produced.with_(S, B))
app = ls.App("bytes_fk_join", b.build())
