"""Test app: stream-stream joins with Bytes keys and values (issue 26). Lefts (Bytes keys
and values) join rights (Bytes keys, String values) within 40 ms, 10 ms of grace, three
ways: inner, left and outer, each with StreamJoined(Bytes, Bytes, String) serdes, so its
buffers and waiting store hold bytes beside text. The joiner writes bytes: b"L" + the left
value, b"|", the right value's UTF-8 (b"-" for a missing side)."""

from datetime import timedelta

import lakestate as ls

B, S = ls.Serdes.Bytes(), ls.Serdes.String()
WINDOWS = ls.JoinWindows.of_time_difference_and_grace(
    timedelta(milliseconds=40), timedelta(milliseconds=10)
)


def joiner(left: bytes | None, right: str | None) -> bytes:
    shown_left = b"-" if left is None else b"L" + left
    return shown_left + b"|" + (b"-" if right is None else right.encode())


b = ls.StreamsBuilder()
lefts = b.stream("lefts", ls.Consumed.with_(B, B))
rights = b.stream("rights", ls.Consumed.with_(B, S))
for how, join in (("inner", lefts.join), ("left", lefts.left_join), ("outer", lefts.outer_join)):
    joined = ls.StreamJoined.as_(how).with_(B, B, S)
    join(rights, joiner, WINDOWS, joined).to(f"{how}-out", ls.Produced.with_(B, B))
app = ls.App("bytes_stream_joins", b.build(), {})
