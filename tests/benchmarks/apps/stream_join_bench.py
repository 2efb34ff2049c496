"""The stream-stream join benchmark's app (``benchmarks/bench_stream_join.py``).

join-left --+
            +-- join(JoinWindows.of_time_difference_and_grace(6 min, 1 min)) --> join-pairs
join-right -+

Each value is the record's id (an int); a joined pair is written as ``[left id, right id]``
under the shared key, at the larger of the two timestamps (Kafka's inner stream-stream join).
The buffers are the window stores ``join-this-join-store`` and ``join-other-join-store``.
"""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls

APP_NAME = "stream-join-bench"
LEFT_TOPIC = "join-left"
RIGHT_TOPIC = "join-right"
OUTPUT_TOPIC = "join-pairs"
DIFFERENCE = timedelta(minutes=6)
GRACE = timedelta(minutes=1)


def pair(left: int, right: int) -> list[int]:
    return [left, right]


def build_topology() -> ls.Topology:
    builder = ls.StreamsBuilder()
    left, right = builder.stream(LEFT_TOPIC), builder.stream(RIGHT_TOPIC)
    left.join(
        right,
        pair,
        ls.JoinWindows.of_time_difference_and_grace(DIFFERENCE, GRACE),
        ls.StreamJoined.as_("join"),
    ).to(OUTPUT_TOPIC)
    return builder.build()


app = ls.App(APP_NAME, build_topology(), {"processing.guarantee": "exactly_once_v2"})
