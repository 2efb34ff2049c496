"""The demo app: counts positive-amount events per user.

events --filter(amount > 0)--> group_by_key().count() --> event-counts
The count per user is kept in the store "event-counts-store" (a Delta state table when
run by the engine) and every update is written to the topic "event-counts".

It runs as two instances, ``a`` and ``b`` (Airflow queues ``lakestate-a`` and
``lakestate-b``, state in ``<state dir>/a`` and ``<state dir>/b``), which share its tasks
as the assignment says: the DAG runs ``rebalance``, then ``run_a`` and ``run_b``;
docker-compose.yml has a Celery worker per queue. ``lakestate run jobs/demo.py`` without
``--instance`` runs as ``a``.
"""

from __future__ import annotations

import random

import lakestate as ls

INPUT_TOPIC = "events"
OUTPUT_TOPIC = "event-counts"
STORE = "event-counts-store"


def build_topology() -> ls.Topology:
    builder = ls.StreamsBuilder()
    (
        builder.stream(INPUT_TOPIC)
        .filter(lambda key, value: value.get("amount", 0) > 0)
        .group_by_key()
        .count(materialized=ls.Materialized.as_(STORE))
        .to_stream()
        .to(OUTPUT_TOPIC)
    )
    return builder.build()


def sample_events(n: int, users: int = 5, seed: int = 7, start_ms: int = 1_700_000_000_000):
    """``n`` sample records (key, value, timestamp): user ids with amounts, some zero."""
    rng = random.Random(seed)
    for i in range(n):
        user = f"user-{rng.randrange(users)}"
        yield user, {"user": user, "amount": rng.choice([0, 1, 5, 10, 20])}, start_ms + i * 1000


INSTANCES = [
    {"name": "a", "queue": "lakestate-a"},
    {"name": "b", "queue": "lakestate-b"},
]

app = ls.App(
    "demo",
    build_topology(),
    {"processing.guarantee": "exactly_once_v2", "lakestate.instances": INSTANCES},
)
