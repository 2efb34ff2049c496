"""The Spark SQL engine of ``lakestate sql --engine spark`` and of Spark users: the views
``read.views`` defines, registered as Spark temporary views and read as DataFrames."""

from __future__ import annotations

from collections.abc import Collection

from lakestate.checkpoint.standing import app_pin
from lakestate.read import catalog
from lakestate.read.views import (
    View,
    _store_pin,
    pinned_app,
    store_types,
    view_name,
    views,
    views_named,
)
from lakestate.warehouse import Warehouse
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

# SHOW TABLES' schema in Spark (the second column is viewName for SHOW VIEWS).
_SHOW_SCHEMA = "{} string not null, {} string not null, {} boolean not null"


def _spark_quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _spark_frame(spark: SparkSession, view: View) -> DataFrame:
    tables = []
    for version in view.versions():
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        tables.append(reader.load(view.path))
    if view.pin is None and view.latest_of is None:
        return tables[0]
    # The tables are handed to spark.sql as DataFrame arguments, named {source<i>} in the text.
    sources = {f"source{i}": t for i, t in enumerate(tables)}
    select = view.select([f"{{{s}}}" for s in sources], tables[0].columns, _spark_quote)
    return spark.sql(select, **sources)


def state_frame(
    spark: SparkSession, warehouse: Warehouse, app: str, store: str, batch: int | None = None
) -> DataFrame:
    """A store's current state as a DataFrame (pinned as ``register_views`` pins it): the
    helper for plain Spark SQL users."""
    path = warehouse.changelog_path(app, store)
    pin = _store_pin(app, app_pin(warehouse, app, batch), path)
    types = store_types(warehouse, app).get(store, ())
    view = View(view_name(f"{app}__{store}"), path, pin.version, pin, types=types)
    return _spark_frame(spark, view)


def register_views(
    spark: SparkSession,
    warehouse: Warehouse,
    batch: int | None = None,
    batch_app: str | None = None,
    only: Collection[str] | None = None,
) -> dict[str, str]:
    """Register ``views(warehouse, batch, batch_app, only)`` as Spark temporary views.
    Returns view -> table path."""
    registered: dict[str, str] = {}
    for view in views(warehouse, batch, batch_app, only):
        _spark_frame(spark, view).createOrReplaceTempView(view.name)
        registered[view.name] = view.path
    return registered


def sql(
    spark: SparkSession, warehouse: Warehouse, query: str, batch: int | None = None
) -> DataFrame:
    """Run ``query`` on Spark over the warehouse's views (those it names are registered);
    ``batch`` pins the one app it names. ``SHOW TABLES`` and ``SHOW VIEWS`` list every view
    (``catalog.show_tables``); a name that is no view is a ValueError naming those there
    are."""
    listed = catalog.show_tables(warehouse, query)
    if listed is not None:
        return spark.createDataFrame(listed.rows, _SHOW_SCHEMA.format(*listed.columns))
    batch_app = pinned_app(warehouse, query, batch)
    register_views(spark, warehouse, batch, batch_app, views_named(warehouse, query))
    try:
        return spark.sql(query)
    except AnalysisException as e:  # ParseException too
        if e.getCondition() == "TABLE_OR_VIEW_NOT_FOUND":
            name = (e.getMessageParameters() or {}).get("relationName", "").replace("`", "")
            raise ValueError(catalog.unknown_view(warehouse, name)) from None
        hint = catalog.spelled_as_tables(warehouse, query)
        if not hint:
            raise
        raise ValueError(str(e).strip().splitlines()[0] + hint) from None
