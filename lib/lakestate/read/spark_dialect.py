"""Spark SQL on DuckDB.

A query written for Spark is transpiled to DuckDB's dialect by sqlglot (reserved words
quoted, e.g. ``offset``; Spark's function names and argument orders mapped to DuckDB's;
0-based array subscripts made 1-based), and the connection gets Spark's behaviour where
sqlglot leaves it to the engine: Spark's functions that DuckDB lacks, as macros with
Spark's semantics (``SPARK_FUNCTIONS``), nulls first in ascending order and last in
descending order, timestamps in UTC (lakestate's Spark sessions run in UTC), and a
string compared with a number cast to the number's type (``'25' >= 20`` is true, as in
Spark; DuckDB refuses the comparison otherwise). Unnamed columns get Spark's names
(``count(1)``, not DuckDB's ``count_star()``: ``spark_names``).
"""

from __future__ import annotations

from typing import Any

import sqlglot
from lakestate.read import spark_names
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import ParseError

__all__ = ["SETTINGS", "SPARK_FUNCTIONS", "execute", "install", "to_duckdb", "translate"]

#: Spark functions DuckDB lacks (or has with other semantics), as DuckDB macros:
#: name -> (parameters, body).
SPARK_FUNCTIONS: dict[str, tuple[str, str]] = {
    # Spark: the value at a JSON path as text (a string unquoted; an object or array as
    # JSON text), NULL for a missing path, a JSON null or text that is not JSON (DuckDB's
    # own json_extract_string fails on the last).
    "get_json_object": ("j, p", "CASE WHEN json_valid(j) THEN json_extract_string(j, p) END"),
    # Spark: epoch milliseconds / seconds / microseconds to a timestamp (shown in UTC).
    "timestamp_millis": ("ms", "make_timestamp(CAST(ms AS BIGINT) * 1000)"),
    "timestamp_seconds": ("s", "make_timestamp(CAST(s * 1000000 AS BIGINT))"),
    "timestamp_micros": ("us", "make_timestamp(CAST(us AS BIGINT))"),
    # Spark: base64 text to its bytes (a Bytes store's view column).
    "unbase64": ("s", "from_base64(s)"),
}

#: DuckDB settings that give Spark's behaviour (see the module's docstring).
SETTINGS: dict[str, str] = {
    "TimeZone": "UTC",
    "default_null_order": "nulls_first_on_asc_last_on_desc",
    "old_implicit_casting": "true",
}


class _DuckDB(DuckDB):
    """DuckDB's dialect, writing Spark's ``get_json_object`` as the macro of that name
    (sqlglot writes DuckDB's ``->>``, which fails on text that is not JSON)."""

    class Generator(DuckDB.Generator):
        TRANSFORMS = {
            **DuckDB.Generator.TRANSFORMS,
            exp.JSONExtractScalar: lambda self, e: self.func(
                "get_json_object", e.this, e.expression
            ),
        }


def to_duckdb(query: str) -> str:
    """``query`` (Spark SQL, one statement) in DuckDB's dialect. Text sqlglot cannot parse
    as Spark SQL is returned as it is, for DuckDB to run or to say what is wrong with it."""
    return translate(query)[0]


def translate(query: str) -> tuple[str, list[str | None]]:
    """``query`` in DuckDB's dialect (``to_duckdb``) and Spark's names of its columns
    (``spark_names.output_names``: for ``spark_names.rename`` of DuckDB's result)."""
    try:
        statements = sqlglot.parse(query, read="spark")
    except ParseError:
        return query, []
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise ValueError(f"expected one SQL statement, got {len(statements)}")
    names = spark_names.output_names(statements[0], query)
    return statements[0].sql(dialect=_DuckDB), names


def execute(con: Any, query: str) -> tuple[list[str], Any]:
    """Run ``query`` (Spark SQL) on DuckDB connection ``con``: its columns' names, as
    Spark names them where they are certain (``spark_names``), and the cursor."""
    text, names = translate(query)
    cursor = con.execute(text)
    return spark_names.rename([d[0] for d in cursor.description or []], names), cursor


def install(con: Any) -> None:
    """Give DuckDB connection ``con`` Spark's functions and behaviour."""
    for name, value in SETTINGS.items():
        con.execute(f"SET {name} = '{value}'")
    for name, (params, body) in SPARK_FUNCTIONS.items():
        con.execute(f"CREATE OR REPLACE TEMP MACRO {name}({params}) AS {body}")
