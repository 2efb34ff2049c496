"""The clicks app: per-user clicks in 1-minute windows, final results only, and rate-limited
alerts for users who click too fast (windows and suppression, KIP-328).

clicks --group_by_key().windowed_by(1 min, 30 s grace).count()--> clicks-per-minute-store
  |-- suppress(until_window_closes) --> clicks-per-minute   one final count per user and minute
  '-- filter(count >= 10) -> map(user, alert) -> to_table   busy-users-store (via a repartition)
        -- suppress(until_time_limit(5 min)) --> click-alerts   at most one per user per 5 min

A window [start, start + 1 min) takes records until the stream time of its task reaches
start + 1 min + 30 s; a record arriving later is dropped (metric late-record-drop-total).
Its final count leaves the buffer "final-clicks-store" then. An alert leaves the buffer
"alert-limit-store" 5 minutes of stream time after the user's first alert since the last
one went out, carrying the latest. Both buffers are SQL tables (clicks__final_clicks_store,
clicks__alert_limit_store); `lakestate demo --app clicks` runs it on sample clicks.
"""

from __future__ import annotations

import random
from datetime import timedelta

import lakestate as ls

INPUT_TOPIC = "clicks"
FINAL_TOPIC = "clicks-per-minute"
ALERT_TOPIC = "click-alerts"
WINDOW_STORE = "clicks-per-minute-store"
FINAL_BUFFER = "final-clicks"  # its store (and SQL table): final-clicks-store
BUSY_STORE = "busy-users-store"
ALERT_BUFFER = "alert-limit"  # its store: alert-limit-store

WINDOW = timedelta(minutes=1)
GRACE = timedelta(seconds=30)
THRESHOLD = 10  # clicks in one window that make an alert
ALERT_INTERVAL = timedelta(minutes=5)

# 2026-01-01 09:00 UTC: sample clicks start on a minute, so the windows read easily.
START_MS = 1_767_258_000_000
HEAVY_USER = "crawler"
USERS = ("user-1", "user-2", "user-3", "user-4")
PAGES = ("/", "/search", "/product", "/cart")


def build_topology() -> ls.Topology:
    builder = ls.StreamsBuilder()
    counts = (
        builder.stream(INPUT_TOPIC)
        .group_by_key()
        .windowed_by(ls.TimeWindows.of_size_and_grace(WINDOW, GRACE))
        .count(ls.Materialized.as_(WINDOW_STORE))
    )
    # Final results: a window's count once it can no longer change.
    (
        counts.suppress(
            ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded()).with_name(FINAL_BUFFER)
        )
        .to_stream()
        .to(FINAL_TOPIC)
    )
    # Alerts from every update (not the final results), so a busy user is flagged while
    # the window is still open; keyed by user, so the rate limit is per user, not per window.
    (
        counts.to_stream()
        .filter(lambda windowed, count: count >= THRESHOLD)
        .map(
            lambda windowed, count: (
                windowed.key,
                {"user": windowed.key, "window_start": windowed.window.start, "clicks": count},
            )
        )
        .to_table(ls.Materialized.as_(BUSY_STORE))
        .suppress(
            ls.Suppressed.until_time_limit(ALERT_INTERVAL, ls.BufferConfig.unbounded()).with_name(
                ALERT_BUFFER
            )
        )
        .to_stream()
        .to(ALERT_TOPIC)
    )
    return builder.build()


def sample_clicks(n: int, seed: int = 7, start_ms: int = START_MS):
    """``n`` sample clicks (key, value, timestamp) in the order they arrive, about one every
    2 s: two in three by ``crawler`` (~20 a minute, over the threshold), the rest spread over
    four users. One in five arrives up to 20 s late (out of order, within the grace), and
    the click at ``n // 2`` arrives 150 s late, after its window closed: it is dropped."""
    rng = random.Random(seed)
    now = start_ms
    user = HEAVY_USER
    for i in range(n):
        now += rng.randrange(1000, 3000)
        timestamp = now
        if i == n // 2:
            # The previous click's user, so the record lands on a partition whose stream
            # time is at most ~25 s behind `now`: its window closed at most `now` - 60 s.
            timestamp = now - 150_000
        else:
            user = HEAVY_USER if rng.random() < 2 / 3 else rng.choice(USERS)
            if rng.random() < 0.2:
                timestamp = now - rng.randrange(20_000)
        yield user, {"user": user, "page": rng.choice(PAGES)}, timestamp


app = ls.App("clicks", build_topology(), {"processing.guarantee": "exactly_once_v2"})
