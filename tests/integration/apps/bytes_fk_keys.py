"""Test app: a foreign-key left join of tables keyed by Bytes (issue 26): "rows" (Bytes keys
and values; the value's first byte picks the foreign key, FOREIGN_KEYS[v[0] % 6], None for
the last) joined with "labels" (Bytes keys: b"", NUL, 0xff and keys that extend them;
Bytes values); the joiner puts the label (b"-" for none) before the row, both bytes (it
would fail on anything else). The result store "joined" and the sink "joined" have Bytes
keys and values."""

import lakestate as ls

B = ls.Serdes.Bytes()
FOREIGN_KEYS = (b"", b"\x00", b"\x00\x00", b"\xff", b"\xff\x00", None)


def foreign_key(value: bytes) -> bytes | None:
    return FOREIGN_KEYS[value[0] % len(FOREIGN_KEYS)]


def joined(value: bytes, label: bytes | None) -> bytes:
    return (b"-" if label is None else label) + b":" + value


b = ls.StreamsBuilder()
rows = b.table("rows", ls.Consumed.with_(B, B))
labels = b.table("labels", ls.Consumed.with_(B, B))
rows.left_join(
    labels, foreign_key, joined, materialized=ls.Materialized.as_("joined").with_value_serde(B)
).to_stream().to("joined", ls.Produced.with_(B, B))
app = ls.App("bytes_fk_keys", b.build())
