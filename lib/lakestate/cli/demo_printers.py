"""What ``lakestate demo`` prints after a demo app's DAG ran: its sinks and SQL over its state
tables, one printer per demo app (``show_counts``, ``show_clicks``, ``show_orders``).

Each query goes through ``lakestate.cli.sql.query`` (DuckDB by default, no JVM;
tests/integration/test_sql_engines.py runs them on Spark too and compares)."""

from __future__ import annotations

import json
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING

from lakestate.cli.shell_hint import sql_command
from lakestate.cli.sql import query

if TYPE_CHECKING:
    from lakestate.cli.main import Context

__all__ = ["show_clicks", "show_counts", "show_orders"]


def _last_records(topic_view: str, columns: str, n: int = 10) -> str:
    """SQL for a topic's last ``n`` records by timestamp, oldest first (ties by partition
    and offset): the order a person reads them in."""
    return (
        f"SELECT {columns} FROM (SELECT * FROM {topic_view} "
        f"ORDER BY timestamp DESC, partition DESC, offset DESC LIMIT {n}) AS recent "
        "ORDER BY timestamp, partition, offset"
    )


def show_counts(ctx: Context, demo_module: ModuleType, engine: str = "duckdb") -> None:
    """The demo app's last output records and its per-user counts (its store's SQL view)."""
    from lakestate.read.views import format_time, view_name

    ctx.print(
        f"demo: the last 10 records of topic {demo_module.OUTPUT_TOPIC!r}, oldest first "
        "(UTC time of the event):"
    )
    text = _last_records(
        view_name(demo_module.OUTPUT_TOPIC), "partition, offset, timestamp, key, value"
    )
    for row in query(ctx, text, engine=engine).dicts():
        ctx.print(
            f"  partition {row['partition']} offset {row['offset']} at "
            f"{format_time(row['timestamp'])[11:]}: {row['key']} -> {row['value']}"
        )
    view = view_name(f"{demo_module.app.name}__{demo_module.STORE}")
    text = f"SELECT key, value AS count, task FROM {view} ORDER BY key"
    ctx.print(f"demo: {sql_command(text)}")
    for row in query(ctx, text, engine=engine).dicts():
        ctx.print(f"  {row['key']}\t{row['count']}\t(task {row['task']})")


def show_clicks(ctx: Context, clicks: ModuleType, engine: str = "duckdb") -> None:
    """The clicks app's final results, alerts, dropped late records and open windows."""
    _show_final_clicks(ctx, clicks, engine)
    _show_alerts(ctx, clicks, engine)
    _show_late_records(ctx, clicks)
    _show_open_windows(ctx, clicks, engine)


def _show_final_clicks(ctx: Context, clicks: ModuleType, engine: str) -> None:
    from lakestate.read.views import view_name

    text = _last_records(
        view_name(clicks.FINAL_TOPIC),
        "get_json_object(key, '$.key') AS user, "
        "CAST(get_json_object(key, '$.window_start') AS BIGINT) AS window_start, value AS clicks",
    )
    ctx.print(
        f"demo: final results, one per user and minute once its window closed (topic "
        f"{clicks.FINAL_TOPIC!r}), the last 10, oldest first:"
    )
    ctx.print(f"  {sql_command(text)}")
    for row in _rows(ctx, text, engine):
        ctx.print(f"  {row.user}\t{_time_of_day(row.window_start)}\t{row.clicks} clicks")


