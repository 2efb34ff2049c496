"""``lakestate sql``: Spark SQL over every topic and state table of the warehouse, in
process with DuckDB (``lakestate.read.duckdb_engine``) or on Spark (``--engine spark``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakestate.cli.main import Context
    from lakestate.read.result import Result


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "query",
        nargs="?",
        help="Spark SQL; topics and state tables (<app>__<store>) are views (SHOW TABLES "
        "lists them)",
    )
    p.add_argument(
        "--list", action="store_true", help="list every view: its name, kind and what it shows"
    )
    p.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="read the stores of the app the query names as of its batch N (default: the "
        "last complete batch of each task)",
    )
    p.add_argument("--limit", type=int, default=1000, help="rows to print (default 1000)")
    p.add_argument(
        "--engine",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="duckdb (default): in this process, no JVM (the query is transpiled from Spark "
        "SQL, with Spark's functions); spark: on Spark, for queries too large for one process",
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Print the query's rows (with ``--list``: the warehouse's views): a tab-separated
    table (NULL for nulls), or with ``--json`` one JSON object per row."""
    from lakestate.read.catalog import listing
    from lakestate.read.result import print_result

    if args.list:
        result = listing(ctx.warehouse)
    elif args.query is None:
        raise ValueError("give a query (Spark SQL), or --list to see the views there are")
    else:
        result = query(ctx, args.query, args.batch, args.limit, args.engine)
    print_result(result, ctx.print, json_lines=ctx.json_output)
    return 0


def query(
    ctx: Context,
    text: str,
    batch: int | None = None,
    limit: int | None = None,
    engine: str = "duckdb",
) -> Result:
    """Run Spark SQL ``text`` over the warehouse's views on ``engine`` (``duckdb``, in
    process; ``spark``); a ``lakestate.read.result.Result`` of at most ``limit`` rows."""
    if engine != "spark":
        from lakestate.read.duckdb_engine import sql as duckdb_sql

        return duckdb_sql(ctx.warehouse, text, batch, limit)
    from pyspark.errors import PySparkException

    from lakestate.read.result import Result
    from lakestate.read.spark_engine import sql as spark_sql

    try:
        df = spark_sql(ctx.spark, ctx.warehouse, text, batch)
        rows = (df if limit is None else df.limit(max(limit, 0))).collect()
    except PySparkException as e:  # Spark's analysis and parse errors: the query's fault
        # One line for the terminal; the whole error, Java stack included, to the log file.
        raise ValueError(str(e).strip().splitlines()[0]) from e
    return Result(list(df.columns), [tuple(r) for r in rows])
