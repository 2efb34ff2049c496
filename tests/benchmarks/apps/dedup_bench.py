"""The deduplication benchmark's app (``benchmarks/bench_dedup.py``).

dedup-events --deduplicate_by_key(1 hour)--> dedup-unique

The key of each input record is its deduplication id. A record is dropped when a record
with the same key was forwarded within one hour of its timestamp (KIP-655); the ids seen are
kept in the store ``dedup-seen-ids`` (the Delta state table
``<warehouse>/apps/dedup-bench/state/dedup-seen-ids`` when run by the engine).
"""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls

APP_NAME = "dedup-bench"
INPUT_TOPIC = "dedup-events"
OUTPUT_TOPIC = "dedup-unique"
STORE = "dedup-seen-ids"
INTERVAL = timedelta(hours=1)


def build_topology(interval: timedelta = INTERVAL) -> ls.Topology:
    builder = ls.StreamsBuilder()
    (
        builder.stream(INPUT_TOPIC)
        .deduplicate_by_key(interval, deduplicated=ls.Deduplicated.as_(STORE))
        .to(OUTPUT_TOPIC)
    )
    return builder.build()


app = ls.App(APP_NAME, build_topology(), {"processing.guarantee": "exactly_once_v2"})
