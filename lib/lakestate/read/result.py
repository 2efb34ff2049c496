"""A query's result, and how ``lakestate sql`` prints it: a tab-separated table (header
line, ``NULL`` for nulls) or, with ``--json``, one JSON object per row.

Both engines' rows print alike: each value is first made plain (``plain``): Spark's
``Row`` becomes a dict, ``bytearray`` bytes, a timestamp with a time zone the same
instant in UTC without one (Spark hands timestamps over in the session's zone, UTC). In
the table, binary values are hex, arrays and structs JSON text, everything else ``str``;
in JSON, binary values are hex strings and timestamps ISO 8601 text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

__all__ = ["Result", "plain", "print_result", "to_json", "to_text"]


@dataclass(frozen=True)
class Result:
    """The columns of a query's result and its rows (at most the limit asked for)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as dicts by column name (plain values)."""
        return [dict(zip(self.columns, map(plain, row), strict=True)) for row in self.rows]


def plain(value: Any) -> Any:
    """``value`` as either engine's row holds it, in the same Python types for both."""
    if hasattr(value, "asDict"):  # a Spark Row (a struct)
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def to_text(value: Any) -> str:
    """A table cell: ``NULL``, hex for binary, JSON for arrays and structs, else ``str``."""
    value = plain(value)
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict | list):
        return json.dumps(_json_value(value), ensure_ascii=False)
    return str(value)


def _unique(columns: Sequence[str]) -> list[str]:
    """Column names made unique for a JSON object (``key``, ``key_2``: a join's two
    ``key`` columns would otherwise be one)."""
    seen: dict[str, int] = {}
    out = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def to_json(columns: Sequence[str], row: Sequence[Any]) -> str:
    """One row as a JSON object by column name (duplicate names get ``_2``, ``_3``)."""
    return json.dumps(
        {c: _json_value(plain(v)) for c, v in zip(_unique(columns), row, strict=True)},
        ensure_ascii=False,
    )


def print_result(result: Result, say: Callable[[str], None], json_lines: bool = False) -> None:
    """Print ``result`` through ``say``: the table, or JSON lines."""
    if json_lines:
        for row in result.rows:
            say(to_json(result.columns, row))
        return
    say("\t".join(result.columns))
    for row in result.rows:
        say("\t".join(to_text(v) for v in row))
