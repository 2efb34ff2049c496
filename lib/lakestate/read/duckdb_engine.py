"""The DuckDB engine of ``lakestate sql``: the warehouse's views (``inspect.views``, the
same definitions Spark registers) over Arrow datasets that delta-rs reads at the pinned
table versions, queried in process by DuckDB. No JVM, and no pyspark import.

DuckDB scans each dataset itself, so a query's filters and columns reach the Parquet
files (a store's pin prunes its changelog by the ``task`` partition). Tables are read
through delta-rs, not DuckDB's own ``delta`` extension (which is downloaded on first
use). The query is Spark SQL: ``spark_dialect`` transpiles it and gives DuckDB Spark's
functions and behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import duckdb
from lakestate.io import delta_commits
from lakestate.read import catalog, spark_dialect
from lakestate.read.result import Result
from lakestate.read.views import View, pinned_app, views, views_named
from lakestate.warehouse import Warehouse

__all__ = ["connect", "register", "sql"]


def quote(name: str) -> str:
    """``name`` as a DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that speaks Spark SQL (``spark_dialect.install``)."""
    con = duckdb.connect(":memory:")
    spark_dialect.install(con)
    return con


def register(con: duckdb.DuckDBPyConnection, found: Iterable[View]) -> list[str]:
    """Create ``found`` as views of ``con``, each over its Delta table read by delta-rs at
    the view's versions. Returns their names."""
    names = []
    for i, view in enumerate(found):
        sources, columns = [], None
        for j, version in enumerate(view.versions()):
            dataset = delta_commits.open_table(view.path, version)
            dataset = dataset.to_pyarrow_dataset()
            sources.append(f"_lakestate_source_{i}_{j}")
            con.register(sources[-1], dataset)
            columns = columns or dataset.schema.names
        select = view.select(sources, columns or [], quote)
        con.execute(f"CREATE OR REPLACE TEMP VIEW {quote(view.name)} AS {select}")
        names.append(view.name)
    return names


def sql(
    warehouse: Warehouse, query: str, batch: int | None = None, limit: int | None = None
) -> Result:
    """Run ``query`` (Spark SQL) over the warehouse's views that it names; ``batch`` pins
    the one app it names (as ``inspect.sql``). At most ``limit`` rows. ``SHOW TABLES`` and
    ``SHOW VIEWS`` list every view (``catalog.show_tables``). ValueError for a query DuckDB
    refuses, with its message, or for a name that is no view, with the views there are."""
    listed = catalog.show_tables(warehouse, query)
    if listed is not None:
        return listed if limit is None else Result(listed.columns, listed.rows[: max(limit, 0)])
    batch_app = pinned_app(warehouse, query, batch)
    con = connect()
    try:
        register(con, views(warehouse, batch, batch_app, views_named(warehouse, query)))
        try:
            columns, cursor = spark_dialect.execute(con, query)
            rows = cursor.fetchall() if limit is None else cursor.fetchmany(max(limit, 0))
        except duckdb.CatalogException as e:
            missing = re.search(r"Table with name (.+?) does not exist", str(e))
            if missing is None:
                raise ValueError(str(e)) from None
            raise ValueError(catalog.unknown_view(warehouse, missing.group(1).strip('"'))) from None
        except duckdb.ParserException as e:
            raise ValueError(str(e) + catalog.spelled_as_tables(warehouse, query)) from None
        except duckdb.Error as e:
            raise ValueError(str(e)) from None
        return Result(columns, rows)
    finally:
        con.close()
