"""Test app: a suppress over a Bytes table (issue 26): a tumbling-windowed reduce with
Bytes serdes (the last 6 bytes of a key's values concatenated: the reducer fails on
anything but bytes), suppressed until its windows close, written as (key + b"@" + the
window start's digits, the final bytes)."""

from datetime import timedelta

import lakestate as ls

B = ls.Serdes.Bytes()
b = ls.StreamsBuilder()
windows = ls.TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10))
final = ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded()).with_name("finals")
(
    b.stream("blobs", ls.Consumed.with_(B, B))
    .group_by_key(ls.Grouped.with_(B, B))
    .windowed_by(windows)
    .reduce(lambda agg, v: (agg + v)[-6:], ls.Materialized.as_("wtails"))
    .suppress(final)
    .to_stream()
    .map(lambda w, v: (w.key + b"@" + str(w.window.start).encode(), v))
    .to("finals-out", ls.Produced.with_(B, B))
)
app = ls.App("bytes_suppress", b.build())
