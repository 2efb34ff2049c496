"""The app of bench_warmup.py: a count per key, in a key-value store, over a 2-partition
topic (tasks 0_0 and 0_1), run as the instances the benchmark names.

keys --group_by_key().count()--> key-counts (store "key-counts-store")

Its instances come from the environment (``BENCH_WARMUP_INSTANCES``, the JSON of
``lakestate.instances``), so that the benchmark adds one between two fresh processes as a
user would edit the config. ``acceptable.recovery.lag`` is Kafka's default (10000).
"""

from __future__ import annotations

import json
import os

import lakestate as ls

APP_NAME = "warmup-bench"
INPUT_TOPIC = "keys"
OUTPUT_TOPIC = "key-counts"
STORE = "key-counts-store"
PARTITIONS = 2
INSTANCES_ENV = "BENCH_WARMUP_INSTANCES"


def build_topology() -> ls.Topology:
    builder = ls.StreamsBuilder()
    (
        builder.stream(INPUT_TOPIC)
        .group_by_key()
        .count(materialized=ls.Materialized.as_(STORE))
        .to_stream()
        .to(OUTPUT_TOPIC)
    )
    return builder.build()


app = ls.App(
    APP_NAME,
    build_topology(),
    {
        "processing.guarantee": "exactly_once_v2",
        "lakestate.instances": json.loads(os.environ.get(INSTANCES_ENV, '[{"name": "a"}]')),
    },
)