def _show_alerts(ctx: Context, clicks: ModuleType, engine: str) -> None:
    from lakestate.read.views import view_name

    limit = int(clicks.ALERT_INTERVAL.total_seconds() // 60)
    ctx.print(
        f"demo: alerts, at most one per user per {limit} minutes of stream time (topic "
        f"{clicks.ALERT_TOPIC!r}):"
    )
    alerts = _rows(
        ctx,
        f"SELECT timestamp, value FROM {view_name(clicks.ALERT_TOPIC)} ORDER BY timestamp",
        engine,
    )
    for row in alerts:
        alert = json.loads(row.value)
        ctx.print(
            f"  at {_time_of_day(row.timestamp)}: {alert['user']} clicked {alert['clicks']} "
            f"times in the minute from {_time_of_day(alert['window_start'])}"
        )


def _show_late_records(ctx: Context, clicks: ModuleType) -> None:
    """The late records the app's tasks dropped, from the metrics of their last batches."""
    from lakestate.processors.metrics import flat
    from lakestate.read.views import app_pin

    pin = app_pin(ctx.warehouse, clicks.app.name)
    metrics = [flat(row.metrics) for row in pin.rows.values()]
    late = sum(m.get("late-record-drop-total", 0) for m in metrics)
    lateness = max((m.get("record-lateness-max", 0) for m in metrics), default=0)
    ctx.print(
        f"demo: late records dropped (late-record-drop-total): {late:g}; the one furthest behind "
        f"arrived {lateness / 1000:g} s behind stream time (record-lateness-max)"
    )


def _show_open_windows(ctx: Context, clicks: ModuleType, engine: str) -> None:
    """The windows the suppression buffer still holds, and when each is emitted."""
    from lakestate.read.views import view_name

    store = view_name(f"{clicks.app.name}__{clicks.FINAL_BUFFER}-store")
    grace = int(clicks.GRACE.total_seconds() * 1000)
    text = (
        "SELECT get_json_object(key, '$.key') AS user, "
        "CAST(get_json_object(key, '$.window_start') AS BIGINT) AS window_start, "
        f"buffer_time + {grace} AS final_at, value AS clicks_so_far FROM {store} "
        "WHERE key IS NOT NULL ORDER BY buffer_time, user"
    )
    ctx.print("demo: windows still open, emitted once their task's stream time passes end + grace:")
    ctx.print(f"  {sql_command(text)}")
    for row in _rows(ctx, text, engine):
        ctx.print(
            f"  {row.user}\t{_time_of_day(row.window_start)}\t{row.clicks_so_far} clicks so far, "
            f"final once stream time reaches {_time_of_day(row.final_at)}"
        )


def show_orders(ctx: Context, orders: ModuleType, engine: str = "duckdb") -> None:
    """The orders app's enriched orders (late ones with a tier other than the customer's
    current one) and SQL over the customers' version history."""
    from lakestate.read.views import view_name

    enriched, history = (
        view_name(orders.OUTPUT_TOPIC),
        view_name(f"orders__{orders.CUSTOMERS_STORE}"),
    )
    text = (
        "SELECT * FROM (SELECT get_json_object(o.key, '$') AS customer, "
        "get_json_object(o.value, '$.order') AS order_id, o.timestamp, o.partition, o.offset, "
        "get_json_object(o.value, '$.tier') AS tier, h.value AS tier_now "
        f"FROM {enriched} o JOIN {history} h ON h.key = o.key AND h.valid_to IS NULL "
        "WHERE get_json_object(o.value, '$.tier') <> get_json_object(h.value, '$') "
        "ORDER BY o.timestamp DESC, o.partition DESC, o.offset DESC LIMIT 10) AS recent "
        "ORDER BY timestamp, partition, offset"
    )
    ctx.print(
        f"demo: orders joined with the tier valid at their time, not the customer's tier now "
        f"(topic {orders.OUTPUT_TOPIC!r}), the last 10, oldest first:"
    )
    ctx.print(f"  {sql_command(text)}")
    for row in _rows(ctx, text, engine):
        ctx.print(
            f"  {row.order_id} at {_time_of_day(row.timestamp)}: {row.customer} was {row.tier} "
            f"(now {json.loads(row.tier_now)})"
        )
    _show_tier_history(ctx, history, engine)


def _show_tier_history(ctx: Context, history: str, engine: str) -> None:
    """The version history of the customer with the most tier changes."""
    customers = _rows(
        ctx, f"SELECT key FROM {history} GROUP BY key ORDER BY count(*) DESC, key LIMIT 1", engine
    )
    if not customers:
        return
    customer = customers[0]
    text = (
        f"SELECT value AS tier, valid_from, valid_to FROM {history} "
        f"WHERE key = '{customer.key}' ORDER BY valid_from"
    )
    ctx.print(
        f"demo: the tier history of {json.loads(customer.key)} (the versioned store's SQL view):"
    )
    ctx.print(f"  {sql_command(text)}")
    for row in _rows(ctx, text, engine):
        until = "now" if row.valid_to is None else _time_of_day(row.valid_to)
        tier = "deleted" if row.tier is None else json.loads(row.tier)
        ctx.print(f"  {tier}\tfrom {_time_of_day(row.valid_from)} until {until}")


def _time_of_day(ms: int | float) -> str:
    """``HH:MM:SS`` of an epoch-ms time, UTC: the demos' samples span minutes of one day."""
    from lakestate.read.views import format_time

    return format_time(int(ms))[11:]


def _rows(ctx: Context, text: str, engine: str = "duckdb") -> list[SimpleNamespace]:
    """The rows of a demo's query, by attribute (the default engine: no JVM)."""
    return [SimpleNamespace(**row) for row in query(ctx, text, engine=engine).dicts()]
