"""The orders app: each order enriched with its customer's tier as it was at the order's time,
from a versioned customers table (KIP-914), late orders included.

customers (key: customer, value: tier) --table(as_versioned("customers", 1 day))--+
orders (key: customer, value: {"order", "amount"}) --left_join(as of the order's time)--> enriched-orders

A tier change is a new version of the customer's row, valid from its timestamp until the
next one; an update that arrives out of order (older than the customer's newest) goes into
the history in its place. An order is joined with the version valid at the order's
timestamp, however late it arrives (within the day of history the store keeps behind the
newest tier change), so an order placed before an upgrade keeps the old tier. An order
of a customer with no version at its time gets tier null (a left join). The history is a
SQL table: orders__customers (key, value, valid_from, valid_to); ``lakestate demo --app
orders`` runs it on sample customers and orders.
"""

from __future__ import annotations

import random
from datetime import timedelta

import lakestate as ls

CUSTOMERS_TOPIC = "customers"
INPUT_TOPIC = "orders"
OUTPUT_TOPIC = "enriched-orders"
CUSTOMERS_STORE = "customers"  # its SQL view: orders__customers
HISTORY_RETENTION = timedelta(days=1)

# 2026-01-01 09:00 UTC, as the clicks demo.
START_MS = 1_767_258_000_000
TIERS = ("bronze", "silver", "gold", "platinum")
HOUR_MS = 3_600_000


def enrich(order: dict, tier: str | None) -> dict:
    return {**order, "tier": tier}


def build_topology() -> ls.Topology:
    builder = ls.StreamsBuilder()
    customers = builder.table(
        CUSTOMERS_TOPIC,
        materialized=ls.Materialized.as_versioned(CUSTOMERS_STORE, HISTORY_RETENTION),
    )
    builder.stream(INPUT_TOPIC).left_join(customers, enrich).to(OUTPUT_TOPIC)
    return builder.build()


def sample_customers(n: int, seed: int = 7, start_ms: int = START_MS, hours: int = 2):
    """Tier changes of ``n`` customers (key, tier, timestamp) in the order they arrive:
    every customer's first tier at ``start_ms``, then 0-3 changes each over ``hours``
    hours, in time order, except that for about half the customers with two changes or
    more the last one arrives first (the other is then out of order: it goes into the
    history in its place)."""
    rng = random.Random(seed)
    names = [f"customer-{i}" for i in range(1, n + 1)]
    first = [(name, rng.choice(TIERS[:2]), start_ms) for name in names]
    changes = []
    for name in names:
        times = sorted(
            start_ms + rng.randrange(1, hours * HOUR_MS) for _ in range(rng.randrange(4))
        )
        changes += [(name, rng.choice(TIERS), t) for t in times]
    arrival = sorted(changes, key=lambda change: change[2])
    for name in names:
        mine = [i for i, change in enumerate(arrival) if change[0] == name]
        if len(mine) >= 2 and rng.random() < 0.5:  # its last two changes swap places
            a, b = mine[-2:]
            arrival[a], arrival[b] = arrival[b], arrival[a]
    return first + arrival


def sample_orders(
    n: int, customers: int, seed: int = 7, start_ms: int = START_MS, hours: int = 2, first: int = 0
):
    """``n`` orders (key: customer, value, timestamp) in the order they arrive, numbered from
    ``first``, spread over ``hours`` hours from ``start_ms``; one in ten arrives up to an
    hour late."""
    rng = random.Random(seed + 1)
    span = hours * HOUR_MS
    for i in range(n):
        timestamp = start_ms + (i * span) // max(n, 1)
        if rng.random() < 0.1:
            timestamp = max(start_ms, timestamp - rng.randrange(HOUR_MS))
        customer = f"customer-{rng.randrange(1, customers + 1)}"
        order = {"order": f"order-{first + i}", "amount": rng.randrange(5, 500)}
        yield customer, order, timestamp


def tier_as_of(history: list[tuple[str, str | None, int]], customer: str, timestamp: int):
    """The reference: the customer's tier valid at ``timestamp`` (the value of its update
    with the largest timestamp <= ``timestamp``; of updates with equal timestamps the one
    that arrived last), from the history (key, tier, timestamp) in arrival order."""
    best = None
    for key, tier, ts in history:
        if key == customer and ts <= timestamp and (best is None or ts >= best[1]):
            best = (tier, ts)
    return None if best is None else best[0]


app = ls.App("orders", build_topology(), {"processing.guarantee": "exactly_once_v2"})
